"""dev/kernels lab: the 3xTF32 GEMM compiles for sm_90a cleanly, and the big/small split is sound.

The kernel itself only runs on a GPU (dev/kernels/bench_gemm.py); here nvcc compiles it on the CPU and we
read ptxas' register/spill report, the PTX (and the SASS where cuobjdump exists), and check the split's
arithmetic with a numpy model of cvt.rna.tf32.f32.
"""

import ctypes
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
KERNELS = REPO / "dev" / "kernels"
SOURCE = KERNELS / "gemm_3xtf32.cu"
GENCODE = "-gencode=arch=compute_90a,code=sm_90a"

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def _nvcc(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["nvcc", *args], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def cubin(tmp_path_factory):
    out = tmp_path_factory.mktemp("gemm3x") / "gemm_3xtf32.cubin"
    proc = _nvcc("-cubin", GENCODE, "-O3", "-Xptxas", "-v,-warn-spills,-warn-lmem-usage", "-Werror",
                 "all-warnings", "-o", str(out), str(SOURCE))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out, proc.stdout + proc.stderr


@needs_nvcc
def test_the_3xtf32_gemm_compiles_for_sm90a_with_no_spills_and_no_local_memory(cubin):
    _, log = cubin
    kernels = re.findall(r"Compiling entry function '(\w+)'", log)
    assert len(kernels) >= 4 and all("gemm3x_tf32_kernel" in k for k in kernels), log
    spills = [(int(s), int(ld)) for s, ld in re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)]
    frames = [int(f) for f in re.findall(r"(\d+) bytes stack frame", log)]
    assert len(spills) == len(kernels) and all(s == (0, 0) for s in spills), log
    assert len(frames) == len(kernels) and not any(frames), log
    registers = [int(r) for r in re.findall(r"Used (\d+) registers", log)]
    assert registers and max(registers) <= 255, log


@needs_nvcc
def test_the_kernel_sass_is_tensor_core_hmma_without_local_loads_or_stores(cubin):
    if shutil.which("cuobjdump") is None:
        pytest.skip("needs cuobjdump")
    path, _ = cubin
    sass = subprocess.run(["cuobjdump", "-sass", str(path)], capture_output=True, text=True, timeout=60).stdout
    assert "HMMA" in sass
    assert not re.search(r"\b(LDL|STL)\b", sass)


@needs_nvcc
def test_the_kernel_ptx_issues_tf32_mma_sync_zero_filling_cp_async_and_rna_splits(tmp_path):
    ptx_path = tmp_path / "gemm_3xtf32.ptx"
    proc = _nvcc("-ptx", GENCODE, "-O3", "-o", str(ptx_path), str(SOURCE))
    assert proc.returncode == 0, proc.stderr
    ptx = ptx_path.read_text()
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in ptx
    assert "cvt.rna.tf32.f32" in ptx
    assert re.search(r"cp\.async\.cg\.shared\.global \[%r\d+\], \[%rd\d+\], 16, %r\d+;", ptx)
    assert re.search(r"cp\.async\.ca\.shared\.global \[%r\d+\], \[%rd\d+\], 4, %r\d+;", ptx)


@needs_nvcc
def test_the_bench_builds_a_library_exporting_the_c_launchers(tmp_path):
    sys.path.insert(0, str(KERNELS))
    try:
        import bench_gemm
    finally:
        sys.path.remove(str(KERNELS))
    lib_path, _ = bench_gemm.build(tmp_path, stages=3)
    lib = bench_gemm.load(lib_path)
    # Nothing to launch: an empty problem returns cudaSuccess, a negative size cudaErrorInvalidValue,
    # and neither touches the driver, so this runs without a GPU.
    assert lib.gemm3x_tn(None, None, None, 0, 8, 8, 8, 8, 8, None, None) == 0
    assert lib.gemm3x_nn(None, None, None, -1, 8, 8, 8, 8, 8, None, None) == 1
    assert isinstance(lib.gemm3x_tn_bias_sigmoid_scale_residual, ctypes._CFuncPtr)


# --------------------------------------------------------------------------------------------------
# The split, modelled on the host: cvt.rna.tf32.f32 keeps 10 explicit mantissa bits, rounding to
# nearest with ties away from zero (add half of the dropped 13 bits to the magnitude, then truncate).
# --------------------------------------------------------------------------------------------------
def tf32_rna(x: np.ndarray) -> np.ndarray:
    bits = x.astype(np.float32).view(np.uint32)
    sign = bits & np.uint32(0x80000000)
    magnitude = ((bits & np.uint32(0x7FFFFFFF)) + np.uint32(0x1000)) & np.uint32(0xFFFFE000)
    return (sign | magnitude).view(np.float32)


def split(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    big = tf32_rna(x)
    return big, tf32_rna(x - big)  # x - big is exact in fp32


def test_rounding_to_tf32_clears_the_low_13_bits_and_rounds_ties_away_from_zero():
    one_plus_half_ulp = np.array([1.0 + 2.0**-11, -(1.0 + 2.0**-11), 1.0 + 2.0**-12], dtype=np.float32)
    assert tf32_rna(one_plus_half_ulp).tolist() == [1.0 + 2.0**-10, -(1.0 + 2.0**-10), 1.0]
    x = np.random.default_rng(0).standard_normal(10_000).astype(np.float32)
    assert not np.any(tf32_rna(x).view(np.uint32) & np.uint32(0x1FFF))


def test_big_plus_small_reproduces_fp32_values_to_2_pow_minus_22():
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(100_000) * np.exp2(rng.integers(-60, 60, 100_000))).astype(np.float32)
    big, small = split(x)
    exact = x.astype(np.float64)
    err_split = np.abs(big.astype(np.float64) + small.astype(np.float64) - exact) / np.abs(exact)
    err_big = np.abs(big.astype(np.float64) - exact) / np.abs(exact)
    assert err_split.max() <= 2.0**-22
    assert err_big.max() > 2.0**-13  # one TF32 alone is ~1000x coarser: the small part matters


def test_three_tf32_products_match_fp64_as_well_as_an_fp32_matmul_and_far_better_than_one():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((64, 512)).astype(np.float32)
    b = rng.standard_normal((48, 512)).astype(np.float32)
    (a_big, a_small), (b_big, b_small) = split(a), split(b)
    f64 = np.float64
    ref = a.astype(f64) @ b.astype(f64).T
    # The tensor core multiplies TF32 values exactly; model its fp32 accumulation of the three terms.
    three = (a_small.astype(f64) @ b_big.astype(f64).T).astype(np.float32)
    three += (a_big.astype(f64) @ b_small.astype(f64).T).astype(np.float32)
    three += (a_big.astype(f64) @ b_big.astype(f64).T).astype(np.float32)
    one = a_big.astype(f64) @ b_big.astype(f64).T

    def rel(c):
        return np.linalg.norm(c.astype(f64) - ref) / np.linalg.norm(ref)

    fp32 = rel(a @ b.T)
    assert rel(three) <= 2 * fp32 + 1e-7
    assert rel(three) * 100 < rel(one)
