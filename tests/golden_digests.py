"""The committed digests of the generated code of every problem model (`tests/golden/`), under the default
plan on the CPU: a change to a plan, a kernel, a binding or a ModelNew file shows as a changed digest, so it
is always made on purpose (`scripts/golden.py --write`) and reviewed.

One file per model, `tests/golden/<folder>/<model>.sha256`, in the format of `sha256sum`: run
`sha256sum -c` on it inside an `optimize` output folder to check that folder by hand."""

from __future__ import annotations

import hashlib
from pathlib import Path

PROBLEMS = (Path(__file__).resolve().parents[2] / "shared" / "problems").resolve()
FOLDERS = ("seed", "dev", "kernelbench")
GOLDEN = Path(__file__).resolve().parent / "golden"
ARTEFACTS = ("20_partition.txt", "30_kernels/kernels.cu", "30_kernels/binding.cpp", "40_model_new.py")


def problem_models() -> list[Path]:
    """Every problem model, folder by folder."""
    return [p for folder in FOLDERS for p in sorted((PROBLEMS / folder).glob("*.py"))]


def golden_file(model: Path) -> Path:
    return GOLDEN / model.parent.name / f"{model.stem}.sha256"


def digests(out_dir: Path) -> str:
    """The digest lines of an `optimize` output folder's generated code."""
    return "".join(f"{hashlib.sha256((out_dir / name).read_bytes()).hexdigest()}  {name}\n" for name in ARTEFACTS)


def generate(model: Path, out_dir: Path) -> None:
    """Run the stages of `optimize` up to emit for MODEL under the default plan, into OUT_DIR (no float64
    check: a plan that would fail it is another test's failure)."""
    from fuseforge.config import OptimizeConfig
    from fuseforge.pipeline import STAGES
    from fuseforge.run import Run

    run = Run(OptimizeConfig(model_path=model, out_dir=out_dir, gpu=False))
    for name, stage in STAGES:
        stage(run)
        if name == "emit":
            return


def assert_the_generated_code_is_the_committed_one(model: Path, out_dir: Path) -> None:
    expected = golden_file(model)
    assert expected.exists(), f"no committed digests for {model.name}: run scripts/golden.py --write"
    got = digests(out_dir)
    changed = [line.split()[1] for line, want in zip(got.splitlines(), expected.read_text().splitlines())
               if line != want]
    assert got == expected.read_text(), (f"{model.name}: generated {', '.join(changed) or 'files'} changed; if on "
                                         "purpose, run scripts/golden.py --write and commit the digests")
