"""dev/kernels lab: the fused row-reduction kernels compile for sm_90a cleanly, and their merges are sound.

The kernels only run on a GPU (dev/kernels/bench_rowwise.py); here nvcc compiles them on the CPU and we
read ptxas' register/spill report, then model the kernels' per-thread accumulation and shuffle-tree
merges (online softmax, Welford/Chan) in numpy and compare them with two-pass float64 results.
"""

import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
KERNELS = REPO / "dev" / "kernels"
SOURCE = KERNELS / "rowwise.cu"
GENCODE = "-gencode=arch=compute_90a,code=sm_90a"

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def _nvcc(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["nvcc", *args], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def cubin(tmp_path_factory):
    out = tmp_path_factory.mktemp("rowwise") / "rowwise.cubin"
    proc = _nvcc("-cubin", GENCODE, "-O3", "-Xptxas", "-v,-warn-spills,-warn-lmem-usage", "-Werror",
                 "all-warnings", "-o", str(out), str(SOURCE))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out, proc.stdout + proc.stderr


@needs_nvcc
def test_every_rowwise_kernel_compiles_for_sm90a_with_no_spills_and_no_stack_frame(cubin):
    _, log = cubin
    kernels = re.findall(r"Compiling entry function '(\w+)'", log)
    # 4 ops x (warp NPT 8/32, block NPT 8/32, two-pass) x (float4, scalar)
    assert len(kernels) == 40, log
    assert all(re.search(r"row_(warp|block|two_pass)_kernel", k) for k in kernels), log
    spills = [(int(s), int(ld)) for s, ld in re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)]
    frames = [int(f) for f in re.findall(r"(\d+) bytes stack frame", log)]
    assert len(spills) == len(kernels) and all(s == (0, 0) for s in spills), log
    assert len(frames) == len(kernels) and not any(frames), log
    registers = [int(r) for r in re.findall(r"Used (\d+) registers", log)]
    # 512-thread blocks need <= 128 registers per thread to launch at all
    assert len(registers) == len(kernels) and max(registers) <= 128, log


@needs_nvcc
def test_the_kernel_sass_has_no_local_loads_or_stores(cubin):
    if shutil.which("cuobjdump") is None:
        pytest.skip("needs cuobjdump")
    path, _ = cubin
    sass = subprocess.run(["cuobjdump", "-sass", str(path)], capture_output=True, text=True, timeout=60).stdout
    assert not re.search(r"\b(LDL|STL)\b", sass)


@needs_nvcc
def test_the_bench_builds_a_library_whose_launchers_validate_sizes_without_a_gpu(tmp_path):
    sys.path.insert(0, str(KERNELS))
    try:
        import bench_rowwise
    finally:
        sys.path.remove(str(KERNELS))
    lib = bench_rowwise.load(bench_rowwise.build(tmp_path)[0])
    # Empty problems return cudaSuccess, negative sizes cudaErrorInvalidValue (1); neither touches the driver.
    assert lib.row_softmax(None, None, 0, 8, 1.0, None) == 0
    assert lib.row_softmax(None, None, 8, 0, 1.0, None) == 0
    assert lib.row_softmax(None, None, -1, 8, 1.0, None) == 1
    assert lib.row_logsumexp_relu(None, None, 4, 0, None) == 1  # logsumexp of an empty row: refused
    assert lib.row_layernorm_relu(None, None, None, None, 0, 4096, 1e-5, None) == 0
    assert lib.row_rmsnorm_residual(None, None, None, 8, -3, 1e-6, None) == 1
    assert {c.op for c in bench_rowwise.CASES} == set(bench_rowwise.OPS)


# --------------------------------------------------------------------------------------------------
# Host model of the kernels' reductions: thread t of T accumulates its elements one by one (add), then
# the partials merge by a butterfly over lanes (xor 16, 8, 4, 2, 1), then across warps the same way.
# --------------------------------------------------------------------------------------------------
class OnlineSoftmax:
    def __init__(self, dt):
        self.dt, self.m, self.s = dt, dt(-np.inf), dt(0)

    def add(self, v):
        v = self.dt(v)
        if v > self.m:
            self.s, self.m = self.s * np.exp(self.m - v) + self.dt(1), v
        elif v != -np.inf:
            self.s = self.s + np.exp(v - self.m)

    def merge(self, o):
        mm = max(self.m, o.m)
        a = self.dt(0) if self.m == -np.inf else self.s * np.exp(self.m - mm)
        b = self.dt(0) if o.m == -np.inf else o.s * np.exp(o.m - mm)
        out = OnlineSoftmax(self.dt)
        out.m, out.s = mm, a + b
        return out


class Welford:
    def __init__(self, dt):
        self.dt, self.n, self.mean, self.m2 = dt, dt(0), dt(0), dt(0)

    def add(self, v):
        v = self.dt(v)
        self.n = self.n + self.dt(1)
        d = v - self.mean
        self.mean = self.mean + d / self.n
        self.m2 = self.m2 + d * (v - self.mean)

    def merge(self, o):
        out = Welford(self.dt)
        nn = self.n + o.n
        if nn == 0:
            return out
        d, fb = o.mean - self.mean, o.n / nn
        out.n, out.mean, out.m2 = nn, self.mean + d * fb, self.m2 + o.m2 + d * d * self.n * fb
        return out


def butterfly(parts):
    """__shfl_xor_sync(mask) for mask = 16..1 over groups of 32, then the same over the warp totals."""
    def warp(p):
        p = list(p)
        mask = 16
        while mask:
            p = [p[i].merge(p[i ^ mask]) for i in range(32)]
            mask >>= 1
        return p[0]

    warps = [warp(parts[i:i + 32]) for i in range(0, len(parts), 32)]
    if len(warps) == 1:
        return warps[0]
    empty = type(parts[0])(parts[0].dt)
    return warp(warps + [empty] * (32 - len(warps)))


def thread_partials(stats, x, threads, vec, dt):
    """Each thread's partial, in the kernels' element order (float4: 4*(t + k*T)..+3; scalar: t + k*T)."""
    parts = [stats(dt) for _ in range(threads)]
    cols = len(x)
    for t in range(threads):
        if vec:
            for c in range(4 * t, cols, 4 * threads):
                for j in range(4):
                    parts[t].add(x[c + j])
        else:
            for c in range(t, cols, threads):
                parts[t].add(x[c])
    return parts


LAYOUTS = [(32, False), (32, True), (512, False), (512, True)]  # warp / block path, scalar / float4 (cols % 4 == 0)


def _row(seed, cols, scale=3.0, offset=0.0):
    return np.random.default_rng(seed).standard_normal(cols) * scale + offset


@pytest.mark.parametrize("cols,threads,vec", [
    (cols, threads, vec) for cols in [1, 3, 4, 100, 1000, 2048] for threads, vec in LAYOUTS if not (vec and cols % 4)])
def test_the_online_softmax_merge_equals_the_two_pass_max_and_sum_of_exponentials_in_float64(cols, threads, vec):
    x = _row(cols * 7 + threads, cols)
    st = butterfly(thread_partials(OnlineSoftmax, x, threads, vec, np.float64))
    m = x.max()
    s = np.exp(x - m).sum()
    assert st.m == m
    assert st.s == pytest.approx(s, rel=1e-13)
    np.testing.assert_allclose(np.exp(x - st.m) / st.s, np.exp(x - m) / s, rtol=1e-13)
    assert st.m + math.log(st.s) == pytest.approx(m + math.log(s), rel=1e-14, abs=1e-14)


def test_the_online_softmax_merge_ignores_minus_infinity_and_empty_threads():
    x = _row(3, 40)
    x[::3] = -np.inf
    st = butterfly(thread_partials(OnlineSoftmax, x, 512, False, np.float64))  # 472 threads hold nothing
    finite = x[np.isfinite(x)]
    assert st.m == finite.max()
    assert st.s == pytest.approx(np.exp(finite - finite.max()).sum(), rel=1e-13)
    all_masked = butterfly(thread_partials(OnlineSoftmax, np.full(8, -np.inf), 32, False, np.float64))
    assert all_masked.m == -np.inf and all_masked.s == 0  # logsumexp -> -inf, as torch gives


@pytest.mark.parametrize("cols,offset,threads,vec", [
    (cols, offset, threads, vec) for cols, offset in [(1, 0.0), (3, 0.0), (1000, 0.0), (2048, 0.0), (4096, 1e4)]
    for threads, vec in LAYOUTS if not (vec and cols % 4)])
def test_the_welford_merge_equals_the_two_pass_mean_and_biased_variance_in_float64(cols, offset, threads, vec):
    x = _row(cols + threads, cols, scale=2.0, offset=offset)
    st = butterfly(thread_partials(Welford, x, threads, vec, np.float64))
    mean = x.sum() / cols
    var = ((x - mean) ** 2).sum() / cols  # two-pass, biased (LayerNorm's)
    assert st.n == cols
    assert st.mean == pytest.approx(mean, rel=1e-13, abs=1e-13)
    assert st.m2 / cols == pytest.approx(var, rel=1e-10, abs=1e-15)


def test_welford_in_float32_stays_accurate_where_the_one_pass_sum_of_squares_cancels():
    x = _row(11, 4096, scale=1.0, offset=3e3).astype(np.float32)  # mean 3000, std 1
    exact = np.var(x.astype(np.float64))
    st = butterfly(thread_partials(Welford, x, 512, True, np.float32))
    welford_err = abs(float(st.m2) / 4096 - exact) / exact
    naive = (np.sum(x * x, dtype=np.float32) / np.float32(4096)) - np.float32(np.mean(x, dtype=np.float32)) ** 2
    naive_err = abs(float(naive) - exact) / exact
    assert welford_err < 1e-4
    assert naive_err > 100 * welford_err


def test_the_float32_online_softmax_is_as_accurate_as_a_float32_two_pass_softmax():
    x = _row(5, 2048).astype(np.float32)
    ref = np.exp(x.astype(np.float64) - x.max()) / np.exp(x.astype(np.float64) - x.max()).sum()
    st = butterfly(thread_partials(OnlineSoftmax, x, 512, True, np.float32))
    ours = np.exp(x - st.m) / st.s
    e = np.exp(x - x.max())
    two_pass = e / e.sum(dtype=np.float32)

    def rel(y):
        return np.linalg.norm(y.astype(np.float64) - ref) / np.linalg.norm(ref)

    assert rel(ours) <= 2 * rel(two_pass) + 1e-7


# --------------------------------------------------------------------------------------------------
# The kernels' own Stats, prologue and epilogue structs (__host__ __device__), run on the host by a small
# nvcc-built program in the kernels' thread layouts, checked against float64 with the bench's error rule.
# --------------------------------------------------------------------------------------------------
HARNESS = r"""
#include "rowwise.cu"
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
using namespace rowwise;

template <class S> S butterfly32(std::vector<S> q) {  // lane i merges lane i ^ mask, as warp_reduce does
  for (int mask = 16; mask > 0; mask >>= 1) {
    std::vector<S> n(q);
    for (int i = 0; i < 32; ++i) n[i].merge(q[i ^ mask]);
    q = n;
  }
  return q[0];
}

template <class Op> void run(const Op& op, const float* x, float* y, int rows, int cols, int T, bool vec) {
  using S = typename Op::Stats;
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + (size_t)r * cols;
    std::vector<S> p(T);
    for (auto& s : p) s.init();
    for (int t = 0; t < T; ++t) {
      if (vec) {
        for (int c = 4 * t; c < cols; c += 4 * T)
          for (int j = 0; j < 4; ++j) p[t].add(op.pre(xr[c + j], c + j));
      } else {
        for (int c = t; c < cols; c += T) p[t].add(op.pre(xr[c], c));
      }
    }
    std::vector<S> warps;
    for (int w = 0; w < T / 32; ++w) warps.push_back(butterfly32(std::vector<S>(p.begin() + 32 * w, p.begin() + 32 * w + 32)));
    S st = warps[0];
    if (warps.size() > 1) {
      while (warps.size() < 32) { S e; e.init(); warps.push_back(e); }
      st = butterfly32(warps);
    }
    st.finalize(cols, op.eps);
    if (S::kRowOutput) { y[r] = op.post(st.row_value(), 0.0f, -1); continue; }
    for (int c = 0; c < cols; ++c) {
      const float v = op.pre(xr[c], c);
      y[(size_t)r * cols + c] = op.post(st.normalize(v), v, c);
    }
  }
}

int main(int argc, char** argv) {
  const char* name = argv[1];
  const int rows = atoi(argv[2]), cols = atoi(argv[3]), T = atoi(argv[4]), vec = atoi(argv[5]);
  const float prescale = (float)atof(argv[6]), eps = (float)atof(argv[7]);
  std::vector<float> x((size_t)rows * cols), w(cols), b(cols), y((size_t)rows * cols);
  if (fread(x.data(), 4, x.size(), stdin) != x.size() || fread(w.data(), 4, cols, stdin) != (size_t)cols ||
      fread(b.data(), 4, cols, stdin) != (size_t)cols) return 2;
  size_t out = (size_t)rows * cols;
  if (!strcmp(name, "softmax")) {
    run(RowOp<OnlineSoftmax, PreScale, PostIdentity>{{prescale}, {}, 0.0f}, x.data(), y.data(), rows, cols, T, vec);
  } else if (!strcmp(name, "logsumexp_relu")) {
    run(RowOp<LogSumExp, PreIdentity, PostRelu>{{}, {}, 0.0f}, x.data(), y.data(), rows, cols, T, vec);
    out = rows;
  } else if (!strcmp(name, "layernorm_relu")) {
    run(RowOp<Welford, PreIdentity, PostAffineRelu>{{}, {w.data(), b.data()}, eps}, x.data(), y.data(), rows, cols,
        T, vec);
  } else {
    run(RowOp<SumSq, PreIdentity, PostGainResidual>{{}, {w.data()}, eps}, x.data(), y.data(), rows, cols, T, vec);
  }
  fwrite(y.data(), 4, out, stdout);
  return 0;
}
"""


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    d = tmp_path_factory.mktemp("rowwise_host")
    (d / "harness.cu").write_text(HARNESS)
    exe = d / "harness"
    proc = _nvcc("-std=c++17", "-O2", "-arch=sm_90a", "-I", str(KERNELS), "-o", str(exe), str(d / "harness.cu"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return exe


def _reference(op, x, w, b, prescale, eps):
    """The ops' PyTorch-style formulas in numpy, in x's dtype."""
    if op == "softmax":
        v = x * x.dtype.type(prescale)
        e = np.exp(v - v.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    if op == "logsumexp_relu":
        m = x.max(axis=1, keepdims=True)
        return np.maximum(np.log(np.exp(x - m).sum(axis=1, keepdims=True)) + m, 0)
    if op == "layernorm_relu":
        mean = x.mean(axis=1, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
        return np.maximum((x - mean) / np.sqrt(var + x.dtype.type(eps)) * w + b, 0)
    return x + x / np.sqrt((x * x).mean(axis=1, keepdims=True) + x.dtype.type(eps)) * w


@needs_nvcc
@pytest.mark.parametrize("op", ["softmax", "logsumexp_relu", "layernorm_relu", "rmsnorm_residual"])
@pytest.mark.parametrize("cols,threads,vec", [(1, 32, False), (3, 32, False), (256, 32, True), (1000, 32, False),
                                              (1000, 32, True), (4097, 512, False), (8192, 512, True)])
def test_the_kernels_own_stats_and_functors_run_on_the_host_match_float64_as_well_as_fp32_eager(
        harness, op, cols, threads, vec):
    rows = 4
    rng = np.random.default_rng(cols * 31 + threads)
    x = (rng.standard_normal((rows, cols)) * 3).astype(np.float32)
    w = (rng.standard_normal(cols) * 0.5 + 1).astype(np.float32)
    b = (rng.standard_normal(cols) * 0.1).astype(np.float32)
    prescale, eps = float(np.float32(1 / 0.7)), 1e-5
    proc = subprocess.run([str(harness), op, str(rows), str(cols), str(threads), str(int(vec)), repr(prescale),
                           repr(eps)], input=x.tobytes() + w.tobytes() + b.tobytes(), capture_output=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    ours = np.frombuffer(proc.stdout, dtype=np.float32).reshape(rows, -1).astype(np.float64)
    f64 = np.float64
    ref = _reference(op, x.astype(f64), w.astype(f64), b.astype(f64), np.float32(prescale), np.float32(eps))
    eager = _reference(op, x, w, b, prescale, eps).astype(f64)

    def rel(y):
        norm = np.linalg.norm(ref)
        return np.linalg.norm(y - ref) / norm if norm > 0 else np.linalg.norm(y - ref)

    assert np.all(np.isfinite(ours))
    assert rel(ours) <= 2 * rel(eager) + 1e-7, (rel(ours), rel(eager))
