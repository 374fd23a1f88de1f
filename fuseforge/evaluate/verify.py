"""Stage `verify`: does ModelNew compute what Model computes, at least about as accurately as eager fp32?

One case per (seed, input distribution), seeds 0..N-1, distributions "file" (get_inputs()) and "signed"
(every floating input redrawn as randn_like * 4), plus optionally seed 0 / "file" at another batch size.
In each case, under `torch.no_grad()` and on the chosen device:

1. `torch.manual_seed(seed)`; `ref = Model(*init)`; `cand = ModelNew(*init)`;
   `cand.load_state_dict(ref.state_dict(), strict=True)`. Both stay in train mode, as constructed.
2. truth = a deep copy of ref in float64 on float64 inputs; eager = ref on the fp32 inputs.
3. A fresh block of about 2x the bytes of eager's outputs, and on CUDA every block the caching
   allocator holds free, are filled with NaN and freed (memory the candidate leaves unwritten then reads
   as NaN, never as the reference's leftovers); then the candidate runs on the fp32 inputs.
4. Every output, and every persistent buffer after the forward (BatchNorm running stats...), is judged
   by the rule of `numerics.py`.

Extra batch (`extra_batch=N`): every tensor input's dim 0 becomes N, its rows taken from fresh
get_inputs() draws concatenated (so the file's own distribution and dtypes are kept). If Model itself
fails at that size, the case is skipped; if only ModelNew fails, the case fails.

50_verify.json:
    schema      "fuseforge.verify/1"
    verdict     "correct" | "incorrect" | "interface_mismatch" | "error"
    reason      one line (null when correct): the first failing case and tensor, or the error
    model, candidate, device, environment (torch/CUDA versions, GPU, precision flags)
    settings    {seeds, distributions, tolerance_factor, floor_rel, floor_abs, extra_batch,
                 input_seed_offset}
    cases       [{seed, distribution, batch (null: the file's), input_shapes, passed (null: skipped),
                  skipped, reason, allclose, outputs: [check], buffers: [check]}]
                check = numerics.TensorCheck: name, shape, dtype, passed, reason, exact, cand_err, ref_err,
                factor, floor, bound, truth_rms, cand_rel_err, ref_rel_err, max_abs_err, max_abs_index,
                cand_at_max, truth_at_max, nan_where_truth_finite, non_regular, allclose
    allclose    KernelBench column: every output allclose(cand, eager, atol=rtol=1e-4); null if unknown
    worst       the check with the largest cand_err / bound: {case, name, cand_err, bound, ratio,
                cand_rel_err, ref_rel_err}
    interface   {missing, unexpected, shape_mismatches} (interface_mismatch only)
    wall_s      seconds spent verifying
"""

from __future__ import annotations

import copy
import sys
import time
import traceback
from dataclasses import dataclass

import torch

from fuseforge.evaluate import harness
from fuseforge.evaluate.harness import (
    CandidateFailed,
    EvalError,
    InterfaceMismatch,
    Programs,
    ReferenceFailed,
)
from fuseforge.evaluate.numerics import FACTOR, FLOOR_ABS, FLOOR_REL, TensorCheck, compare

SCHEMA = "fuseforge.verify/1"


@dataclass
class VerifySettings:
    device: torch.device
    seeds: int = 3
    factor: float = FACTOR
    extra_batch: int | None = None


def _describe(outputs: list, is_tuple: bool) -> str:
    return f"a tuple of {len(outputs)} tensors" if is_tuple else "a tensor"


def _output_checks(got, got_tuple, eager, eager_tuple, truth, factor) -> list[TensorCheck]:
    """One check per output; a single failing check if the outputs' structure differs."""
    if got_tuple != eager_tuple or len(got) != len(eager):
        check = TensorCheck("outputs", [], "")
        check.reason = f"ModelNew returned {_describe(got, got_tuple)}, Model {_describe(eager, eager_tuple)}"
        return [check]
    names = [f"output {i}" for i in range(len(eager))] if eager_tuple else ["output"]
    return [compare(n, g, e, t, factor) for n, g, e, t in zip(names, got, eager, truth)]


def _buffer_checks(cand_model, eager_model, truth_model, factor) -> list[TensorCheck]:
    """Every persistent buffer (not parameter) of the model, after the forward."""
    params = {name for name, _ in eager_model.named_parameters()}
    eager_sd, truth_sd, cand_sd = eager_model.state_dict(), truth_model.state_dict(), cand_model.state_dict()
    return [compare(f"buffer {name}", cand_sd[name], eager_sd[name], truth_sd[name], factor)
            for name in eager_sd if name not in params]


def run_case(progs: Programs, settings: VerifySettings, seed: int, distribution: str,
             batch: int | None = None) -> dict:
    """One (seed, distribution[, batch]) case; failures of either side raise an EvalError."""
    dev = settings.device
    ref, cand = harness.build_pair(progs, seed)
    inputs = harness.draw_inputs(progs, seed, distribution, batch)
    truth_model = copy.deepcopy(ref).to(dev).double()
    eager_model = ref.to(dev)
    cand_model = harness.guard(CandidateFailed, "ModelNew.to(device)", lambda: cand.to(dev))
    with torch.no_grad():
        progs.precision.restore()
        truth, _ = harness.forward(truth_model, harness.to_device(inputs, dev, torch.float64), dev,
                                   "Model (float64)", ReferenceFailed)
        eager, eager_tuple = harness.forward(eager_model, harness.to_device(inputs, dev), dev,
                                             "Model", ReferenceFailed)
        harness.poison(dev, sum(t.numel() * t.element_size() for t in eager))
        got, got_tuple = harness.forward(cand_model, harness.to_device(inputs, dev), dev,
                                         "ModelNew", CandidateFailed)
        outputs = _output_checks(got, got_tuple, eager, eager_tuple, truth, settings.factor)
        buffers = _buffer_checks(cand_model, eager_model, truth_model, settings.factor)
    failed = [c for c in outputs + buffers if not c.passed]
    allclose = [c.allclose for c in outputs]
    return {
        "seed": seed, "distribution": distribution, "batch": batch,
        "input_shapes": [list(x.shape) if isinstance(x, torch.Tensor) else None for x in inputs],
        "passed": not failed, "skipped": False, "reason": failed[0].reason if failed else None,
        "allclose": all(allclose) if None not in allclose else None,
        "outputs": [c.to_json() for c in outputs], "buffers": [c.to_json() for c in buffers],
    }


def _extra_batch_case(progs: Programs, settings: VerifySettings) -> dict:
    batch = settings.extra_batch
    case = {"seed": 0, "distribution": "file", "batch": batch, "input_shapes": None, "allclose": None,
            "outputs": [], "buffers": []}
    try:
        return run_case(progs, settings, 0, "file", batch)
    except InterfaceMismatch:
        raise
    except ReferenceFailed as exc:
        return case | {"passed": None, "skipped": True, "reason": f"Model itself fails at batch {batch}: {exc}"}
    except CandidateFailed as exc:
        traceback.print_exception(exc, file=sys.stderr)
        return case | {"passed": False, "skipped": False, "reason": str(exc)}


def case_label(case: dict) -> str:
    batch = f" / batch {case['batch']}" if case["batch"] else ""
    return f"seed {case['seed']} / {case['distribution']}{batch}"


def run_cases(progs: Programs, settings: VerifySettings) -> list[dict]:
    cases = [run_case(progs, settings, seed, dist)
             for seed in range(settings.seeds) for dist in harness.DISTRIBUTIONS]
    if settings.extra_batch:
        cases.append(_extra_batch_case(progs, settings))
    return cases


def _worst(cases: list[dict]) -> dict | None:
    """The floating check closest to (or furthest past) its bound."""
    best = None
    for case in cases:
        for check in case["outputs"] + case["buffers"]:
            err, bound = check.get("cand_err"), check.get("bound")
            if not isinstance(err, float) or not isinstance(bound, float) or bound <= 0:
                continue
            ratio = err / bound
            if best is None or ratio > best["ratio"]:
                best = {"case": case_label(case), "name": check["name"], "cand_err": err, "bound": bound,
                        "ratio": ratio, "cand_rel_err": check["cand_rel_err"],
                        "ref_rel_err": check["ref_rel_err"]}
    return best


def _conclude(record: dict, cases: list[dict]) -> None:
    record["cases"] = cases
    failed = [c for c in cases if c["passed"] is False]
    record["verdict"] = "incorrect" if failed else "correct"
    record["reason"] = f"{case_label(failed[0])}: {failed[0]['reason']}" if failed else None
    columns = [c["allclose"] for c in cases if not c["skipped"]]
    record["allclose"] = all(columns) if columns and None not in columns else None
    record["worst"] = _worst(cases)


def _new_record(model_path, candidate_path, settings: VerifySettings) -> dict:
    return {
        "schema": SCHEMA, "verdict": "error", "reason": None,
        "model": str(model_path), "candidate": str(candidate_path), "device": str(settings.device),
        "environment": None,
        "settings": {"seeds": settings.seeds, "distributions": list(harness.DISTRIBUTIONS),
                     "tolerance_factor": settings.factor, "floor_rel": FLOOR_REL, "floor_abs": FLOOR_ABS,
                     "extra_batch": settings.extra_batch, "input_seed_offset": harness.INPUT_SEED_OFFSET},
        "cases": [], "allclose": None, "worst": None, "wall_s": None,
    }


def verify_files(model_path, candidate_path, settings: VerifySettings) -> tuple[dict, Programs | None]:
    """Verify CANDIDATE against MODEL; never raises. Returns the 50_verify.json record and the programs."""
    record = _new_record(model_path, candidate_path, settings)
    start, progs = time.perf_counter(), None
    try:
        harness.check_device(settings.device)
        record["environment"] = harness.environment(settings.device)
        progs = harness.load_programs(model_path, candidate_path)
        _conclude(record, run_cases(progs, settings))
    except InterfaceMismatch as exc:
        record.update(verdict="interface_mismatch", reason=str(exc), interface=exc.to_json())
    except (Exception, SystemExit) as exc:
        traceback.print_exception(exc, file=sys.stderr)
        reason = str(exc) if isinstance(exc, EvalError) else f"evaluator failed: {harness.one_line(exc)}"
        record.update(verdict="error", reason=reason)
    record["wall_s"] = round(time.perf_counter() - start, 3)
    return record, progs
