
// Channel kernels: every operand is made contiguous and checked against its class (full: the norm's input
// shape, channel: one value per channel, scalar: one value).
enum FFChanClass { FF_CHAN_FULL = 0, FF_CHAN_CHANNEL = 1, FF_CHAN_SCALAR = 2 };

struct FFChanCall {
    std::vector<int64_t> sizes;  // the full shape of this call
    FFChanDims dims;
};

// `one_full`: the group has one full-shape input, so a channels-last one is taken as it is.
static FFChanCall ff_channels_of(const char* kernel, const torch::Tensor& full, int64_t groups, bool one_full) {
    TORCH_CHECK(full.dim() >= 2, kernel, ": the normalised input needs a batch and a channel axis");
    FFChanCall call;
    call.sizes = full.sizes().vec();
    FFChanDims& d = call.dims;
    d.batch = call.sizes[0];
    d.channels = call.sizes[1];
    d.hw = 1;
    for (size_t k = 2; k < call.sizes.size(); ++k) d.hw *= call.sizes[k];
    d.groups = groups;
    TORCH_CHECK(groups == 0 || d.channels % groups == 0, kernel, ": ", d.channels, " channels in ", groups, " groups");
    d.units = groups == 0 ? d.channels : d.batch * groups;
    d.per_unit = groups == 0 ? d.batch * d.hw : d.channels / groups * d.hw;
    d.columns = groups == 0 && d.hw == 1;
    const auto format = full.dim() == 5 ? at::MemoryFormat::ChannelsLast3d : at::MemoryFormat::ChannelsLast;
    d.nhwc = one_full && (full.dim() == 4 || full.dim() == 5) && !full.is_contiguous() && full.is_contiguous(format);
    TORCH_CHECK(d.per_unit > 0 && d.units > 0, kernel, ": normalisation of an empty tensor");
    TORCH_CHECK(d.per_unit < (int64_t(1) << 30) && d.units < (int64_t(1) << 31), kernel,
                ": more than 2^30 values per unit or 2^31 units");
    d.parts = d.nhwc ? ff_channel_nhwc_parts(d.batch, d.channels, d.hw)
                     : ff_channel_parts(d.units, d.per_unit, d.columns);
    return call;
}

static torch::Tensor ff_chan_operand(const char* kernel, const char* name, const torch::Tensor& t,
                                     const FFChanCall& call, const torch::Tensor& first, int cls) {
    TORCH_CHECK(t.is_cuda(), kernel, ": ", name, " must be a CUDA tensor");
    TORCH_CHECK(t.scalar_type() == torch::kFloat, kernel, ": ", name, " must be float32, got ", t.scalar_type());
    TORCH_CHECK(t.device() == first.device(), kernel, ": inputs must be on one device");
    if (cls == FF_CHAN_FULL) TORCH_CHECK(t.sizes().vec() == call.sizes, kernel, ": ", name, " has sizes ",
                                         t.sizes(), ", expected ", call.sizes);
    if (cls == FF_CHAN_CHANNEL) TORCH_CHECK(t.numel() == call.dims.channels, kernel, ": ", name,
                                            " needs one value per channel");
    if (cls == FF_CHAN_SCALAR) TORCH_CHECK(t.numel() == 1, kernel, ": ", name, " must hold one value");
    return cls == FF_CHAN_FULL && call.dims.nhwc ? t : t.contiguous();
}
