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


def test_a_wheel_installed_in_a_fresh_environment_optimizes_the_seed_model_with_its_kernel_families(tmp_path):
    """As a user installs it: a wheel built from the repository, installed (without its dependencies) into a
    fresh virtual environment outside it, whose dependencies are this environment's packages; `fuseforge
    optimize --no-gpu` there, on the seed GEMM model, must keep the GEMM family (a missing CUDA source makes
    GEMM codegen fail and the ladder drop the family: the run would still pass) and generate the committed
    code."""
    source = tmp_path / "source"  # built from a copy: setuptools writes build/ and *.egg-info beside it
    shutil.copytree(PACKAGE, source / "fuseforge", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    wheels = tmp_path / "wheels"
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                            "-w", str(wheels), str(source)], capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = wheels.glob("fuseforge-*.whl")
    env_dir = tmp_path / "fresh"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True, timeout=300)
    python = env_dir / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    # the dependencies (torch, typer, ...) from this environment's package folders (the system's too, where
    # it sees them), as plain path lines: the .pth files there (this checkout's editable install) are not read
    folders = [p for p in sys.path if Path(p).name in ("site-packages", "dist-packages")]
    (site / "dependencies.pth").write_text("".join(f"{p}\n" for p in folders))
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
                              "--no-index", str(wheel)], capture_output=True, text=True, timeout=600)
    if "no such option: --python" in install.stderr:  # pip before 22.3: install into the target's folder
        install = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--target",
                                  str(site), str(wheel)], capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stderr[-3000:]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    where = subprocess.run([str(python), "-c", "import fuseforge; print(fuseforge.__file__)"], capture_output=True,
                           text=True, cwd=tmp_path, env=env, timeout=300)
    assert where.stdout.strip().startswith(str(site)), (where.stdout, where.stderr[-2000:])
    model = next(m for m in problem_models() if m.stem == "gemm_sigmoid_scaling_residualadd")
    out = tmp_path / "out"
    run = subprocess.run([str(python), "-m", "fuseforge", "optimize", str(model), "-o", str(out), "--no-gpu"],
                         capture_output=True, text=True, cwd=tmp_path, env=env, timeout=900)
    assert run.returncode == 0, (run.stdout[-2000:], run.stderr[-2000:])
    assert not (out / "attempts").exists(), "the default plan was left"
    assert "gemm" in (out / "20_partition.txt").read_text().lower()
    sys.path.insert(0, str(REPO / "tests"))
    from golden_digests import digests

    assert digests(out) == golden_file(model).read_text()


def test_a_missing_cuda_source_is_named_in_one_line():
    from fuseforge.cuda_sources import MissingCudaSource, cuda_source

    try:
        cuda_source("fuseforge.families.rows", "no_such_kernel.cu")
    except MissingCudaSource as exc:
        assert "fuseforge/families/rows/no_such_kernel.cu" in str(exc) and "\n" not in str(exc)
    else:
        raise AssertionError("a missing source was read")
    assert "__global__" in cuda_source("fuseforge.families.rows", "rows.cu")
