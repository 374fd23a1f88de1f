"""The evaluator: verify a `ModelNew` candidate against its `Model` (fp64-referenced rule), then time it.

    python -m fuseforge.evaluate MODEL.py CANDIDATE.py --out DIR [--device cuda|cpu] [--seeds 3]
        [--tolerance-factor 2.0] [--extra-batch N] [--trials 50] [--warmup 5] [--no-compile] [--skip-bench]

Modules:
    numerics  the correctness rule for one tensor (pure; unit-tested)
    harness   load both files, build weight-identical pairs, draw inputs, run forwards, typed failures
    verify    the cases (seeds x input distributions [+ an extra batch size]) -> 50_verify.json
    bench     eager / torch.compile / candidate timed in one process, interleaved -> 60_bench.json
    cli       the command line
"""

from fuseforge.evaluate.bench import BenchSettings, bench_programs
from fuseforge.evaluate.numerics import TensorCheck, compare
from fuseforge.evaluate.verify import VerifySettings, verify_files

__all__ = ["BenchSettings", "TensorCheck", "VerifySettings", "bench_programs", "compare", "verify_files"]
