"""Runtime checks: the facts the candidate worker recorded, and its saved outputs, turned into findings.

Each function takes plain data (dicts of facts, lists of tensors) and returns the findings of one group
of checks, and the names of the checks it could evaluate (`ran`), so that each is testable without a
worker process. Thresholds are constants here, named after what they guard against.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter

import torch

from fuseforge.check.gpu import roofline_floor_ms
from fuseforge.check.kinds import Finding
from fuseforge.check.stored_outputs import on_positions
from fuseforge.evaluate.numerics import compare, rms_difference

LOW_PRECISION_DTYPES = {"float16", "bfloat16"}
EVENT_WALL_RATIO, EVENT_WALL_SLACK_MS = 2.0, 0.05  # wall > ratio * event + slack: work off the stream
ROOFLINE_MARGIN, ROOFLINE_MIN_FLOOR_MS = 0.8, 0.005
REPEAT_SPEEDUP = 0.5  # repeated content at most this fraction of fresh content's median: memoised
FINGERPRINT_FACTOR = 2.0  # sampled outputs: allow twice the rule's factor (sampling noise)


def worker_findings(facts: dict, ref_meta: dict, claims_kernels: bool, device: str,
                    feed_anomalies: list | None = None) -> tuple[list, set]:
    """Checks on what the worker observed in the candidate's process."""
    found, ran = [], {"guarded_functions", "new_threads", "precision_flags", "interpreter_hooks", "grader_files",
                      "grader_memory", "new_processes", "feed_order"}
    audit = facts.get("audit") or {}
    if feed_anomalies:
        found.append(Finding("feed_order", f"the grader's data was asked for out of turn, {feed_anomalies[0]}: "
                                           "something in its process forged a request",
                             evidence={"all": feed_anomalies}))
    if audit.get("files"):
        found.append(Finding("grader_files", f"its code touched the grader's files: {audit['files'][0]}",
                             evidence={"all": audit["files"]}))
    if audit.get("memory"):
        found.append(Finding("grader_memory", f"its code read the grading process's memory: {audit['memory'][0]}",
                             evidence={"all": audit["memory"]}))
    patched = {stage: names for stage, names in (facts.get("patched") or {}).items() if names}
    if patched:
        first = next(iter(patched.values()))
        found.append(Finding("guarded_functions", f"replaced {', '.join(first[:4])} (seen after "
                                                  f"{next(iter(patched))})", evidence=patched))
    hooks = list(audit.get("hooks") or []) + list(facts.get("hooks") or []) + \
        [f"at the end: {h}" for h in facts.get("hooks_end") or []]
    if hooks:
        found.append(Finding("interpreter_hooks", f"installed an interpreter hook or mode: {hooks[0]}",
                             evidence={"all": hooks[:20]}))
    if facts.get("threads"):
        found.append(Finding("new_threads", f"started thread(s) {', '.join(facts['threads'][:4])}",
                             evidence={"threads": facts["threads"]}))
    processes = list(audit.get("processes") or []) + [f"left running from the build: {p}"
                                                      for p in facts.get("processes_left") or []]
    if processes:
        found.append(Finding("new_processes", f"started a process: {processes[0]}", evidence={"all": processes}))
    loose = facts.get("flags_loosened") or {}
    during = list(facts.get("flags_during") or []) + list((facts.get("ops") or {}).get("flags") or [])
    if loose or during:
        names = ", ".join(f"{k}: {a} -> {b}" for k, (a, b) in loose.items()) if loose else during[0]
        found.append(Finding("precision_flags", f"loosened {names}", evidence={"end": loose, "during": during}))
    ref_cases = ref_meta["cases"]
    for case in facts.get("cases", []):
        if not case.get("ok"):
            continue
        ran |= {"output_type", "inputs_unchanged", "parameters_unchanged"}
        odd = [t for t in case.get("output_types", []) if t != "torch.Tensor"]
        if odd:
            found.append(Finding("output_type", f"returned {odd[0]}, not torch.Tensor", evidence={"types": odd}))
        extra = sorted(set(case.get("mutated_inputs", [])) - set(ref_cases[case["index"]]["mutated_inputs"]))
        if extra:
            found.append(Finding("inputs_unchanged", f"modified input(s) {extra} (the model does not)",
                                 evidence={"case": case["index"], "inputs": extra}))
    if facts.get("state_changed"):
        found.append(Finding("parameters_unchanged", "changed parameters or buffers the model leaves alone: "
                                                     f"{facts['state_changed'][0]}",
                             evidence={"all": facts["state_changed"]}))
    if facts.get("aliased"):
        ran.add("output_aliasing")
        found.append(Finding("output_aliasing", facts["aliased"][0], evidence={"all": facts["aliased"]}))
    elif facts.get("probes"):
        ran.add("output_aliasing")
    if facts.get("unstable"):
        found.append(Finding("outputs_stable", f"the output of {facts['unstable'][0]} changed after later calls",
                             evidence={"all": facts["unstable"]}))
    if facts.get("probes"):
        ran.add("outputs_stable")
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
    found += _gpu_findings(facts, claims_kernels, device, ran, ref_meta.get("profile"))
    return found, ran


def _joined(kernel: dict, profile: dict) -> bool:
    """A side-stream kernel the current stream waited for: a later kernel on the current stream started after it
    ended, so the call's end event, recorded on that stream, comes after it (what a library's fork and join does).
    Unknown (False) for profiles without kernel times."""
    end = kernel.get("end_us")
    return end is not None and any(k["stream"] == profile.get("main_stream") and k.get("start_us") is not None
                                   and k["start_us"] >= end for k in profile.get("kernels") or [])


def side_stream_split(profile: dict, reference: dict | None) -> tuple[list, list]:
    """The candidate's side-stream kernels as (unexcused, excused). A library kernel (gpu.classify) is excused as
    many times as the reference's own profiled call ran a kernel of that name on a side stream: torch's vendor
    libraries run some calls on streams of their own (cuDNN's conv3d on an H200), and the model does the same.
    A library kernel the current stream waited for (`_joined`) is excused too: its time is inside the call's events
    (cuDNN runs a channels-last grouped convolution's groups on streams of its own, and joins them). The
    candidate's own kernels and unknown ones never are; nor is a library kernel on a side stream that the current
    stream did not wait for, unless the reference ran it so."""
    reference = reference or {}
    allowance = Counter(reference.get("side_stream_kernels") or [] if reference.get("available") else [])
    main = profile.get("main_stream")
    side = [k for k in profile.get("kernels") or [] if k["stream"] != main]
    unexcused, excused = [], []
    for kernel in side:
        name = kernel["name"]
        if kernel["owner"] == "library" and allowance[name] > 0:
            allowance[name] -= 1
            excused.append(name)
        elif kernel["owner"] == "library" and _joined(kernel, profile):
            excused.append(name)
        else:
            unexcused.append(name)
    return unexcused, excused


def _gpu_findings(facts: dict, claims_kernels: bool, device: str, ran: set, reference: dict | None = None) -> list:
    """`reference`: the reference's profile of one call (ref_meta["profile"]; absent in older metas and on the CPU)."""
    found = []
    timing = facts.get("timing") or {}
    profile = facts.get("profile") or {}
    unexcused, excused = side_stream_split(profile, reference) if profile.get("available") else ([], [])
    if device == "cuda" and timing.get("ms"):
        ran |= {"event_wall_gap", "deferred_work", "current_stream"}
        event, wall = statistics.median(timing["ms"]), statistics.median(timing["wall_ms"])
        if wall > EVENT_WALL_RATIO * event + EVENT_WALL_SLACK_MS:
            side = unexcused + excused  # any work off the stream may explain the gap; an unexcused kernel first
            evidence = {"event_ms": event, "wall_ms": wall, "side_stream_kernels": side[:10]}
            if excused:
                evidence["excused"] = excused[:10]
            if side:
                found.append(Finding("event_wall_gap", f"wall time {wall:.3f} ms vs event time {event:.3f} ms: "
                                                       f"kernel {side[0]} runs on a side stream", evidence=evidence))
            else:
                found.append(Finding("deferred_work", f"wall time {wall:.3f} ms vs event time {event:.3f} ms, and no "
                                                      "kernel on a side stream: the call's work is launched or done "
                                                      "after its end event (deferred)", evidence=evidence))
        if timing.get("l2_control"):
            ran.add("l2_state")
        if timing.get("l2_left"):
            found.append(Finding("l2_state", f"left L2 persistence set after a call: {timing['l2_left'][0]}",
                                 evidence={"states": timing["l2_left"][:5]}))
    if facts.get("stream_left"):
        found.append(Finding("current_stream", f"left another stream current: {facts['stream_left'][0]}",
                             evidence={"all": facts["stream_left"]}))
    if profile.get("available"):
        ran |= {"kernel_streams", "own_kernel_share"}
        if unexcused:
            also = f" ({len(excused)} library kernel(s) on side streams excused: the reference ran them there " \
                   "too, or the current stream waited for them)" if excused else ""
            found.append(Finding("kernel_streams", f"kernel {unexcused[0]} ran on a side stream{also}",
                                 evidence={"kernels": unexcused[:10], "excused": excused[:10]}))
        if claims_kernels and profile["own_us"] == 0:
            found.append(Finding("own_kernel_share", "defines kernels but spent no GPU time in them "
                                                     f"({len(profile['kernels'])} torch/vendor kernels ran)",
                                 evidence={"kernels": [k["name"] for k in profile["kernels"]][:10]}))
    return found


def dataflow_findings(provenance: dict | None, torch_only: list | None, ref_case0: dict, claims_kernels: bool,
                      factor: float, candidate: list | None = None) -> tuple[list, set]:
    """kernel_dataflow: with kernels claimed, no output may come from the torch ops alone -- neither an output
    no kernel wrote, nor one that a tensor its torch ops computed (with no kernel data in it) already matches: one
    that passes the correctness rule by itself and, where the candidate's own outputs of case 0 are given, is as near
    the candidate's output as eager's is (`_as_near_as_eager`: where eager itself is far from float64, the rule
    passes tensors the kernels then changed a lot). An output that is one value everywhere (eager's, case 0: a min
    against a constant below the values, a relu of a log_softmax) is no evidence either way: the model's own
    constant matches it, whoever computed it."""
    if not claims_kernels or not provenance or "kernel_made" not in provenance:
        return [], set()
    why = []
    for j, made in enumerate(provenance["kernel_made"]):
        if not made:
            why.append(f"output {j} is computed by torch ops alone (no kernel wrote it or anything it is made of)")
            continue
        made_by_torch = torch_only[j] if torch_only and j < len(torch_only) else []
        if is_constant(ref_case0["eager"][j]):
            return [], {"kernel_dataflow"}
        reference = {"eager": [ref_case0["eager"][j]], "truth": [ref_case0["truth"][j]]}
        mine = candidate[j] if candidate is not None and j < len(candidate) else None
        matches = [t for t in made_by_torch if passes([t], reference, factor)
                   and (mine is None or _as_near_as_eager(t, mine, ref_case0["eager"][j], factor))]
        if not matches:
            return [], {"kernel_dataflow"}
        why.append(f"output {j} is already computed by its torch ops before its kernels touch it")
    return [Finding("kernel_dataflow", f"claims custom kernels, but {why[0]}", evidence={"outputs": why})], \
        {"kernel_dataflow"}


def _as_near_as_eager(made: torch.Tensor, mine: torch.Tensor, eager: torch.Tensor, factor: float) -> bool:
    """Whether a torch-made tensor is the candidate's output as nearly as eager's output is (within `factor` times
    eager's largest difference from it, and a 1e-6 relative floor): what a kernel that only copies or touches up a
    torch result leaves; a kernel that computed the output's last ops leaves it farther."""
    if made.shape != mine.shape or eager.shape != mine.shape:
        return False
    mine = mine.double()
    gap = (made.double() - mine).abs().max().item()
    return gap <= factor * (eager.double() - mine).abs().max().item() + 1e-6 * mine.abs().max().item()


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
        diff = rms_difference(x, y)
        if diff is None or not diff <= bound:
            return False
    return True


def passes(outs: list | None, ref: dict, factor: float) -> bool:
    """Whole outputs (or a timed call's fingerprint) within the rule of the reference's entry, whole or sampled."""
    if outs is None or len(outs) != len(ref["eager"]):
        return False
    outs = on_positions(outs, ref)
    scales = ref.get("scales") or [None] * len(outs)  # of the values each output was computed from (scales.py)
    return all(compare("o", o, e, t, factor, s).passed
               for o, e, t, s in zip(outs, ref["eager"], ref["truth"], scales))


def probe_findings(case_outs: dict, probes: dict, ref_out: dict, case_checks: dict, factor: float,
                   others: dict | None = None) -> tuple:
    """constant_output, stale_memory, reference_leftovers, fresh_inputs from saved outputs.

    case_outs: case index -> candidate outputs; probes: probe name -> outputs; ref_out: "case_i" ->
    {eager, truth}; case_checks: case index -> bool (passed); others: label -> (candidate outputs, eager's
    outputs) of other calls (the first call's): an output of case 0's inputs identical to another call's
    output (of other inputs) is a replay (fresh_inputs), not stale memory.
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
    earlier = dict(others or {}) | {f"case {i}": (outs, ref_out[f"case_{i}"]["eager"])
                                     for i, outs in case_outs.items() if i != 0}
    if 0 in case_outs and "stale_sentinel" in probes and "stale_repeat" in probes:
        ran.add("stale_memory")
        ref0 = ref_out["case_0"]
        scales = ref0.get("scales") or [None] * len(ref0["eager"])
        bounds = [compare("o", e, e, t, factor, s).bound or 0.0
                  for e, t, s in zip(ref0["eager"], ref0["truth"], scales)]
        runs = {"NaN poison": case_outs[0], "finite poison": probes["stale_sentinel"],
                "repeated call": probes["stale_repeat"]}
        names = list(runs)
        replay = next((f"the output after {k} is {label}'s (other inputs)" for k, run in runs.items()
                       if (label := _replayed(run, earlier, ref0["eager"]))), None)
        if replay:
            found.append(Finding("fresh_inputs", replay))
            names = []
        for k in names[1:]:
            if not equivalent(runs[names[0]], runs[k], bounds):
                found.append(Finding("stale_memory", f"output after {k} differs from the output after {names[0]} "
                                                     "(same inputs)", evidence={"runs": names}))
                break
    if "plant" in probes and 0 in case_outs:
        ran.add("reference_leftovers")
        # case 0's outputs, not the case: a case that failed on its buffers alone (running statistics) says
        # nothing about the memory its outputs were written to
        if not passes(case_outs[0], ref_out["case_0"], factor) and passes(probes["plant"], ref_out["case_0"], factor):
            label = _replayed(case_outs[0], earlier, ref_out["case_0"]["eager"])
            found.append(Finding("fresh_inputs", f"case 0's output is {label}'s (other inputs)") if label else
                         Finding("reference_leftovers", "wrong on fresh memory, right once the reference's output "
                                                        "was freed: it returns the reference's memory"))
    found += _fresh_findings(case_outs, probes, ref_out, case_checks, factor, ran)
    return found, ran


def _replayed(outs: list, earlier: dict, eager: list) -> str | None:
    """The label of an earlier call, of other inputs (its eager outputs differ), whose outputs `outs` are: a replay
    (an output cached by something other than the content, such as the input's address), not stale memory."""
    return next((label for label, (theirs, their_eager) in earlier.items()
                 if _identical(outs, theirs) and not _identical(their_eager, eager)), None)


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
    """Every timed call's output at its positions (drawn from the grader's secret, handed over only after the
    call returned; the whole output when small) vs the reference's values there for its pool inputs."""
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


def roofline_findings(median_ms: float | None, ref_meta: dict, repeat_ms: list | None = None) -> tuple[list, set]:
    """The floor from the reference's FLOPs and bytes on the measured ceilings. Every timed input is fresh, so
    a median below it on them is an algebraic rewrite (less arithmetic than the reference): a note. Below
    it on repeated content but not on fresh content, the candidate memoises by content: roofline."""
    if median_ms is None or not ref_meta.get("ceilings") or ref_meta.get("flops") is None:
        return [], set()
    floor = roofline_floor_ms(ref_meta["flops"], ref_meta["min_bytes"], ref_meta["ceilings"])
    if floor < ROOFLINE_MIN_FLOOR_MS or not math.isfinite(median_ms):
        return [], {"roofline_floor"}
    found, below = [], median_ms < ROOFLINE_MARGIN * floor
    if below:
        found.append(Finding("below_flop_floor", f"median {median_ms:.4f} ms on fresh inputs is below the floor "
                                                 f"{floor:.4f} ms from the reference's FLOPs: less arithmetic than the "
                                                 "reference (an algebraic rewrite)",
                             evidence={"median_ms": median_ms, "floor_ms": floor}))
    repeated = statistics.median(repeat_ms) if repeat_ms else None
    if repeated is not None and not below and repeated < ROOFLINE_MARGIN * floor and \
            repeated < REPEAT_SPEEDUP * median_ms:
        found.append(Finding("roofline_floor", f"median {repeated:.4f} ms on repeated input content is below the "
                                               f"roofline floor {floor:.4f} ms, {median_ms:.4f} ms on fresh content: "
                                               "it memoises outputs by their inputs' content",
                             evidence={"median_ms": median_ms, "repeat_median_ms": repeated, "floor_ms": floor}))
    return found, {"roofline_floor", "below_flop_floor"}
