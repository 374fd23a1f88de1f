"""dev/kernels lab: the 3xTF32 GEMM compiles for sm_90a cleanly, and the big/small split is sound.

The kernel itself only runs on a GPU (dev/kernels/bench_gemm.py); here nvcc compiles it on the CPU and we
read ptxas' register/spill report, the PTX (and the SASS where cuobjdump exists), and check the split's
arithmetic with a numpy model of cvt.rna.tf32.f32 and of the tensor core's fp32 accumulation.

What the first H100 run taught (bench_gemm.py, 3 stages): the split was exact, but chaining every mma of
the K loop into one accumulator lost accuracy linearly in K (rel. error 3.1e-7 at K=33, 7.0e-6 at K=999,
2.9e-5 at K=4096, 5.7e-5 at K=8192; cuBLAS SGEMM 1.6e-6 at K=8192). The tensor core's fp32 accumulation is
not IEEE: a model that adds blocks of 8 exact products to the accumulator after aligning them to the
largest term with 2 bits below fp32's 24 (truncated), then rounds the sum toward zero, reproduces those
numbers to a few percent. The kernel now gives every 2 k-tiles (24 mmas, variant 2; one k-tile in variants 0
and 1) a fresh accumulator, small-part products first, and adds it into the running sum with an ordinary
round-to-nearest fp32 add.
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
SOURCE = REPO / "fuseforge" / "families" / "gemm" / "gemm_3xtf32.cu"
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
    families = ("gemm3x_tf32_kernel", "gemm3x_wgmma_kernel", "gemm3x_ws_kernel")
    assert all(any(f in k for f in families) for k in kernels), log
    assert sum("gemm3x_tf32_kernel" in k for k in kernels) >= 4, log  # variant 0, mma.sync
    assert sum("gemm3x_wgmma_kernel" in k for k in kernels) >= 4, log  # variant 1, wgmma
    assert sum("gemm3x_ws_kernel" in k for k in kernels) >= 4, log  # variant 2, warp-specialised wgmma
    # e.g. no "wgmma serialized" notes (-Werror all-warnings would also fail the build on them)
    assert "wgmma" not in log.lower().replace("gemm3x_wgmma_kernel", ""), log
    spills = [(int(s), int(ld)) for s, ld in re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)]
    frames = [int(f) for f in re.findall(r"(\d+) bytes stack frame", log)]
    assert len(spills) == len(kernels) and all(s == (0, 0) for s in spills), log
    assert len(frames) == len(kernels) and not any(frames), log
    registers = [int(r) for r in re.findall(r"Used (\d+) registers", log)]
    assert registers and max(registers) <= 255, log
    # Variant 2 launches 512 threads (4 warps on each SM sub-partition), so ptxas caps the kernel at 128
    # registers per thread; the consumers get theirs from setmaxnreg (see the SASS test).
    per_kernel = re.findall(r"Compiling entry function '(\w+)'.*?Used (\d+) registers", log, re.S)
    ws = [int(r) for name, r in per_kernel if "gemm3x_ws_kernel" in name]
    assert len(ws) >= 4 and max(ws) <= _ws_registers()[0], per_kernel


@needs_nvcc
def test_the_kernel_sass_is_tensor_core_hmma_without_local_loads_or_stores(cubin):
    if shutil.which("cuobjdump") is None:
        pytest.skip("needs cuobjdump")
    path, _ = cubin
    sass = subprocess.run(["cuobjdump", "-sass", str(path)], capture_output=True, text=True, timeout=60).stdout
    assert "HMMA" in sass
    assert not re.search(r"\b(LDL|STL)\b", sass)
    assert "HGMMA.64x128x8.F32.TF32" in sass
    # Per-k-tile accumulation: in every kernel, 1 mma in 12 (the first of each accumulator tile in a
    # k-tile: 4 k-steps x 3 products) reads the zero register as its accumulator, and the others chain.
    functions = re.findall(r"Function : (\S+)\n(.*?)(?=\n\s*Function : |\Z)", sass, re.S)
    assert sum("gemm3x_wgmma_kernel" in name for name, _ in functions) >= 4
    assert sum("gemm3x_ws_kernel" in name for name, _ in functions) >= 4
    assert sum("gemm3x_tf32_kernel" in name for name, _ in functions) >= 4
    for name, body in functions:
        if "gemm3x_wgmma_kernel" in name or "gemm3x_ws_kernel" in name:
            # The 12 wgmmas of a k-tile are issued back to back and waited for once: ptxas silently
            # serialises them (a wait after each) when it cannot prove the sequence safe, e.g. with branches
            # around it, and that builds without a warning.
            ops = re.findall(r"\b(HGMMA|WARPGROUP\.DEPBAR)\b", body)
            first, last = ops.index("HGMMA"), len(ops) - 1 - ops[::-1].index("HGMMA")
            assert "WARPGROUP.DEPBAR" not in ops[first:last], (name, ops)
            # variant 1 waits once per k-tile; variant 2 once per commit group (one per k-tile of a flush)
            waits = _ws_constant("kWsTilesPerFlush") if "gemm3x_ws_kernel" in name else 1
            assert ops.count("WARPGROUP.DEPBAR") == waits, (name, ops)
        if "gemm3x_wgmma_kernel" in name:
            mmas = re.findall(r"HGMMA\.64x128x8\.F32\.TF32 R\d+, gdesc\[UR\d+\], (R\d+|RZ)\b", body)
            assert len(mmas) == 12, (name, len(mmas))  # one k-tile per loop trip: 4 k8 x 3 products
        elif "gemm3x_ws_kernel" in name:
            # Variant 2: A from registers (the second operand is a register, not a descriptor).
            assert not re.search(r"HGMMA\.[^;]*gdesc\[UR\d+\], gdesc", body), name
            mmas = re.findall(r"HGMMA\.64x128x8\.F32\.TF32 R\d+, R\d+, gdesc\[UR\d+\], (R\d+|RZ)\b", body)
            per_flush = 12 * _ws_constant("kWsTilesPerFlush")  # the k-tiles of one fresh accumulator
            assert len(mmas) == per_flush, (name, len(mmas))
            assert sum(c == "RZ" for c in mmas) == 1, (name, mmas)
            _check_ws_sass(name, body)
            continue
        elif "gemm3x_tf32_kernel" in name:
            mmas = re.findall(r"HMMA\.1688\.F32\.TF32 R\d+, [^;]*?, (R\d+|RZ) ;", body)
            assert mmas, name
        else:
            continue
        fresh = sum(c == "RZ" for c in mmas)
        assert fresh * 12 == len(mmas), (name, fresh, len(mmas))


def _ws_constant(name: str) -> int:
    """A constant of variant 2 as the .cu defines it (constexpr int or #define default)."""
    text = SOURCE.read_text()
    m = re.search(rf"constexpr int {name} = (\d+);", text) or re.search(rf"#define {name} (\d+)", text)
    assert m, name
    return int(m.group(1))


def _ws_registers() -> tuple[int, int, int]:
    """Variant 2's register budget as the .cu sets it: (per thread at launch, producers', consumers')."""
    groups = _ws_constant("GEMM3X_WS_PRODUCER_WARPGROUPS")
    producer = _ws_constant("kWsProducerRegsOneGroup" if groups == 1 else "kWsProducerRegsTwoGroups")
    threads = 256 + 128 * groups
    launch = 65536 // threads // 8 * 8
    return launch, producer, (launch * threads - producer * 128 * groups) // 256 // 8 * 8


def test_the_register_budget_of_variant_2_adds_up_to_the_multiprocessors_registers():
    launch, producer, consumer = _ws_registers()
    groups = _ws_constant("GEMM3X_WS_PRODUCER_WARPGROUPS")
    assert launch * (256 + 128 * groups) <= 65536
    assert consumer * 256 + producer * 128 * groups <= launch * (256 + 128 * groups)
    assert consumer >= 200  # the consumers' mainloop and the generated epilogues need ~190-208 (no spills)


def _check_ws_sass(name: str, body: str) -> None:
    """Variant 2's SASS: the register hand-over, mbarrier-only synchronisation, consumers above the launch's."""
    launch_regs, producer_regs, consumer_regs = _ws_registers()
    alloc = re.findall(r"USETMAXREG\.TRY_ALLOC\.CTAPOOL \w+, (0x[0-9a-f]+)", body)
    dealloc = re.findall(r"USETMAXREG\.DEALLOC\.CTAPOOL (0x[0-9a-f]+)", body)
    assert [int(x, 16) for x in alloc] == [consumer_regs], (name, alloc)
    assert [int(x, 16) for x in dealloc] == [producer_regs], (name, dealloc)
    # The consumers' code really uses more than the registers the launch gives every thread (else
    # setmaxnreg buys nothing), and no code uses more than the consumers' share.
    highest = max(int(r) for r in re.findall(r"\bR(\d+)\b", body))
    assert launch_regs <= highest < consumer_regs, (name, highest)
    # One block-wide barrier (after the mbarrier init); in the k loop, mbarriers only.
    assert len(re.findall(r"\bBAR\.SYNC\.DEFER_BLOCKING 0x0\b", body)) == 1, name
    assert len(re.findall(r"\bBAR\.(SYNC|ARV)\b", body)) == 1, name
    assert "SYNCS.PHASECHK.TRANS64.TRYWAIT" in body and "SYNCS.ARRIVE.TRANS64" in body, name
    assert "ARRIVES.LDGSTSBAR.64" in body, name  # cp.async.mbarrier.arrive: the loaders' copies landed
    assert "FENCE.VIEW.ASYNC.S" in body and "LDSM.16.M88.4" in body and "LDGSTS" in body, name
    if "ILb1ELi4E" in name:  # TN with 16-byte rows: TMA boxes as well as the cp.async fallback
        assert "UTMALDG.3D" in body, name


@needs_nvcc
def test_the_kernel_ptx_issues_tf32_mma_sync_zero_filling_cp_async_and_truncating_splits(tmp_path):
    ptx_path = tmp_path / "gemm_3xtf32.ptx"
    proc = _nvcc("-ptx", GENCODE, "-O3", "-o", str(ptx_path), str(SOURCE))
    assert proc.returncode == 0, proc.stderr
    ptx = ptx_path.read_text()
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in ptx
    # The split truncates: big = bits & 0xffffe000, small = x - big in fp32 (no rounding instructions).
    assert "cvt.rna.tf32.f32" not in ptx
    assert re.search(r"and\.b32\s+%r\d+, %r\d+, -8192;", ptx)
    assert re.search(r"sub\.f32\s+%f\d+, %f\d+, %f\d+;", ptx)
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx
    # Variant 1: TF32 warpgroup MMA from shared-memory descriptors, with the async-proxy fence after the
    # split pass's ordinary stores.
    assert "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32" in ptx
    assert "fence.proxy.async.shared::cta" in ptx
    assert "wgmma.wait_group.sync.aligned 0" in ptx
    # Variant 2: register-A wgmma, setmaxnreg hand-over, mbarrier ring.
    assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n128k8\.f32\.tf32\.tf32 \{[^}]*\}, "
                     r"\{%r\d+, %r\d+, %r\d+, %r\d+\}, %rd\d+, p, 1, 1;", ptx)
    _, producer_regs, consumer_regs = _ws_registers()
    assert f"setmaxnreg.dec.sync.aligned.u32 {producer_regs};" in ptx
    assert f"setmaxnreg.inc.sync.aligned.u32 {consumer_regs};" in ptx
    # TMA loads of K-major tiles, completing the slot's mbarrier by bytes
    assert "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes" in ptx
    assert "mbarrier.arrive.expect_tx.shared::cta.b64" in ptx
    assert "mbarrier.try_wait.parity.shared::cta.b64" in ptx
    assert "mbarrier.arrive.shared::cta.b64" in ptx
    assert "cp.async.mbarrier.arrive.noinc.shared::cta.b64" in ptx  # loader -> splitter hand-over
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
    assert lib.gemm3x_set_variant(1) == 0 and lib.gemm3x_set_variant(7) == -1 and lib.gemm3x_set_variant(0) == 1
    assert lib.gemm3x_set_variant(2) == 0 and lib.gemm3x_set_variant(3) == -1 and lib.gemm3x_set_variant(0) == 2
    assert bench_gemm.VARIANTS == {"mma": 0, "wgmma": 1, "ws": 2}


def test_the_wgmma_split_layout_is_the_128_byte_swizzle_and_fills_each_tile_exactly_once():
    # sw128(r, k) of the .cu: byte offset of the 4 TF32 values (r, k..k+3) in a [128][32] K-major tile.
    def sw128(r, k):
        return r * 128 + (((k >> 2) ^ (r & 7)) << 4)

    offsets = [sw128(r, k) for r in range(128) for k in range(0, 32, 4)]
    assert sorted(offsets) == list(range(0, 128 * 128, 16))  # every 16-byte chunk written once
    # The hardware's 128-byte swizzle: address bits [4:6] ^= bits [7:9] inside 1024-byte atoms.
    for r in range(128):
        for k in range(0, 32, 4):
            linear = r * 128 + (k // 4) * 16
            assert sw128(r, k) == linear ^ (((linear >> 7) & 7) << 4)


# --------------------------------------------------------------------------------------------------
# The split, modelled on the host: cvt.rna.tf32.f32 keeps 10 explicit mantissa bits, rounding to
# nearest with ties away from zero (add half of the dropped 13 bits to the magnitude, then truncate).
# --------------------------------------------------------------------------------------------------
def tf32_rna(x: np.ndarray) -> np.ndarray:
    bits = x.astype(np.float32).view(np.uint32)
    sign = bits & np.uint32(0x80000000)
    magnitude = ((bits & np.uint32(0x7FFFFFFF)) + np.uint32(0x1000)) & np.uint32(0xFFFFE000)
    return (sign | magnitude).view(np.float32)


def tf32_rna_as_kernel(x: np.ndarray) -> np.ndarray:
    """The kernel's integer form, (bits + 0x1000) & 0xffffe000, without the sign handling above."""
    bits = x.astype(np.float32).view(np.uint32)
    return ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


def split_rna(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The split of the kernel's first H100 run: both parts rounded to nearest."""
    big = tf32_rna(x)
    return big, tf32_rna(x - big)  # x - big is exact in fp32


def tf32_trunc(x: np.ndarray) -> np.ndarray:
    """bits & 0xffffe000: what the kernel does for big, and what the tensor core does to any operand."""
    return (x.astype(np.float32).view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)


def split(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The kernel's split of A as the tensor core sees it: big = rna(x), small = x - big (exact in fp32), of
    which the tensor core keeps the top 19 bits."""
    big = tf32_rna(x)
    return big, tf32_trunc(x - big)


def split_b_in_place(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Variant 2's B: big = the fp32 value, which the tensor core truncates; small = rna(x - trunc(x))."""
    big = tf32_trunc(x)
    return big, tf32_rna(x - big)


def split_truncating(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both parts truncated (fewer instructions; tried and dropped: every value biased toward zero)."""
    big = tf32_trunc(x)
    return big, tf32_trunc(x - big)


def test_rounding_to_tf32_clears_the_low_13_bits_and_rounds_ties_away_from_zero():
    one_plus_half_ulp = np.array([1.0 + 2.0**-11, -(1.0 + 2.0**-11), 1.0 + 2.0**-12], dtype=np.float32)
    assert tf32_rna(one_plus_half_ulp).tolist() == [1.0 + 2.0**-10, -(1.0 + 2.0**-10), 1.0]
    x = np.random.default_rng(0).standard_normal(10_000).astype(np.float32)
    assert not np.any(tf32_rna(x).view(np.uint32) & np.uint32(0x1FFF))


def test_the_first_runs_integer_rounding_is_rna_on_every_fp32_including_inf_and_nan():
    rng = np.random.default_rng(3)
    bits = np.concatenate([rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32),
                           np.array([0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001, 0x7F7FFFFF, 0x00000FFF,
                                     0x00001000, 0x80001000, 0x3F800FFF], dtype=np.uint32)])
    x = bits.view(np.float32)
    assert np.array_equal(tf32_rna_as_kernel(x).view(np.uint32), tf32_rna(x).view(np.uint32))


def test_truncation_keeps_the_sign_clears_13_bits_and_leaves_an_exact_remainder():
    rng = np.random.default_rng(4)
    x = (rng.standard_normal(100_000) * np.exp2(rng.integers(-60, 60, 100_000))).astype(np.float32)
    big = tf32_trunc(x)
    assert not np.any(big.view(np.uint32) & np.uint32(0x1FFF))
    assert np.all(np.abs(big) <= np.abs(x)) and np.all(np.sign(big) == np.sign(x))
    small = x - big  # fp32, as the kernel computes it
    assert np.array_equal(big.astype(np.float64) + small.astype(np.float64), x.astype(np.float64))
    assert np.all(np.abs(small) < np.abs(x) * 2.0**-10)


def _signed_split_error(how) -> np.ndarray:
    """(big + small - x) / |x| * sign(x) over wide-ranging fp32 values: negative = toward zero."""
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(100_000) * np.exp2(rng.integers(-60, 60, 100_000))).astype(np.float32)
    big, small = how(x)
    exact = x.astype(np.float64)
    return (big.astype(np.float64) + small.astype(np.float64) - exact) / np.abs(exact) * np.sign(exact)


@pytest.mark.parametrize("how", [split, split_b_in_place, split_truncating])
def test_every_split_reproduces_fp32_values_to_2_pow_minus_21(how):
    assert np.abs(_signed_split_error(how)).max() <= 2.0**-21
    big, _ = how(np.array([1.0 + 2.0**-12 + 2.0**-20], dtype=np.float32))
    assert big[0] != np.float32(1.0 + 2.0**-12 + 2.0**-20)  # one TF32 alone is coarser: the small part matters


def test_the_kernels_splits_are_not_biased_toward_zero_as_truncating_both_parts_is():
    trunc = _signed_split_error(split_truncating)
    assert np.all(trunc <= 0) and abs(trunc.mean()) > 0.9 * np.abs(trunc).mean()  # every value shrinks
    a_split = _signed_split_error(split)  # A: big rounded (24 -> 11 bits: ties are rare), small truncated
    assert abs(a_split.mean()) < 0.1 * np.abs(a_split).mean()
    # B: small = rna(x - trunc(x)) drops at most 2 bits, so ties (rounded away from zero) are common: a bias
    # away from zero: measured 3.2e-8 against truncation's 7.5e-8 toward zero (mean relative error, 2^-24 ~ 6e-8).
    b_split = _signed_split_error(split_b_in_place)
    assert 0 < b_split.mean() < 0.5 * abs(trunc.mean())


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


# --------------------------------------------------------------------------------------------------
# The tensor core's fp32 accumulation, modelled: one m16n8k8 TF32 mma adds its 8 products to C as one
# block. The products are exact (11-bit x 11-bit significands); all 9 terms are aligned to the largest
# one and truncated 2 bits below fp32's 24, summed exactly, and the sum is rounded toward zero to fp32.
# (Block size 8, 2 extra bits and round-toward-zero are the parameters that reproduce the H100 errors
# measured by the first bench run; plain IEEE round-to-nearest would have given ~1e-6 at K=8192.)
# --------------------------------------------------------------------------------------------------
H100_FIRST_RUN_ERR = {8192: 5.74e-5, 4096: 2.87e-5}  # ours, one accumulator for the whole K loop
H100_SGEMM_ERR = {8192: 1.62e-6, 4096: 1.15e-6}
# The kernel now (unbiased split, variant 2 with kWsTilesPerFlush = 2: 8 k-steps per fresh accumulator, small
# products first), bench_gemm.py on the H100 at b2736b1 (bench/results/2026-11-22_gemm_h100_b2736b1):
# 1024x8192x8192, 4096^3. (Each k-step's 3 products in a row, b1f684f: 5.17e-7 and 4.97e-7.)
H100_NOW_ERR = {8192: 2.93e-7, 4096: 2.55e-7}


def _round_toward_zero_f32(x: np.ndarray) -> np.ndarray:
    r = x.astype(np.float32)
    over = np.abs(r.astype(np.float64)) > np.abs(x)
    r[over] = np.nextafter(r[over], np.float32(0))
    return r


def _mma_block(c: np.ndarray, products: np.ndarray) -> np.ndarray:
    terms = np.concatenate([c.astype(np.float64)[:, None], products], axis=1)
    top = np.abs(terms).max(axis=1)
    quantum = np.exp2(np.floor(np.log2(np.where(top > 0, top, 1.0))) - 23 - 2)[:, None]
    return _round_toward_zero_f32((np.trunc(terms / quantum) * quantum).sum(axis=1))


def _emulated_3xtf32(a: np.ndarray, b: np.ndarray, k_steps_per_flush: int | None, split=split,
                     split_b=split_b_in_place, smalls_first: bool = False) -> np.ndarray:
    """C = a . b^T as the kernel computes it: per k8 step the mmas a_small.b_big, a_big.b_small, a_big.b_big
    on the tensor-core accumulator; every k_steps_per_flush steps (None: never) that accumulator is
    added into an fp32 register (round to nearest) and restarted from zero. smalls_first: within each flush,
    the small-part products of all its k-steps first, then the big products (variant 2's order)."""
    (a_big, a_small), (b_big, b_small) = split(a), split_b(b)
    m, k = a.shape
    n = b.shape[0]
    total = np.zeros(m * n, np.float32)
    span = 8 * (k_steps_per_flush or (k + 7) // 8)

    def mma(tc, x, y, k0):
        xs = x[:, k0:k0 + 8].astype(np.float64)
        ys = y[:, k0:k0 + 8].astype(np.float64)
        return _mma_block(tc, (xs[:, None, :] * ys[None, :, :]).reshape(m * n, -1))

    for f0 in range(0, k, span):
        steps = range(f0, min(k, f0 + span), 8)
        if smalls_first:
            order = [(x, y, k0) for k0 in steps for x, y in ((a_small, b_big), (a_big, b_small))]
            order += [(a_big, b_big, k0) for k0 in steps]
        else:
            order = [(x, y, k0) for k0 in steps for x, y in ((a_small, b_big), (a_big, b_small), (a_big, b_big))]
        tc = np.zeros(m * n, np.float32)
        for x, y, k0 in order:
            tc = mma(tc, x, y, k0)
        if not k_steps_per_flush:
            return tc.reshape(m, n)
        total = (total.astype(np.float64) + tc).astype(np.float32)
    return total.reshape(m, n)


@pytest.mark.parametrize("k", [4096, 8192])
def test_the_accumulation_model_reproduces_the_first_h100_run_and_todays_kernel_which_beats_sgemm(k):
    rng = np.random.default_rng(k)
    a = rng.standard_normal((16, k)).astype(np.float32)
    b = rng.standard_normal((16, k)).astype(np.float32)
    ref = a.astype(np.float64) @ b.astype(np.float64).T

    def rel(c):
        return np.linalg.norm(c.astype(np.float64) - ref) / np.linalg.norm(ref)

    # the first version: rounded split, one accumulator for all of K
    chained = rel(_emulated_3xtf32(a, b, None, split=split_rna, split_b=split_rna))
    assert 0.75 * H100_FIRST_RUN_ERR[k] < chained < 1.3 * H100_FIRST_RUN_ERR[k]
    # the kernel now: unbiased split, a fresh accumulator every kWsTilesPerFlush k-tiles of 4 k8 steps
    now = rel(_emulated_3xtf32(a, b, 4 * _ws_constant("kWsTilesPerFlush"), smalls_first=True))
    assert 0.75 * H100_NOW_ERR[k] < now < 1.3 * H100_NOW_ERR[k]
    assert now < 0.75 * H100_SGEMM_ERR[k]
    assert now * 25 < chained


# A Linear layer before train-mode BatchNorm: x = torch.rand (every row has the same positive mean), W = nn.Linear's
# uniform init. The batch mean over rows averages each element's random error away and keeps what the rows share:
# the accumulator's rounding toward zero, which every wgmma applies to the running sum of its chain. gemm_ablate.py
# on the H100 (1024x8192x8192, rms over columns of the mean over rows vs float64, in units of cuBLAS SGEMM's):
# 715af80 (a fresh accumulator per k-tile, each k-step's 3 products in a row) 3.75x and verified on
# gemm_scale_batchnorm; 2 k-tiles per accumulator in that order 7.55x, failed verification on its running mean;
# 2 k-tiles with the small products first (the kernel now) 2.74x, verified (bench/results/2026-11-22_gemm_h100_b2736b1).
H100_COLUMN_MEAN_VS_SGEMM = {"per_tile": 3.75, "two_tiles": 7.55, "two_tiles_smalls_first": 2.74}


def test_small_products_first_keep_batchnorms_column_means_closer_to_float64_than_the_per_tile_flush_did():
    rng = np.random.default_rng(5)
    k = 1024
    a = rng.random((256, k)).astype(np.float32)
    b = rng.uniform(-(k ** -0.5), k ** -0.5, (16, k)).astype(np.float32)
    ref_mean = (a.astype(np.float64) @ b.astype(np.float64).T).mean(axis=0)

    def column_mean_err(c):
        return np.sqrt(np.mean((c.astype(np.float64).mean(axis=0) - ref_mean) ** 2))

    per_tile = column_mean_err(_emulated_3xtf32(a, b, 4, split=split_rna, split_b=split_rna))  # 715af80
    two_tiles = column_mean_err(_emulated_3xtf32(a, b, 8))
    now = column_mean_err(_emulated_3xtf32(a, b, 4 * _ws_constant("kWsTilesPerFlush"), smalls_first=True))
    h100 = H100_COLUMN_MEAN_VS_SGEMM
    # the model orders them as the H100 did, with ratios near the measured ones
    assert now < per_tile < two_tiles
    assert 0.6 * h100["two_tiles"] / h100["per_tile"] < two_tiles / per_tile < 1.6 * h100["two_tiles"] / h100["per_tile"]
    assert now / per_tile < 1.2 * h100["two_tiles_smalls_first"] / h100["per_tile"]


# --------------------------------------------------------------------------------------------------
# Variant 2 (warp-specialised), modelled on the host: the layouts its threads index with, and the
# producer/consumer mbarrier protocol (a wrong parity or arrival count would hang the GPU or let the
# producer overwrite a slot that a consumer still reads; neither shows in a compile).
# --------------------------------------------------------------------------------------------------
def _sw128(r, k):
    return r * 128 + (((k >> 2) ^ (r & 7)) << 4)


def test_variant2_ldmatrix_addresses_are_the_swizzled_a_fragments_and_conflict_free():
    # .cu: a_row = 64 cw + 16 q + (lane & 7) + ((lane >> 3) & 1) * 8, chunk (half ^ (lane & 7)) ^ 2 kk
    for cw in range(2):
        for q in range(4):
            for kk in range(4):
                addrs = []
                for lane in range(32):
                    row = 64 * cw + 16 * q + (lane & 7) + ((lane >> 3) & 1) * 8
                    chunk = ((lane >> 4) ^ (lane & 7)) ^ (2 * kk)
                    addr = row * 128 + (chunk << 4)
                    # the block this lane addresses: (rows 0-7 | 8-15) x (k 0-3 | 4-7) of the k8 step,
                    # i.e. a0 (g, t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4) after ldmatrix
                    assert addr == _sw128(row, 8 * kk + 4 * (lane >> 4))
                    addrs.append(addr)
                # each 8-lane phase of ldmatrix reads 8 rows' 16 bytes: all 32 banks, no conflict
                for phase in range(4):
                    banks = {(a // 4 + w) % 32 for a in addrs[8 * phase:8 * phase + 8] for w in range(4)}
                    assert len(banks) == 32


def test_variant2_a_copied_by_the_loaders_and_read_by_ldmatrix_gives_the_register_fragments_wgmma_expects():
    # End to end on the host: fp32 A tile -> ws_load_kmajor's swizzled smem -> ldmatrix.x4 (lane l gets
    # row l / 4, 32-bit column l % 4 of matrix i, whose 8 row addresses lanes 8i .. 8i + 7 give) -> the
    # register-A fragment of wgmma m64k8 tf32 as CUTLASS's ALayout_64x8 lays it out: warp q of the
    # warpgroup, g = lane / 4, t = lane % 4: a0 (16q + g, t), a1 (16q + g + 8, t), a2 (16q + g, t + 4),
    # a3 (16q + g + 8, t + 4) of the warpgroup's 64 x 8 slice (the m16n8k8 A fragment, per warp).
    tile = np.random.default_rng(5).standard_normal((128, 32)).astype(np.float32)
    smem = {}
    for t in range(_ws_constant("kWsLoaderThreads")):
        for i in range(1024 // 64):
            r, k = 8 * i + (t >> 3), (t & 7) * 4
            for e in range(4):
                smem[_sw128(t >> 3, k) + 1024 * i + 4 * e] = tile[r, k + e]
    for cw in range(2):
        for q in range(4):
            for kk in range(4):
                rows = [(64 * cw + 16 * q + (lane & 7) + ((lane >> 3) & 1) * 8) * 128
                        + ((((lane >> 4) ^ (lane & 7)) ^ (2 * kk)) << 4) for lane in range(32)]
                for lane in range(32):
                    g, t = lane >> 2, lane & 3
                    regs = [smem[rows[8 * i + g] + 4 * t] for i in range(4)]
                    base = 64 * cw + 16 * q
                    want = [tile[base + g, 8 * kk + t], tile[base + g + 8, 8 * kk + t],
                            tile[base + g, 8 * kk + t + 4], tile[base + g + 8, 8 * kk + t + 4]]
                    assert regs == want, (cw, q, kk, lane)


def test_variant2_loaders_fill_every_element_of_each_tile_once_and_splitters_cover_every_b_chunk_once():
    loaders = _ws_constant("kWsLoaderThreads")
    splitters = 128 * _ws_constant("GEMM3X_WS_PRODUCER_WARPGROUPS") - loaders  # kWsSplitterThreads
    per_loader = 1024 // loaders  # kWsChunksPerLoader
    # ws_load_kmajor (A, TN's B): thread t, pass i -> row 8 i + t / 8, k 4 (t % 8) .. +3, at
    # sw128(t / 8, 4 (t % 8)) + 1024 i
    kmajor = []
    for t in range(loaders):
        for i in range(per_loader):
            r, k = 8 * i + (t >> 3), (t & 7) * 4
            assert _sw128(t >> 3, k) + 1024 * i == _sw128(r, k)
            kmajor += [_sw128(r, k) + 4 * e for e in range(4)]
    assert sorted(kmajor) == list(range(0, 128 * 128, 4))
    # ws_load_nn_b: thread t, k row kr -> (n = t, t + 64; k = kr) at sw128(t, kr & ~3) + 4 (kr & 3) (+ 64 rows)
    nn = []
    for t in range(loaders):
        for kr in range(32):
            off = _sw128(t, kr & ~3) + 4 * (kr & 3)
            assert off + 64 * 128 == _sw128(t + 64, kr & ~3) + 4 * (kr & 3)
            nn += [off, off + 64 * 128]
    assert sorted(nn) == list(range(0, 128 * 128, 4))
    # splitters: thread t takes 16-byte chunks c = t, t + splitters, ... < 1024 at sw128(c / 8, 4 (c % 8)):
    # every chunk once, and a warp's 32 consecutive chunks are 4 whole 128-byte rows (conflict-free)
    chunks = [_sw128(c >> 3, (c & 7) * 4) for t in range(splitters) for c in range(t, 1024, splitters)]
    assert sorted(chunks) == list(range(0, 128 * 128, 16))
    assert splitters % 32 == 0


def _simulate_ws_pipeline(k_tiles, stages, seed, tiles_per_flush, consumer_warps=8, loader_parity_flip=1):
    """Runs the .cu's loader / splitter / consumer loops as interleaved agents on modelled mbarriers.

    mbarrier model: `done` = completed phases; an arrival that reaches `count` completes a phase;
    try_wait.parity(p) succeeds iff the current phase's parity (done & 1) differs from p. The loader's
    cp.async copies land at a random later time (cp.async.mbarrier.arrive.noinc arrives then). Every role
    runs the k-tiles rounded up to whole flushes (the tiles past K are zero-filled). A consumer warp takes
    the flush's slots one after the other (wait full, issue its wgmmas), then releases them in order as
    their commit groups complete. Returns the order in which consumers read tiles; raises on a hang, on a
    slot overwritten while a consumer may still read it, or on a read before the tile was copied and split."""
    rng = np.random.default_rng(seed)
    padded = -(-k_tiles // tiles_per_flush) * tiles_per_flush

    def barrier(count):
        return {"done": 0, "arrived": 0, "count": count}

    loaded = [barrier(1) for _ in range(stages)]  # the loader warps as one agent, the splitters as one
    full = [barrier(1) for _ in range(stages)]
    empty = [barrier(consumer_warps) for _ in range(stages)]
    slot_tile = [None] * stages
    slot_state = ["free"] * stages  # "copying" -> "landed" -> "split"
    readers = [set() for _ in range(stages)]
    in_flight = []  # slots whose copies have not landed yet

    def arrive(bar):
        bar["arrived"] += 1
        if bar["arrived"] == bar["count"]:
            bar["arrived"] = 0
            bar["done"] += 1

    def can_pass(bar, parity):
        return (bar["done"] & 1) != parity

    def advance(state, key):
        state[key] += 1
        state["s"] += 1
        if state["s"] == stages:
            state["s"], state["phase"] = 0, state["phase"] ^ 1

    loader = {"it": 0, "s": 0, "phase": 0}
    splitter = {"j": 0, "s": 0, "phase": 0}
    # consumer warp: first slot s of its flush, h = tiles of the flush issued, released = tiles released
    cons = [{"kt": 0, "s": 0, "phase": 0, "h": 0, "released": 0} for _ in range(consumer_warps)]
    reads = []

    for _ in range(200_000):
        agents = []
        if loader["it"] < padded:
            agents.append("loader")
        if in_flight:
            agents.append("land")
        if splitter["j"] < padded:
            agents.append("splitter")
        agents += [w for w in range(consumer_warps) if cons[w]["kt"] < padded]
        if not agents:
            return reads
        progressed = False
        for pick in rng.permutation(len(agents)):
            agent = agents[pick]
            if agent == "loader":
                s = loader["s"]
                if not can_pass(empty[s], loader["phase"] ^ loader_parity_flip):
                    continue
                assert not readers[s], f"slot {s} overwritten by tile {loader['it']} while read"
                assert slot_state[s] in ("free", "split"), (s, slot_state[s])
                slot_tile[s], slot_state[s] = loader["it"], "copying"
                in_flight.append(s)
                advance(loader, "it")
            elif agent == "land":
                s = in_flight.pop(0)
                slot_state[s] = "landed"
                arrive(loaded[s])
            elif agent == "splitter":
                s = splitter["s"]
                if not can_pass(loaded[s], splitter["phase"]):
                    continue
                assert slot_tile[s] == splitter["j"] and slot_state[s] == "landed", (s, slot_tile[s], splitter)
                slot_state[s] = "split"
                arrive(full[s])
                advance(splitter, "j")
            else:
                w = cons[agent]
                if w["h"] < tiles_per_flush:  # wait full[s + h], then issue that tile's wgmmas (read it)
                    s, tile = w["s"] + w["h"], w["kt"] + w["h"]
                    assert s < stages, "a flush's slots wrapped around the ring"
                    if not can_pass(full[s], w["phase"]):
                        continue
                    assert slot_tile[s] == tile and slot_state[s] == "split", (agent, w, slot_tile[s])
                    readers[s].add(agent)
                    reads.append((agent, tile))
                    w["h"] += 1
                else:  # wgmma.wait_group: the next commit group has completed; release its slot
                    s = w["s"] + w["released"]
                    readers[s].discard(agent)
                    arrive(empty[s])
                    w["released"] += 1
                    if w["released"] == tiles_per_flush:
                        w["kt"] += tiles_per_flush
                        w["s"] += tiles_per_flush
                        if w["s"] == stages:
                            w["s"], w["phase"] = 0, w["phase"] ^ 1
                        w["h"] = w["released"] = 0
            progressed = True
            break
        if not progressed:
            raise RuntimeError(f"hang: loader {loader}, splitter {splitter}, consumers {cons}")
    raise RuntimeError("did not finish")


@pytest.mark.parametrize("k_tiles", [0, 1, 2, 3, 4, 5, 7, 8, 9, 33, 64])
def test_variant2_mbarrier_protocol_never_hangs_and_never_overwrites_a_slot_in_use(k_tiles):
    stages, per_flush = _ws_constant("kWsStages"), _ws_constant("kWsTilesPerFlush")
    padded = -(-k_tiles // per_flush) * per_flush
    for seed in range(6):
        reads = _simulate_ws_pipeline(k_tiles, stages, seed, per_flush)
        for warp in range(8):
            assert [kt for w, kt in reads if w == warp] == list(range(padded))


def test_the_variant2_protocol_model_catches_a_flush_that_wraps_around_the_ring():
    # The .cu's static_assert(kWsStages % kWsTilesPerFlush == 0) in the model: 3 tiles per flush over a
    # 4-slot ring would need slots 3, 4, 5 of a 4-slot ring.
    with pytest.raises(AssertionError, match="wrapped"):
        _simulate_ws_pipeline(16, 4, 0, 3)


def test_the_variant2_protocol_model_catches_a_wrong_parity():
    # The model is able to fail: a loader waiting on empty[s] with the consumers' parity (no ^ 1) waits
    # for a phase nobody completes before it has loaded anything: a hang.
    with pytest.raises(RuntimeError, match="hang"):
        _simulate_ws_pipeline(16, _ws_constant("kWsStages"), 0, _ws_constant("kWsTilesPerFlush"),
                              loader_parity_flip=0)
