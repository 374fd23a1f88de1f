"""Fixed C++ text shared by every generated extension: operand descriptors, loads, launch helpers.

`TYPES` is included by both translation units (kernels and torch binding), so it uses no CUDA or torch
header. `KERNEL_RUNTIME` goes into the kernel unit; `BINDING_RUNTIME` into the torch binding.

`ff_prepare` merges the dims of a call's iteration space and describes every operand over the merged
dims. It also picks the tiled path of the pointwise kernels (`FFCall::tiled`): when the merged space is
[N, C, S] or [C, S] and an operand is channels-last over it (strides [S*C, 1, C], or [1, C]; an NHWC or
NDHWC tensor of an NCHW-sized iteration), reading it in the output's order would be strided by C, so the
kernel reads the first such operand a tile at a time through shared memory (`FFTiles`) (`ff_offset_ncs`
addresses the other operands of a tile's element) and still writes contiguous outputs. Ranks above 3 stay
on the flat path.
"""

from ..cuda_sources import cuda_source, paste_include

TYPES = cuda_source("fuseforge", "cuda/types.cuh")

TILES = cuda_source("fuseforge", "cuda/tiles.cuh")

KERNEL_RUNTIME = paste_include(cuda_source("fuseforge", "cuda/pointwise.cu"), "tiles.cuh")

BINDING_RUNTIME = cuda_source("fuseforge", "cuda/binding.h")
