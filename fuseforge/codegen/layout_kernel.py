"""Fixed C++ of `ff_channels_last`: a convolution's input converted to channels-last (NHWC) for cuDNN.

A convolution that `layout.py` runs channels-last needs its input channels-last. PyTorch's
`x.contiguous(memory_format=torch.channels_last)` does it with its generic strided copy (measured on the
H100 with dev/kernels/profile_kernels.py: 144 us for the 134 MB input of conv2d_batchnorm_relu, where
torch.compile's transposing kernel takes 90 us). This kernel is a tile transpose per sample: [C, S] ->
[S, C] through shared memory, 32 channels x 64 positions per tile, reading along positions and writing
along channels, both coalesced. Anything but a contiguous float32 4-D or 5-D CUDA tensor of at least 32
channels is converted by PyTorch as before, so the result is always the same tensor values in channels-last
memory. Fewer channels leave most lanes of a tile idle: measured at 62d60db, 160 us for conv3d_maxpool_sigmoid_sum's
4-channel input (cuDNN's own conversion: 113 us) and 296 us for conv2d_channelmin_tanh's (compile: 173 us),
while at 32 channels it matched compile (convtranspose2d_bias_tanh_scale: 25.8 us vs 23.8 us).
"""

LAYOUT_KERNEL_RUNTIME = r"""
// ---- ff_channels_last: [N, C, S] contiguous -> [N, S, C] (channels-last), tile transpose per sample.
__global__ void __launch_bounds__(256) ff_channels_last_kernel(const float* __restrict__ in, float* __restrict__ out,
                                                               int64_t batch, int64_t channels, int64_t positions) {
    __shared__ float tile[32][65];  // [channel][position]; the pad avoids bank conflicts
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t chunks = (channels + 31) / 32, spans = (positions + 63) / 64;
    const int64_t tiles = batch * chunks * spans;
    for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
        const int64_t s0 = t % spans * 64, c0 = t / spans % chunks * 32, n = t / spans / chunks;
#pragma unroll
        for (int j = 0; j < 8; ++j) {  // read: warp w takes channels c0 + w, c0 + w + 8, ...; lanes along positions
            const int64_t c = c0 + warp + 8 * (j % 4), s = s0 + 32 * (j / 4) + lane;
            if (c < channels && s < positions)
                tile[warp + 8 * (j % 4)][32 * (j / 4) + lane] = __ldg(in + (n * channels + c) * positions + s);
        }
        __syncthreads();
#pragma unroll
        for (int j = 0; j < 8; ++j) {  // write: warp w takes positions s0 + w, s0 + w + 8, ...; lanes along channels
            const int64_t s = s0 + warp + 8 * j, c = c0 + lane;
            if (c < channels && s < positions) out[(n * positions + s) * channels + c] = tile[lane][warp + 8 * j];
        }
        __syncthreads();
    }
}

int launch_ff_channels_last(const float* in, float* out, int64_t batch, int64_t channels, int64_t positions,
                            void* stream) {
    const int64_t tiles = batch * ((channels + 31) / 32) * ((positions + 63) / 64);
    if (tiles == 0) return 0;
    ff_channels_last_kernel<<<ff_blocks(tiles, 1), 256, 0, static_cast<cudaStream_t>(stream)>>>(
        in, out, batch, channels, positions);
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
        x.numel() == 0 || x.size(1) < 32)  // fewer than 32 channels: most lanes of a tile would idle
        return x.contiguous(format);
    torch::Tensor out = torch::empty(x.sizes(), x.options().memory_format(format));
    const int64_t positions = x.numel() / (x.size(0) * x.size(1));
    ff_check("ff_channels_last", launch_ff_channels_last(x.data_ptr<float>(), out.data_ptr<float>(), x.size(0),
                                                         x.size(1), positions, reinterpret_cast<void*>(stream)));
    return out;
}
"""
