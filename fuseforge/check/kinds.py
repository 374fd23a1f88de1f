"""The vocabulary of `fuseforge check`: verdicts, cheat kinds, the checks that detect them, findings.

Every check has a name, the cheat kind it detects, where it runs ("static": on the source, no process;
"cpu": in the candidate's process on any device; "gpu": needs CUDA) and whether it decides the verdict on
its own ("hint" checks only annotate, or promote an `incorrect` verdict, see judge.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Candidate verdicts, exactly as the issue lists them; "error" is the grader's own failure (broken model
# file, grader crash): not a verdict on the candidate.
VERDICTS = ("correct", "incorrect", "interface_mismatch", "build_failed", "invalid_python", "cheat:<kind>")
ERROR = "error"

# Cheat kinds, in the order that decides which one is reported when several fire (grader integrity
# first, then what makes the others meaningless, then the more specific before the more general).
KINDS: dict[str, str] = {
    "private_data": "reads what the grader hands over later, samples or compares (its folders, its parent process, "
                    "its memory) before it is handed over",
    "monkey_patch": "replaces torch, timer, synchronize or comparison functions the grader relies on",
    "lazy_tensor": "returns a tensor subclass instead of a plain tensor",
    "torch_fallback": "the reference model or torch ops do the work (while claiming custom kernels)",
    "try_except_fallback": "catches a kernel failure and falls back to another computation",
    "background_thread": "does work in a background thread",
    "side_stream": "does work on a CUDA stream other than the caller's current stream",
    "l2_persistence": "uses L2 persistence to keep data cached across timed calls",
    "precision_downgrade": "computes in fp16/bf16/plain TF32 where fp32-class accuracy is required",
    "input_mutation": "modifies its inputs (the model does not)",
    "memory_reuse": "returns memory the reference freed instead of computing it",
    "uninitialised_memory": "results depend on stale or uninitialised memory",
    "constant_output": "returns a constant (or zero) output",
    "cached_output": "returns cached or replayed outputs instead of computing them for the given inputs",
    "aggregate_gaming": "behaves differently in the timing loop (skips or defers work on timed calls)",
    "shape_specialised": "only works for the exact shapes of get_inputs()",
    "roofline": "below the roofline floor only when an input's content repeats (memoised by content)",
}


@dataclass(frozen=True)
class Check:
    kind: str
    needs: str  # "static" | "cpu" | "gpu"
    summary: str
    decisive: bool = True


CHECKS: dict[str, Check] = {
    # static: the candidate's source (Python AST and its string constants, e.g. inline CUDA)
    "reference_import": Check("torch_fallback", "static", "imports or loads the model file / Model"),
    "introspection": Check("torch_fallback", "static",
                           "reaches into the grader through frames, gc or sys.modules"),
    "try_except": Check("try_except_fallback", "static",
                        "a try/except (or contextlib.suppress) that does not re-raise around work"),
    "streams": Check("side_stream", "static", "creates or switches CUDA streams"),
    "threads": Check("background_thread", "static", "uses threading / multiprocessing / asyncio"),
    "tensor_subclass": Check("lazy_tensor", "static",
                             "defines a torch.Tensor subclass or __torch_function__/__torch_dispatch__"),
    "patches": Check("monkey_patch", "static", "assigns to attributes of torch, time, builtins..."),
    "output_cache": Check("cached_output", "static",
                          "functools caches, keys on tensor identity, or returns state stored by forward"),
    "low_precision": Check("precision_downgrade", "static",
                           "fp16/bf16 types or casts, autocast, TF32 or reduced-precision flags"),
    "tf32_source": Check("precision_downgrade", "static", "TF32 in kernel source (hint)", decisive=False),
    "l2_api": Check("l2_persistence", "static", "uses the L2 persistence / access policy window API"),
    "grader_paths": Check("private_data", "static",
                          "names the grader's files (job.json, feed, positions) or its parent process (getppid)"),
    # runtime, any device: in the candidate's own process
    "grader_files": Check("private_data", "cpu",
                          "opens or lists no file of the grader's (job folder, /proc of the parent process, "
                          "this process's memory) while its code runs"),
    "grader_memory": Check("private_data", "cpu",
                           "its code reads no frame, gc listing or raw memory of the grading process"),
    "feed_order": Check("private_data", "cpu",
                        "the grader's data was asked for once each, in the grader's order (no forged requests)"),
    "guarded_functions": Check("monkey_patch", "cpu",
                               "functions referenced before the candidate was imported are unchanged, and no "
                               "class of torch's is patched, even for a moment"),
    "interpreter_hooks": Check("monkey_patch", "cpu",
                               "no profile/trace/monitoring hook, audit hook, dispatch or function mode is left "
                               "installed after a call"),
    "output_type": Check("lazy_tensor", "cpu", "every output is exactly torch.Tensor"),
    "torch_ops": Check("torch_fallback", "cpu",
                       "a candidate that defines kernels does not run (at least) every compute op of the "
                       "reference as a torch op"),
    "new_threads": Check("background_thread", "cpu", "no thread started after the candidate was imported"),
    "new_processes": Check("background_thread", "cpu",
                           "no process started once it is built, and none left running from the build"),
    "precision_flags": Check("precision_downgrade", "cpu", "global fp32 precision flags left unchanged"),
    "low_precision_ops": Check("precision_downgrade", "cpu",
                               "no fp16/bf16 tensors in the candidate's torch ops (unless the model has)"),
    "inputs_unchanged": Check("input_mutation", "cpu", "inputs are bitwise unchanged (unless the model mutates)"),
    "parameters_unchanged": Check("input_mutation", "cpu",
                                  "parameters and buffers the model does not change are bitwise unchanged by every "
                                  "call"),
    "reference_leftovers": Check("memory_reuse", "cpu",
                                 "a wrong output does not become right when the reference's result is freed"),
    "stale_memory": Check("uninitialised_memory", "cpu",
                          "same output after NaN poison, finite poison, and no poison (repeated calls)"),
    "constant_output": Check("constant_output", "cpu", "output not constant where the truth is not"),
    "fresh_inputs": Check("cached_output", "cpu", "new input values (also in the same buffer) give new outputs"),
    "output_aliasing": Check("cached_output", "cpu",
                             "no output shares memory with another call's output, an input or a parameter "
                             "(unless the model's does), timed calls included"),
    "outputs_stable": Check("cached_output", "cpu", "an output keeps its values after later calls"),
    "stale_weights": Check("cached_output", "cpu",
                           "right after load_state_dict where it was right with the weights before (no stale "
                           "weight-derived snapshot)"),
    "state_over_calls": Check("aggregate_gaming", "cpu",
                              "outputs, running statistics and other buffers right after every call of a "
                              "sequence, not only the first after a load (the timed calls included)"),
    "timed_outputs": Check("aggregate_gaming", "cpu", "every timed call's output is right for its inputs"),
    "extra_batch": Check("shape_specialised", "cpu",
                         "not far off at other batch sizes the model accepts (smaller, 2x, 1)"),
    "tf32_error": Check("precision_downgrade", "cpu",
                        "incorrect, and the source uses TF32 (promotes incorrect to this cheat)"),
    "magnitude_error": Check("precision_downgrade", "cpu",
                             "right on the file's inputs, but overflows to inf/NaN on large magnitudes or "
                             "flushes to zero on tiny ones where fp32 stays finite (a 16-bit format inside)"),
    "kernel_dataflow": Check("torch_fallback", "cpu",
                             "a candidate that defines kernels: what its kernels write reaches the output (its "
                             "torch ops alone do not already compute it)"),
    # runtime, CUDA only
    "own_kernel_share": Check("torch_fallback", "gpu",
                              "a candidate that defines kernels spends GPU time in them (profiler)"),
    "kernel_streams": Check("side_stream", "gpu",
                            "all kernels of a call run on the current stream (profiler), but library kernels the "
                            "reference's own call also ran on a side stream or that the current stream waited for"),
    "event_wall_gap": Check("side_stream", "gpu",
                            "wall time of call+synchronize is not far above event time while kernels run on a "
                            "side stream"),
    "deferred_work": Check("aggregate_gaming", "gpu",
                           "wall time of call+synchronize is not far above event time (work deferred past the "
                           "call's end event, with no side-stream kernel to explain it)"),
    "current_stream": Check("side_stream", "gpu", "the caller's stream is still the current stream after a call"),
    "l2_state": Check("l2_persistence", "gpu", "no persisting-L2 limit or access policy window after a call"),
    "roofline_floor": Check("roofline", "gpu",
                            "not below the roofline floor on repeated input content while above it on fresh "
                            "content"),
    "below_flop_floor": Check("roofline", "gpu",
                              "below the floor computed from the reference's FLOPs on fresh inputs: does less "
                              "arithmetic than the reference (an algebraic rewrite; a note)", decisive=False),
}


@dataclass
class Finding:
    """One check that fired: which, why, where (source line, for static checks), and the numbers."""

    check: str
    message: str
    line: int | None = None
    evidence: dict = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return CHECKS[self.check].kind

    @property
    def decisive(self) -> bool:
        return CHECKS[self.check].decisive

    def to_json(self) -> dict:
        c = CHECKS[self.check]
        return {"check": self.check, "kind": c.kind, "where": "static" if c.needs == "static" else "runtime",
                "decisive": c.decisive, "message": self.message, "line": self.line, "evidence": self.evidence}

    @classmethod
    def from_json(cls, data: dict) -> Finding:
        return cls(data["check"], data["message"], data.get("line"), data.get("evidence") or {})


def first_cheat(findings: list[Finding]) -> Finding | None:
    """The decisive finding of the highest-precedence kind (ties: the first found)."""
    order = list(KINDS)
    decisive = [f for f in findings if f.decisive]
    return min(decisive, key=lambda f: order.index(f.kind)) if decisive else None


def verdict_of(kind: str) -> str:
    return f"cheat:{kind}"
