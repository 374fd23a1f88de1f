
// Channel reductions: every operand is made contiguous and checked against its class (full: the reduced
// tensor's shape, channel: one value per channel, scalar: one value, reduced: one per output position).
enum FFCredClass { FF_CRED_FULL = 0, FF_CRED_CHANNEL = 1, FF_CRED_SCALAR = 2, FF_CRED_REDUCED = 3, FF_CRED_POOLED = 4 };

struct FFCredCall {
    std::vector<int64_t> sizes;      // the reduced tensor's shape [N, C, *spatial]
    std::vector<int64_t> out_sizes;  // [N, 1, *spatial] (keepdim) or [N, *spatial]
    FFCredDims dims;
};

// The sizes of a call from the reduced tensor's sizes [N, C, *spatial]; `reduce` false: a pool kernel.
static FFCredCall ff_cred_of(const char* kernel, const std::vector<int64_t>& sizes, bool keepdim, bool needs_channels,
                             bool reduce = true) {
    TORCH_CHECK(sizes.size() >= 3, kernel, ": the reduced input needs a batch, a channel and a spatial axis");
    FFCredCall call;
    call.sizes = sizes;
    FFCredDims& d = call.dims;
    d.batch = call.sizes[0];
    d.channels = call.sizes[1];
    d.positions = 1;
    for (size_t k = 2; k < call.sizes.size(); ++k) d.positions *= call.sizes[k];
    d.tiles = 0;
    d.in_positions = 0;
    d.channel_step = d.positions;
    d.position_step = 1;
    d.pool_nhwc = 0;
    for (int a = 0; a < 3; ++a) d.in_size[a] = d.out_size[a] = 1;
    call.out_sizes = call.sizes;
    if (reduce && keepdim) {
        call.out_sizes[1] = 1;
    } else if (reduce) {
        call.out_sizes.erase(call.out_sizes.begin() + 1);
    }
    TORCH_CHECK(!needs_channels || d.channels > 0 || d.batch * d.positions == 0, kernel,
                ": a minimum or maximum over zero channels");
    TORCH_CHECK(d.channels < (int64_t(1) << 31), kernel, ": 2^31 channels or more");
    TORCH_CHECK(d.batch * ((d.positions + kFFCredThreads - 1) / kFFCredThreads) < (int64_t(1) << 31), kernel,
                ": too many output positions for one grid");
    return call;
}

// PyTorch's pooling output size (ceil_mode: the last window starts inside the input or its left padding).
static int64_t ff_pool_out_size(int64_t size, int64_t k, int64_t s, int64_t p, int64_t dil, bool ceil_mode) {
    const int64_t span = size + 2 * p - dil * (k - 1) - 1;
    if (span < 0) return 0;
    int64_t out = (span + (ceil_mode ? s - 1 : 0)) / s + 1;
    if (ceil_mode && (out - 1) * s >= size + p) --out;
    return out;
}

// The sizes of a call whose prologue starts with a pool of `pooled` ([N, C, *in_size]); per axis: kernel k,
// stride s, padding p, dilation dil.
static FFCredCall ff_cred_of_pool(const char* kernel, const torch::Tensor& pooled, int dims, const int64_t* k,
                                  const int64_t* s, const int64_t* p, const int64_t* dil, bool ceil_mode,
                                  bool keepdim, bool needs_channels, bool reduce) {
    TORCH_CHECK(pooled.dim() == dims + 2, kernel, ": the pool's input must be [N, C] and ", dims, " spatial sizes");
    std::vector<int64_t> sizes = pooled.sizes().vec();
    int64_t in_positions = 1, in_size[3] = {1, 1, 1}, out_size[3] = {1, 1, 1};
    for (int a = 0; a < dims; ++a) {
        in_size[a] = sizes[2 + a];
        out_size[a] = ff_pool_out_size(in_size[a], k[a], s[a], p[a], dil[a], ceil_mode);
        TORCH_CHECK(out_size[a] > 0, kernel, ": the pool's window does not fit its input");
        in_positions *= in_size[a];
        sizes[2 + a] = out_size[a];
    }
    TORCH_CHECK(in_positions < (int64_t(1) << 31), kernel, ": 2^31 or more values per plane of the pool's input");
    FFCredCall call = ff_cred_of(kernel, sizes, keepdim, needs_channels, reduce);
    call.dims.in_positions = in_positions;
    for (int a = 0; a < 3; ++a) {
        call.dims.in_size[a] = in_size[a];
        call.dims.out_size[a] = out_size[a];
    }
    return call;
}

// Channels-last: dense in NHWC (NDHWC) order and not also contiguous (with C == 1 or no spatial extent the
// two orders are the same, and contiguous is the one taken).
static bool ff_cred_channels_last(const torch::Tensor& t) {
    if (t.is_contiguous()) return false;
    return (t.dim() == 4 && t.is_contiguous(at::MemoryFormat::ChannelsLast)) ||
           (t.dim() == 5 && t.is_contiguous(at::MemoryFormat::ChannelsLast3d));
}

// The layout of the full input (channels-last when the kernel has one full input and it is so, else
// contiguous) and of the pool's input.
static void ff_cred_set_layout(FFCredCall& call, const std::vector<torch::Tensor>& full, const torch::Tensor* pooled) {
    FFCredDims& d = call.dims;
    bool nhwc = full.size() == 1;
    for (const auto& t : full) nhwc = nhwc && ff_cred_channels_last(t);
    if (nhwc) { d.channel_step = 1; d.position_step = d.channels; }
    if (pooled && ff_cred_channels_last(*pooled)) d.pool_nhwc = 1;
}

static bool ff_cred_is_nhwc(const FFCredCall& call, int cls) {
    return (cls == FF_CRED_FULL && call.dims.position_step != 1) ||
           (cls == FF_CRED_POOLED && call.dims.pool_nhwc);
}

static torch::Tensor ff_cred_operand(const char* kernel, const char* name, const torch::Tensor& t,
                                     const FFCredCall& call, const torch::Tensor& first, int cls) {
    TORCH_CHECK(t.is_cuda(), kernel, ": ", name, " must be a CUDA tensor");
    TORCH_CHECK(t.scalar_type() == torch::kFloat, kernel, ": ", name, " must be float32, got ", t.scalar_type());
    TORCH_CHECK(t.device() == first.device(), kernel, ": inputs must be on one device");
    if (cls == FF_CRED_FULL) TORCH_CHECK(t.sizes().vec() == call.sizes, kernel, ": ", name, " has sizes ",
                                         t.sizes(), ", expected ", call.sizes);
    if (cls == FF_CRED_CHANNEL) TORCH_CHECK(t.numel() == call.dims.channels, kernel, ": ", name,
                                            " needs one value per channel");
    if (cls == FF_CRED_SCALAR) TORCH_CHECK(t.numel() == 1, kernel, ": ", name, " must hold one value");
    if (cls == FF_CRED_POOLED) TORCH_CHECK(t.dim() >= 3 && t.size(0) == call.dims.batch &&
                                           t.size(1) == call.dims.channels, kernel, ": ", name, " has sizes ",
                                           t.sizes(), ", not [N, C, ...] of the pool");
    if (cls == FF_CRED_REDUCED) TORCH_CHECK(t.sizes().vec() == call.out_sizes, kernel, ": ", name, " has sizes ",
                                            t.sizes(), ", expected ", call.out_sizes);
    return ff_cred_is_nhwc(call, cls) ? t : t.contiguous();
}
