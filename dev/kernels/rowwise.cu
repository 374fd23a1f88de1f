// rowwise.cu -- row reductions over the last (contiguous) axis fused with pointwise neighbours (issue #6):
// softmax, logsumexp, LayerNorm, RMSNorm, each with a prologue and an epilogue functor. Only CUDA headers.
//
// Shape: x is [rows, cols] row-major and contiguous; y is [rows, cols] (or [rows] for a per-row output).
// Per row:   v[c]  = pre(x[c], c)                      (prologue, e.g. x * prescale)
//            st    = reduce(v)                         (Stats: online softmax, Welford, or sum of squares)
//            y[c]  = post(st.normalize(v[c]), v[c], c) (epilogue; it also sees v, e.g. for a residual)
//   or       y[row] = post(st.row_value(), ., -1)      (per-row output: logsumexp)
//
// Stats (all merge associatively, so per-thread partials combine by warp shuffles and shared memory):
//   OnlineSoftmax (m, s): running max m and s = sum exp(v - m); merging (m1,s1),(m2,s2) gives
//       m = max(m1,m2), s = s1*exp(m1-m) + s2*exp(m2-m)   (a side whose m is -inf contributes 0).
//       softmax: exp(v - m) / s; logsumexp: m + log(s) (m if m is +-inf).
//   Welford (n, mean, M2): per element n+=1, d=v-mean, mean+=d/n, M2+=d*(v-mean); Chan's merge
//       n = na+nb, d = mb-ma, mean = ma + d*nb/n, M2 = M2a + M2b + d*d*na*nb/n.
//       LayerNorm (PyTorch): biased var = M2/cols, (v - mean) * (1/sqrtf(var + eps)).
//   SumSq (ss): RMSNorm (as the dev model spells it): v * (1/sqrtf(ss/cols + eps)).
// The CPU test tests/test_dev_rowwise.py models both merges in numpy against two-pass float64, and runs
// these very structs (they are __host__ __device__) on the host in the kernels' thread layout.
//
// Paths (the launcher picks one from cols; all templated on the per-thread register capacity NPT):
//   warp  (cols <= 1024): one warp per row, 8 rows per 256-thread block, row cached in registers
//         (NPT = 8 for cols <= 256, else 32), reduction by __shfl_xor_sync only. One read of x.
//   block (cols <= 16384): one 512-thread block per row, row cached in registers (NPT = 8 for
//         cols <= 4096, else 32), warp shuffles then shared memory. One read of x.
//   block, two pass (cols > 16384): stats from a first read of x, outputs from a second read (the row,
//         <= a few hundred KB, normally still sits in L2).
// Loads/stores are float4 (kVec) when cols % 4 == 0 and x, y are 16-byte aligned, scalar otherwise.
// In the float4 layout thread t of T owns elements 4*(t + k*T) .. +3; in the scalar one t + k*T.
//
// Math is precise fp32 (expf, logf, sqrtf, division; no fast-math), matching PyTorch's formulas.
//
// UNVERIFIED ON A GPU: this file compiles for sm_90a (tests/test_dev_rowwise.py); correctness and speed
// are checked by dev/kernels/bench_rowwise.py in a GPU session.

#include <cuda_runtime.h>
#include <stdint.h>

namespace rowwise {

#define RW_HD __host__ __device__ __forceinline__

constexpr int kWarpRowsPerBlock = 8;  // warp path: 256 threads, one row per warp
constexpr int kBlockThreads = 512;    // block path: one row per block
constexpr int kWarpMaxCols = 1024;
constexpr int kBlockMaxCachedCols = kBlockThreads * 32;

RW_HD float relu(float x) { return x < 0.0f ? 0.0f : x; }  // keeps NaN, like torch.relu

// Read-only load of a parameter (w, b): the read-only data cache on the device, a plain load on the host
// (the Stats, prologues and epilogues are __host__ __device__ so the CPU test can run them).
RW_HD float load_param(const float* p) {
#ifdef __CUDA_ARCH__
  return __ldg(p);
#else
  return *p;
#endif
}

// ------------------------------------------------------------------------------------------------
// Stats
// ------------------------------------------------------------------------------------------------
struct OnlineSoftmax {
  static constexpr bool kRowOutput = false;
  float m, s;
  RW_HD void init() { m = -INFINITY; s = 0.0f; }
  RW_HD void add(float v) {
    if (v > m) {
      s = s * expf(m - v) + 1.0f;  // m == -inf: expf(-inf) = 0
      m = v;
    } else if (v != -INFINITY) {
      s += expf(v - m);  // NaN v lands here and makes s NaN (PyTorch gives a NaN row too)
    }
  }
  RW_HD void merge(const OnlineSoftmax& o) {
    const float mm = fmaxf(m, o.m);
    const float a = m == -INFINITY ? 0.0f : s * expf(m - mm);
    const float b = o.m == -INFINITY ? 0.0f : o.s * expf(o.m - mm);
    m = mm;
    s = a + b;
  }
  __device__ OnlineSoftmax shfl_xor(int lane_mask) const {
    OnlineSoftmax o;
    o.m = __shfl_xor_sync(0xffffffffu, m, lane_mask);
    o.s = __shfl_xor_sync(0xffffffffu, s, lane_mask);
    return o;
  }
  RW_HD void finalize(int, float) {}
  RW_HD float normalize(float v) const { return expf(v - m) / s; }
  RW_HD float row_value() const { return isinf(m) ? m : m + logf(s); }
};

struct LogSumExp : OnlineSoftmax {
  static constexpr bool kRowOutput = true;
  __device__ LogSumExp shfl_xor(int lane_mask) const {
    LogSumExp o;
    o.m = __shfl_xor_sync(0xffffffffu, m, lane_mask);
    o.s = __shfl_xor_sync(0xffffffffu, s, lane_mask);
    return o;
  }
};

struct Welford {
  static constexpr bool kRowOutput = false;
  float n, mean, m2;  // n as float: exact up to 2^24 columns
  RW_HD void init() { n = 0.0f; mean = 0.0f; m2 = 0.0f; }
  RW_HD void add(float v) {
    n += 1.0f;
    const float d = v - mean;
    mean += d / n;
    m2 += d * (v - mean);
  }
  RW_HD void merge(const Welford& o) {
    const float nn = n + o.n;
    if (nn == 0.0f) return;
    const float d = o.mean - mean;
    const float fb = o.n / nn;
    mean = mean + d * fb;
    m2 = m2 + o.m2 + d * d * n * fb;
    n = nn;
  }
  __device__ Welford shfl_xor(int lane_mask) const {
    Welford o;
    o.n = __shfl_xor_sync(0xffffffffu, n, lane_mask);
    o.mean = __shfl_xor_sync(0xffffffffu, mean, lane_mask);
    o.m2 = __shfl_xor_sync(0xffffffffu, m2, lane_mask);
    return o;
  }
  // After finalize: mean stays, m2 holds rstd = 1/sqrt(M2/cols + eps) (biased variance, eps inside).
  RW_HD void finalize(int cols, float eps) { m2 = 1.0f / sqrtf(m2 / (float)cols + eps); }
  RW_HD float normalize(float v) const { return (v - mean) * m2; }
  RW_HD float row_value() const { return mean; }
};

struct SumSq {
  static constexpr bool kRowOutput = false;
  float ss;
  RW_HD void init() { ss = 0.0f; }
  RW_HD void add(float v) { ss = fmaf(v, v, ss); }
  RW_HD void merge(const SumSq& o) { ss += o.ss; }
  __device__ SumSq shfl_xor(int lane_mask) const {
    SumSq o;
    o.ss = __shfl_xor_sync(0xffffffffu, ss, lane_mask);
    return o;
  }
  // After finalize: ss holds rstd = 1/sqrt(mean(v^2) + eps).
  RW_HD void finalize(int cols, float eps) { ss = 1.0f / sqrtf(ss / (float)cols + eps); }
  RW_HD float normalize(float v) const { return v * ss; }
  RW_HD float row_value() const { return ss; }
};

// ------------------------------------------------------------------------------------------------
// Prologues: float operator()(float x, int col) const
// ------------------------------------------------------------------------------------------------
struct PreIdentity {
  RW_HD float operator()(float x, int) const { return x; }
};
struct PreScale {  // x * scale (a temperature T is passed as scale = 1/T)
  float scale;
  RW_HD float operator()(float x, int) const { return x * scale; }
};

// ------------------------------------------------------------------------------------------------
// Epilogues: float operator()(float normalized, float v, int col) const  (col = -1 for per-row output)
// ------------------------------------------------------------------------------------------------
struct PostIdentity {
  RW_HD float operator()(float y, float, int) const { return y; }
};
struct PostRelu {
  RW_HD float operator()(float y, float, int) const { return relu(y); }
};
struct PostAffineRelu {  // LayerNorm's weight and bias, then relu
  const float* __restrict__ w;
  const float* __restrict__ b;
  RW_HD float operator()(float y, float, int c) const { return relu(y * load_param(w + c) + load_param(b + c)); }
};
struct PostGainResidual {  // v + normalized * w  (rmsnorm_residual: x + x * rms * weight)
  const float* __restrict__ w;
  RW_HD float operator()(float y, float v, int c) const { return v + y * load_param(w + c); }
};

template <class Stats_, class Pre_, class Post_>
struct RowOp {
  using Stats = Stats_;
  Pre_ pre;
  Post_ post;
  float eps;
};

// ------------------------------------------------------------------------------------------------
// Reductions
// ------------------------------------------------------------------------------------------------
template <class Stats>
__device__ __forceinline__ Stats warp_reduce(Stats st) {
#pragma unroll
  for (int mask = 16; mask > 0; mask >>= 1) st.merge(st.shfl_xor(mask));
  return st;  // every lane holds the total
}

template <class Stats, int kThreads>
__device__ __forceinline__ Stats block_reduce(Stats st) {
  constexpr int kWarps = kThreads / 32;
  __shared__ Stats partial[kWarps];
  __shared__ Stats total;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  st = warp_reduce(st);
  if (lane == 0) partial[warp] = st;
  __syncthreads();
  if (warp == 0) {
    Stats s;
    if (lane < kWarps) {
      s = partial[lane];
    } else {
      s.init();
    }
    s = warp_reduce(s);
    if (lane == 0) total = s;
  }
  __syncthreads();
  return total;
}

template <class Stats, int kThreads, bool kBlock>
__device__ __forceinline__ Stats reduce(Stats st) {
  if constexpr (kBlock) {
    return block_reduce<Stats, kThreads>(st);
  } else {
    return warp_reduce(st);
  }
}

// ------------------------------------------------------------------------------------------------
// One row, cached in registers: thread t of kThreads holds up to NPT values.
// ------------------------------------------------------------------------------------------------
template <class Op, int kThreads, int NPT, bool kVec, bool kBlock>
__device__ __forceinline__ void row_cached(const Op& op, const float* __restrict__ x, float* __restrict__ y,
                                           int row, int cols, int t) {
  using Stats = typename Op::Stats;
  const float* xr = x + (size_t)row * cols;
  float v[NPT];
  Stats st;
  st.init();
  if constexpr (kVec) {
#pragma unroll
    for (int k = 0; k < NPT / 4; ++k) {
      const int c = 4 * (t + k * kThreads);
      if (c < cols) {
        const float4 q = __ldg(reinterpret_cast<const float4*>(xr + c));
        v[4 * k + 0] = op.pre(q.x, c + 0);
        v[4 * k + 1] = op.pre(q.y, c + 1);
        v[4 * k + 2] = op.pre(q.z, c + 2);
        v[4 * k + 3] = op.pre(q.w, c + 3);
#pragma unroll
        for (int j = 0; j < 4; ++j) st.add(v[4 * k + j]);
      }
    }
  } else {
#pragma unroll
    for (int k = 0; k < NPT; ++k) {
      const int c = t + k * kThreads;
      if (c < cols) {
        v[k] = op.pre(__ldg(xr + c), c);
        st.add(v[k]);
      }
    }
  }
  st = reduce<Stats, kThreads, kBlock>(st);
  st.finalize(cols, op.eps);
  if constexpr (Stats::kRowOutput) {
    if (t == 0) y[row] = op.post(st.row_value(), 0.0f, -1);
    return;
  } else {
    float* yr = y + (size_t)row * cols;
    if constexpr (kVec) {
#pragma unroll
      for (int k = 0; k < NPT / 4; ++k) {
        const int c = 4 * (t + k * kThreads);
        if (c < cols) {
          float4 q;
          q.x = op.post(st.normalize(v[4 * k + 0]), v[4 * k + 0], c + 0);
          q.y = op.post(st.normalize(v[4 * k + 1]), v[4 * k + 1], c + 1);
          q.z = op.post(st.normalize(v[4 * k + 2]), v[4 * k + 2], c + 2);
          q.w = op.post(st.normalize(v[4 * k + 3]), v[4 * k + 3], c + 3);
          *reinterpret_cast<float4*>(yr + c) = q;
        }
      }
    } else {
#pragma unroll
      for (int k = 0; k < NPT; ++k) {
        const int c = t + k * kThreads;
        if (c < cols) yr[c] = op.post(st.normalize(v[k]), v[k], c);
      }
    }
  }
}

// One row of any length, two reads of x (stats, then outputs).
template <class Op, int kThreads, bool kVec>
__device__ __forceinline__ void row_two_pass(const Op& op, const float* __restrict__ x, float* __restrict__ y,
                                             int row, int cols, int t) {
  using Stats = typename Op::Stats;
  const float* xr = x + (size_t)row * cols;
  Stats st;
  st.init();
  if constexpr (kVec) {
    for (int c = 4 * t; c < cols; c += 4 * kThreads) {
      const float4 q = __ldg(reinterpret_cast<const float4*>(xr + c));
      st.add(op.pre(q.x, c + 0));
      st.add(op.pre(q.y, c + 1));
      st.add(op.pre(q.z, c + 2));
      st.add(op.pre(q.w, c + 3));
    }
  } else {
    for (int c = t; c < cols; c += kThreads) st.add(op.pre(__ldg(xr + c), c));
  }
  st = block_reduce<Stats, kThreads>(st);
  st.finalize(cols, op.eps);
  if constexpr (Stats::kRowOutput) {
    if (t == 0) y[row] = op.post(st.row_value(), 0.0f, -1);
    return;
  } else {
    float* yr = y + (size_t)row * cols;
    if constexpr (kVec) {
      for (int c = 4 * t; c < cols; c += 4 * kThreads) {
        const float4 q = __ldg(reinterpret_cast<const float4*>(xr + c));
        float4 o;
        float a = op.pre(q.x, c + 0);
        o.x = op.post(st.normalize(a), a, c + 0);
        a = op.pre(q.y, c + 1);
        o.y = op.post(st.normalize(a), a, c + 1);
        a = op.pre(q.z, c + 2);
        o.z = op.post(st.normalize(a), a, c + 2);
        a = op.pre(q.w, c + 3);
        o.w = op.post(st.normalize(a), a, c + 3);
        *reinterpret_cast<float4*>(yr + c) = o;
      }
    } else {
      for (int c = t; c < cols; c += kThreads) {
        const float a = op.pre(__ldg(xr + c), c);
        yr[c] = op.post(st.normalize(a), a, c);
      }
    }
  }
}

// ------------------------------------------------------------------------------------------------
// Kernels
// ------------------------------------------------------------------------------------------------
template <class Op, int NPT, bool kVec>
__global__ void __launch_bounds__(32 * kWarpRowsPerBlock)
    row_warp_kernel(Op op, const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
  const int row = blockIdx.x * kWarpRowsPerBlock + (threadIdx.x >> 5);
  if (row >= rows) return;  // the whole warp leaves together, so the shuffles stay full-mask
  row_cached<Op, 32, NPT, kVec, false>(op, x, y, row, cols, threadIdx.x & 31);
}

template <class Op, int NPT, bool kVec>
__global__ void __launch_bounds__(kBlockThreads)
    row_block_kernel(Op op, const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
  row_cached<Op, kBlockThreads, NPT, kVec, true>(op, x, y, blockIdx.x, cols, threadIdx.x);
}

template <class Op, bool kVec>
__global__ void __launch_bounds__(kBlockThreads)
    row_two_pass_kernel(Op op, const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
  row_two_pass<Op, kBlockThreads, kVec>(op, x, y, blockIdx.x, cols, threadIdx.x);
}

// ------------------------------------------------------------------------------------------------
// Launch: pick the path and the float4/scalar variant.
// ------------------------------------------------------------------------------------------------
template <class Op, bool kVec>
cudaError_t launch_variant(const Op& op, const float* x, float* y, int rows, int cols, cudaStream_t stream) {
  if (cols <= kWarpMaxCols) {
    const dim3 grid((rows + kWarpRowsPerBlock - 1) / kWarpRowsPerBlock), block(32 * kWarpRowsPerBlock);
    if (cols <= 32 * 8) {
      row_warp_kernel<Op, 8, kVec><<<grid, block, 0, stream>>>(op, x, y, rows, cols);
    } else {
      row_warp_kernel<Op, 32, kVec><<<grid, block, 0, stream>>>(op, x, y, rows, cols);
    }
  } else if (cols <= kBlockThreads * 8) {
    row_block_kernel<Op, 8, kVec><<<rows, kBlockThreads, 0, stream>>>(op, x, y, rows, cols);
  } else if (cols <= kBlockMaxCachedCols) {
    row_block_kernel<Op, 32, kVec><<<rows, kBlockThreads, 0, stream>>>(op, x, y, rows, cols);
  } else {
    row_two_pass_kernel<Op, kVec><<<rows, kBlockThreads, 0, stream>>>(op, x, y, rows, cols);
  }
  return cudaGetLastError();
}

template <class Op>
cudaError_t launch(const Op& op, const float* x, float* y, int rows, int cols, void* stream) {
  if (rows < 0 || cols < 0) return cudaErrorInvalidValue;
  if (Op::Stats::kRowOutput && rows > 0 && cols == 0) return cudaErrorInvalidValue;  // empty logsumexp
  if (rows == 0 || cols == 0) return cudaSuccess;
  const bool aligned = ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y)) & 15u) == 0;
  // The float4 path reads x in float4s; a per-row output y is written one float per row, any alignment.
  const bool vec = cols % 4 == 0 && (Op::Stats::kRowOutput ? (reinterpret_cast<uintptr_t>(x) & 15u) == 0 : aligned);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  return vec ? launch_variant<Op, true>(op, x, y, rows, cols, s) : launch_variant<Op, false>(op, x, y, rows, cols, s);
}

}  // namespace rowwise

// ---------------------------------------------------------------------------------------------------
// C-callable launchers. x, y: [rows, cols] row-major contiguous fp32 (logsumexp: y is [rows]); stream is
// a cudaStream_t (NULL = legacy default stream). Each returns the cudaError_t of the launch (0 = success;
// rows == 0 or cols == 0 launch nothing; negative sizes give cudaErrorInvalidValue).
// ---------------------------------------------------------------------------------------------------

// y = softmax(x * prescale, dim=-1)   (temperature T: prescale = 1/T)
extern "C" int row_softmax(const float* x, float* y, int rows, int cols, float prescale, void* stream) {
  using Op = rowwise::RowOp<rowwise::OnlineSoftmax, rowwise::PreScale, rowwise::PostIdentity>;
  const Op op{{prescale}, {}, 0.0f};
  return static_cast<int>(rowwise::launch(op, x, y, rows, cols, stream));
}

// y[r] = relu(logsumexp(x[r, :]))     (y has rows elements; cols >= 1)
extern "C" int row_logsumexp_relu(const float* x, float* y, int rows, int cols, void* stream) {
  using Op = rowwise::RowOp<rowwise::LogSumExp, rowwise::PreIdentity, rowwise::PostRelu>;
  const Op op{{}, {}, 0.0f};
  return static_cast<int>(rowwise::launch(op, x, y, rows, cols, stream));
}

// y = relu(layer_norm(x, [cols], w, b, eps))   (biased variance, eps inside the rsqrt)
extern "C" int row_layernorm_relu(const float* x, const float* w, const float* b, float* y, int rows, int cols,
                                  float eps, void* stream) {
  using Op = rowwise::RowOp<rowwise::Welford, rowwise::PreIdentity, rowwise::PostAffineRelu>;
  const Op op{{}, {w, b}, eps};
  return static_cast<int>(rowwise::launch(op, x, y, rows, cols, stream));
}

// y = x + x * rsqrt(mean(x^2, dim=-1) + eps) * w   (the dev model rmsnorm_residual)
extern "C" int row_rmsnorm_residual(const float* x, const float* w, float* y, int rows, int cols, float eps,
                                    void* stream) {
  using Op = rowwise::RowOp<rowwise::SumSq, rowwise::PreIdentity, rowwise::PostGainResidual>;
  const Op op{{}, {w}, eps};
  return static_cast<int>(rowwise::launch(op, x, y, rows, cols, stream));
}
