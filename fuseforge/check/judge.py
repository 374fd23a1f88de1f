"""The verdict, from the static report, the reference's data and how the candidate's worker ended.

Order (the first that applies decides; see the package docstring for the record's fields):
1. build_failed: the import/build/construction failed, crashed or ran past the build limit (but "error",
   no verdict, where the build failed because the grader's machine ran out of disk space);
2. interface_mismatch: no ModelNew, signatures that cannot take the model's arguments, a state_dict
   that does not load, or outputs of another count, structure, shape or dtype (file-shaped cases);
3. cheat:<kind>: the highest-precedence decisive finding (kinds.KINDS order);
4. incorrect: a crash, illegal memory access, hang or exception at run time, or an error vs fp64 beyond
   the rule in a file-shaped case (the file's and signed inputs, and large, tiny and shifted magnitudes)
   or a call of the sequence (a case whose failures are all on the bound with an error on few elements,
   numerics.few_carriers, is decided by the majority of its draws: the reference's redraws of it; the sequence's
   calls, each on its own inputs, are such draws of one another) -- promoted
   to cheat:precision_downgrade when the source uses TF32 (check tf32_error) or when only the magnitude cases
   fail, by overflowing or flushing to zero (magnitude_error); or a buffer past the rule after the timed calls but
   not far off (its updates drift by rounding: far off, it is cheat:aggregate_gaming, state_over_calls);
5. correct, with the timings and speedups.

Findings from the calls' results (beyond evidence.py's): stale_weights (right with the weights before, far
off right after load_state_dict: the first call vs case 0, or a sequence call before vs after its load),
state_over_calls (the first call after a load right, a later one far off; or the buffers after the timed
calls far off), extra_batch (a case at another batch size far off), kernel_dataflow (provenance.py).
"""

from __future__ import annotations

from pathlib import Path

import torch

from fuseforge.check import evidence
from fuseforge.check.gpu import roofline_floor_ms
from fuseforge.check.kinds import CHECKS, ERROR, Finding, first_cheat, verdict_of
from fuseforge.check.stored_outputs import on_positions
from fuseforge.check.timing import stats
from fuseforge.evaluate.numerics import TensorCheck, compare, few_carriers, majority_of_draws

DISK_FULL = "No space left on device"  # strerror(ENOSPC): the machine failed the build, not the candidate
FAR_OFF = 1e-3  # relative error beyond any rounding: a failure this large is not a precision problem
ZERO_FLUSH = 0.01  # tiny inputs: more than this fraction of zeros where the truth is not zero


def _load(path: Path):
    """A saved file of the candidate's worker, mapped (its tensors page in as they are compared), or None."""
    return torch.load(path, mmap=True, weights_only=True) if path.exists() else None


def _label(case: dict) -> str:
    if case.get("name"):
        return case["name"]
    return (f"seed {case['seed']} / {case['distribution']}" + (f" / batch {case['batch']}" if case["batch"] else "")
            + (f" (a redraw of case {case['of']})" if case.get("of") is not None else ""))


def structure_mismatch(outs: list, is_tuple: bool, ref: dict, shapes: list | None = None) -> str | None:
    """Why the outputs cannot be compared with the model's (count, tuple-ness, shape, dtype), or None. `shapes`:
    the outputs' own where they were saved at a sampled call's positions (so is the entry `ref` then)."""
    eager = ref["eager"]
    theirs = shapes if shapes is not None else [list(o.shape) for o in outs]
    models = ref.get("shapes") or [list(e.shape) for e in eager]
    if is_tuple != ref["is_tuple"] or len(outs) != len(eager):
        def what(n, t):
            return f"a tuple of {n} tensors" if t else "a tensor"
        return f"ModelNew returned {what(len(outs), is_tuple)}, Model {what(len(eager), ref['is_tuple'])}"
    for j, (o, e) in enumerate(zip(outs, eager)):
        if tuple(theirs[j]) != tuple(models[j]):
            return f"output {j} has shape {tuple(theirs[j])}, Model's {tuple(models[j])}"
        if o.dtype != e.dtype:
            return f"output {j} has dtype {o.dtype}, Model's {e.dtype}"
    return None


def worst_elements(cand: torch.Tensor, truth: torch.Tensor, eager: torch.Tensor, k: int = 5,
                   positions: torch.Tensor | None = None, shape: list | None = None) -> list[dict]:
    """The k elements furthest from the truth; `positions` and `shape` where the values are a sampled call's."""
    diff = (cand.double() - truth.double()).abs()
    diff = torch.where(torch.isnan(cand) & torch.isfinite(truth), torch.full_like(diff, float("inf")), diff)
    diff = torch.nan_to_num(diff, nan=-1.0).reshape(-1)
    top = torch.topk(diff, min(k, diff.numel())).indices

    def where(idx):
        return torch.unravel_index(idx, cand.shape) if positions is None else \
            torch.unravel_index(positions[idx], tuple(shape))
    return [{"index": [int(i) for i in where(idx)],
             "candidate": cand.reshape(-1)[idx].item(), "truth": truth.reshape(-1)[idx].item(),
             "eager": eager.reshape(-1)[idx].item()} for idx in top]


def compare_outputs(saved: dict, ref: dict, factor: float, buffers: bool = True) -> dict:
    """Outputs (and the buffers the reference recorded) vs eager and the fp64 truth; the structure first."""
    mismatch = structure_mismatch(saved["outputs"], saved["is_tuple"], ref, saved.get("shapes"))
    if mismatch:
        return {"passed": False, "reason": mismatch, "structure": mismatch, "outputs": [], "buffers": [],
                "far_off": True, "outputs_far_off": True}
    names = [f"output {j}" for j in range(len(ref["eager"]))] if ref["is_tuple"] else ["output"]
    mine = saved["outputs"] if "shapes" in saved else on_positions(saved["outputs"], ref)
    scales = ref.get("scales") or [None] * len(names)  # of the values each output was computed from (scales.py)
    outputs = [compare(n, o, e, t, factor, s) for n, o, e, t, s in zip(names, mine, ref["eager"], ref["truth"], scales)]
    checked = []
    buffer_scales = ref.get("buffer_scales") or {}
    for name, (eager, truth) in (ref.get("buffers") or {}).items() if buffers else ():
        got = (saved.get("buffers") or {}).get(name)
        checked.append(compare(f"buffer {name}", got if got is not None else torch.empty(0), eager, truth, factor,
                               buffer_scales.get(name)))
    failed = [c for c in outputs + checked if not c.passed]

    def far(checks) -> bool:
        return any(c.exact or c.cand_rel_err is None or not c.cand_rel_err <= FAR_OFF for c in checks if not c.passed)
    return {"passed": not failed, "reason": failed[0].reason if failed else None, "structure": None,
            "outputs": outputs, "buffers": checked, "far_off": far(failed), "outputs_far_off": far(outputs)}


def judge_case(case: dict, fact: dict | None, saved: dict | None, ref: dict | None, factor: float,
               buffers: bool = True) -> dict:
    record = {"seed": case.get("seed"), "distribution": case.get("distribution"), "batch": case.get("batch"),
              "role": case.get("role", "main"), "of": case.get("of"), "name": case.get("name"),
              "skipped": case.get("skipped", False), "redraws": None,
              "passed": None, "reason": case.get("reason"), "structure": None, "allclose": None, "outputs": [],
              "buffers": [], "worst_elements": [], "far_off": None, "outputs_far_off": None, "compared": None}
    if record["skipped"]:
        return record
    if fact is None or (not fact.get("ok") and not fact.get("error")):
        return record | {"reason": "not run (the worker stopped before this call)"}
    if fact.get("error"):
        return record | {"passed": False, "reason": f"ModelNew raised {fact['error']}", "far_off": True,
                         "outputs_far_off": True}
    if saved is None or ref is None:
        return record | {"passed": False, "reason": "the worker saved no outputs", "far_off": True,
                         "outputs_far_off": True}
    result = compare_outputs(saved, ref, factor, buffers)
    outputs = result["outputs"]
    record["compared"] = "whole" if ref.get("positions") is None else \
        f"at {max((p.numel() for p in ref['positions'] if p is not None), default=0)} sampled positions per output"
    if "shapes" not in saved:
        saved = dict(saved, outputs=on_positions(saved["outputs"], ref))
    record.update(passed=result["passed"], reason=result["reason"], structure=result["structure"],
                  far_off=result["far_off"], outputs_far_off=result["outputs_far_off"],
                  outputs=[c.to_json() for c in outputs],
                  buffers=[c.to_json() for c in result["buffers"]],
                  allclose=all(c.allclose for c in outputs) if outputs and all(c.allclose is not None
                                                                               for c in outputs) else None)
    bad = next((j for j, c in enumerate(outputs) if not c.passed), None)
    if bad is not None:
        positions = (ref.get("positions") or [None] * len(outputs))[bad]
        record["worst_elements"] = worst_elements(saved["outputs"][bad], ref["truth"][bad], ref["eager"][bad],
                                                  positions=positions,
                                                  shape=(ref.get("shapes") or [None] * len(outputs))[bad])
    return record


def _check_of(record: dict) -> TensorCheck:
    """A TensorCheck back from its JSON (non-finite numbers were written as strings)."""
    return TensorCheck(**{k: float(v) if v in ("nan", "inf", "-inf") else v for k, v in record.items()})


def _failures(case: dict) -> list[TensorCheck]:
    """A judged case's failing checks; one standing for its failure where it failed without a check (it raised,
    it saved nothing, its outputs had another structure)."""
    fails = [_check_of(c) for c in case["outputs"] + case["buffers"] if not c["passed"]]
    if case["passed"] is False and not fails:
        fails = [TensorCheck("outputs", [], "", reason=case["reason"])]
    return fails


def judge_over_draws(cases: list[dict]) -> None:
    """A file-shaped case that failed on the bound alone with few carriers, and has redraws, is decided by the
    majority of its draws (numerics.majority_of_draws); its `redraws` says how it went."""
    redraws: dict[int, list[dict]] = {}
    for case in cases:
        if case["role"] == "redraw" and case["passed"] is not None:
            redraws.setdefault(case["of"], []).append(case)
    for i, case in enumerate(cases):
        first = _failures(case) if case["role"] in ("main", "magnitude") and case["passed"] is False else []
        if not first or i not in redraws or not all(few_carriers(c) for c in first):
            continue
        _settle(case, *majority_of_draws([first] + [_failures(r) for r in redraws[i]]))


def _settle(case: dict, passed: bool, account: str) -> None:
    """A case decided over draws: its verdict, and the account in `redraws` (and in the reason of a failure)."""
    case.update(passed=passed, reason=None if passed else f"{case['reason']}; {account}", redraws=account)


def judge_calls_over_draws(calls: list[dict]) -> None:
    """The first call and the sequence's calls each run on inputs of their own: draws of one kind. Where every call
    that failed, failed on the bound alone with few carriers, they are decided together by the majority of all the
    calls (numerics.majority_of_draws); each failing call's `redraws` says how it went. A stale weight or a state
    carried wrongly over calls is off by far more than a rounding (FAR_BEYOND) on the calls it touches."""
    judged = [c for c in calls if c["passed"] is not None]
    failing = [c for c in judged if c["passed"] is False]
    if not failing or not all(_failures(c) and all(few_carriers(f) for f in _failures(c)) for c in failing):
        return
    passed, account = majority_of_draws([_failures(failing[0])] + [_failures(c) for c in judged if c is not failing[0]])
    for call in failing:
        _settle(call, passed, account)


def _worst(cases: list[dict]) -> dict | None:
    """The output or buffer closest to (or furthest past) its bound: among the file's and signed inputs' cases,
    else the magnitudes' (at large magnitudes a saturated output can leave eager exact, a bound of the floor
    alone); other batch sizes count only when far off."""
    for role in ("main", "magnitude"):
        best = _worst_of([c for c in cases if c.get("role", "main") == role])
        if best is not None:
            return best
    return None


def _worst_of(cases: list[dict]) -> dict | None:
    best = None
    for case in cases:
        for check in case["outputs"] + case["buffers"]:
            err, bound = check.get("cand_err"), check.get("bound")
            if isinstance(err, float) and isinstance(bound, float) and bound > 0 and \
                    (best is None or err / bound > best["ratio"]):
                best = {"case": _label(case), "name": check["name"], "cand_err": err, "ref_err": check["ref_err"],
                        "bound": bound, "ratio": err / bound, "cand_rel_err": check["cand_rel_err"],
                        "ref_rel_err": check["ref_rel_err"], "max_abs_err": check["max_abs_err"],
                        "max_abs_index": check["max_abs_index"], "cand_at_max": check["cand_at_max"],
                        "truth_at_max": check["truth_at_max"]}
    return best


def _timing(facts: dict, ref_meta: dict) -> dict | None:
    timing, ref_timing = facts.get("timing") or {}, ref_meta.get("timing") or {}
    if not timing.get("ms"):
        return {"error": timing["error"]} if timing.get("error") else None
    cand = stats(timing["ms"]) | {"wall_median_ms": stats(timing["wall_ms"])["median_ms"]}
    eager, compiled = ref_timing.get("eager") or {}, ref_timing.get("compile") or {}
    autotuned = ref_timing.get("compile_max_autotune") or {}

    def ratio(base):
        return base["median_ms"] / cand["median_ms"] if base.get("median_ms") and cand["median_ms"] else None
    return {"candidate": cand, "eager": eager or None, "compile": compiled or None,
            "compile_max_autotune": autotuned or None, "timer": timing["timer"],
            "l2_flush_bytes": ref_timing.get("l2_flush_bytes"), "pool_size": ref_meta.get("pool_size"),
            "speedup": {"vs_eager": ratio(eager), "vs_compile": ratio(compiled),
                        "vs_compile_max_autotune": ratio(autotuned)}}


def _run_failure(outcome, facts: dict, cases: list[dict], limits: dict) -> str | None:
    if outcome.status != "finished":
        return f"ModelNew {outcome.describe(limits)}"
    if facts.get("fatal"):
        return f"the candidate's process failed: {facts['fatal']}"
    errors = [c for c in cases if c["passed"] is False and c["reason"].startswith("ModelNew raised")]
    if errors:
        return f"{_label(errors[0])}: {errors[0]['reason']}"
    first = facts.get("init") or {}
    if first.get("cuda_error"):  # the context broke on the first call: later calls could not run
        return f"the first call: ModelNew raised {first['error']}"
    return None


def _finish(record: dict, verdict: str, reason: str | None, check: str | None) -> dict:
    record.update(verdict=verdict, reason=reason, check=check)
    return record


def judge(record: dict, static, ref, outcome, cand_dir: Path, settings, feed_anomalies: list | None = None,
          taken: dict | None = None) -> dict:
    """Fill `record` (verdict, reason, check, cases, findings, checks, timing, gpu) and return it. `taken`: saved
    files the grading process already read (and deleted) while the worker ran, by file name (ProbeCollector)."""
    facts, factor = outcome.result or {}, settings.tolerance_factor
    limits = {"build": settings.build_timeout_s, "run": settings.run_timeout_s}
    build = facts.get("build") or {}
    built = bool(build.get("ok")) or outcome.phase == "run"  # "built" was reported before the end
    crashed_in_build = outcome.status != "finished" and outcome.phase == "build"
    record["build"] = {"status": "ok" if built else (outcome.status if crashed_in_build else "failed"),
                       "seconds": outcome.build_s, "reason": build.get("error"), "error_lines": []}
    record["run"] = {"status": outcome.status, "phase": outcome.phase, "signal": outcome.signal,
                     "seconds": outcome.run_s, "stderr_tail": outcome.stderr[-1500:]}
    findings = [f for f in static.findings if not f.decisive]
    record["findings"] = [f.to_json() for f in findings]
    if not built and not facts.get("interface"):
        lines = [ln for ln in (build.get("error") or "").splitlines() if "error" in ln.lower()][1:]
        lines = list(dict.fromkeys(outcome.error_lines + lines))[:10]
        record["build"]["error_lines"] = lines
        if crashed_in_build:
            why = f"the build {outcome.describe(limits)}"
        else:
            why = build.get("error") or facts.get("fatal") or "the build stopped without a reason"
        first = f"; first error: {lines[0]}" if lines else ""
        if any(DISK_FULL in text for text in (why, *lines, outcome.stderr)):
            return _finish(record, ERROR, "the grader's machine ran out of disk space during the build (no verdict "
                                          f"on the candidate): {why.splitlines()[0][:300]}{first[:200]}", "build")
        return _finish(record, "build_failed", why.splitlines()[0][:400] + first[:300], "build")
    if facts.get("interface"):
        return _finish(record, "interface_mismatch", facts["interface"], "interface")

    meta, ref_out = ref.meta, ref.outputs
    plan = meta.get("plan") or {}
    cases, case_outs, passed, others = [], {}, {}, {}
    facts_by_index = {c["index"]: c for c in facts.get("cases", [])}
    saves = {}
    for i, case in enumerate(meta["cases"]):
        saves[i] = _load(cand_dir / f"case_{i}.pt") if facts_by_index.get(i, {}).get("ok") else None
        cases.append(judge_case(case, facts_by_index.get(i), saves[i], ref_out.get(f"case_{i}"), factor))
    judge_over_draws(cases)
    for i, saved in saves.items():
        if saved is not None and cases[i]["role"] == "main" and not cases[i]["structure"]:
            case_outs[i], passed[i] = saved["outputs"], cases[i]["passed"]
        elif saved is not None:
            others[f"case {i}"] = (saved["outputs"], ref_out[f"case_{i}"]["eager"])
    record["cases"], record["worst"] = cases, _worst(cases)
    main = [c for c in cases if c["role"] in ("main", "magnitude") and not c["skipped"]]
    mismatch = next((c for c in main if c["structure"]), None)
    if mismatch:
        return _finish(record, "interface_mismatch", f"{_label(mismatch)}: {mismatch['structure']}", "interface")

    found, ran = evidence.worker_findings(facts, meta, static.claims_kernels, settings.device, feed_anomalies)
    taken = taken or {}
    probes = {name: taken.get(f"probe_{name}.pt") or _load(cand_dir / f"probe_{name}.pt")
              for name, p in (facts.get("probes") or {}).items()
              if p.get("ok")}
    init_saved = _load(cand_dir / "init.pt") if (facts.get("init") or {}).get("ok") else None
    if init_saved is not None and "init" in ref_out:
        others["the first call"] = (init_saved["outputs"], ref_out["init"]["eager"])
    more, ran2 = evidence.probe_findings(case_outs, {k: v["outputs"] for k, v in probes.items() if v},
                                         ref_out, passed, factor, others)
    found, ran = found + more, ran | ran2
    provenance = _load(cand_dir / "provenance.pt") or {}
    more, ran2 = evidence.dataflow_findings(facts.get("provenance"), provenance.get("torch_only"),
                                            ref_out["case_0"], static.claims_kernels, factor, case_outs.get(0))
    found, ran = found + more, ran | ran2
    init = _step_case("the first call (its own initial weights)", facts.get("init"), cand_dir / "init.pt",
                      ref_out.get("init"), factor, buffers=False)
    seq_facts = facts.get("sequence") or []
    sequence = [_step_case(f"sequence call {k}" + (" (right after load_state_dict)" if step["after_load"] else ""),
                           seq_facts[k] if k < len(seq_facts) else None, cand_dir / f"{step['name']}.pt",
                           ref_out.get(step["name"]), factor) | {"after_load": step["after_load"]}
                for k, step in enumerate(plan.get("sequence") or [])]
    record["sequence"] = [init] + sequence
    more, ran2 = _weight_findings(init, cases, sequence)
    found, ran = found + more, ran | ran2
    main_ok = bool(main) and all(c["passed"] for c in main)
    drift = None  # buffers past the bound after the timed calls, not far off (_state_findings)
    record["timing"] = _timing(facts, meta)
    if main_ok:
        more, ran2 = evidence.timed_findings(_load(cand_dir / "timed.pt"), ref_out, factor)
        found, ran = found + more, ran | ran2
        more, ran2, drift = _state_findings(sequence, _load(cand_dir / "timed_state.pt"),
                                            ref_out.get("timed_state"), meta, factor)
        found, ran = found + more, ran | ran2
        batch_cases = [c for c in cases if c["role"] == "batch" and not c["skipped"] and c["passed"] is not None]
        if batch_cases:
            ran.add("extra_batch")
            # far off only: at a batch of 1 an output may be a handful of elements, where eager's rounding error
            # can be near zero by chance and the rule's ratio says nothing about precision
            bad = next((c for c in batch_cases if not c["passed"] and c["far_off"]), None)
            if bad is not None:
                found.append(Finding("extra_batch", f"{_label(bad)}: {bad['reason']}"))
        median = (record["timing"] or {}).get("candidate", {}).get("median_ms")
        repeat = (facts.get("repeat") or {}).get("ms")
        more, ran2 = evidence.roofline_findings(median, meta, repeat)
        found, ran = found + more, ran | ran2
    record["gpu"] = _gpu(facts, meta)
    findings += found
    record["findings"] = [f.to_json() for f in findings]
    record["checks"] = checks_table(ran | ({"tf32_error", "magnitude_error"} if main else set()), findings)
    cheat = first_cheat(findings)
    if cheat:
        return _finish(record, verdict_of(cheat.kind), f"{cheat.check}: {cheat.message}", cheat.check)
    failure = _run_failure(outcome, facts, main + [c for c in cases if c["role"] == "redraw"], limits)
    if failure:
        return _finish(record, "incorrect", failure, "run")
    if not main_ok:
        bad = next(c for c in main if not c["passed"])
        promoted = _promotion(findings, cases, cand_dir, ref_out, bad)
        if promoted is not None:
            record["findings"].append(promoted.to_json())
            return _finish(record, verdict_of(promoted.kind), f"{promoted.check}: {promoted.message}", promoted.check)
        return _finish(record, "incorrect", f"{_label(bad)}: {bad['reason']}", "correctness")
    judge_calls_over_draws([init] + sequence)
    wrong = next((c for c in sequence if c["passed"] is False), None)
    if wrong is not None:
        return _finish(record, "incorrect", f"{_label(wrong)}: {wrong['reason']}", "correctness")
    if drift is not None:
        return _finish(record, "incorrect", f"state over calls: {drift}", "correctness")
    return _finish(record, "correct", None, None)


def _step_case(name: str, fact: dict | None, path: Path, ref: dict | None, factor: float,
               buffers: bool = True) -> dict:
    saved = _load(path) if (fact or {}).get("ok") else None
    return judge_case({"name": name, "role": "sequence"}, fact, saved, ref, factor, buffers)


def _weight_findings(init: dict, cases: list[dict], sequence: list[dict]) -> tuple[list, set]:
    """stale_weights: outputs right with the weights before, far off right after load_state_dict (outputs:
    a buffer update that assumes the initial running statistics is a bug, not a stale snapshot)."""
    ran = {"stale_weights"} if init["passed"] is not None or sequence else set()
    first = cases[0] if cases else None
    if init["passed"] and first is not None and first["passed"] is False and first["outputs_far_off"]:
        return [Finding("stale_weights", f"right with its own initial weights, far off once Model's state_dict was "
                                         f"loaded ({_label(first)}: {first['reason']}): it computes with a "
                                         "snapshot of its weights")], ran
    for before, after in zip(sequence, sequence[1:]):
        if after["after_load"] and before["passed"] and after["passed"] is False and after["outputs_far_off"]:
            return [Finding("stale_weights", f"right before load_state_dict, far off right after it "
                                             f"({_label(after)}: {after['reason']}): it computes with a snapshot "
                                             "of the weights loaded before")], ran
    return [], ran


def _state_findings(sequence: list[dict], timed: dict | None, ref_timed: dict | None, meta: dict,
                    factor: float) -> tuple[list, set, str | None]:
    """state_over_calls: the first call after a load right, a later call without a load far off; or the
    buffers after the timed calls far off. A buffer past the bound after the timed calls but not far off is no
    cheat: its updates drift by rounding (a running mean near zero summed less precisely than eager's), and the
    third value says so, for an `incorrect` verdict."""
    ran, found = set(), []
    group_ok = None
    for step in sequence:
        if step["after_load"]:
            group_ok = step["passed"]
            continue
        ran.add("state_over_calls")
        if group_ok and step["passed"] is False and step["far_off"]:
            found.append(Finding("state_over_calls", f"right on the first call after a load, far off on a later "
                                                     f"one ({_label(step)}: {step['reason']})"))
            return found, ran, None
    if timed is not None and ref_timed is not None and ref_timed.get("buffers"):
        ran.add("state_over_calls")
        for name, (eager, truth) in ref_timed["buffers"].items():
            got = (timed.get("buffers") or {}).get(name)
            check = compare(f"buffer {name}", got if got is not None else torch.empty(0), eager, truth, factor,
                            (ref_timed.get("buffer_scales") or {}).get(name))
            if not check.passed:
                calls = (meta.get("plan") or {}).get("timing") or {}
                said = f"after {calls.get('warmup', 0)} warm-up and {calls.get('pool_size', 0)} timed calls: {check.reason}"
                if check.exact or check.cand_rel_err is None or not check.cand_rel_err <= FAR_OFF:
                    found.append(Finding("state_over_calls", said))
                    return found, ran, None
                return found, ran, said
    return found, ran, None


def _promotion(findings: list, cases: list[dict], cand_dir: Path, ref_out: dict, bad: dict) -> Finding | None:
    """An incorrect verdict promoted to precision_downgrade: TF32 in the source, or a 16-bit format showing at
    large or tiny magnitudes only."""
    if any(f.check == "tf32_source" for f in findings):
        return Finding("tf32_error", f"incorrect and the source uses TF32: {_label(bad)}: {bad['reason']}")
    failing = [(i, c) for i, c in enumerate(cases) if c["role"] in ("main", "magnitude") and c["passed"] is False]
    if not failing or any(c["role"] != "magnitude" for _, c in failing):
        return None
    for i, case in failing:
        saved, ref = _load(cand_dir / f"case_{i}.pt"), ref_out.get(f"case_{i}")
        if saved is None or ref is None:
            continue
        for cand, truth in zip(saved["outputs"], ref["truth"]):
            finite = torch.isfinite(truth)
            if case["distribution"] == "large" and bool((~torch.isfinite(cand) & finite).any()):
                return Finding("magnitude_error", f"{_label(case)}: inf/NaN where fp32 stays finite, right on the "
                                                  "file's inputs: a 16-bit format overflows inside")
            nonzero = finite & (truth != 0)
            if case["distribution"] == "tiny" and nonzero.any() and \
                    float(((cand == 0) & nonzero).sum()) > ZERO_FLUSH * float(nonzero.sum()):
                return Finding("magnitude_error", f"{_label(case)}: zeros where the truth is not, right on the file's "
                                                  "inputs: a 16-bit format flushes tiny values to zero inside")
    return None


def _gpu(facts: dict, meta: dict) -> dict | None:
    profile = facts.get("profile")
    if not profile and not meta.get("ceilings"):
        return None
    floor = None
    if meta.get("ceilings") and meta.get("flops") is not None:
        floor = roofline_floor_ms(meta["flops"], meta["min_bytes"], meta["ceilings"])
    excused = evidence.side_stream_split(profile, meta.get("profile"))[1] if (profile or {}).get("available") else []
    return {"own_kernel_share": (profile or {}).get("own_share"), "profile": profile,
            "side_stream_excused": excused,
            "reference_side_stream_kernels": (meta.get("profile") or {}).get("side_stream_kernels"),
            "roofline": {"flops": meta.get("flops"), "min_bytes": meta.get("min_bytes"),
                         "ceilings": meta.get("ceilings"), "floor_ms": floor}}


def checks_table(ran: set, findings: list[Finding]) -> list[dict]:
    """Every check: whether it ran (static ones always do once the file parses) and whether it fired."""
    fired = {f.check for f in findings}
    return [{"name": name, "kind": c.kind, "needs": c.needs, "decisive": c.decisive,
             "ran": c.needs == "static" or name in ran, "fired": name in fired} for name, c in CHECKS.items()]
