
// Pointwise helpers shared by every generated kernel: PyTorch's formulas, or an algebraically equal one where noted
// (mish), in precise fp32.
#define FF_HD __host__ __device__ __forceinline__
FF_HD float ff_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
FF_HD float ff_silu(float x) { return x / (1.0f + expf(-x)); }
FF_HD float ff_relu(float x) { return x < 0.0f ? 0.0f : x; }  // keeps NaN, like torch.relu
FF_HD float ff_clamp(float x, float lo, float hi) { return x != x ? x : fminf(fmaxf(x, lo), hi); }
FF_HD float ff_clamp_min(float x, float lo) { return x != x ? x : fmaxf(x, lo); }
FF_HD float ff_clamp_max(float x, float hi) { return x != x ? x : fminf(x, hi); }
FF_HD float ff_minimum(float a, float b) { return (a != a || b != b) ? a + b : fminf(a, b); }
FF_HD float ff_maximum(float a, float b) { return (a != a || b != b) ? a + b : fmaxf(a, b); }
FF_HD float ff_rsqrt(float x) { return 1.0f / sqrtf(x); }
FF_HD float ff_gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f)); }
FF_HD float ff_gelu_tanh(float x) {
    const float inner = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanhf(inner));
}
FF_HD float ff_softplus(float x, float beta, float threshold) {
    return x * beta > threshold ? x : log1pf(expf(x * beta)) / beta;
}
// mish(x) = x tanh(softplus(x)) with PyTorch's softplus threshold 20 (softplus(x) = x above it, where tanh is 1 in
// float32). Below it, tanh(log1p(e)) = ((1 + e)^2 - 1) / ((1 + e)^2 + 1) = n / (n + 2) with e = exp(x), n = e (e + 2):
// one exp and a division instead of exp, log1p and tanh (within a few float32 ulps of the float64 value; -inf gives
// NaN, as in PyTorch: -inf x 0).
FF_HD float ff_mish(float x) {
    if (x > 20.0f || x != x) return x;
    const float e = expf(x);
    const float n = e * (e + 2.0f);
    return x * (n / (n + 2.0f));
}
FF_HD float ff_hardsigmoid(float x) { return ff_clamp(x + 3.0f, 0.0f, 6.0f) / 6.0f; }
FF_HD float ff_hardswish(float x) { return x * ff_clamp(x + 3.0f, 0.0f, 6.0f) / 6.0f; }
FF_HD float ff_elu(float x, float alpha, float scale, float input_scale) {
    return x > 0.0f ? scale * x : scale * alpha * expm1f(x * input_scale);
}
FF_HD float ff_sign(float x) { return (float)((x > 0.0f) - (x < 0.0f)); }  // NaN -> 0, like torch.sign
// log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|)): no overflow for large |x| (PyTorch's formula)
FF_HD float ff_log_sigmoid(float x) { return fminf(x, 0.0f) - log1pf(expf(-fabsf(x))); }
FF_HD float ff_remainder(float a, float b) {  // Python's a % b: the sign of b (PyTorch's formula)
    float mod = fmodf(a, b);
    if (mod != 0.0f && (b < 0.0f) != (mod < 0.0f)) mod += b;
    return mod;
}
FF_HD float ff_lerp(float a, float b, float w) {  // exact at both ends (PyTorch's formula)
    return fabsf(w) < 0.5f ? a + w * (b - a) : b - (b - a) * (1.0f - w);
}
FF_HD float ff_xlogy(float x, float y) {  // 0 where x == 0, NaN where y is NaN
    if (y != y) return y;
    return x == 0.0f ? 0.0f : x * logf(y);
}
FF_HD float ff_nan_to_num(float x, float nan, float posinf, float neginf) {
    return x != x ? nan : (x == INFINITY ? posinf : (x == -INFINITY ? neginf : x));
}
FF_HD float ff_div_floor(float a, float b) {  // torch's div_floor_floating: Python's a // b
    if (b == 0.0f) return a / b;
    const float mod = fmodf(a, b);
    float div = (a - mod) / b;
    if (mod != 0.0f && (b < 0.0f) != (mod < 0.0f)) div -= 1.0f;
    if (div == 0.0f) return copysignf(0.0f, a / b);
    float floordiv = floorf(div);
    if (div - floordiv > 0.5f) floordiv += 1.0f;
    return floordiv;
}
