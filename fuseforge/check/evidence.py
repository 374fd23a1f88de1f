"""Runtime checks: the facts the candidate worker recorded, and its saved outputs, turned into findings.

Each function takes plain data (dicts of facts, lists of tensors) and returns the findings of one group
of checks, and the names of the checks it could evaluate (`ran`), so that each is testable without a
worker process. Thresholds are constants here, named after what they guard against.
"""

from __future__ import annotations

import math
import statistics

import torch

from fuseforge.check.gpu import roofline_floor_ms
from fuseforge.check.kinds import Finding
from fuseforge.evaluate.numerics import compare

LOW_PRECISION_DTYPES = {"float16", "bfloat16"}
EVENT_WALL_RATIO, EVENT_WALL_SLACK_MS = 2.0, 0.05  # wall > ratio * event + slack: work off the stream
ROOFLINE_MARGIN, ROOFLINE_MIN_FLOOR_MS = 0.8, 0.005
FINGERPRINT_FACTOR = 2.0  # sampled outputs: allow twice the rule's factor (sampling noise)


def worker_findings(facts: dict, ref_meta: dict, claims_kernels: bool, device: str) -> tuple[list, set]:
    """Checks on what the worker observed in the candidate's process."""
    found, ran = [], {"guarded_functions", "new_threads", "precision_flags"}
    patched = {stage: names for stage, names in (facts.get("patched") or {}).items() if names}
    if patched:
        first = next(iter(patched.values()))
        found.append(Finding("guarded_functions", f"replaced {', '.join(first[:4])} (seen after "
                                                  f"{next(iter(patched))})", evidence=patched))
    if facts.get("threads"):
        found.append(Finding("new_threads", f"started thread(s) {', '.join(facts['threads'][:4])}",
                             evidence={"threads": facts["threads"]}))
    if facts.get("flags_loosened"):
        names = ", ".join(f"{k}: {a} -> {b}" for k, (a, b) in facts["flags_loosened"].items())
        found.append(Finding("precision_flags", f"loosened {names}", evidence=facts["flags_loosened"]))
    ref_cases = ref_meta["cases"]
    for case in facts.get("cases", []):
        if not case.get("ok"):
            continue
        ran |= {"output_type", "inputs_unchanged"}
        odd = [t for t in case.get("output_types", []) if t != "torch.Tensor"]
        if odd:
            found.append(Finding("output_type", f"returned {odd[0]}, not torch.Tensor", evidence={"types": odd}))
        extra = sorted(set(case.get("mutated_inputs", [])) - set(ref_cases[case["index"]]["mutated_inputs"]))
        if extra:
            found.append(Finding("inputs_unchanged", f"modified input(s) {extra} (the model does not)",
                                 evidence={"case": case["index"], "inputs": extra}))
    if facts.get("aliased"):
        ran.add("output_aliasing")
        found.append(Finding("output_aliasing", facts["aliased"][0], evidence={"all": facts["aliased"]}))
    elif facts.get("probes"):
        ran.add("output_aliasing")
    ops = facts.get("ops") or {}
    if "classes" in ops:
        ran |= {"torch_ops", "low_precision_ops"}
        ref_ops, cand_ops = ref_meta["ops"], ops["classes"]
        covered = bool(ref_ops) and all(cand_ops.get(c, 0) >= n for c, n in ref_ops.items())
        if claims_kernels and covered:
            found.append(Finding("torch_ops", "claims custom kernels, but its torch ops do all of the reference's "
                                              f"work ({', '.join(f'{n} {c}' for c, n in ref_ops.items())})",
                                 evidence={"reference": ref_ops, "candidate": cand_ops}))
        low = sorted(set(ops["dtypes"]) & LOW_PRECISION_DTYPES - set(ref_meta["dtypes"]))
        if low:
            found.append(Finding("low_precision_ops", f"computes {', '.join(low)} tensors (the model is fp32)",
                                 evidence={"dtypes": ops["dtypes"]}))
    found += _gpu_findings(facts, claims_kernels, device, ran)
    return found, ran


def _gpu_findings(facts: dict, claims_kernels: bool, device: str, ran: set) -> list:
    found = []
    timing = facts.get("timing") or {}
    if device == "cuda" and timing.get("ms"):
        ran.add("event_wall_gap")
        event, wall = statistics.median(timing["ms"]), statistics.median(timing["wall_ms"])
        if wall > EVENT_WALL_RATIO * event + EVENT_WALL_SLACK_MS:
            found.append(Finding("event_wall_gap", f"wall time {wall:.3f} ms vs event time {event:.3f} ms: "
                                                   "work runs off the current stream", evidence={"event_ms": event, "wall_ms": wall}))
        if timing.get("l2_control"):
            ran.add("l2_state")
        if timing.get("l2_left"):
            found.append(Finding("l2_state", f"left L2 persistence set after a call: {timing['l2_left'][0]}",
                                 evidence={"states": timing["l2_left"][:5]}))
    profile = facts.get("profile") or {}
    if profile.get("available"):
        ran |= {"kernel_streams", "own_kernel_share"}
        if profile["side_stream_kernels"]:
            found.append(Finding("kernel_streams", f"kernel {profile['side_stream_kernels'][0]} ran on a side stream",
                                 evidence={"kernels": profile["side_stream_kernels"][:10]}))
        if claims_kernels and profile["own_us"] == 0:
            found.append(Finding("own_kernel_share", "defines kernels but spent no GPU time in them "
                                                     f"({len(profile['kernels'])} torch/vendor kernels ran)",
                                 evidence={"kernels": [k["name"] for k in profile["kernels"]][:10]}))
    return found


def is_constant(t: torch.Tensor) -> bool:
    if t.numel() < 2 or not t.is_floating_point() or torch.isnan(t).any():
        return False
    return bool(t.max() == t.min())


def equivalent(a: list, b: list, bounds: list[float]) -> bool:
    """Same NaN pattern and shape, and an RMS difference within each output's bound (bitwise not needed:
    atomics may reorder sums)."""
    if len(a) != len(b):
        return False
    for x, y, bound in zip(a, b, bounds):
        if x.shape != y.shape or x.dtype != y.dtype:
            return False
        if not x.is_floating_point():
            if not torch.equal(x, y):
                return False
            continue
        nan_x, nan_y = torch.isnan(x), torch.isnan(y)
        if not torch.equal(nan_x, nan_y):
            return False
        diff = (x.double() - y.double())[~nan_x]
        if diff.numel() and not diff.square().mean().sqrt().item() <= bound:
            return False
    return True


def passes(outs: list | None, ref: dict, factor: float) -> bool:
    if outs is None or len(outs) != len(ref["eager"]):
        return False
    return all(compare("o", o, e, t, factor).passed for o, e, t in zip(outs, ref["eager"], ref["truth"]))


def probe_findings(case_outs: dict, probes: dict, ref_out: dict, case_checks: dict, factor: float) -> tuple:
    """constant_output, stale_memory, reference_leftovers, fresh_inputs from saved outputs.

    case_outs: case index -> candidate outputs; probes: probe name -> outputs; ref_out: "case_i" ->
    {eager, truth}; case_checks: case index -> bool (passed).
    """
    found, ran = [], set()
    for i, outs in case_outs.items():
        ran.add("constant_output")
        truth = ref_out[f"case_{i}"]["truth"]
        for j, (o, t) in enumerate(zip(outs, truth)):
            # the truth rounded to the output's dtype: a saturated output (sigmoid of huge values) is
            # constant in fp32 even where fp64 still varies
            if o.shape == t.shape and is_constant(o) and not is_constant(t.to(o.dtype)):
                found.append(Finding("constant_output", f"output {j} is the constant {o.reshape(-1)[0].item():g} "
                                                        f"(case {i}); the truth is not", evidence={"case": i}))
                break
    if 0 in case_outs and "stale_sentinel" in probes and "stale_repeat" in probes:
        ran.add("stale_memory")
        ref0 = ref_out["case_0"]
        bounds = [compare("o", e, e, t, factor).bound or 0.0 for e, t in zip(ref0["eager"], ref0["truth"])]
        runs = {"NaN poison": case_outs[0], "finite poison": probes["stale_sentinel"],
                "repeated call": probes["stale_repeat"]}
        names = list(runs)
        for k in names[1:]:
            if not equivalent(runs[names[0]], runs[k], bounds):
                found.append(Finding("stale_memory", f"output after {k} differs from the output after {names[0]} "
                                                     "(same inputs)", evidence={"runs": names}))
                break
    if "plant" in probes and 0 in case_checks:
        ran.add("reference_leftovers")
        if not case_checks[0] and passes(probes["plant"], ref_out["case_0"], factor):
            found.append(Finding("reference_leftovers", "wrong on fresh memory, right once the reference's "
                                                        "output was freed: it returns the reference's memory"))
    found += _fresh_findings(case_outs, probes, ref_out, case_checks, factor, ran)
    return found, ran


def _identical(a: list, b: list) -> bool:
    return len(a) == len(b) and all(x.shape == y.shape and torch.equal(x, y) for x, y in zip(a, b))


def _fresh_findings(case_outs, probes, ref_out, case_checks, factor, ran) -> list:
    found = []
    cases = sorted(case_outs)
    if len(cases) > 1:
        ran.add("fresh_inputs")
    for i in cases:
        for j in cases:
            if i < j and _identical(case_outs[i], case_outs[j]) and \
                    not _identical(ref_out[f"case_{i}"]["eager"], ref_out[f"case_{j}"]["eager"]):
                return [Finding("fresh_inputs", f"cases {i} and {j} (different inputs) got the identical output")]
    for name, label in (("fresh_new_buffer", "new inputs in new memory"),
                        ("fresh_same_buffer", "new values written into the previous call's input buffers")):
        if name not in probes or "case_1" not in ref_out:
            continue
        ran.add("fresh_inputs")
        differ = not _identical(ref_out["case_0"]["eager"], ref_out["case_1"]["eager"])
        replayed = differ and any(_identical(probes[name], earlier) for earlier in
                                  (case_outs.get(0), probes.get("same_buffer_before")) if earlier is not None)
        if replayed or (case_checks.get(1) and not passes(probes[name], ref_out["case_1"], factor)):
            found.append(Finding("fresh_inputs", f"{label}: the output is " +
                                 ("the previous call's" if replayed else "wrong (the same inputs in a fresh "
                                                                          "instance are right)")))
            break
    return found


def timed_findings(timed: dict | None, ref_out: dict, factor: float) -> tuple[list, set]:
    """Every timed call's sampled output vs the reference's samples for its pool inputs."""
    if not timed:
        return [], set()
    failed = []
    for t, (prints, k) in enumerate(zip(timed["fingerprints"], timed["pool_index"])):
        pool = ref_out[f"pool_{k}"]
        if not passes(prints, pool, FINGERPRINT_FACTOR * factor):
            failed.append(t)
    if not failed:
        return [], {"timed_outputs"}
    return [Finding("timed_outputs", f"{len(failed)} of {len(timed['pool_index'])} timed calls returned wrong "
                                     f"outputs (first: call {failed[0]}); verification calls were right",
                    evidence={"failed_calls": failed[:20]})], {"timed_outputs"}


def roofline_findings(median_ms: float | None, ref_meta: dict) -> tuple[list, set]:
    if median_ms is None or not ref_meta.get("ceilings") or ref_meta.get("flops") is None:
        return [], set()
    floor = roofline_floor_ms(ref_meta["flops"], ref_meta["min_bytes"], ref_meta["ceilings"])
    if floor >= ROOFLINE_MIN_FLOOR_MS and median_ms < ROOFLINE_MARGIN * floor and math.isfinite(median_ms):
        return [Finding("roofline_floor", f"median {median_ms:.4f} ms is below the roofline floor {floor:.4f} ms",
                        evidence={"median_ms": median_ms, "floor_ms": floor})], {"roofline_floor"}
    return [], {"roofline_floor"}
