"""One convolution shape, each kernel once after a warm-up: our instances and cuDNN's channels-last call, for
Nsight Compute to compare (what limits ours where cuDNN's kernel with the same tile runs 2.4x faster).

    ncu --clock-control none -k regex:"conv_igemm_kernel|xmma_fprop" --section SpeedOfLight \\
        --section WarpStateStats --section Occupancy --section MemoryWorkloadAnalysis --csv --page details \\
        .venv/bin/python dev/kernels/conv_igemm/ncu_one_shape.py nchw_n128_s4_b1 cl_n128_s4_b1 > ncu.csv

Default shape: model 17's convolution, [128, 64, 128, 128] -> 128 channels, 3x3, no padding (--shape, --k).
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_conv_igemm as b  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("instances", nargs="+")
p.add_argument("--shape", type=int, nargs="+", default=[128, 64, 128, 128])
p.add_argument("--k", type=int, default=128)
args = p.parse_args()
ext = b.build()
g = b.geometry(args.shape, args.k, [3, 3], [0, 0], [1, 1])
torch.manual_seed(0)
x = torch.randn(args.shape, device="cuda")
w = torch.randn([args.k, args.shape[1], 3, 3], device="cuda") * 0.05
bias = torch.randn([args.k], device="cuda")
ours = b.Ours(ext, g, w, bias)
for name in args.instances:
    ours(x, name)
    torch.cuda.synchronize()
x_cl, w_cl = x.to(memory_format=torch.channels_last), w.to(memory_format=torch.channels_last)
F.conv2d(x_cl, w_cl)
torch.cuda.synchronize()
print("ran", args.instances, "and cuDNN channels-last", file=sys.stderr)
