"""Fixed C++ of `ff_channels_last`: a convolution's input converted to channels-last (NHWC) for cuDNN.

A convolution that `layout.py` runs channels-last needs its input channels-last. PyTorch's
`x.contiguous(memory_format=torch.channels_last)` does it with its generic strided copy (measured on the
H100 with dev/kernels/profile_kernels.py: 144 us for the 134 MB input of conv2d_batchnorm_relu, where
torch.compile's transposing kernel takes 90 us). This kernel is a tile transpose per sample: [C, S] ->
[S, C] through shared memory in runtime.py's `FFTiles` (up to 32 channels x 2048 / width positions, so a
4- or 16-channel input leaves no lane idle), reading along positions and writing along channels, both
coalesced, 16 bytes per access when C and S are multiples of 4 (the phases `FFTiles::load_nchw` and
`FFTiles::store_channels_last`; the pointwise tiled kernel reads with `FFTiles::load_channels_last`).
Anything but a contiguous float32 4-D or 5-D CUDA tensor is converted by PyTorch as before, so the result
is always the same tensor values in channels-last memory. (Fixed 32 x 64 tiles, measured at
62d60db, were slower than PyTorch below 32 channels: 160 us for conv3d_maxpool_sigmoid_sum's 4-channel
input, cuDNN's own conversion 113 us; 296 us for conv2d_channelmin_tanh's 16 channels, compile 173 us.)
"""

LAYOUT_KERNEL_RUNTIME = r"""
// ---- ff_channels_last: [N, C, S] contiguous -> [N, S, C] (channels-last), tile transpose per sample (FFTiles).
// Read along positions, write along channels. kQuads is tiles.quads: one kernel per path, so that each gets
// the registers its own path needs (with both paths in one kernel the scalar path's 64-bit addresses took
// 118 registers, two blocks per multiprocessor).
template <bool kQuads>
__global__ void __launch_bounds__(FF_TILE_THREADS) ff_channels_last_kernel(const float* __restrict__ in,
                                                                        float* __restrict__ out, FFTiles tiles) {
    __shared__ __align__(16) float tile[FF_TILE_SLOTS];  // [channel][position], rows of tiles.pitch()
    const int64_t C = tiles.channels, S = tiles.positions;
    tiles.quads = kQuads;  // a constant for the phases' branches
    for (int64_t t = blockIdx.x; t < tiles.count; t += gridDim.x) {
        int64_t n, c0, s0;
        tiles.origin(t, n, c0, s0);
        tiles.load_nchw(tile, in, n, c0, s0, C, S);
        __syncthreads();
        tiles.store_channels_last(tile, out, n, c0, s0, C, S);
        __syncthreads();
    }
}

int launch_ff_channels_last(const float* in, float* out, int64_t batch, int64_t channels, int64_t positions,
                            void* stream) {
    const bool aligned = reinterpret_cast<uintptr_t>(in) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0;
    const FFTiles tiles(batch, channels, positions, aligned);
    if (tiles.count == 0) return 0;
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    if (tiles.quads) ff_channels_last_kernel<true><<<tiles.blocks(), FF_TILE_THREADS, 0, s>>>(in, out, tiles);
    else ff_channels_last_kernel<false><<<tiles.blocks(), FF_TILE_THREADS, 0, s>>>(in, out, tiles);
    return (int)cudaGetLastError();
}
"""

LAYOUT_BINDING_RUNTIME = r"""
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
"""
