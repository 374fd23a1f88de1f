// conv_rs.cuh -- lab: the direct convolution of few input channels on Hopper tensor cores, 3xTF32, with wgmma's A
// operand from registers (RS). Needs igemm_ptx.cuh (wgmma_rs_n64, desc_sw32, the fences) before it. sm_90a.
//
// The question it answers: the FFMA direct kernel (families/conv/direct.cuh) is issue-bound on 8-channel 3x3
// convolutions (2.25 warp instructions an output for the products alone); mma.sync in 3xTF32 was at parity with it,
// and the implicit-GEMM kernel's 8-channel chunks (TMA boxes reloaded per tap from L2) slower. Here the input tile
// with its halo is in shared memory once (as direct.cuh keeps it: channel planes, zero-filled padding, the next
// tile's copy in flight), each thread loads its A fragment of a tap from the plane at the tap's offset (any
// offset: no descriptor), splits it into TF32 big and small parts in registers, and one warpgroup issues the three
// products of each tap as wgmma m64n64k8 (A registers, B the block's re-laid weights in shared memory, 32-byte
// swizzled rows). A thread's work an output drops ~10x; the tensor cores take the products.
//
// Layouts: x [N, C, H, W], w [K, C, KH, KW], y [N, K, OH, OW], fp32, contiguous; stride 1, dilation 1, any padding.
// Tile: 4 output rows x 32 columns of one image (128 pixels: two m64 halves, warp q of half m holding pixels
// 64 m + 16 q .. + 15), 64 output channels (blockIdx.y: a group of 64). Summation order of an output: per kernel row,
// a fresh partial over its taps (each tap: small x big, big x small, big x big, k8 over 8 input channels), added in
// fp32 to the running sum; the tensor cores' own accumulation rounds toward zero, so the partials stay short.
#include <algorithm>

namespace ff_conv_rs {

struct Geometry {
  int n, c, h, w;     // input
  int k, oh, ow;      // output channels and extents
  int ph, pw;         // padding
};

template <int C, int KH, int KW>
struct Cfg {
  static constexpr int kCp = (C + 7) / 8 * 8;  // input channels in k8 steps (the tail's planes stay zero)
  static constexpr int kSteps = kCp / 8;
  static constexpr int kTileH = 4, kTileW = 32, kThreads = 128, kBN = 64;
  static constexpr int kThIn = kTileH + KH - 1, kTwIn = kTileW + KW - 1;
  // a plane is 8 floats past a multiple of 32: the lanes of a fragment load (8 columns x 4 channels) hit 32 banks
  static constexpr int kPlane = kThIn * kTwIn + ((8 - kThIn * kTwIn) % 32 + 32) % 32;
  static constexpr int kTileFloats = kCp * kPlane;
  static constexpr int kWTileBytes = kBN * 32;  // one tap and k8 step: 64 output channels x 8 inputs
  static constexpr int kWBytes = KH * KW * kSteps * 2 * kWTileBytes;  // big and small parts
  static constexpr size_t kSmem = kWBytes + 2 * static_cast<size_t>(kTileFloats) * 4 + 1024;
};

__device__ __forceinline__ uint32_t tf32_big(float v) { return (__float_as_uint(v) + 0x1000u) & 0xFFFFE000u; }

template <int C, int KH, int KW, class Epi, bool kPipelined = false, bool kFresh = true>
__global__ void __launch_bounds__(128, kPipelined && kFresh ? 2 : 3)
conv_rs_kernel(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, const Geometry g,
               const Epi epi) {
  using ff_conv_igemm::desc_sw32;
  using ff_conv_igemm::fence_accumulators;
  using ff_conv_igemm::wgmma_commit;
  using ff_conv_igemm::wgmma_fence;
  using ff_conv_igemm::wgmma_rs_n64;
  using ff_conv_igemm::wgmma_wait;
  using Q = Cfg<C, KH, KW>;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  unsigned char* w_s = smem;                                     // [tap][step][big, small][64 rows x 32 bytes]
  float* x_s = reinterpret_cast<float*>(smem + Q::kWBytes);      // 2 x [kCp][kPlane]
  const uint32_t w_addr = ff_conv_igemm::smem_addr(w_s);
  const int tid = threadIdx.x, lane = tid & 31, q = tid >> 5, gq = lane >> 2, tq = lane & 3;
  const int k0 = blockIdx.y * Q::kBN;
  const int tiles_w = (g.ow + Q::kTileW - 1) / Q::kTileW, tiles_h = (g.oh + Q::kTileH - 1) / Q::kTileH;
  const int tiles = g.n * tiles_h * tiles_w;

  auto load_tile = [&](int t, float* buf) {  // the tile's input with its halo, zero outside the image
    const int tw = t % tiles_w, th = (t / tiles_w) % tiles_h, n = t / tiles_w / tiles_h;
    const int gh0 = th * Q::kTileH - g.ph, gw0 = tw * Q::kTileW - g.pw;
    for (int r = q; r < C * Q::kThIn; r += 4) {
      const int hh = r % Q::kThIn, c = r / Q::kThIn, gh = gh0 + hh;
      const bool row_ok = gh >= 0 && gh < g.h;
      const float* src = x + (static_cast<size_t>(n) * C + c) * g.h * g.w + static_cast<size_t>(row_ok ? gh : 0) * g.w;
      float* dst = buf + c * Q::kPlane + hh * Q::kTwIn;
      for (int ww = lane; ww < Q::kTwIn; ww += 32) {
        const int gw = gw0 + ww;
        const bool ok = row_ok && gw >= 0 && gw < g.w;
        ff_conv_direct::cp_async_4(dst + ww, ok ? src + gw : x, ok);
      }
    }
  };

  int t = blockIdx.x;
  if (t < tiles) load_tile(t, x_s);
  ff_conv_direct::cp_async_commit();
  for (int i = tid; i < 2 * Q::kTileFloats; i += Q::kThreads) {  // the padded channels' planes: zero, for good
    if ((i % Q::kTileFloats) / Q::kPlane >= C) x_s[i] = 0.0f;
  }
  // The weights of this channel group, big and small TF32 parts, each tap and k8 step a [64][8] tile of 32-byte rows
  // in the 32-byte swizzle (16-byte half h of row n at n * 32 + 16 (h ^ ((n >> 2) & 1))).
  for (int i = tid; i < KH * KW * Q::kSteps * Q::kBN * 8; i += Q::kThreads) {
    const int kk = i % 8, n = (i / 8) % Q::kBN, step = (i / 8 / Q::kBN) % Q::kSteps, tap = i / 8 / Q::kBN / Q::kSteps;
    const int c = 8 * step + kk, k = k0 + n, r = tap / KW, s = tap % KW;
    const float v = (k < g.k && c < C) ? w[((static_cast<size_t>(k) * C + c) * KH + r) * KW + s] : 0.0f;
    const uint32_t big = tf32_big(v);
    const float small = v - __uint_as_float(big);
    const uint32_t o = n * 32 + kk * 4, phys = o ^ (((o >> 7) & 1u) << 4);
    unsigned char* tile = w_s + (tap * Q::kSteps + step) * 2 * Q::kWTileBytes;
    *reinterpret_cast<uint32_t*>(tile + phys) = big;
    *reinterpret_cast<uint32_t*>(tile + Q::kWTileBytes + phys) = tf32_big(small);
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // the weights, written by threads, read by wgmma

  for (int it = 0; t < tiles; ++it, t += gridDim.x) {
    const float* cur = x_s + (it & 1) * Q::kTileFloats;
    if (t + static_cast<int>(gridDim.x) < tiles) load_tile(t + gridDim.x, x_s + ((it + 1) & 1) * Q::kTileFloats);
    ff_conv_direct::cp_async_commit();
    ff_conv_direct::cp_async_wait_one();
    __syncthreads();

    float acc[2][32];
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int i = 0; i < 32; ++i) acc[m][i] = 0.0f;
    if constexpr (kPipelined) {
      // Groups g = (half m, kernel row r) in turn, two sets of fragment registers: group g + 1's loads and splits run
      // while group g's wgmmas do (wait<1> leaves one group in flight; the set a load redefines belongs to group
      // g - 1, which that wait has finished). kFresh: group g's products go into partial g % 2, added into the half's
      // sum once its group is done; else straight into the half's sum.
      constexpr int kGroups = 2 * KH;
      uint32_t big[2][KW][Q::kSteps][4], small[2][KW][Q::kSteps][4];
      float part[2][32];
      auto load = [&](int g, int set) {
        const int m = g / KH, r = g % KH, p0 = 64 * m + 16 * q + gq;
        const float* base = cur + tq * Q::kPlane + (p0 / Q::kTileW + r) * Q::kTwIn + p0 % Q::kTileW;
#pragma unroll
        for (int s = 0; s < KW; ++s)
#pragma unroll
          for (int j = 0; j < Q::kSteps; ++j) {
            const float* at = base + (8 * j) * Q::kPlane + s;
            const float v[4] = {at[0], at[8], at[4 * Q::kPlane], at[4 * Q::kPlane + 8]};
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              big[set][s][j][e] = tf32_big(v[e]);
              small[set][s][j][e] = __float_as_uint(v[e] - __uint_as_float(big[set][s][j][e])) + 0x1000u;
            }
          }
      };
      auto issue = [&](int r, int set, float (&d)[32]) {
#pragma unroll
        for (int s = 0; s < KW; ++s)
#pragma unroll
          for (int j = 0; j < Q::kSteps; ++j) {
            const uint32_t tile = w_addr + ((r * KW + s) * Q::kSteps + j) * 2 * Q::kWTileBytes;
            wgmma_rs_n64(d, small[set][s][j], desc_sw32(tile));
            wgmma_rs_n64(d, big[set][s][j], desc_sw32(tile + Q::kWTileBytes));
            wgmma_rs_n64(d, big[set][s][j], desc_sw32(tile));
          }
      };
      load(0, 0);
#pragma unroll
      for (int g = 0; g < kGroups; ++g) {
        const int set = g & 1;
        if constexpr (kFresh) {
#pragma unroll
          for (int i = 0; i < 32; ++i) part[set][i] = 0.0f;
        }
        wgmma_fence();
        if constexpr (kFresh) issue(g % KH, set, part[set]);
        else issue(g % KH, set, acc[g / KH]);
        wgmma_commit();
        wgmma_wait<1>();
        if constexpr (kFresh) {
          if (g > 0) {
            fence_accumulators(part[set ^ 1]);
#pragma unroll
            for (int i = 0; i < 32; ++i) acc[(g - 1) / KH][i] += part[set ^ 1][i];
          }
        }
        if (g + 1 < kGroups) load(g + 1, set ^ 1);
      }
      wgmma_wait<0>();
      if constexpr (kFresh) {
        fence_accumulators(part[(kGroups - 1) & 1]);
#pragma unroll
        for (int i = 0; i < 32; ++i) acc[1][i] += part[(kGroups - 1) & 1][i];
      }
#pragma unroll
      for (int m = 0; m < 2; ++m) fence_accumulators(acc[m]);
    } else {
#pragma unroll
      for (int m = 0; m < 2; ++m) {
        const int p0 = 64 * m + 16 * q + gq;  // the lane's pixels p0 and p0 + 8 (one tile row)
        const float* base = cur + tq * Q::kPlane + (p0 / Q::kTileW) * Q::kTwIn + p0 % Q::kTileW;
#pragma unroll 1
        for (int r = 0; r < KH; ++r) {
          uint32_t big[KW][Q::kSteps][4], small[KW][Q::kSteps][4];
#pragma unroll
          for (int s = 0; s < KW; ++s)
#pragma unroll
            for (int j = 0; j < Q::kSteps; ++j) {
              const float* at = base + (8 * j) * Q::kPlane + r * Q::kTwIn + s;
              const float v[4] = {at[0], at[8], at[4 * Q::kPlane], at[4 * Q::kPlane + 8]};
#pragma unroll
              for (int e = 0; e < 4; ++e) {
                big[s][j][e] = tf32_big(v[e]);
                small[s][j][e] = __float_as_uint(v[e] - __uint_as_float(big[s][j][e])) + 0x1000u;
              }
            }
          float part[32];
#pragma unroll
          for (int i = 0; i < 32; ++i) part[i] = 0.0f;
          wgmma_fence();
#pragma unroll
          for (int s = 0; s < KW; ++s)
#pragma unroll
            for (int j = 0; j < Q::kSteps; ++j) {
              const uint32_t tile = w_addr + ((r * KW + s) * Q::kSteps + j) * 2 * Q::kWTileBytes;
              wgmma_rs_n64(part, small[s][j], desc_sw32(tile));
              wgmma_rs_n64(part, big[s][j], desc_sw32(tile + Q::kWTileBytes));
              wgmma_rs_n64(part, big[s][j], desc_sw32(tile));
            }
          wgmma_commit();
          wgmma_wait<0>();
          fence_accumulators(part);
#pragma unroll
          for (int i = 0; i < 32; ++i) acc[m][i] += part[i];
        }
      }
    }

    // Epilogue: acc[m][4 j + 2 half + e] is pixel 64 m + 16 q + 8 half + gq, channel k0 + 8 j + 2 tq + e.
    const int tw = t % tiles_w, th = (t / tiles_w) % tiles_h, n = t / tiles_w / tiles_h;
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int p = 64 * m + 16 * q + 8 * half + gq;
        const int oh = th * Q::kTileH + p / Q::kTileW, ow = tw * Q::kTileW + p % Q::kTileW;
        if (oh >= g.oh || ow >= g.ow) continue;
        const int64_t pix = static_cast<int64_t>(oh) * g.ow + ow, plane = static_cast<int64_t>(g.oh) * g.ow;
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int k = k0 + 8 * j + 2 * tq + e;
            if (k < g.k) {
              const int64_t at = (static_cast<int64_t>(n) * g.k + k) * plane + pix;
              y[at] = epi(acc[m][4 * j + 2 * half + e], k, at);
            }
          }
      }
    __syncthreads();  // every warp is done with `cur` before the next iteration's copy overwrites it
  }
}

// Blocks an SM of the instance (the launch's grid is this many an SM, per channel group).
template <int C, int KH, int KW, class Epi, bool kPipelined = false, bool kFresh = true>
int blocks_per_sm() {
  int per_sm = 0;
  auto kernel = conv_rs_kernel<C, KH, KW, Epi, kPipelined, kFresh>;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(Cfg<C, KH, KW>::kSmem)) != cudaSuccess)
    return -static_cast<int>(cudaGetLastError());
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, Cfg<C, KH, KW>::kThreads, Cfg<C, KH, KW>::kSmem);
  return per_sm;
}

template <int C, int KH, int KW, class Epi, bool kPipelined = false, bool kFresh = true>
int launch(const float* x, const float* w, float* y, const Geometry& g, const Epi& epi, cudaStream_t stream) {
  using Q = Cfg<C, KH, KW>;
  if (g.c != C) return 1001;
  auto kernel = conv_rs_kernel<C, KH, KW, Epi, kPipelined, kFresh>;
  static bool configured = false;
  if (!configured) {
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(Q::kSmem)) !=
        cudaSuccess)
      return static_cast<int>(cudaGetLastError());
    configured = true;
  }
  int device = 0, sms = 0, per_sm = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, Q::kThreads, Q::kSmem);
  const int tiles = g.n * ((g.oh + Q::kTileH - 1) / Q::kTileH) * ((g.ow + Q::kTileW - 1) / Q::kTileW);
  const int groups = (g.k + Q::kBN - 1) / Q::kBN;
  const int grid_x = std::max(1, std::min(tiles, sms * std::max(1, per_sm) / groups));
  kernel<<<dim3(grid_x, groups), Q::kThreads, Q::kSmem, stream>>>(x, w, y, g, epi);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace ff_conv_rs
