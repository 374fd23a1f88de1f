"""Audit of the verifier's float64 truth on generated models: for each fuzz seed, the model's eager fp32 run on the
CPU against the truth the verifier and the grader compute (`scales.tracked_truth`: float64, float32 draws), on the
file's inputs and on signed ones, and that truth against a plain float64 run of the model. A truth that drops or
changes an op shows as eager far from it AND the truth off the plain float64 run (fuzz_040042: the truth's rrelu was
its input, 7-77 % of the RMS): such a model is a suspect. Eager far from a truth that is the plain float64 run is
eager's own error (a norm of near-constant values): counted, not listed. Outputs of RMS below FLOOR are compared
at that scale (near zero by cancellation: rounding noise on both sides). A model with random ops
draws other values in a plain float64 run, but its truth draws eager's, so eager is near it and it is no suspect.

    .venv/bin/python dev/truth_audit.py --seed 40000 --count 300 [--flag 1e-4]
"""
from __future__ import annotations

import argparse
import copy
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fuseforge.evaluate import harness  # noqa: E402
from fuseforge.evaluate.random_draws import FORWARD_SEED  # noqa: E402
from fuseforge.evaluate.scales import tracked_truth  # noqa: E402
from fuseforge.fuzz.campaign import write_model  # noqa: E402
from fuseforge.load import load_model_file  # noqa: E402

# An output of RMS below this is compared absolutely, at this scale: the generated models' inputs are O(1), and an
# output near zero by cancellation (the spatial mean of instance-normalised values) is rounding noise in eager and
# in float64 alike, not a measure of either. A truth that drops an op is off by the output's own size.
FLOOR = 1e-3


def relative(eager, truth) -> float:
    e, t = eager.double(), truth.double()
    finite = torch.isfinite(t) & torch.isfinite(e)
    if not finite.any():
        return 0.0
    e, t = e[finite], t[finite]
    return ((e - t).pow(2).mean().sqrt() / t.pow(2).mean().sqrt().clamp_min(FLOOR)).item()


def audit(path: Path, signed: bool) -> tuple[float, float]:
    """(eager vs truth, truth vs plain float64): the worst relative RMS difference over the model's outputs."""
    loaded = load_model_file(path)
    inputs = [t.clone() if isinstance(t, torch.Tensor) else t for t in loaded.inputs]
    if signed:
        torch.manual_seed(1)
        inputs = [torch.randn_like(t) if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in inputs]
    model = loaded.model
    truth_model, plain_model = copy.deepcopy(model).double(), copy.deepcopy(model).double()
    eager = _forward(model, inputs)
    truth, _, _ = tracked_truth(truth_model, inputs, torch.device("cpu"))
    with harness.float64_run():
        plain = _forward(plain_model, [t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t
                                       for t in inputs])
    pairs = [(e, t, p) for e, t, p in zip(eager, truth, plain) if e.is_floating_point()]
    return (max([0.0, *(relative(e, t) for e, t, _ in pairs)]), max([0.0, *(relative(p, t) for _, t, p in pairs)]))


def _forward(model, inputs) -> list:
    torch.manual_seed(FORWARD_SEED)
    with torch.no_grad():
        out = model(*[t.clone() if isinstance(t, torch.Tensor) else t for t in inputs])
    return [o for o in (out if isinstance(out, (tuple, list)) else [out]) if isinstance(o, torch.Tensor)]


def run(first: int, count: int, flag: float) -> tuple[list, int, list]:
    """(suspects as (eager vs truth, seed, truth vs plain float64, ops), how many models eager is far from for its own
    error, models that could not be audited as (seed, why)) over the seeds first .. first + count - 1."""
    suspects, eagers_own, failed = [], 0, []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(first, first + count):
            model, path = write_model(Path(tmp), seed)
            try:
                results = [audit(path, False), audit(path, True)]
            except Exception as exc:  # noqa: BLE001 - an audit: note the model and go on
                failed.append((seed, str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__))
                continue
            far, off = max(r[0] for r in results), max(r[1] for r in results)
            if far > flag and off > 1e-12:
                suspects.append((far, seed, off, " > ".join(model.ops)))
            elif far > flag:
                eagers_own += 1
    return sorted(suspects, reverse=True), eagers_own, failed


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=40000)
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--flag", type=float, default=1e-4)
    args = ap.parse_args()
    suspects, eagers_own, failed = run(args.seed, args.count, args.flag)
    for far, seed, off, ops in suspects:
        print(f"{seed}: eager vs truth {far:.2e} of the RMS, truth vs plain float64 {off:.2e}: {ops}")
    for seed, why in failed:
        print(f"{seed}: not audited: {why}")
    print(f"{args.count} models: {len(suspects)} suspects; {eagers_own} with eager past {args.flag:g} of a truth "
          f"that is the plain float64 run (eager's own error); {len(failed)} not audited")
    return 0


if __name__ == "__main__":
    sys.exit(main())
