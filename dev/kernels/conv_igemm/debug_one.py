"""Run one instance of conv_igemm on one small case and synchronise (for compute-sanitizer / SASS reading).

    .venv/bin/python dev/kernels/conv_igemm/debug_one.py nchw_n64_s4_b2 [x_shape...]
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_conv_igemm as b  # noqa: E402
import torch  # noqa: E402

name = sys.argv[1]
shape = [int(v) for v in sys.argv[2:]] or [1, 8, 8, 32]
ext = b.build()
import os  # noqa: E402

g = b.geometry(shape, 16, [3, 3], [1, 1], [1, 1])
if os.environ.get("BWB"):
    g["bwb"] = int(os.environ["BWB"])
torch.manual_seed(0)
x = torch.randn(shape, device="cuda")
w = torch.randn([16, shape[1], 3, 3], device="cuda")
ours = b.Ours(ext, g, w, None)
y = ours(x, name, 0)
torch.cuda.synchronize()
truth = torch.nn.functional.conv2d(x.double(), w.double(), None, 1, 1)
print(name, "err", b.rel_err(y, truth), "so", ext.__file__)
