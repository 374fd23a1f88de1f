"""Fixed C++ of `ff_channels_last`: a convolution's input converted to channels-last (NHWC) for cuDNN.

A convolution that `layout.py` runs channels-last needs its input channels-last. PyTorch's
`x.contiguous(memory_format=torch.channels_last)` does it with its generic strided copy (measured on the
H100 with dev/kernels/profile_kernels.py: 144 us for the 134 MB input of conv2d_batchnorm_relu, where
torch.compile's transposing kernel takes 90 us). This kernel is a tile transpose per sample: [C, S] ->
[S, C] through shared memory in `cuda/tiles.cuh`'s `FFTiles` (up to 32 channels x 1024 / width positions, so a
4- or 16-channel input leaves no lane idle), reading along positions and writing along channels, both
coalesced, 16 bytes per access when C and S are multiples of 4, on the channels-last side when C is (the phases `FFTiles::load_nchw` and
`FFTiles::store_channels_last`; the pointwise tiled kernel reads with `FFTiles::load_channels_last`).
Anything but a contiguous float32 4-D or 5-D CUDA tensor is converted by PyTorch as before, so the result
is always the same tensor values in channels-last memory. (Fixed 32 x 64 tiles, measured at
62d60db, were slower than PyTorch below 32 channels: 160 us for conv3d_maxpool_sigmoid_sum's 4-channel
input, cuDNN's own conversion 113 us; 296 us for conv2d_channelmin_tanh's 16 channels, compile 173 us.)
"""

from ..cuda_sources import cuda_source

LAYOUT_KERNEL_RUNTIME = cuda_source("fuseforge", "cuda/layout.cu")

LAYOUT_BINDING_RUNTIME = cuda_source("fuseforge", "cuda/layout_binding.h")
