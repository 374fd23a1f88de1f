"""Recompute the digests of every problem model's generated code (plan, kernels, binding, ModelNew) under the
default plan on the CPU, and compare them with `tests/golden/` (`--write`: replace them, on purpose).

    .venv/bin/python scripts/golden.py [--write] [--jobs 2] [MODEL.py ...]

Runs the stages up to emit for each model (no float64 check: the tests run that), each model in a process
of its own; exit code 1 when a digest differs (or, with --write, 0 once every file is written)."""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from golden_digests import digests, generate, golden_file, problem_models  # noqa: E402


def generated_digests(model: Path) -> str:
    """The digest lines of MODEL's generated code, or the line of the error that stopped its generation."""
    with tempfile.TemporaryDirectory() as out:
        try:
            generate(model, Path(out))
        except Exception as exc:  # a model that no longer generates differs from its digests
            return f"error: {type(exc).__name__}: {exc}\n"
        return digests(Path(out))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", type=Path)
    parser.add_argument("--write", action="store_true", help="replace the committed digests")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    models = [m.resolve() for m in args.models] or problem_models()
    with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        found = dict(zip(models, pool.map(generated_digests, models)))
    changed = 0
    for model, text in found.items():
        target = golden_file(model)
        if target.exists() and target.read_text() == text:
            continue
        changed += 1
        print(f"{'wrote' if args.write else 'differs'}: {target.relative_to(target.parents[3])}"
              + (f" ({text.strip()})" if text.startswith("error") else ""))
        if args.write and not text.startswith("error"):
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
    print(f"{len(found)} models, {changed} {'written' if args.write else 'different'}")
    failed = any(text.startswith("error") for text in found.values())
    return 0 if args.write and not failed or not changed else 1


if __name__ == "__main__":
    sys.exit(main())
