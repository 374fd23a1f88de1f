"""dev/kernels/conv_igemm lab (issue #24): the TF32 implicit-GEMM convolution compiles for sm_90a without spills
and without ptxas serialising its wgmmas; the bench's geometry helpers (pixel boxes, the weight's re-layout, a
transposed convolution as a convolution) and a float64 transliteration of the NCHW path's box addressing (the box
starting at the 16-byte-aligned column left of each tap, the consumers' shift past it) equal torch's convolution.

CPU only: the kernel's speed and error are measured by bench_conv_igemm.py on a GPU.
"""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

LAB = Path(__file__).resolve().parents[1] / "dev" / "kernels" / "conv_igemm"
sys.path.insert(0, str(LAB))
import bench_conv_igemm as lab  # noqa: E402
import bench_transposed as transposed_lab  # noqa: E402

SOURCE = LAB / "conv_igemm.cu"
GENCODE = "-gencode=arch=compute_90a,code=sm_90a"
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


@pytest.fixture(scope="module")
def ptxas_log(tmp_path_factory):
    out = tmp_path_factory.mktemp("conv_igemm") / "conv_igemm.cubin"
    proc = subprocess.run(["nvcc", "-cubin", GENCODE, "-std=c++17", "-O3", "-I", str(lab.PACKAGE_CONV), "-Xptxas",
                           "-v,-warn-spills,-warn-lmem-usage", "-o", str(out), str(SOURCE)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


@needs_nvcc
def test_every_instance_compiles_for_sm90a_with_no_spills_and_unserialised_wgmmas(ptxas_log):
    kernels = re.findall(r"Compiling entry function '(\w+)'", ptxas_log)
    conv_kernels = [k for k in kernels if "conv_igemm_kernel" in k or "conv_igemm_halo_kernel" in k]
    # the transposed launchers' kernels are the conv instances' own
    assert len(conv_kernels) == len(lab.INSTANCES), ptxas_log
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", ptxas_log)
    assert len(spills) == len(kernels) and all(s == ("0", "0") for s in spills), ptxas_log
    # C7513 and kin: "wgmma.mma_async instructions are serialized" (an earlier NCHW main loop that defined the
    # A registers while wgmmas were in flight; it then died on the GPU)
    assert "serialized" not in ptxas_log, ptxas_log


@needs_nvcc
def test_the_binding_names_every_instance_the_cuda_file_defines():
    defined = set(re.findall(r"^CONV_IGEMM_(?:INSTANCE|HALO)\((\w+),", SOURCE.read_text(), re.M))
    assert defined == set(lab.INSTANCES)
    defined = set(re.findall(r"^CONV_IGEMM_TRANSPOSED\((\w+),", SOURCE.read_text(), re.M))
    assert defined == set(transposed_lab.INSTANCES)


@pytest.mark.parametrize("extent", [(1, 126, 126), (1, 254, 254), (30, 62, 62), (34, 34, 34), (20, 36, 36),
                                    (1, 514, 514), (7, 11, 35), (3, 4, 6), (1, 1, 1)])
def test_the_pixel_box_holds_128_pixels_and_wastes_no_more_than_any_other(extent):
    od, oh, ow = extent
    bd, bh, bw = lab.pixel_box(od, oh, ow)
    assert bd * bh * bw == 128 and bw in (8, 16, 32)
    if od == 1:
        assert bd == 1

    def covered(bd, bh, bw):
        return -(-ow // bw) * bw * -(-oh // bh) * bh * -(-od // bd) * bd

    others = [(128 // (w * h), h, w) for w in (32, 16, 8) for h in (1, 2, 4, 8, 16) if 128 % (w * h) == 0
              and (od > 1 or w * h == 128)]
    assert covered(bd, bh, bw) == min(covered(*o) for o in others)


def _gemm_conv(x, weight, padding, dilation, geometry, nchw_boxes):
    """The kernel's sum in float64: per tap (kd, kh, kw) and 32-channel block, the A operand as the kernel reads
    it (nchw_boxes: a box of bwb columns starting at the 16-byte-aligned column left of the tap, rows read at
    the shift past it; otherwise the channels-last box at the tap's own column) times the re-laid weight."""
    g = geometry
    dims = x.dim() - 2
    x5 = x if dims == 3 else x.unsqueeze(2)
    n, c, d, h, w = x5.shape
    w_re = lab.relayout_weight(weight.float(), g["cq"]).double()  # [K, taps, cq], TF32-rounded
    big = 64  # room for negative and past-the-end coordinates
    xp = torch.zeros(n, g["cq"], d + 2 * big, h + 2 * big, w + 2 * big, dtype=torch.float64)
    xp[:, :c, big:big + d, big:big + h, big:big + w] = x5
    out = torch.zeros(n, g["k"], g["od"], g["oh"], g["ow"], dtype=torch.float64)
    for kd in range(g["kd"]):
        for kh in range(g["kh"]):
            for kw in range(g["kw"]):
                tap = (kd * g["kh"] + kh) * g["kw"] + kw
                for ow0 in range(0, g["ow"], g["bw"]):
                    iw = ow0 + kw * g["dw"] - g["pw"]
                    if nchw_boxes:
                        start, shift = iw & ~3, iw & 3
                        assert start % 4 == 0 and 0 <= shift <= 3 and shift + g["bw"] <= g["bwb"]
                        box = xp[..., big + start: big + start + g["bwb"]]
                        cols = box[..., shift: shift + g["bw"]]
                    else:
                        cols = xp[..., big + iw: big + iw + g["bw"]]
                    width = min(g["bw"], g["ow"] - ow0)
                    a = cols[:, :, big + kd * g["dd"] - g["pd"]: big + kd * g["dd"] - g["pd"] + g["od"],
                             big + kh * g["dh"] - g["ph"]: big + kh * g["dh"] - g["ph"] + g["oh"], :width]
                    out[..., ow0: ow0 + width] += torch.einsum("ncdhw,kc->nkdhw", a, w_re[:, tap, :])
    return out if dims == 3 else out.squeeze(2)


CASES = [  # x_shape, k, window, padding, dilation
    ([2, 3, 11, 36], 7, [3, 3], [1, 1], [1, 1]),
    ([1, 40, 9, 72], 70, [3, 3], [2, 1], [1, 3]),
    ([1, 16, 5, 13, 36], 17, [3, 3, 3], [1, 1, 1], [2, 2, 2]),
    ([1, 33, 4, 6, 20], 9, [2, 4, 4], [1, 0, 3], [1, 1, 1]),
    ([2, 8, 6, 40], 5, [5, 5], [4, 4], [1, 1]),
]


@pytest.mark.parametrize("nchw_boxes", [True, False])
@pytest.mark.parametrize("case", CASES)
def test_the_kernels_tap_by_tap_sum_over_its_boxes_equals_torch_conv(case, nchw_boxes):
    x_shape, k, window, padding, dilation = case
    torch.manual_seed(0)
    x = torch.randn(x_shape, dtype=torch.float64)
    weight = torch.randn([k, x_shape[1], *window], dtype=torch.float64)
    g = lab.geometry(x_shape, k, window, padding, dilation)
    ours = _gemm_conv(x, weight, padding, dilation, g, nchw_boxes)
    rounded = lab.relayout_weight(weight.float(), g["cq"]).double()[:, :, :x_shape[1]]
    w_tf32 = rounded.permute(0, 2, 1).reshape(weight.shape)  # the same TF32-rounded weight, torch's layout
    truth = (F.conv2d if len(window) == 2 else F.conv3d)(x, w_tf32, None, 1, padding, dilation)
    assert ours.shape == truth.shape
    assert torch.allclose(ours, truth, rtol=0, atol=1e-10)


def test_a_one_column_shift_in_the_nchw_box_is_caught():
    x_shape, k, window, padding, dilation = CASES[0]
    torch.manual_seed(0)
    x = torch.randn(x_shape, dtype=torch.float64)
    weight = torch.randn([k, x_shape[1], *window], dtype=torch.float64)
    g = lab.geometry(x_shape, k, window, padding, dilation)
    wrong = dict(g, pw=g["pw"] + 1)  # the shift of a box one column off
    assert not torch.allclose(_gemm_conv(x, weight, padding, dilation, wrong, True),
                              _gemm_conv(x, weight, padding, dilation, g, True))


@pytest.mark.parametrize("bw", [32, 16])
def test_the_nchw_fragment_reads_of_a_warp_fall_in_32_banks(bw):
    bwb = lab.BOX_WIDTH[bw]
    assert bwb >= bw + 3 and bwb % 4 == 0
    for shift in range(4):
        for q in range(4):
            # lane (g, t) of warp q reads pixel 16q + g (row r0, same box row for bw >= 16) at channel t
            words = {(t * bwb + (16 * q + g) % bw + shift) % 32 for g in range(8) for t in range(4)}
            assert len(words) == 32


@pytest.mark.parametrize("dims", [2, 3])
def test_a_stride_1_transposed_convolution_is_the_convolution_as_convolution_says(dims):
    torch.manual_seed(0)
    ct = (torch.nn.ConvTranspose2d if dims == 2 else torch.nn.ConvTranspose3d)(5, 7, 3, padding=1, dilation=2)
    ct = ct.double()
    x = torch.randn([2, 5] + [6] * dims, dtype=torch.float64)
    w, padding = lab.as_convolution(ct.weight.detach(), [1] * dims, [2] * dims)
    conv = F.conv2d if dims == 2 else F.conv3d
    assert torch.allclose(conv(x, w, ct.bias, 1, padding, [2] * dims), ct(x), atol=1e-12)


def test_a_transposed_convolution_whose_padding_exceeds_the_window_is_refused():
    w = torch.randn(4, 3, 3, 3)
    assert lab.as_convolution(w, [3, 3], [1, 1])[1] is None


def _sw128_smem(a):
    """A [rows][32] fp32 tile as TMA writes it in the 128-byte swizzle: element (r, c) at byte
    r * 128 + ((c // 4) ^ (r % 8)) * 16 + (c % 4) * 4. Returns {byte address: value}."""
    return {r * 128 + ((c // 4) ^ (r % 8)) * 16 + (c % 4) * 4: a[r][c] for r in range(len(a)) for c in range(32)}


@pytest.mark.parametrize("shift", [0, 1, 2, 3, 5, 8])
def test_the_halo_kernels_ldmatrix_addresses_give_each_lane_its_window_fragment(shift):
    """conv_igemm_halo_kernel reads tap kw's A as rows kw * dw .. + 127 of the swizzled input row: lane l of
    warp q (warpgroup cw) gives ldmatrix the address of row a_row + shift at chunk (2 kk + l / 16) ^ (row % 8);
    thread L receives in r[i] the word at (address of lane 8 i + L / 4) + 4 (L % 4). That must be the m64k8
    tf32 A fragment of the window: a0 = A[g][t], a1 = A[g + 8][t], a2 = A[g][t + 4], a3 = A[g + 8][t + 4]."""
    rows = 128 + shift
    a = [[r * 100 + c for c in range(32)] for r in range(rows)]
    smem = _sw128_smem(a)
    for cw in range(2):
        for q in range(4):
            addresses = {}
            for lane in range(32):
                a_row = 64 * cw + 16 * q + (lane & 7) + ((lane >> 3) & 1) * 8
                row = a_row + shift
                for kk in range(4):
                    addresses[lane, kk] = row * 128 + (((2 * kk + (lane >> 4)) ^ (row & 7)) << 4)
            for lane in range(32):
                g, t = lane >> 2, lane & 3
                base = 64 * cw + 16 * q + shift
                for kk in range(4):
                    got = [smem[addresses[8 * i + lane // 4, kk] + 4 * (lane % 4)] for i in range(4)]
                    want = [a[base + g][8 * kk + t], a[base + g + 8][8 * kk + t], a[base + g][8 * kk + t + 4],
                            a[base + g + 8][8 * kk + t + 4]]
                    assert got == want


def test_a_window_read_without_the_shift_in_the_swizzle_is_caught():
    shift = 3
    a = [[r * 100 + c for c in range(32)] for r in range(128 + shift)]
    smem = _sw128_smem(a)
    lane = 1  # k8 step 0, row 1 of the window: chunk 0 ^ (1 + 3) in the kernel, 0 ^ 1 if the shift were forgotten
    row = 1 + shift
    wrong = row * 128 + ((0 ^ 1) << 4)
    assert smem.get(wrong + 4 * (lane % 4)) != a[row][lane % 4]


def _tile_origin(t, g, bn):
    """igemm.cuh's decomposition of block t: output-channel tile fastest, then w, h, d boxes, then the image."""
    k_tiles = -(-g["k"] // bn)
    w_tiles, h_tiles, d_tiles = (-(-g["ow"] // g["bw"]), -(-g["oh"] // g["bh"]), -(-g["od"] // g["bd"]))
    k0 = (t % k_tiles) * bn
    t //= k_tiles
    ow0 = (t % w_tiles) * g["bw"]
    t //= w_tiles
    oh0 = (t % h_tiles) * g["bh"]
    t //= h_tiles
    od0 = (t % d_tiles) * g["bd"]
    return k0, ow0, oh0, od0, t // d_tiles, k_tiles * w_tiles * h_tiles * d_tiles * g["n"]


def _written(g, bn, staged):
    """How often each output element is stored, over every tile, by the epilogue of igemm.cuh's kernel (the
    fragment form: warp q of warpgroup cw, lane (g, t), rows 16q + g (+ 8), columns 8j + 2t + e; the staged form:
    warp w takes channels w, w + 8, ..., lane l pixels l, l + 32, ...)."""
    counts = {}
    _, _, _, _, _, tiles = _tile_origin(0, g, bn)

    def store(k, img, od, oh, ow):
        if ow < g["ow"] and oh < g["oh"] and od < g["od"] and k < g["k"]:
            at = (((img * g["k"] + k) * g["od"] + od) * g["oh"] + oh) * g["ow"] + ow
            counts[at] = counts.get(at, 0) + 1

    def pixel(r):
        return r // (g["bw"] * g["bh"]), (r // g["bw"]) % g["bh"], r % g["bw"]

    for t in range(tiles):
        k0, ow0, oh0, od0, img, _ = _tile_origin(t, g, bn)
        if staged:
            for warp in range(8):
                for kc in range(warp, bn, 8):
                    for p in range(128):
                        pd, ph, pw = pixel(p)
                        store(k0 + kc, img, od0 + pd, oh0 + ph, ow0 + pw)
            continue
        for cw in range(2):
            for q in range(4):
                for lane in range(32):
                    for half in range(2):
                        pd, ph, pw = pixel(64 * cw + 16 * q + lane // 4 + 8 * half)
                        for j in range(bn // 8):
                            for e in range(2):
                                store(k0 + 8 * j + 2 * (lane % 4) + e, img, od0 + pd, oh0 + ph, ow0 + pw)
    return counts


@pytest.mark.parametrize("staged", [False, True])
@pytest.mark.parametrize("shape", [([2, 16, 11, 37], 70, [3, 3], [1, 1]), ([1, 33, 5, 9, 35], 29, [2, 3, 3], [1, 1, 1]),
                                   ([1, 8, 3, 6, 10], 130, [1, 1, 1], [0, 0, 0])])
def test_the_kernels_epilogue_stores_every_output_element_exactly_once(shape, staged):
    x_shape, k, window, padding = shape
    g = lab.geometry(x_shape, k, window, padding, [1] * len(window))
    for bn in (64, 128):
        counts = _written(g, bn, staged)
        assert len(counts) == g["n"] * g["k"] * g["od"] * g["oh"] * g["ow"] and set(counts.values()) == {1}
