
int launch_ff_channels_last(const float* in, float* out, int64_t batch, int64_t channels, int64_t positions,
                            void* stream);

// A convolution's input, channels-last (4-D: channels_last, 5-D: channels_last_3d).
torch::Tensor ff_channels_last(torch::Tensor x, int64_t stream) {
    TORCH_CHECK(x.dim() == 4 || x.dim() == 5, "ff_channels_last: a 4-D or 5-D tensor, got ", x.dim(), "-D");
    const auto format = x.dim() == 5 ? at::MemoryFormat::ChannelsLast3d : at::MemoryFormat::ChannelsLast;
    if (!x.is_cuda() || x.scalar_type() != torch::kFloat || !x.is_contiguous() || x.is_contiguous(format) ||
        x.numel() == 0)
        return x.contiguous(format);
    torch::Tensor out = torch::empty(x.sizes(), x.options().memory_format(format));
    const int64_t positions = x.numel() / (x.size(0) * x.size(1));
    ff_check("ff_channels_last", launch_ff_channels_last(x.data_ptr<float>(), out.data_ptr<float>(), x.size(0),
                                                         x.size(1), positions, reinterpret_cast<void*>(stream)));
    return out;
}
