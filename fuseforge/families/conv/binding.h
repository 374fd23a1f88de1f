// Conv kernels (families/conv): the binding's side. The direct kernel reads its input [N, C, (D,) H, W] and its
// weight [K, C, (KD,) KH, KW] as contiguous fp32 (copied when they are not) and writes a new contiguous output
// [N, K, (OD,) OH, OW]; a 2-D convolution is a 3-D one of depth 1. Stride, padding and dilation are the
// plan's constants; the sizes are read from the tensors at each call.
struct FFConv {
    torch::Tensor x, w;
    int64_t n, d, h, w_, od, oh, ow;
    std::vector<int64_t> out_sizes;
};

static int64_t ff_conv_extent(int64_t size, int64_t window, int64_t stride, int64_t padding, int64_t dilation) {
    return (size + 2 * padding - dilation * (window - 1) - 1) / stride + 1;
}

// A transposed convolution's output extent: each of `size` inputs spreads its window `stride` apart, less the
// padding on both sides, plus the output padding.
static int64_t ff_conv_transposed_extent(int64_t size, int64_t window, int64_t stride, int64_t padding,
                                         int64_t dilation, int64_t output_padding) {
    return (size - 1) * stride - 2 * padding + dilation * (window - 1) + output_padding + 1;
}

// geometry: {C, K, KD, KH, KW, sd, sh, sw, pd, ph, pw, dd, dh, dw}; `output_padding` {opd, oph, opw} for a
// transposed convolution (weight [C, K, window]), empty for an ordinary one (weight [K, C, window]).
static FFConv ff_conv_prepare(const char* kernel, const torch::Tensor& x, const torch::Tensor& w, int dims,
                              const std::vector<int64_t>& g, const std::vector<int64_t>& output_padding = {}) {
    const bool transposed = !output_padding.empty();
    for (const auto* t : {&x, &w}) {
        TORCH_CHECK(t->is_cuda(), kernel, ": convolution operands must be CUDA tensors");
        TORCH_CHECK(t->scalar_type() == torch::kFloat, kernel, ": convolution operands must be float32, got ",
                    t->scalar_type());
    }
    TORCH_CHECK(x.device() == w.device(), kernel, ": convolution operands must be on one device");
    TORCH_CHECK(x.dim() == dims + 2 && w.dim() == dims + 2, kernel, ": a ", dims, "-D convolution of ", x.sizes(),
                " by ", w.sizes());
    TORCH_CHECK(x.size(1) == g[0] && w.size(transposed ? 1 : 0) == g[1] && w.size(transposed ? 0 : 1) == g[0],
                kernel, ": this kernel was generated for ", g[0], " -> ", g[1], " channels, got input ", x.sizes(),
                " and weight ", w.sizes());
    for (int a = 0; a < dims; ++a)
        TORCH_CHECK(w.size(2 + a) == g[2 + 3 - dims + a], kernel, ": weight ", w.sizes(), " has another window");
    FFConv c;
    c.x = x.contiguous();
    c.w = w.contiguous();
    c.n = x.size(0);
    c.d = dims == 3 ? x.size(2) : 1;
    c.h = x.size(dims == 3 ? 3 : 2);
    c.w_ = x.size(dims == 3 ? 4 : 3);
    if (transposed) {
        c.od = dims == 3 ? ff_conv_transposed_extent(c.d, g[2], g[5], g[8], g[11], output_padding[0]) : 1;
        c.oh = ff_conv_transposed_extent(c.h, g[3], g[6], g[9], g[12], output_padding[1]);
        c.ow = ff_conv_transposed_extent(c.w_, g[4], g[7], g[10], g[13], output_padding[2]);
    } else {
        c.od = dims == 3 ? ff_conv_extent(c.d, g[2], g[5], g[8], g[11]) : 1;
        c.oh = ff_conv_extent(c.h, g[3], g[6], g[9], g[12]);
        c.ow = ff_conv_extent(c.w_, g[4], g[7], g[10], g[13]);
    }
    TORCH_CHECK(c.od > 0 && c.oh > 0 && c.ow > 0, kernel, ": input ", x.sizes(), " is smaller than the window");
    const int64_t kMax = (int64_t(1) << 31) - 1;
    TORCH_CHECK(c.n <= kMax && c.d <= kMax && c.h <= kMax && c.w_ <= kMax, kernel, ": sizes beyond 32-bit indexing");
    c.out_sizes = {c.n, g[1]};
    if (dims == 3) c.out_sizes.push_back(c.od);
    c.out_sizes.push_back(c.oh);
    c.out_sizes.push_back(c.ow);
    return c;
}

enum FFConvClass { FF_CONV_FULL = 0, FF_CONV_CHANNEL = 1, FF_CONV_SCALAR = 2 };

static torch::Tensor ff_conv_operand(const char* kernel, const char* name, const torch::Tensor& t, const FFConv& c,
                                     int cls) {
    TORCH_CHECK(t.is_cuda(), kernel, ": ", name, " must be a CUDA tensor");
    TORCH_CHECK(t.scalar_type() == torch::kFloat, kernel, ": ", name, " must be float32, got ", t.scalar_type());
    TORCH_CHECK(t.device() == c.x.device(), kernel, ": inputs must be on one device");
    if (cls == FF_CONV_FULL) TORCH_CHECK(t.sizes().vec() == c.out_sizes, kernel, ": ", name, " has sizes ", t.sizes(),
                                         ", expected the convolution's output sizes ", c.out_sizes);
    if (cls == FF_CONV_CHANNEL) TORCH_CHECK(t.numel() == c.out_sizes[1], kernel, ": ", name, " needs one value per "
                                            "output channel");
    if (cls == FF_CONV_SCALAR) TORCH_CHECK(t.numel() == 1, kernel, ": ", name, " must hold one value");
    return t.contiguous();
}
