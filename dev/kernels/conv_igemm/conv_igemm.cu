// conv_igemm.cu -- the lab of the conv family's TF32 implicit-GEMM kernel: the kernel itself is
// fuseforge/families/conv/igemm.cuh (included: its one copy); here are an epilogue of bias + relu, the C
// launchers of the bench's instances, and the variant still in the lab (the halo kernel).

#include "igemm.cuh"

namespace ff_conv_igemm {

// ------------------------------------------------------------------------------------------- epilogues
struct BiasAct {
  const float* bias;  // may be null
  int act;            // 0 none, 1 relu
  __device__ __forceinline__ float operator()(float acc, int k, long long) const {
    float v = bias ? acc + bias[k] : acc;
    return act == 1 ? fmaxf(v, 0.0f) : v;
  }
};

// ------------------------------------------------------------------------------------------- halo kernel
// The input read once per row of taps (3x less input traffic from L2 for a 3-wide window). A tile is 128
// output pixels of one output row (bw = 128, bh = bd = 1). A stage holds, for one (channel block, kd, kh), the
// channels-last input row the tile's kw taps read — a TMA box of rw = 128 + (kw - 1) * dw pixels x 32 channels,
// 128-byte swizzled, padded to whole 1024-byte atoms (rwp rows) — and the kw weight tiles of those taps. The
// consumers take tap kw as the window of 128 rows starting at row kw * dw of the box: they read their A
// fragments with ldmatrix.x4 (the swizzle is of the absolute row, so a window's row r sits at chunk
// c ^ ((r + kw * dw) & 7); the 8 rows of an ldmatrix phase are consecutive, hence in 8 different chunks:
// conflict-free) and issue wgmma with A from registers, one tap per wgmma group (waited for before the next
// tap's fragments are loaded, as in the NCHW path). The input is the prepared channels-last copy (already
// TF32-rounded). Stages: as many as fit ~200 KB, at most 4 (run-time: the stage size depends on the window).
__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

struct HaloShape {
  int rw, rwp;        // box rows (pixels) and rows padded to whole 8-row atoms
  int stage_bytes;    // rwp * 128 + kw * BN * 128
  int stages;
};

template <int kBN, bool kStaged, class Epilogue>
__global__ void __launch_bounds__(kThreads, 1)
    conv_igemm_halo_kernel(float* __restrict__ y, const Geometry g, const HaloShape hs,
                           const __grid_constant__ CUtensorMap xmap, const __grid_constant__ CUtensorMap wmap,
                           Epilogue epi) {
  constexpr int kAcc = kBN / 2;
  constexpr int kBTile = kBN * kBK * 4;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw = smem_addr(smem_raw);
  const uint32_t ring = raw + ((1024u - (raw & 1023u)) & 1023u);
  const uint32_t full_bar = ring + hs.stages * hs.stage_bytes;
  const uint32_t empty_bar = full_bar + 8 * hs.stages;

  const int tid = static_cast<int>(threadIdx.x);
  int t = static_cast<int>(blockIdx.x);
  const int k_tiles = (g.k + kBN - 1) / kBN;
  const int w_tiles = (g.ow + kBM - 1) / kBM;
  const int k0 = (t % k_tiles) * kBN;
  t /= k_tiles;
  const int ow0 = (t % w_tiles) * kBM;
  t /= w_tiles;
  const int oh = t % g.oh;
  t /= g.oh;
  const int od = t % g.od;
  const int img = t / g.od;
  const int cblocks = g.cq / kBK;
  const int rows_of_taps = cblocks * g.kd * g.kh;  // stages per tile

  if (tid == 0) {
    for (int s = 0; s < hs.stages; ++s) {
      mbar_init(full_bar + 8 * s, 1);
      mbar_init(empty_bar + 8 * s, kConsumers / 32);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  if (tid >= kConsumers) {
    if (tid == kConsumers) {
      uint32_t s = 0, phase = 0;
      int cb = 0, khi = 0, kdi = 0;
      for (int it = 0; it < rows_of_taps; ++it) {
        mbar_wait(empty_bar + 8 * s, phase ^ 1u);
        const uint32_t a = ring + s * hs.stage_bytes;
        const uint32_t b = a + hs.rwp * 128;
        mbar_arrive_expect_tx(full_bar + 8 * s, static_cast<uint32_t>(hs.rw * 128 + g.kw * kBTile));
        tma_load_5d(a, &xmap, cb * kBK, ow0 - g.pw, oh + khi * g.dh - g.ph, od + kdi * g.dd - g.pd, img,
                    full_bar + 8 * s);
        for (int kwi = 0; kwi < g.kw; ++kwi) {
          const int tap = (kdi * g.kh + khi) * g.kw + kwi;
          tma_load_2d(b + kwi * kBTile, &wmap, tap * g.cq + cb * kBK, k0, full_bar + 8 * s);
        }
        if (++cb == cblocks) {
          cb = 0;
          if (++khi == g.kh) {
            khi = 0;
            ++kdi;
          }
        }
        if (++s == static_cast<uint32_t>(hs.stages)) {
          s = 0;
          phase ^= 1u;
        }
      }
    }
    return;
  }

  const int cw = tid >> 7;
  const int lane = tid & 31;
  const int q = (tid & 127) >> 5;
  float acc[1][kAcc];  // store_tile's layout: one wgmma row block a warpgroup (tiles of 128 pixels)
#pragma unroll
  for (int i = 0; i < kAcc; ++i) acc[0][i] = 0.0f;
  // ldmatrix rows of this lane: block i = lanes 8i .. 8i + 7 (rows 0-7 / 8-15 of the warp's 16, k 0-3 / 4-7)
  const int a_row = 64 * cw + 16 * q + (lane & 7) + ((lane >> 3) & 1) * 8;
  const int half = lane >> 4;
  uint32_t frag[kBK / 8][4];
  uint32_t s = 0, phase = 0;
#pragma unroll 1
  for (int it = 0; it < rows_of_taps; ++it) {
    mbar_wait(full_bar + 8 * s, phase);
    const uint32_t a = ring + s * hs.stage_bytes;
    const uint32_t b = a + hs.rwp * 128;
#pragma unroll 1
    for (int kwi = 0; kwi < g.kw; ++kwi) {
      const int row = a_row + kwi * g.dw;
      const uint32_t row_addr = a + static_cast<uint32_t>(row * 128);
#pragma unroll
      for (int kk = 0; kk < kBK / 8; ++kk) {
        ldsm_x4(row_addr + ((static_cast<uint32_t>((2 * kk + half) ^ (row & 7))) << 4), frag[kk]);
      }
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kBK / 8; ++kk) Mma<kBN>::run(acc[0], frag[kk], desc_sw128(b + kwi * kBTile + 32 * kk));
      wgmma_commit();
      wgmma_wait<0>();
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(empty_bar + 8 * s);
    if (++s == static_cast<uint32_t>(hs.stages)) {
      s = 0;
      phase ^= 1u;
    }
  }

  Geometry row = g;  // the tile as the shared epilogue sees it: a box of one output row of 128 pixels
  row.bd = 1;
  row.bh = 1;
  row.bw = kBM;
  store_tile<kBN, kStaged, kBM>(y, row, acc, k0, ow0, oh, od, img,
                                reinterpret_cast<float*>(smem_raw + (ring - raw)), tid, epi);
}

// The halo kernel (channels-last input; tiles of 128 pixels of one output row). 1004: a window too wide for one
// box (rw > 256 rows) or a geometry it does not take.
template <int kBN, bool kStaged, class Epilogue>
int launch_halo(const float* x_cl, const float* w_re, float* y, const Geometry& g, Epilogue epi, cudaStream_t stream) {
  Encode encode = encoder();
  if (encode == nullptr) return 1001;
  HaloShape hs;
  hs.rw = kBM + (g.kw - 1) * g.dw;
  hs.rwp = (hs.rw + 7) / 8 * 8;
  hs.stage_bytes = hs.rwp * 128 + g.kw * kBN * kBK * 4;
  hs.stages = 200 * 1024 / hs.stage_bytes;
  if (hs.stages > 4) hs.stages = 4;
  if (hs.rw > 256 || hs.stages < 2 || g.cp % 4 != 0 || g.cq % kBK != 0 || g.cq < g.c) return 1004;
  if (kStaged && kBN * (kBM + 4) * 4 > hs.stages * hs.stage_bytes) return 1004;
  CUtensorMap xmap, wmap;
  const cuuint32_t unit[5] = {1, 1, 1, 1, 1};
  {
    const cuuint64_t dims[5] = {static_cast<cuuint64_t>(g.cp), static_cast<cuuint64_t>(g.w),
                                static_cast<cuuint64_t>(g.h), static_cast<cuuint64_t>(g.d),
                                static_cast<cuuint64_t>(g.n)};
    const cuuint64_t row = static_cast<cuuint64_t>(g.cp) * 4;
    const cuuint64_t strides[4] = {row, row * g.w, row * g.w * g.h, row * g.w * g.h * g.d};
    const cuuint32_t box[5] = {static_cast<cuuint32_t>(kBK), static_cast<cuuint32_t>(hs.rw), 1, 1, 1};
    if (encode(&xmap, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 5, const_cast<float*>(x_cl), dims, strides, box, unit,
               CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS)
      return 1002;
  }
  {
    const int taps = g.kd * g.kh * g.kw;
    const cuuint64_t dims[2] = {static_cast<cuuint64_t>(taps) * g.cq, static_cast<cuuint64_t>(g.k)};
    const cuuint64_t strides[1] = {static_cast<cuuint64_t>(taps) * g.cq * 4};
    const cuuint32_t box[2] = {static_cast<cuuint32_t>(kBK), static_cast<cuuint32_t>(kBN)};
    if (encode(&wmap, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, const_cast<float*>(w_re), dims, strides, box, unit,
               CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS)
      return 1003;
  }
  const int smem = hs.stages * hs.stage_bytes + 1024 + 16 * hs.stages;
  auto kernel = conv_igemm_halo_kernel<kBN, kStaged, Epilogue>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (err != cudaSuccess) return static_cast<int>(err);
  const long long tiles = static_cast<long long>((g.k + kBN - 1) / kBN) * ((g.ow + kBM - 1) / kBM) * g.oh *
                          static_cast<long long>(g.od) * g.n;
  if (tiles <= 0 || tiles > 0x7fffffffLL) return 1004;
  kernel<<<static_cast<unsigned>(tiles), kThreads, smem, stream>>>(y, g, hs, xmap, wmap, epi);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace ff_conv_igemm

// geometry ints, in this order: n c cp cq d h w k od oh ow kd kh kw pd ph pw dd dh dw bd bh bw bwb (24)
static ff_conv_igemm::Geometry geometry_from(const int* v) {
  ff_conv_igemm::Geometry g;
  int* f = &g.n;
  for (int i = 0; i < 24; ++i) f[i] = v[i];
  return g;
}

#define CONV_IGEMM_INSTANCE(NAME, NCHW, BN, STAGES, MINB, STAGED)                                              \
  extern "C" int conv_igemm_##NAME(const float* x, const float* w_re, const float* bias, float* y,             \
                                   const int* geom, int act, void* stream) {                                  \
    return ff_conv_igemm::launch<NCHW, BN, STAGES, MINB, STAGED>(x, w_re, y, geometry_from(geom),                 \
                                                      ff_conv_igemm::BiasAct{bias, act},                          \
                                                      static_cast<cudaStream_t>(stream));                      \
  }

// name                 x NCHW  BN  stages min-blocks/SM  epilogue through shared memory
CONV_IGEMM_INSTANCE(cl_n128_s4_b1, false, 128, 4, 1, false)
CONV_IGEMM_INSTANCE(cl_n64_s4_b2, false, 64, 4, 2, false)
CONV_IGEMM_INSTANCE(nchw_n128_s4_b1, true, 128, 4, 1, false)
CONV_IGEMM_INSTANCE(nchw_n64_s6_b1, true, 64, 6, 1, false)
CONV_IGEMM_INSTANCE(cl_n128_s4_b1_st, false, 128, 4, 1, true)
CONV_IGEMM_INSTANCE(cl_n64_s4_b2_st, false, 64, 4, 2, true)
CONV_IGEMM_INSTANCE(nchw_n128_s4_b1_st, true, 128, 4, 1, true)
CONV_IGEMM_INSTANCE(nchw_n64_s6_b1_st, true, 64, 6, 1, true)
// two blocks an SM with 128 channels (3 stages): one block's epilogue and prologue overlap the other's main loop,
// where Nsight Compute found the one-block instances latency-bound (bench/results/2026-11-27c_h100/ncu17.csv).
// The NCHW path cannot: its A fragments in registers take it past the 112 registers two blocks of 288 threads
// leave each thread (ptxas spills 56 bytes and serialises the wgmmas); that needs setmaxnreg (the producer warp
// giving its registers to the consumers).
CONV_IGEMM_INSTANCE(cl_n128_s3_b2, false, 128, 3, 2, false)


#define CONV_IGEMM_HALO(NAME, BN, STAGED)                                                                      \
  extern "C" int conv_igemm_##NAME(const float* x, const float* w_re, const float* bias, float* y,             \
                                   const int* geom, int act, void* stream) {                                  \
    return ff_conv_igemm::launch_halo<BN, STAGED>(x, w_re, y, geometry_from(geom), ff_conv_igemm::BiasAct{bias, act}, \
                                               static_cast<cudaStream_t>(stream));                             \
  }
// name             BN  epilogue through shared memory (channels-last input; tiles of one output row)
CONV_IGEMM_HALO(halo_n128, 128, false)
CONV_IGEMM_HALO(halo_n128_st, 128, true)
CONV_IGEMM_HALO(halo_n64_st, 64, true)

// Transposed convolutions (the product's launch_transposed): geometry ints as above (the whole window, padding and
// output) then the strides sd sh sw (27); w the model's weight [C, K, window], w_re a scratch of K x taps x cq floats.
#define CONV_IGEMM_TRANSPOSED(NAME, NCHW, BN, STAGES, MINB)                                                      \
  extern "C" int conv_igemm_transposed_##NAME(const float* x, const float* w, float* w_re, const float* bias,    \
                                              float* y, const int* geom, int act, void* stream) {               \
    ff_conv_igemm::Geometry g = geometry_from(geom);                                                          \
    g.sd = geom[24], g.sh = geom[25], g.sw = geom[26];                                                         \
    return ff_conv_igemm::launch_transposed<NCHW, BN, STAGES, MINB, false>(                                     \
        x, w, w_re, y, g, ff_conv_igemm::BiasAct{bias, act}, static_cast<cudaStream_t>(stream));               \
  }
// name              x NCHW  BN  stages min-blocks/SM
CONV_IGEMM_TRANSPOSED(cl_n128, false, 128, 4, 1)
CONV_IGEMM_TRANSPOSED(cl_n64, false, 64, 4, 2)

extern "C" int conv_igemm_prepare_input(const float* x, float* out, int n, int c, int cp, long long spatial,
                                        void* stream) {
  return ff_conv_igemm::prepare_input(x, out, n, c, cp, spatial, static_cast<cudaStream_t>(stream));
}
