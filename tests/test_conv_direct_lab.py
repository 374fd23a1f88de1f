"""dev/kernels/conv_direct lab (issue #24): the direct fp32 convolution compiles for sm_90a without spills, and
a float64 numpy transliteration of its tiling and index math (tile decode, halo copy with zero fill, weight
transpose, per-thread rows/columns/channels, both row paths, bounded stores) equals torch's convolution.

CPU only: nothing here runs the kernel; its speed and fp32 error are measured by bench_conv_direct.py on a GPU.
"""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

LAB = Path(__file__).resolve().parents[1] / "dev" / "kernels" / "conv_direct"
sys.path.insert(0, str(LAB))
import conv_direct_model as cdm  # noqa: E402

GENCODE = "-gencode=arch=compute_90a,code=sm_90a"
CONFIGS = {cf.name: cf for cf in cdm.parse_configs()}
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


@pytest.fixture(scope="module")
def ptxas_log(tmp_path_factory):
    out = tmp_path_factory.mktemp("conv_direct") / "conv_direct.cubin"
    proc = subprocess.run(["nvcc", "-cubin", GENCODE, "-O3", "-Xptxas", "-v,-warn-spills,-warn-lmem-usage",
                           "-Werror", "all-warnings", "-I", str(cdm.KERNEL.parent), "-o", str(out), str(cdm.SOURCE)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


@needs_nvcc
def test_every_instantiation_compiles_for_sm90a_with_no_spills_and_no_stack_frame(ptxas_log):
    kernels = re.findall(r"Compiling entry function '(\w+)'", ptxas_log)
    # per instantiation: 3 epilogues on the unit-row path, 2 on the general one
    assert len(kernels) == 5 * len(CONFIGS), ptxas_log
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", ptxas_log)
    frames = re.findall(r"(\d+) bytes stack frame", ptxas_log)
    assert len(spills) == len(kernels) and all(s == ("0", "0") for s in spills), ptxas_log
    assert frames and all(f == "0" for f in frames), ptxas_log
    registers = [int(r) for r in re.findall(r"Used (\d+) registers", ptxas_log)]
    assert registers and max(registers) <= 255, ptxas_log


def test_the_instantiations_are_the_ones_the_ten_models_need():
    assert set(CONFIGS) == {"c8_k3x3_bk64", "c3_k3x3x3_bk16", "c3_k3x3x3_bk24", "c3_k4x4x4_bk16"}
    assert cdm.pick_config(list(CONFIGS.values()), 8, (3, 3), 64).name == "c8_k3x3_bk64"
    assert cdm.pick_config(list(CONFIGS.values()), 3, (3, 3, 3), 24).name == "c3_k3x3x3_bk24"
    assert cdm.pick_config(list(CONFIGS.values()), 3, (3, 3, 3), 16).name == "c3_k3x3x3_bk16"
    assert cdm.pick_config(list(CONFIGS.values()), 3, (4, 4, 4), 16).name == "c3_k4x4x4_bk16"
    assert cdm.pick_config(list(CONFIGS.values()), 3, (5, 5), 16) is None


def test_the_model_and_the_kernel_agree_on_the_tile_width():
    source = cdm.KERNEL.read_text()
    assert re.search(r"kTileW = (\d+);", source).group(1) == str(cdm.TILE_W)


def test_every_bench_shape_fits_in_shared_memory_with_at_least_two_blocks_per_sm():
    cases = [((128, 8, 256, 256), 64, (3, 3)), ((128, 8, 384, 384), 64, (3, 3)), ((128, 3, 24, 32, 32), 24, (3, 3, 3)),
             ((1024, 3, 16, 32, 32), 16, (4, 4, 4)), ((128, 3, 16, 64, 64), 16, (3, 3, 3))]
    for x_shape, k, window in cases:
        ones = (1,) * len(window)
        g = cdm.geometry(x_shape, k, window, ones, (0,) * len(window), ones)
        cf = cdm.pick_config(list(CONFIGS.values()), x_shape[1], window, k)
        assert 2 * cdm.smem_bytes(cf, g) <= 227 * 1024, (cf, cdm.smem_bytes(cf, g))


def _check(name, x_shape, k, window, stride, padding, dilation, unit_rows=None):
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.standard_normal(x_shape))
    w = torch.from_numpy(rng.standard_normal((k, x_shape[1], *window)))
    b = torch.from_numpy(rng.standard_normal(k))
    conv = F.conv2d if len(x_shape) == 4 else F.conv3d
    expected = conv(x, w, b, stride, padding, dilation).numpy()
    g = cdm.geometry(x_shape, k, window, stride, padding, dilation)
    got = cdm.model_conv(CONFIGS[name], g, x.numpy(), w.numpy(), b.numpy(), unit_rows).reshape(expected.shape)
    assert not np.isnan(got).any(), "an output slot the kernel would leave unwritten"
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


def test_a_3d_conv_with_stride_2_padding_1_and_dilation_2_tiles_exactly_like_torch():
    _check("c3_k3x3x3_bk16", (2, 3, 9, 13, 37), 7, (3, 3, 3), (2, 2, 2), (1, 1, 1), (2, 2, 2))


def test_a_3d_conv_with_per_axis_stride_padding_and_dilation_and_a_channel_tail_tiles_like_torch():
    _check("c3_k3x3x3_bk24", (1, 3, 5, 23, 41), 29, (3, 3, 3), (2, 1, 1), (1, 2, 0), (1, 1, 2))


def test_the_unit_row_path_with_padding_and_column_dilation_matches_torch():
    _check("c3_k3x3x3_bk24", (1, 3, 5, 23, 41), 29, (3, 3, 3), (1, 1, 1), (1, 2, 0), (1, 1, 2))


def test_the_general_row_path_also_holds_at_unit_row_stride():
    _check("c3_k3x3x3_bk24", (1, 3, 5, 23, 41), 29, (3, 3, 3), (1, 1, 1), (1, 2, 0), (1, 1, 2), unit_rows=False)


def test_a_4x4x4_window_with_odd_sizes_matches_torch():
    _check("c3_k4x4x4_bk16", (1, 3, 6, 9, 35), 17, (4, 4, 4), (1, 2, 1), (2, 0, 1), (1, 1, 2))


def test_a_2d_conv_with_stride_2_padding_1_dilation_2_and_13_channels_matches_torch():
    _check("c8_k3x3_bk64", (2, 8, 37, 45), 13, (3, 3), (2, 2), (1, 1), (2, 2))


def test_a_2d_conv_with_two_channel_groups_and_several_row_and_column_tiles_matches_torch():
    _check("c8_k3x3_bk64", (1, 8, 19, 70), 70, (3, 3), (1, 2), (2, 1), (1, 3))


def test_a_wrong_halo_origin_is_caught():
    g = cdm.geometry((1, 3, 5, 9, 11), 4, (3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1))
    shifted = cdm.Geometry(**{**g.__dict__, "ph": 0})  # the halo origin ignores the padding in H
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((1, 3, 5, 9, 11)), rng.standard_normal((4, 3, 3, 3, 3))
    expected = F.conv3d(torch.from_numpy(x), torch.from_numpy(w), None, 1, 1, 1).numpy()
    got = cdm.model_conv(CONFIGS["c3_k3x3x3_bk16"], shifted, x, w)
    assert not np.allclose(got, expected)
