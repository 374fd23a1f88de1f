"""Stage `verify`: does ModelNew compute what Model computes, at least about as accurately as eager fp32?

One case per (seed, input distribution), seeds 0..N-1, distributions "file" (get_inputs()) and "signed"
(every floating input redrawn as randn_like * 4); seed 0 at the magnitudes `fuseforge check` also grades
("large" x 2^20, "tiny" x 2^-20, "shifted" + 16 RMS: harness.MAGNITUDES), each skipped where the model's own
fp32 math or its float64 truth is not finite there, or where no input is floating; plus optionally seed 0 /
"file" at another batch size.
In each case, under `torch.no_grad()` and on the chosen device:

1. `torch.manual_seed(seed)`; `ref = Model(*init)`; `cand = ModelNew(*init)`;
   `cand.load_state_dict(ref.state_dict(), strict=True)`. Both stay in train mode, as constructed.
   Models are built and inputs drawn with the device as the default device (harness.py: the GPU's
   generator under the same seeds; the CPU where the file's code needs it).
2. truth = a deep copy of ref in float64 on float64 inputs, run under `scales.ScaleTracker` (the scale of
   the values each output was computed from, for the floor of numerics.py); eager = ref on the fp32
   inputs. Truth, eager and the candidate each start their forward from the same generator state, and the
   truth's random ops draw in float32 (`random_draws.py`): a model with dropout is compared seed for seed.
3. A fresh block of about 2x the bytes of eager's outputs, and on CUDA every block the caching
   allocator holds free, are filled with NaN and freed (memory the candidate leaves unwritten then reads
   as NaN, never as the reference's leftovers); then the candidate runs on the fp32 inputs.
4. Every output, and every persistent buffer after the forward (BatchNorm running stats...), is judged
   by the rule of `numerics.py`.
5. A case whose every failing check failed the bound alone with eager's or its own error on few elements
   (`numerics.few_carriers`) is judged again over numerics.REDRAWS more draws of its kind (its seed's weights,
   other inputs: seed + 1000 r for draw r), within REDRAW_BUDGET_S: it passes where most draws pass
   (`numerics.majority_of_draws`); `redraws` records the account.

Each fp64 truth is computed once: one float64 forward per case serves both the eager-error and the
candidate-error comparisons of every output and buffer. A case that is the very computation of an earlier
one (the "signed" case of a model without floating inputs: same seed, so same weights, and nothing to
redraw) takes that case's truth and eager results instead of running them again (`reused_from`); its
candidate still runs, on fresh copies. Cases of different seeds, distributions or batch sizes are
different computations and get their own truth.

Extra batches (`extra_batches=(N, ...)`; optimize asks for `check`'s: b // 2 + 1, 2b and 1, where the batch is free):
every tensor input's dim 0 becomes N, its rows taken from fresh
get_inputs() draws concatenated (so the file's own distribution and dtypes are kept). If Model itself
fails at that size, the case is skipped; if only ModelNew fails, the case fails.

50_verify.json:
    schema      "fuseforge.verify/1"
    verdict     "correct" | "incorrect" | "interface_mismatch" | "error"
    reason      one line (null when correct): the first failing case and tensor, or the error
    model, candidate, device, environment (torch/CUDA versions, GPU, precision flags)
    settings    {seeds, distributions, magnitudes, tolerance_factor, floor_rel, floor_abs, extra_batches,
                 input_seed_offset}
    cases       [{seed, distribution, batch (null: the file's), input_shapes, passed (null: skipped),
                  skipped, reason, allclose, outputs: [check], buffers: [check], reused_from (null, or the
                  case whose truth and eager results this one took), redraws (null, or the account of the
                  draws a few-carrier failure was judged over), seconds: {build, inputs, truth, eager,
                  candidate, compare}}]
                check = numerics.TensorCheck: name, shape, dtype, passed, reason, exact, cand_err, ref_err,
                factor, floor, bound, truth_rms, operand_scale, cand_rel_err, ref_rel_err, max_abs_err,
                max_abs_index, cand_at_max, truth_at_max, nan_where_truth_finite, non_regular, allclose,
                ref_carriers, cand_carriers
    allclose    KernelBench column: every output allclose(cand, eager, atol=rtol=1e-4); null if unknown
    worst       the check with the largest cand_err / bound: {case, name, cand_err, bound, ratio,
                cand_rel_err, ref_rel_err}
    interface   {missing, unexpected, shape_mismatches} (interface_mismatch only)
    seconds     {load, cases, build, inputs, truth, eager, candidate, compare}: where the wall time went
                (the steps summed over the cases; each case has its own breakdown)
    wall_s      seconds spent verifying
    gpu_lease   (written by the command line) null, or {waited_s, prebuild_s} when it held a GPU lease
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
from fuseforge.evaluate.numerics import (
    FACTOR,
    FLOOR_ABS,
    FLOOR_REL,
    REDRAW_BUDGET_S,
    REDRAWS,
    TensorCheck,
    compare,
    few_carriers,
    majority_of_draws,
)
from fuseforge.evaluate.random_draws import FORWARD_SEED
from fuseforge.evaluate.scales import tracked_truth

SCHEMA = "fuseforge.verify/1"


@dataclass
class VerifySettings:
    device: torch.device
    seeds: int = 3
    factor: float = FACTOR
    extra_batches: tuple[int, ...] = ()  # other batch sizes of seed 0 / file
    magnitudes: bool = True  # the seed-0 cases at harness.MAGNITUDES


def _describe(outputs: list, is_tuple: bool) -> str:
    return f"a tuple of {len(outputs)} tensors" if is_tuple else "a tensor"


def _output_checks(got, got_tuple, eager, eager_tuple, truth, factor, scales) -> list[TensorCheck]:
    """One check per output; a single failing check if the outputs' structure differs."""
    if got_tuple != eager_tuple or len(got) != len(eager):
        check = TensorCheck("outputs", [], "")
        check.reason = f"ModelNew returned {_describe(got, got_tuple)}, Model {_describe(eager, eager_tuple)}"
        return [check]
    names = [f"output {i}" for i in range(len(eager))] if eager_tuple else ["output"]
    return [compare(n, g, e, t, factor, scale) for n, g, e, t, scale in zip(names, got, eager, truth, scales)]


def _buffer_checks(cand_sd, eager_sd, truth_sd, params, factor, scales: dict) -> list[TensorCheck]:
    """Every persistent buffer (not parameter) of the model, after the forward; `scales`: those the truth's run
    tracked (a batch norm's running mean carries its input's)."""
    return [compare(f"buffer {name}", cand_sd[name], eager_sd[name], truth_sd[name], factor, scales.get(name))
            for name in eager_sd if name not in params]


class _Laps:
    """Seconds per step of a case; the device is synchronised at each lap so the work lands where it ran."""

    def __init__(self, device: torch.device):
        self.device, self.seconds, self.last = device, {}, time.perf_counter()

    def lap(self, name: str) -> None:
        harness.synchronize(self.device)
        now = time.perf_counter()
        self.seconds[name] = round(self.seconds.get(name, 0.0) + now - self.last, 4)
        self.last = now


@dataclass
class _Reference:
    """What the reference side of a case computed: reusable by a case that is the same computation."""

    truth: list
    eager: list
    eager_tuple: bool
    scales: list
    truth_sd: dict
    eager_sd: dict
    params: set
    label: str
    buffer_scales: dict  # buffer name -> the scale its truth was computed from (scales.py), where tracked


def _reference_run(ref, inputs, dev, precision, laps: _Laps, label: str) -> _Reference:
    """truth (float64, scales tracked) and eager (fp32) on copies of `inputs`; the buffers after both."""
    truth_model = harness.as_float64(copy.deepcopy(ref))
    eager_model = ref
    precision.restore()
    truth, scales, buffer_scales = tracked_truth(truth_model, inputs, dev)
    laps.lap("truth")
    torch.manual_seed(FORWARD_SEED)
    eager, eager_tuple = harness.forward(eager_model, harness.to_device(inputs, dev), dev, "Model",
                                         ReferenceFailed)
    laps.lap("eager")
    params = {name for name, _ in eager_model.named_parameters()}
    return _Reference(truth, eager, eager_tuple, scales, truth_model.state_dict(), eager_model.state_dict(),
                      params, label, buffer_scales)


def _candidate_checks(cand_model, inputs, reference: _Reference, settings: VerifySettings,
                      laps: _Laps) -> tuple[list[TensorCheck], list[TensorCheck]]:
    """Steps 3-4 of the module docstring: poisoned memory, the candidate's forward on copies of `inputs` from the
    generator state eager started from, then its outputs' and buffers' checks against `reference`."""
    dev = settings.device
    harness.poison(dev, sum(t.numel() * t.element_size() for t in reference.eager))
    torch.manual_seed(FORWARD_SEED)  # random ops draw what eager drew (random_draws.py)
    got, got_tuple = harness.forward(cand_model, harness.to_device(inputs, dev), dev, "ModelNew", CandidateFailed)
    laps.lap("candidate")
    outputs = _output_checks(got, got_tuple, reference.eager, reference.eager_tuple, reference.truth,
                             settings.factor, reference.scales)
    buffers = _buffer_checks(cand_model.state_dict(), reference.eager_sd, reference.truth_sd,
                             reference.params, settings.factor, reference.buffer_scales)
    laps.lap("compare")
    return outputs, buffers


def _redrawn(progs: Programs, settings: VerifySettings, seed: int, distribution: str, batch: int | None,
             first: list[TensorCheck], seconds: float) -> tuple[bool, str]:
    """Judge a case whose failures are all few-carrier ones over REDRAWS more draws (module docstring, step 5):
    fresh models of the case's seed, inputs of its distribution from seed + 1000 r. `seconds`: the case's own time,
    which tells whether another draw fits the budget."""
    dev, draws = settings.device, [first]
    start = time.perf_counter()
    for r in range(1, REDRAWS + 1):
        if time.perf_counter() - start + seconds > REDRAW_BUDGET_S:
            break
        laps = _Laps(dev)
        ref, cand = harness.build_pair(progs, seed, dev)
        ref = ref.to(dev)
        cand_model = harness.guard(CandidateFailed, "ModelNew.to(device)", lambda cand=cand: cand.to(dev))
        inputs = harness.draw_inputs(progs, seed + 1000 * r, distribution, batch, dev)
        with torch.no_grad():
            try:
                reference = _reference_run(ref, inputs, dev, progs.precision, laps, f"redraw {r}")
            except ReferenceFailed:  # Model itself fails on this draw: judged on the draws made
                break
            outputs, buffers = _candidate_checks(cand_model, inputs, reference, settings, laps)
        draws.append([c for c in outputs + buffers if not c.passed])
    return majority_of_draws(draws)


def run_case(progs: Programs, settings: VerifySettings, seed: int, distribution: str,
             batch: int | None = None, same_as: dict | None = None) -> dict:
    """One (seed, distribution[, batch]) case; failures of either side raise an EvalError. `same_as`: the
    references of earlier cases by (seed, batch), for a case that is one of them again (module docstring)."""
    dev = settings.device
    laps = _Laps(dev)
    ref, cand = harness.build_pair(progs, seed, dev)
    ref = ref.to(dev)
    cand_model = harness.guard(CandidateFailed, "ModelNew.to(device)", lambda: cand.to(dev))
    laps.lap("build")
    inputs = harness.draw_inputs(progs, seed, distribution, batch, dev)
    laps.lap("inputs")
    label = case_label({"seed": seed, "distribution": distribution, "batch": batch})
    if distribution in harness.MAGNITUDES and harness.redraws_nothing(inputs):
        return _skipped(seed, distribution, batch, "no floating input to move to other magnitudes")
    key = (seed, batch)
    reference = None
    if same_as is not None and distribution != "file" and harness.redraws_nothing(inputs):
        reference = same_as.get(key)
    with torch.no_grad():
        if reference is None:
            reference = _reference_run(ref, inputs, dev, progs.precision, laps, label)
            if same_as is not None and distribution == "file" and harness.redraws_nothing(inputs):
                same_as[key] = reference
        reused = reference.label if reference.label != label else None
        if distribution in harness.MAGNITUDES and not harness.finite(reference.eager + reference.truth):
            return _skipped(seed, distribution, batch, f"the model's fp32 math is not finite at {distribution} "
                                                       f"magnitudes ({harness.MAGNITUDES[distribution]})")
        outputs, buffers = _candidate_checks(cand_model, inputs, reference, settings, laps)
    failed = [c for c in outputs + buffers if not c.passed]
    reason, redraws = failed[0].reason if failed else None, None
    if failed and all(few_carriers(c) for c in failed):
        passed, redraws = _redrawn(progs, settings, seed, distribution, batch, failed, sum(laps.seconds.values()))
        reason = None if passed else f"{reason}; {redraws}"
        failed = [] if passed else failed
        laps.lap("redraws")
    allclose = [c.allclose for c in outputs]
    return {
        "seed": seed, "distribution": distribution, "batch": batch,
        "input_shapes": [list(x.shape) if isinstance(x, torch.Tensor) else None for x in inputs],
        "passed": not failed, "skipped": False, "reason": reason,
        "allclose": all(allclose) if None not in allclose else None,
        "outputs": [c.to_json() for c in outputs], "buffers": [c.to_json() for c in buffers],
        "reused_from": reused, "redraws": redraws, "seconds": laps.seconds,
    }


def _skipped(seed: int, distribution: str, batch: int | None, reason: str) -> dict:
    return {"seed": seed, "distribution": distribution, "batch": batch, "input_shapes": None, "allclose": None,
            "outputs": [], "buffers": [], "reused_from": None, "redraws": None, "seconds": {}, "passed": None,
            "skipped": True, "reason": reason}


def _optional_case(progs: Programs, settings: VerifySettings, distribution: str, batch: int | None,
                   same_as: dict | None = None) -> dict:
    """A seed-0 case the model itself may be unable to run (another batch size, another magnitude): skipped
    then; the candidate failing it fails it."""
    try:
        return run_case(progs, settings, 0, distribution, batch, same_as)
    except InterfaceMismatch:
        raise
    except ReferenceFailed as exc:
        where = f"at batch {batch}" if batch else f"at {distribution} magnitudes"
        return _skipped(0, distribution, batch, f"Model itself fails {where}: {exc}")
    except CandidateFailed as exc:
        traceback.print_exception(exc, file=sys.stderr)
        return _skipped(0, distribution, batch, str(exc)) | {"passed": False, "skipped": False}


def case_label(case: dict) -> str:
    batch = f" / batch {case['batch']}" if case["batch"] else ""
    return f"seed {case['seed']} / {case['distribution']}{batch}"


def run_cases(progs: Programs, settings: VerifySettings) -> list[dict]:
    same_as: dict = {}
    cases = [run_case(progs, settings, seed, dist, same_as=same_as)
             for seed in range(settings.seeds) for dist in harness.DISTRIBUTIONS]
    if settings.magnitudes:
        cases += [_optional_case(progs, settings, kind, None, same_as) for kind in harness.MAGNITUDES]
    same_as.clear()
    cases += [_optional_case(progs, settings, "file", batch) for batch in settings.extra_batches]
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
                     "magnitudes": list(harness.MAGNITUDES) if settings.magnitudes else [],
                     "tolerance_factor": settings.factor, "floor_rel": FLOOR_REL, "floor_abs": FLOOR_ABS,
                     "extra_batches": list(settings.extra_batches), "input_seed_offset": harness.INPUT_SEED_OFFSET},
        "cases": [], "allclose": None, "worst": None, "seconds": None, "wall_s": None,
    }


def verify_files(model_path, candidate_path, settings: VerifySettings) -> tuple[dict, Programs | None]:
    """Verify CANDIDATE against MODEL; never raises. Returns the 50_verify.json record and the programs."""
    record = _new_record(model_path, candidate_path, settings)
    start, progs = time.perf_counter(), None
    try:
        harness.check_device(settings.device)
        record["environment"] = harness.environment(settings.device)
        progs = harness.load_programs(model_path, candidate_path)
        loaded = time.perf_counter()
        record["seconds"] = {"load": round(loaded - start, 3)}
        _conclude(record, run_cases(progs, settings))
        record["seconds"]["cases"] = round(time.perf_counter() - loaded, 3)
        steps: dict[str, float] = {}  # the steps summed over the cases (rounded once): where verification spends
        for case in record["cases"]:  # its time
            for step, seconds in (case.get("seconds") or {}).items():
                steps[step] = steps.get(step, 0.0) + seconds
        record["seconds"].update({step: round(total, 3) for step, total in steps.items()})
    except InterfaceMismatch as exc:
        record.update(verdict="interface_mismatch", reason=str(exc), interface=exc.to_json())
    except (Exception, SystemExit) as exc:
        traceback.print_exception(exc, file=sys.stderr)
        reason = str(exc) if isinstance(exc, EvalError) else f"evaluator failed: {harness.one_line(exc)}"
        record.update(verdict="error", reason=reason)
    record["wall_s"] = round(time.perf_counter() - start, 3)
    return record, progs
