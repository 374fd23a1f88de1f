"""dev/kernels/conv_3xtf32 (the 3xTF32 tensor-core convolution lab), on the CPU: its source compiles for sm_90a
with no spills, and a float64 transliteration of its tiling, fragment layout and index math computes the
convolution. Its speed and its error on a GPU are measured by its bench, not here."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

LAB = Path(__file__).resolve().parents[1] / "dev" / "kernels" / "conv_3xtf32"
sys.path.insert(0, str(LAB))
import lab  # noqa: E402

INSTANCES = {inst.name: inst for inst in lab.INSTANCES}

# (instance, x shape, out channels, window, stride, padding, dilation): padding, stride and dilation per axis,
# channels padded to 8 (C = 3, 5) and in two blocks (C = 16), channel groups with a tail (K > 8 NT), 3-D, output
# rows that do not fill the tile's warps and columns past 32
CASES = [
    ("c5_k5x5_n8", (2, 5, 13, 40), 7, (5, 5), (1, 1), (2, 1), (1, 1)),
    ("c5_k5x5_n8", (1, 5, 17, 45), 11, (5, 5), (2, 1), (1, 3), (1, 2)),
    ("c16_k3x3_n32", (1, 16, 9, 35), 40, (3, 3), (1, 2), (1, 1), (2, 1)),
    ("c3_k3x3x3_n16", (1, 3, 5, 7, 34), 16, (3, 3, 3), (1, 1, 1), (1, 0, 1), (1, 1, 1)),
    ("c3_k3x3x3_n24", (1, 3, 6, 9, 20), 24, (3, 3, 3), (2, 1, 2), (0, 1, 1), (1, 2, 1)),
    ("c8_k3x3_n64_w4", (1, 8, 8, 33), 70, (3, 3), (1, 1), (0, 0), (1, 1)),
]


def _case(name, x_shape, k, window, stride, padding, dilation, split, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal((k, x_shape[1], *window)).astype(np.float32)
    geom = lab.geometry(x_shape, k, window, stride, padding, dilation)
    five = (lambda a: a) if len(x_shape) == 5 else (lambda a: a[:, :, None])
    got = lab.simulate(five(x), five(w), geom, INSTANCES[name], split=split)
    conv = torch.nn.functional.conv3d if len(x_shape) == 5 else torch.nn.functional.conv2d
    truth = conv(torch.from_numpy(x).double(), torch.from_numpy(w).double(), stride=stride, padding=padding,
                 dilation=dilation).numpy()
    fp32 = conv(torch.from_numpy(x), torch.from_numpy(w), stride=stride, padding=padding, dilation=dilation).numpy()
    rms = np.sqrt((truth**2).mean())
    return np.abs(got - five(truth)).max() / rms, np.abs(fp32 - truth).max() / rms


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{'x'.join(map(str, c[1]))}" for c in CASES])
def test_the_kernels_index_math_transliterated_in_float64_computes_the_convolution(case):
    err, _ = _case(*case, split=False)
    assert err < 1e-12


@pytest.mark.parametrize("case", CASES[:4], ids=[c[0] for c in CASES[:4]])
def test_with_its_tf32_splits_the_kernels_products_stay_within_fp32_class_error(case):
    err, fp32_err = _case(*case, split=True)
    # the 3xTF32 representation error (the tensor core's own fp32 accumulation comes on top, on the GPU)
    assert err < 2e-6, (err, fp32_err)


def test_one_tf32_product_alone_would_not_be_fp32_class():
    """What the two correction products buy: the same transliteration with the low parts zeroed is TF32-class."""
    inst = INSTANCES["c5_k5x5_n8"]
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 5, 1, 12, 40)).astype(np.float32)
    w = rng.standard_normal((8, 5, 1, 5, 5)).astype(np.float32)
    geom = lab.geometry((1, 5, 12, 40), 8, (5, 5), (1, 1), (0, 0), (1, 1))
    truth = torch.nn.functional.conv2d(torch.from_numpy(x[:, :, 0]).double(), torch.from_numpy(w[:, :, 0]).double())
    truth = truth.numpy()[:, :, None]
    rms = np.sqrt((truth**2).mean())
    x_hi, w_hi = lab.to_tf32(x), lab.to_tf32(w)
    tf32_only = lab.simulate(x_hi, w_hi, geom, inst, split=False)
    split = lab.simulate(x, w, geom, inst, split=True)
    assert np.abs(tf32_only - truth).max() / rms > 1e-4
    assert np.abs(split - truth).max() / rms < 2e-6


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_every_instance_compiles_for_sm90a_without_spills(tmp_path):
    source = tmp_path / "conv3x.cu"
    source.write_text(lab.lab_source())
    proc = subprocess.run(["nvcc", "-cubin", "-gencode=arch=compute_90a,code=sm_90a", "-O3", "-Xptxas",
                           "-v,-warn-spills,-warn-lmem-usage", "-o", str(tmp_path / "conv3x.cubin"), str(source)],
                          capture_output=True, text=True, timeout=600)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log
    ours = re.findall(r"Function properties for (_ZN14ff_conv_tf32x3\w+)\n\s+(\d+) bytes stack frame, (\d+) bytes "
                      r"spill stores, (\d+) bytes spill loads", log)
    assert len(ours) == len(lab.INSTANCES), log
    assert all(frame == ["0", "0", "0"] for _, *frame in ours), log
    assert "ptxas warning" not in log, log
