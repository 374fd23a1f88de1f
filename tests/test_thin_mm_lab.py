"""dev/kernels/bench_thin_mm.py (the thin-product lab): its kernel compiles for sm_90a at every column count it
instantiates, with no spills and no stack frame. CPU only: its speed and error are measured on a GPU."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

LAB = Path(__file__).resolve().parents[1] / "dev" / "kernels"
sys.path.insert(0, str(LAB))
import bench_thin_mm  # noqa: E402


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_the_thin_product_kernel_compiles_for_sm90a_at_every_column_count_without_spills(tmp_path):
    source = tmp_path / "thin_mm.cu"
    source.write_text(bench_thin_mm.SOURCE)
    proc = subprocess.run(["nvcc", "-cubin", "-gencode=arch=compute_90a,code=sm_90a", "-O3", "-Xptxas",
                           "-v,-warn-spills,-warn-lmem-usage", "-Werror", "all-warnings", "-o",
                           str(tmp_path / "thin_mm.cubin"), str(source)], capture_output=True, text=True, timeout=300)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log
    kernels = re.findall(r"Compiling entry function '(\w+)'", log)
    assert len(kernels) == 6  # N = 1, 2, 3, 4, 8, 16
    frames = re.findall(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", log)
    assert len(frames) == 6 and all(f == ("0", "0", "0") for f in frames), log
