"""dev/kernels/conv_direct/sweep_conv_direct.py (issue #24 lab): the sweep's grid is what it claims (the 2-D and
3-D shape families, dot lengths 9 to ~400, each shape with the tiling rule's tiling or the reason it has none,
every chosen tiling inside the shared-memory limit), and the library source it generates compiles for sm_90a
with ptxas reporting 0 bytes spilled for every kernel.

CPU only: nvcc compiles, nothing runs; the sweep's speeds and errors come from a GPU run of the script.
"""

import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LAB = REPO / "dev" / "kernels" / "conv_direct"
sys.path.insert(0, str(LAB))
import conv_direct_model as cdm  # noqa: E402
import sweep_conv_direct as sweep  # noqa: E402

tiling = sweep.tiling  # fuseforge.families.conv.tiling, as the sweep imported it
SHAPES = sweep.grid()
PLANS = {s.name: sweep.plan(s) for s in SHAPES}
INSTS = sweep.instantiations(SHAPES)
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def test_the_grid_has_40_to_60_distinct_shapes_with_dot_lengths_from_9_to_about_400():
    names = [s.name for s in SHAPES]
    assert len(set(names)) == len(names), names
    assert 40 <= len(SHAPES) <= 60, len(SHAPES)
    dots = sorted({s.dot for s in SHAPES})
    assert dots[0] == 9 and 384 <= dots[-1] <= 512, dots
    assert len(dots) >= 15, dots  # spread over the range, not a few points
    tiled = sorted({s.dot for s in SHAPES if PLANS[s.name]["inst"] is not None})
    assert tiled[0] == 9 and tiled[-1] >= 256, tiled  # ours is measured over most of the range


def test_the_2d_shapes_are_the_claimed_family():
    two = [s for s in SHAPES if s.dims == 2]
    assert {s.c for s in two} == {1, 3, 4, 8, 12, 16, 24, 32}
    assert {s.window for s in two} == {(1, 3, 3), (1, 5, 5), (1, 7, 7)}
    assert all(s.c <= 4 for s in two if s.window == (1, 7, 7))
    assert {s.k for s in two} == {16, 64, 128}
    assert {s.stride for s in two} == {1, 2} and {s.padding for s in two} == {0, 1}
    assert sum(s.stride == 2 for s in two) >= 3
    for s in two:
        n, c, h, w = s.x_shape
        assert c == s.c and h == w == (sweep.OUT_HW - 1) * s.stride + s.window[1] - 2 * s.padding, s
        assert s.out_shape == (n, s.k, 128, 128), s
        assert 64 <= n <= 512 and 0.4e9 <= s.out_bytes <= 1.1e9, (s.name, n, s.out_bytes)


def test_the_3d_shapes_are_the_claimed_family():
    three = [s for s in SHAPES if s.dims == 3]
    assert {s.c for s in three} == {1, 3, 8, 16}
    assert {s.window for s in three} == {(3, 3, 3)}
    assert {s.k for s in three} == {16, 32, 64}
    assert {(s.c, s.k) for s in three} == {(c, k) for c in (1, 3, 8, 16) for k in (16, 32, 64)}
    for s in three:
        assert s.x_shape[1:] == (s.c, 16, 64, 64) and s.stride == 1, s
        assert 0.4e9 <= s.out_bytes <= 1.1e9, (s.name, s.out_bytes)


def test_every_shape_has_the_rules_tiling_or_a_recorded_reason():
    for s in SHAPES:
        p, g = PLANS[s.name], s.geometry()
        t = tiling.choose(s.c, s.k, s.window, s.stride3, (1, 1, 1), g.oh)
        if isinstance(t, str):
            assert p["inst"] is None and p["reason"] == t, (s.name, p)
            continue
        smem = tiling.smem_bytes(t, s.c, s.window, s.stride3, (1, 1, 1))
        assert p["smem_bytes"] == smem <= tiling.SMEM_LIMIT and p["tiling"]["block_k"] == t.block_k, (s.name, p)
        assert p["reason"] is None, (s.name, p)
        unit = s.stride == 1
        assert p["inst"] == sweep.Inst(s.c, *s.window, t.kpt, t.wk, t.wh, t.ph, unit), (s.name, p)
        assert 0 < p["useful_fraction"] <= 1
    assert sum(p["inst"] is not None for p in PLANS.values()) >= 30


def test_every_chosen_tiling_fits_the_shared_memory_limit_by_the_kernels_own_formula():
    for s in SHAPES:
        inst = PLANS[s.name]["inst"]
        if inst is None:
            continue
        cf = cdm.Config(inst.name, inst.c, inst.kd, inst.kh, inst.kw, inst.kpt, inst.wk, inst.wh, inst.ph)
        kernel_smem = cdm.smem_bytes(cf, s.geometry())  # Config::smem_bytes of direct.cuh, transliterated
        assert kernel_smem == PLANS[s.name]["smem_bytes"] <= tiling.SMEM_LIMIT, (s.name, kernel_smem)
        assert 2 * kernel_smem <= 227 * 1024
        assert cf.threads <= 32 * tiling.MAX_WARPS and cf.block_k <= tiling.MAX_BLOCK_K


def test_a_convolution_too_big_for_shared_memory_is_refused_with_its_reason():
    s = sweep.shape_2d(64, 64, 3)  # 64 channels x 9 taps x 64 outputs of weights alone: 147 KB
    p = sweep.plan(s)
    assert p["inst"] is None and "shared memory" in p["reason"]


def test_the_instantiations_are_exactly_what_the_tiled_shapes_need():
    used = {PLANS[s.name]["inst"] for s in SHAPES} - {None}
    assert set(INSTS) == used and len(INSTS) == len(used)
    assert len({i.name for i in INSTS}) == len(INSTS)
    assert {i.unit_rows for i in INSTS} == {True, False}  # both row paths are measured
    src = sweep.source(INSTS)
    assert sorted(re.findall(r"^FFSWEEP_LAUNCHER\((\w+),", src, re.M)) == sorted(i.name for i in INSTS)
    for n in (1, 2, 7, 100):
        parts = sweep.shards(INSTS, n)
        assert sorted((i for p in parts for i in p), key=lambda i: i.args) == INSTS and all(parts)


def test_the_launchers_call_the_kernels_template_as_it_is_declared():
    text = sweep.KERNEL.read_text()
    assert re.search(r"template <int C, int KD, int KH, int KW, int KPT, int WK, int WH, int PH, bool kUnitRows, "
                     r"class Epi>\s*cudaError_t launch\(const float\* x, const float\* w, float\* y, "
                     r"const Geometry& g, const Epi& epi,\s*cudaStream_t stream\)", text)
    fields = re.search(r"struct Geometry \{(.*?)\};", text, re.S).group(1)
    names = re.findall(r"\b(\w+)[,;]", re.sub(r"//.*", "", fields))
    assert names == list(cdm.Geometry.__dataclass_fields__), names  # the 18 ints, in the launchers' order


def test_ptxas_reports_are_read_per_kernel_with_their_template_arguments():
    log = ("ptxas info    : Compiling entry function '_ZN14ff_conv_direct18conv_direct_kernelILi3ELi1ELi7ELi7ELi8"
           "ELi8ELi1ELi4ELb1EN7ffsweep7EpiBiasEEEvPKfS4_PfNS_8GeometryET8_' for 'sm_90a'\n"
           "ptxas info    : Function properties for x\n    24 bytes stack frame, 20 bytes spill stores, 8 bytes "
           "spill loads\nptxas info    : Used 128 registers, used 1 barriers\n")
    (k,) = sweep.parse_ptxas(log)
    assert k["inst"] == "c3_w1x7x7_t8x8x1x4_u"
    assert (k["registers"], k["spill_stores"], k["spill_loads"], k["stack_bytes"]) == (128, 20, 8, 24)


def test_dry_run_prints_the_grid_and_the_instantiations_without_cuda():
    proc = subprocess.run([sys.executable, str(LAB / "sweep_conv_direct.py"), "--dry-run"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"{len(SHAPES)} shapes" in proc.stdout and f"{len(INSTS)} instantiations" in proc.stdout
    assert all(s.name in proc.stdout for s in SHAPES) and all(f"ffsweep_{i.name}" in proc.stdout for i in INSTS)
    proc = subprocess.run([sys.executable, str(LAB / "sweep_conv_direct.py"), "--help"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and "--budget" in proc.stdout and "--out" in proc.stdout


@pytest.fixture(scope="module")
def ptxas(tmp_path_factory):
    """nvcc -cubin of the whole generated library (one translation unit) for sm_90a with ptxas -v."""
    tmp = tmp_path_factory.mktemp("conv_sweep")
    src = tmp / "sweep.cu"
    src.write_text(sweep.source(INSTS))
    t0 = time.perf_counter()
    proc = subprocess.run(["nvcc", "-cubin", *sweep.NVCC_FLAGS, "-o", str(tmp / "sweep.cubin"), str(src)],
                          capture_output=True, text=True, timeout=300)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-5000:]
    print(f"nvcc -cubin of {len(INSTS)} instantiations: {time.perf_counter() - t0:.1f} s")
    return sweep.parse_ptxas(log)


@needs_nvcc
def test_the_generated_source_compiles_for_sm90a_with_one_kernel_per_instantiation(ptxas):
    assert sorted(k.get("inst", k["kernel"]) for k in ptxas) == sorted(i.name for i in INSTS), ptxas
    by_name = {i.name: i for i in INSTS}
    for k in ptxas:
        assert k["registers"] is not None and k["spill_stores"] is not None and k["stack_bytes"] is not None, k
        threads = 32 * by_name[k["inst"]].wk * by_name[k["inst"]].wh
        assert k["registers"] <= min(255, 65536 // (2 * threads)), k  # kMinBlocks = 2 at <= 256 threads


@needs_nvcc
def test_no_kernel_of_the_sweep_spills(ptxas):
    users = {i.name: [s.name for s in SHAPES if PLANS[s.name]["inst"] == i] for i in INSTS}
    bad = [f"{k['inst']} ({k['registers']} registers, {k['spill_stores']} B spill stores, {k['spill_loads']} B spill "
           f"loads, {k['stack_bytes']} B stack; shapes {users[k['inst']]})"
           for k in ptxas if k["spill_stores"] or k["spill_loads"] or k["stack_bytes"]]
    assert not bad, "kernels that spill:\n  " + "\n  ".join(bad)
