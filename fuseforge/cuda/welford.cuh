// Welford statistics of fp32 values: count n, mean, and M2 (the sum of squared deviations from the mean), the
// one implementation for the families that take a mean and a variance (rows: layer_norm; channel_norms: batch
// and group norm). Functions of any statistics struct S with float members n, mean and m2, so each family
// keeps its own struct (its other members, loads and stores) around the same arithmetic. Uses FF_HD
// (prelude.cuh). A family's source that includes it gets its text pasted there (cuda_sources.paste_include);
// a generated source with two such families holds it twice, and the guard keeps the second copy out.
#ifndef FF_WELFORD_CUH
#define FF_WELFORD_CUH

// Welford's update with one value v (n as float: exact up to 2^24 values).
template <class S>
FF_HD void ff_welford_add(S& s, float v) {
    s.n += 1.0f;
    const float d = v - s.mean;
    s.mean += d / s.n;
    s.m2 += d * (v - s.mean);
}

// Chan's merge of o into s: with d = o.mean - s.mean and n = s.n + o.n, mean = s.mean + d * o.n / n and
// M2 = s.M2 + o.M2 + d^2 * s.n * o.n / n (two empty sides stay empty).
template <class S>
FF_HD void ff_welford_merge(S& s, const S& o) {
    const float nn = s.n + o.n;
    if (nn == 0.0f) return;
    const float d = o.mean - s.mean;
    const float fb = o.n / nn;
    s.mean = s.mean + d * fb;
    s.m2 = s.m2 + o.m2 + d * d * s.n * fb;
    s.n = nn;
}

// hi + lo = a + b exactly, hi the rounded sum (Knuth's two-sum): a mean kept as its pivot plus the mean of the values
// less the pivot, so that (v - hi) - lo is v - mean rounded once where v lies near the mean.
FF_HD void ff_two_sum(float a, float b, float& hi, float& lo) {
    hi = a + b;
    const float a_part = hi - b;
    lo = (a - a_part) + (b - (hi - a_part));
}

// n, mean and M2 of lane (this lane ^ lane_mask) of the warp into o; o's other members are left as they are.
template <class S>
__device__ __forceinline__ void ff_welford_shfl_xor(S& o, const S& s, int lane_mask) {
    o.n = __shfl_xor_sync(0xffffffffu, s.n, lane_mask);
    o.mean = __shfl_xor_sync(0xffffffffu, s.mean, lane_mask);
    o.m2 = __shfl_xor_sync(0xffffffffu, s.m2, lane_mask);
}

#endif  // FF_WELFORD_CUH
