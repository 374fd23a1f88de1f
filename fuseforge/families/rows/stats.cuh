
// Row statistics: per-thread accumulation (add), an associative merge across threads (merge, by warp
// shuffles and shared memory), then finalize. Numerics as dev/kernels/rowwise.cu (verified on an H100).
FF_HD float ff_ldg(const float* p) {  // read-only load: the read-only data cache on the device
#ifdef __CUDA_ARCH__
    return __ldg(p);
#else
    return *p;
#endif
}

// softmax / log_softmax / logsumexp: running max m and s = sum exp(v - m); merging (m1,s1),(m2,s2) gives
// m = max(m1,m2), s = s1*exp(m1-m) + s2*exp(m2-m) (a side whose m is -inf contributes 0).
struct FFRowSoftmax {
    float m, s;
    FF_HD void init() { m = -INFINITY; s = 0.0f; }
    FF_HD void add(float v) {
        if (v > m) {
            s = s * expf(m - v) + 1.0f;  // m == -inf: expf(-inf) = 0
            m = v;
        } else if (v != -INFINITY) {
            s += expf(v - m);  // NaN v lands here and makes s NaN (PyTorch gives a NaN row too)
        }
    }
    FF_HD void merge(const FFRowSoftmax& o) {
        const float mm = fmaxf(m, o.m);
        const float a = m == -INFINITY ? 0.0f : s * expf(m - mm);
        const float b = o.m == -INFINITY ? 0.0f : o.s * expf(o.m - mm);
        m = mm;
        s = a + b;
    }
    __device__ FFRowSoftmax shfl_xor(int lane_mask) const {
        FFRowSoftmax o;
        o.m = __shfl_xor_sync(0xffffffffu, m, lane_mask);
        o.s = __shfl_xor_sync(0xffffffffu, s, lane_mask);
        return o;
    }
    FF_HD void finalize(int, float) {}
    FF_HD float logsumexp() const { return isinf(m) ? m : m + logf(s); }
};

#include "welford.cuh"
// layer_norm, var, std: Welford per element, Chan's merge (welford.cuh), of the values less a pivot: the first value
// each thread takes (0 if not finite). Where a row's values lie far from zero next to their spread (the exponential of
// a nearly constant row), the updates then round at the spread's scale, not the values'; a merge moves the other side's
// mean to this side's pivot first (the pivots' difference is exact where they are close). finalize gives the mean as
// hi + lo (mean, lo: two floats, exact) and rstd = 1/sqrt(M2/cols + eps) (biased variance, eps inside the root, as
// PyTorch).
struct FFRowWelford {
    float n, mean, m2, rstd;  // n as float: exact up to 2^24 columns; mean: of the values less the pivot until finalize
    float pivot, lo;
    FF_HD void init() { n = 0.0f; mean = 0.0f; m2 = 0.0f; rstd = 0.0f; pivot = 0.0f; lo = 0.0f; }
    FF_HD void add(float v) {
        if (n == 0.0f) pivot = isfinite(v) ? v : 0.0f;
        ff_welford_add(*this, v - pivot);
    }
    FF_HD void merge(const FFRowWelford& o) {
        if (o.n == 0.0f) return;
        if (n == 0.0f) {
            *this = o;
            return;
        }
        FFRowWelford q = o;
        q.mean = (o.pivot - pivot) + o.mean;
        ff_welford_merge(*this, q);
    }
    __device__ FFRowWelford shfl_xor(int lane_mask) const {
        FFRowWelford o;
        ff_welford_shfl_xor(o, *this, lane_mask);
        o.pivot = __shfl_xor_sync(0xffffffffu, pivot, lane_mask);
        o.rstd = 0.0f;
        o.lo = 0.0f;
        return o;
    }
    FF_HD void finalize(int cols, float eps) {
        float hi;
        ff_two_sum(pivot, mean, hi, lo);
        mean = hi;
        rstd = 1.0f / sqrtf(m2 / (float)cols + eps);
    }
};

// sum / mean: fp32 sum with Neumaier's compensation, per thread then tree-merged. Each add keeps the low-order
// bits it rounds away in c, so the error stays within a few ulps of the sum whatever the row's length (a plain
// running sum over a thread's share of a 64K-value row drifts to ~1e-6 of it, several times eager's own sum on
// near-constant rows). Infinities and NaN add as in a plain sum (the compensation skips non-finite sums).
struct FFRowSum {
    float sum, c;
    FF_HD void init() { sum = 0.0f; c = 0.0f; }
    FF_HD void add(float v) {
        const float t = sum + v;
        if (isfinite(t)) c += fabsf(sum) >= fabsf(v) ? (sum - t) + v : (v - t) + sum;
        sum = t;
    }
    FF_HD void merge(const FFRowSum& o) {
        add(o.sum);
        c += o.c;
    }
    __device__ FFRowSum shfl_xor(int lane_mask) const {
        FFRowSum o;
        o.sum = __shfl_xor_sync(0xffffffffu, sum, lane_mask);
        o.c = __shfl_xor_sync(0xffffffffu, c, lane_mask);
        return o;
    }
    FF_HD void finalize(int, float) {
        if (isfinite(sum)) sum += c;
        c = 0.0f;
    }
};

// The 2-norm's square and the 1-norm: the same compensated sum, of v * v or of |v| (merges add the sums as they are).
template <class Term>
struct FFRowSumOf : FFRowSum {
    FF_HD void add(float v) { FFRowSum::add(Term::of(v)); }
    FF_HD void merge(const FFRowSumOf& o) { FFRowSum::merge(o); }
    __device__ FFRowSumOf shfl_xor(int lane_mask) const {
        FFRowSumOf o;
        static_cast<FFRowSum&>(o) = FFRowSum::shfl_xor(lane_mask);
        return o;
    }
};
struct FFSquare { FF_HD static float of(float v) { return v * v; } };
struct FFAbsolute { FF_HD static float of(float v) { return fabsf(v); } };
using FFRowSumSquares = FFRowSumOf<FFSquare>;
using FFRowSumAbs = FFRowSumOf<FFAbsolute>;

// amax / amin: NaN propagates, like torch.amax.
struct FFRowMax {
    float m;
    FF_HD void init() { m = -INFINITY; }
    FF_HD void add(float v) { m = ff_maximum(m, v); }
    FF_HD void merge(const FFRowMax& o) { m = ff_maximum(m, o.m); }
    __device__ FFRowMax shfl_xor(int lane_mask) const {
        FFRowMax o;
        o.m = __shfl_xor_sync(0xffffffffu, m, lane_mask);
        return o;
    }
    FF_HD void finalize(int, float) {}
};

struct FFRowMin {
    float m;
    FF_HD void init() { m = INFINITY; }
    FF_HD void add(float v) { m = ff_minimum(m, v); }
    FF_HD void merge(const FFRowMin& o) { m = ff_minimum(m, o.m); }
    __device__ FFRowMin shfl_xor(int lane_mask) const {
        FFRowMin o;
        o.m = __shfl_xor_sync(0xffffffffu, m, lane_mask);
        return o;
    }
    FF_HD void finalize(int, float) {}
};
