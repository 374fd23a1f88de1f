"""The package ships its CUDA sources as package data and reads nothing outside its own folder: a copy of it,
away from the repository, generates the committed code."""

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from golden_digests import golden_file, problem_models

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "fuseforge"
CPP = (".cu", ".cuh", ".h")


def test_every_cuda_source_of_the_package_is_declared_package_data():
    globs = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["fuseforge"]
    declared = {p for g in globs for p in PACKAGE.glob(g)}
    sources = {p for p in PACKAGE.rglob("*") if p.suffix in CPP}
    assert sources, "no CUDA source in the package"
    assert sources <= declared, sorted(str(p.relative_to(PACKAGE)) for p in sources - declared)


def test_no_module_of_the_package_builds_a_path_into_the_lab_folder():
    outside = re.compile(r"""(["'])dev\1\s*[/,)]|/\s*(["'])dev\2|(["'])dev/kernels""")
    found = [f"{p.relative_to(REPO)}:{i}" for p in PACKAGE.rglob("*.py")
             for i, line in enumerate(p.read_text().splitlines(), 1) if outside.search(line)]
    assert not found, found


def test_a_copy_of_the_package_outside_the_repository_generates_the_committed_code_of_a_gemm_model(tmp_path):
    copy = tmp_path / "site"
    shutil.copytree(PACKAGE, copy / "fuseforge", ignore=shutil.ignore_patterns("__pycache__"))
    model = next(m for m in problem_models() if m.stem == "gemm_sigmoid_scaling_residualadd")
    script = ("import sys; from pathlib import Path; sys.path[:0] = [sys.argv[1], sys.argv[2]]\n"
              "import fuseforge; assert fuseforge.__file__.startswith(sys.argv[1]), fuseforge.__file__\n"
              "from golden_digests import digests, generate\n"
              "generate(Path(sys.argv[3]), Path(sys.argv[4])); print(digests(Path(sys.argv[4])), end='')\n")
    out = tmp_path / "out"
    out.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "-c", script, str(copy), str(REPO / "tests"), str(model), str(out)],
                            capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout == golden_file(model).read_text()
