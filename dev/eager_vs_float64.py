"""Where a model's eager fp32 run departs from its float64 run: the whole model (a plain float64 run, and the
verifier's and grader's truth, `scales.tracked_truth`), then the captured graph node by node (each node's float64
output against its fp32 one, both computed from the fp32 and float64 values of its inputs as the graph runs), on each
device asked for. Prints the relative RMS difference of each output and every node where it jumps past --jump (1e-4
of its RMS).

    .venv/bin/python dev/eager_vs_float64.py MODEL.py [--devices cpu,cuda] [--seed 0] [--signed]

Eager far from the verifier's truth but not from the plain float64 run means the truth is wrong (fuzz_040042: the
truth's rrelu was its input, 7-77 % of the RMS, fixed in c5bd23d); far from both, eager's own error; a node that jumps
on one device only, an op whose float64 run differs there. `truth_audit.py` runs the first check over many models.
"""
from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from truth_audit import relative  # noqa: E402  (dev/, beside this file)

from fuseforge.capture import capture  # noqa: E402
from fuseforge.evaluate import harness  # noqa: E402
from fuseforge.evaluate.random_draws import FORWARD_SEED  # noqa: E402
from fuseforge.evaluate.scales import tracked_truth  # noqa: E402
from fuseforge.load import load_model_file  # noqa: E402


def flat(out):
    return [o for o in (out if isinstance(out, (tuple, list)) else [out]) if isinstance(o, torch.Tensor)]


def whole_model(loaded, inputs, device: str) -> None:
    """Eager's outputs against a plain float64 run and against the verifier's and grader's truth (`tracked_truth`:
    float64, random ops drawing as float32 does), all from FORWARD_SEED."""
    model = copy.deepcopy(loaded.model).to(device)
    x32 = [x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs]
    x64 = [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in x32]
    clones = lambda xs: [x.clone() if isinstance(x, torch.Tensor) else x for x in xs]  # noqa: E731
    with torch.no_grad():
        torch.manual_seed(FORWARD_SEED)
        e = flat(model(*clones(x32)))
        torch.manual_seed(FORWARD_SEED)
        with harness.float64_run():
            p = flat(harness.as_float64(copy.deepcopy(model))(*clones(x64)))
    v, _, _ = tracked_truth(harness.as_float64(copy.deepcopy(model)), x32, torch.device(device))
    for j, (a, b, c) in enumerate(zip(e, p, v)):
        print(f"{device} output {j}: eager vs float64 {relative(a, b):.2e}, eager vs the verifier's truth "
              f"{relative(a, c):.2e}, float64 vs that truth {relative(b, c):.2e}")


def node_by_node(captured, loaded, inputs, device: str, jump: float) -> None:
    from torch.fx import Interpreter

    gm = captured.program.module()
    state = {k: v.to(device) for k, v in loaded.model.state_dict().items()}
    gm.load_state_dict(state, strict=False)
    gm = gm.to(device)
    seen: dict[str, tuple] = {}

    class Both(Interpreter):
        def run_node(self, n):
            out = super().run_node(n)
            if n.op == "call_function" and isinstance(out, torch.Tensor) and out.is_floating_point():
                args64 = torch.fx.node.map_arg(n.args, lambda a: seen.get(a.name, (None, None))[1])
                kwargs64 = torch.fx.node.map_arg(n.kwargs, lambda a: seen.get(a.name, (None, None))[1])
                try:
                    out64 = n.target(*args64, **kwargs64)
                except Exception as exc:  # noqa: BLE001 - a diagnostic: say which node and go on
                    print(f"{device} {n.name} ({n.target}): float64 failed: {str(exc).splitlines()[0][:120]}")
                    out64 = out.double()
                seen[n.name] = (out, out64 if isinstance(out64, torch.Tensor) else out.double())
                d = relative(out, seen[n.name][1])
                if d > jump:
                    print(f"{device} {n.name} ({n.target}): fp32 vs float64 {d:.2e}")
            elif isinstance(out, torch.Tensor):
                seen[n.name] = (out, out.double() if out.is_floating_point() else out)
            return out

    x = [t.to(device) if isinstance(t, torch.Tensor) else t for t in inputs]
    with torch.no_grad():
        Both(gm).run(*x)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--devices", default="cpu,cuda")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--signed", action="store_true", help="inputs drawn from randn (the verifier's signed case)")
    ap.add_argument("--jump", type=float, default=1e-4)
    args = ap.parse_args()
    loaded = load_model_file(args.model, seed=args.seed)
    inputs = loaded.inputs
    if args.signed:
        torch.manual_seed(args.seed)
        inputs = [torch.randn_like(t) if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in inputs]
    captured = capture(loaded)
    for device in args.devices.split(","):
        if device == "cuda" and not torch.cuda.is_available():
            continue
        whole_model(loaded, inputs, device)
        node_by_node(captured, loaded, inputs, device, args.jump)
    return 0


if __name__ == "__main__":
    sys.exit(main())
