"""The evaluator: verify a `ModelNew` candidate against its `Model` (fp64-referenced rule), then time it.

    python -m fuseforge.evaluate MODEL.py CANDIDATE.py --out DIR [--device cuda|cpu] [--seeds 3]
        [--tolerance-factor 2.0] [--extra-batch N]... [--no-magnitudes] [--trials 50] [--warmup 5] [--no-compile]
        [--skip-bench]
        [--baselines FILE]

Modules:
    cpu_check  the verify stage's CPU half: the plan in float64 on the CPU against the model, no GPU needed
    numerics   the correctness rule for one tensor (pure; unit-tested)
    scales     the scale of the values each output was computed from, tracked in the float64 reference run
    harness    load both files, build weight-identical pairs, draw inputs, run forwards, typed failures
    verify     the cases (seeds x input distributions [+ an extra batch size]) -> 50_verify.json
    bench      eager / torch.compile / candidate timed in one process, interleaved -> 60_bench.json
    baselines  the cache of reference timings (eager, compile) per model, GPU, torch and bench settings
    lease      the GPU lease: one process at a time on a GPU (`fuseforge suite` overlaps jobs with it)
    conv_precision  each convolution's error vs float64 in NCHW and channels-last, measured on the GPU
    cli        the command line

The package imports torch only when one of its torch modules is used (`baselines` and `lease` need none:
the suite's processes import them without paying for torch).
"""

import importlib

_EXPORTS = {"BenchSettings": "bench", "bench_programs": "bench", "TensorCheck": "numerics", "compare": "numerics",
            "VerifySettings": "verify", "verify_files": "verify"}

__all__ = ["BenchSettings", "TensorCheck", "VerifySettings", "bench_programs", "compare", "verify_files"]


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"fuseforge.evaluate.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'fuseforge.evaluate' has no attribute {name!r}")
