"""`fuseforge check MODEL.py CANDIDATE.py`: grade a candidate ModelNew so that no known trick passes
and honest kernels always do.

    fuseforge check MODEL.py CANDIDATE.py [--json PATH|-] [--device cuda|cpu] [--seeds 3] [--trials 50]
        [--warmup 5] [--tolerance-factor 2.0] [--extra-batch N] [--build-timeout 900] [--run-timeout 600]
        [--no-compile] [--max-autotune] [--workdir DIR]
    python -m fuseforge.check ...          (the same, without the main CLI)

How (orchestrate.py): static checks on the source first (static.py, static_rules.py, static_cache.py);
then the model file alone in one process (reference_role.py: every input, state_dict and fingerprint
position drawn from a secret) and the candidate alone in another (candidate_role.py, with guards.py and an
audit hook, audit.py, set up before the candidate is imported), each under time limits (runner.py,
worker.py). The candidate's process is handed each input, state_dict and set of fingerprint positions
only when it needs it (feed.py); nothing that decides its verdict is on disk before that. Per-call timing
with L2 flush and reset on a stream taken before the candidate was imported (timing.py), CUDA-only
measurements (gpu.py: profiler, ceilings, FLOPs), where the output's data comes from (provenance.py);
the grader (judge.py, evidence.py) compares what they saved, in this process, one call's outputs at a time
(stored_outputs.py). The fp64 correctness rule
is the evaluator's (fuseforge/evaluate/numerics.py), with the scale of the values each output and buffer was
computed from tracked in the reference's float64 run (fuseforge/evaluate/scales.py), as the verifier does. The vocabulary of verdicts, cheat kinds and checks
is kinds.py; the terminal summary and JSON, report.py.

Verdicts (exactly these strings): "correct", "incorrect", "interface_mismatch", "build_failed",
"invalid_python", "cheat:<kind>" with <kind> one of kinds.KINDS: private_data, monkey_patch,
lazy_tensor, torch_fallback, try_except_fallback, background_thread, side_stream, l2_persistence,
precision_downgrade, input_mutation, memory_reuse, uninitialised_memory, constant_output, cached_output,
aggregate_gaming, shape_specialised, roofline. "error" is not a verdict on the candidate: the grader
could not grade (the model file fails, a grader bug). A crash, an illegal memory access, a hang or an
exception of the candidate at run time is "incorrect" (check "run"); during the build, "build_failed".

The record, schema "fuseforge.check/1" (JSON; non-finite floats as strings):
    schema, verdict, reason (one line; null when correct), check (the check that decided: a name of
        kinds.CHECKS, or "syntax" | "build" | "interface" | "run" | "correctness"; null when correct)
    model, candidate, device, settings {device, seeds, trials, warmup, tolerance_factor, extra_batch,
        build_timeout_s, run_timeout_s, reference_timeout_s, compile, max_autotune, pool_budget_bytes,
        whole_budget_bytes, workdir}
    environment   torch/python/CUDA versions, GPU, precision flags (from the reference's process)
    static        {syntax_error, kernel_names, claims_kernels, findings: [finding]}
    build         {status: "ok"|"failed"|"timeout"|"crashed"|"exited", seconds, reason,
                   error_lines: the compiler's first error lines}
    run           {status: "finished"|"timeout"|"crashed"|"exited"|"skipped", phase: "build"|"run",
                   signal, seconds, stderr_tail}  ("skipped": a static check decided)
    cases         [{seed, distribution ("file", "signed", "large", "tiny", "shifted"), batch (null: the
                    file's), role ("main", "magnitude", "batch", "redraw": another draw of case `of`, whose
                    eager error had few carriers), of (null, or that case's index), name (null), skipped, passed
                    (null: not run), reason, redraws (null, or how a few-carrier failure went over the case's
                    draws: numerics.majority_of_draws), structure (why outputs could not be compared), far_off (an error far
                    beyond rounding), outputs_far_off (the same, outputs only), allclose, outputs: [numerics.TensorCheck], buffers: [...],
                    worst_elements: [{index, candidate, truth, eager}] (first failing output, 5 largest
                    errors), compared: "whole" | "at N sampled positions per output" (stored_outputs.py: case 0
                    always whole, the other calls whole while the reference's kept outputs, fp32 and fp64, fit
                    whole_budget_bytes, 8 GiB by default)}]
    sequence      [the first call (its own initial weights), then the sequence's calls: as cases, with
                   name, role "sequence" and after_load (a state_dict was loaded right before)]
    worst         {case, name, cand_err, ref_err (eager's), bound, ratio, cand_rel_err, ref_rel_err,
                   max_abs_err, max_abs_index, cand_at_max, truth_at_max}
    findings      [{check, kind, where: "static"|"runtime", decisive, message, line, evidence}]
    checks        [{name, kind, needs: "static"|"cpu"|"gpu", decisive, ran, fired}] (every check)
    timing        {candidate: {median_ms, p10_ms, p90_ms, min_ms, mean_ms, trials, wall_median_ms},
                   eager: {...}, compile: {...}|{status, reason},
                   compile_max_autotune: {...}|{status, reason} (torch.compile(mode="max-autotune"), timed
                       only with --max-autotune on CUDA; otherwise {status: "skipped", reason}; null in
                       records of references that predate it), timer: "cuda_events"|"perf_counter",
                   l2_flush_bytes, pool_size, speedup: {vs_eager, vs_compile, vs_compile_max_autotune}}
                  (a baseline's status: "ok"|"skipped"|"error"; a speedup is null without its median)
    gpu           {own_kernel_share, profile: {kernels: [{name, us, stream, owner}], own_share,
                   side_stream_kernels, ...}, side_stream_excused (library kernels on side streams excused
                   because the reference's own profiled call ran them on side streams too),
                   reference_side_stream_kernels (null: no reference profile),
                   roofline: {flops, min_bytes, ceilings, floor_ms}} | null
    stages        {reference, candidate, grader: [[stage, seconds], ...]}: where the check's time went, each
                  worker's stages named by its progress events ("built": waiting for the GPU's gate; the
                  reference's "untimed": writing its results); a cached reference: [["from the cache", 0]]
    wall_s
"""

from fuseforge.check.kinds import CHECKS, KINDS, VERDICTS
from fuseforge.check.orchestrate import SCHEMA, CheckSettings, check_files

__all__ = ["CHECKS", "KINDS", "SCHEMA", "VERDICTS", "CheckSettings", "check_files"]
