"""dev/kernels/conv_wgmma_shift lab: the few-channel stride-1 convolution on tensor cores (3xTF32, every tap the same
shared-memory band read through a shifted wgmma descriptor) compiles for sm_90a without spills and without ptxas
serialising its wgmmas; and the identity it rests on holds: reading the band's planes through a K-major descriptor
without swizzle, moved by a tap's offset, gives that tap's operand, so the chunks' products summed over the taps are
the convolution. CPU only: its speed and error on a GPU are measured by bench_conv_shift.py."""

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from compile_check import NVCC, lab_kernels_for_hopper

LAB = Path(__file__).resolve().parents[1] / "dev" / "kernels" / "conv_wgmma_shift"
sys.path.insert(0, str(LAB))
import bench_conv_shift as lab  # noqa: E402

# the lab's variants and the product's kernel (families/conv/shift.cuh), whose band and weight helpers they share
SOURCE = (LAB / "conv_shift.cuh").read_text() + (LAB.parents[2] / "fuseforge" / "families" / "conv" / "shift.cuh").read_text()
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="needs nvcc")


@needs_nvcc
def test_every_instance_compiles_for_sm90a_with_no_spills_and_unserialised_wgmmas(tmp_path):
    assert len(lab_kernels_for_hopper(lab.source(), tmp_path, "conv_shift_kernel")) == sum(len(lab.kinds_of(n)) for n, *_ in lab.INSTANCES)


def _read_k_major(mem: np.ndarray, start: int, lbo: int, sbo: int, rows: int) -> np.ndarray:
    """The [rows][8] tf32 operand a K-major descriptor without swizzle reads from `mem` (float32 words, byte
    addresses): element (n, k) at start + (n // 8) sbo + (n % 8) 16 + (k // 4) lbo + (k % 4) 4 (PTX ISA, wgmma's
    canonical K-major layout without swizzling: 8-row x 16-byte core matrices)."""
    n, k = np.arange(rows)[:, None], np.arange(8)[None, :]
    at = start + (n // 8) * sbo + (n % 8) * 16 + (k // 4) * lbo + (k % 4) * 4
    assert (at % 4 == 0).all()
    return mem[at // 4]


def _emulate(x: np.ndarray, w: np.ndarray, padding, dilation, chunks: int) -> np.ndarray:
    """The kernel's data movement in float64, as conv_shift.cuh does it: per band of `chunks` x 128 positions (in the
    padded row order) the padded image's pixels i0 .. i0 + band_inputs copied into 4-channel planes of band_pixels
    pixels, per chunk and tap the weights' [64][8] tile and the planes read through their descriptors, the products
    summed; outputs at columns >= OW or rows >= OH dropped."""
    n_img, c, h, wd = x.shape
    k_out, _, kh, kw = w.shape
    (ph, pw), (dh, dw) = padding, dilation
    oh, ow = h + 2 * ph - dh * (kh - 1), wd + 2 * pw - dw * (kw - 1)
    wp = wd + 2 * pw
    quads = (c + 7) // 8 * 2
    band = chunks * 128
    inputs = band + (kh - 1) * dh * wp + (kw - 1) * dw  # band_inputs
    pixels = (inputs + 7) // 8 * 8  # band_pixels
    plane_bytes = pixels * 16
    wpad = np.zeros((64, quads * 4, kh, kw))
    wpad[:k_out, :c] = w
    y = np.zeros((n_img, k_out, oh, ow))
    for n in range(n_img):
        for i0 in range(0, oh * wp, band):
            mem = np.zeros(quads * pixels * 4)
            for p in range(inputs):
                row, col = divmod(i0 + p, wp)
                gh, gw = row - ph, col - pw
                if 0 <= gh < h and 0 <= gw < wd:
                    for ch in range(c):
                        mem[(ch // 4) * pixels * 4 + p * 4 + ch % 4] = x[n, ch, gh, gw]
            for chunk in range(chunks):
                p0 = chunk * 128
                acc = np.zeros((64, 128))
                for r in range(kh):
                    for s in range(kw):
                        for j in range(quads // 2):
                            tile = np.zeros(64 * 8)  # the weights' [64][8] tile, written as the kernel does
                            for m in range(64):
                                for kk in range(8):
                                    tile[((kk // 4) * 1024 + m * 16 + (kk % 4) * 4) // 4] = wpad[m, 8 * j + kk, r, s]
                            a = _read_k_major(tile, 0, 1024, 128, 64)
                            b = _read_k_major(mem, 2 * j * plane_bytes + (p0 + r * dh * wp + s * dw) * 16,
                                              plane_bytes, 128, 128)
                            acc += a @ b.T
                for col in range(128):
                    orow, ocol = divmod(i0 + p0 + col, wp)
                    if ocol < ow and orow < oh:
                        y[n, :, orow, ocol] = acc[:k_out, col]
    return y


@pytest.mark.parametrize("shape, k_out, kernel, padding, dilation, chunks", [
    ((1, 8, 9, 13), 16, (3, 3), (0, 0), (1, 1), 1),
    ((2, 3, 7, 11), 5, (3, 3), (1, 1), (1, 1), 2),
    ((1, 8, 10, 12), 8, (3, 3), (2, 2), (2, 2), 1),
    ((1, 16, 9, 30), 4, (5, 5), (2, 1), (1, 1), 2),
])
def test_shifted_descriptors_over_the_band_compute_the_convolution(shape, k_out, kernel, padding, dilation, chunks):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape)
    w = rng.standard_normal((k_out, shape[1], *kernel))
    got = _emulate(x, w, padding, dilation, chunks)
    want = F.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=padding, dilation=dilation).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_the_kernel_text_uses_the_layout_the_emulation_reads():
    """The emulation above mirrors these lines; if one changes, the other must."""
    assert "static_cast<uint64_t>((addr & 0x3FFFFu) >> 4) | (static_cast<uint64_t>(lbo >> 4) << 16) |" in SOURCE
    assert "(static_cast<uint64_t>(sbo >> 4) << 32);" in SOURCE and "<< 62" not in SOURCE.split("desc_plain")[1][:400]
    assert "x_addr + 2 * j * plane_bytes + (p0 + r * g.dh * wp + s * g.dw) * 16" in SOURCE
    assert "pos0 = (t % bands_per_image) * band_positions + chunk * Q::kN + 2 * tq" in SOURCE
    assert "desc_plain(b, plane_bytes, 128)" in SOURCE and "desc_plain(a, 1024, 128)" in SOURCE
    assert "(kk / 4) * 1024 + m * 16 + (kk % 4) * 4" in SOURCE
    assert "buf + (c / 4) * pixels * 4 + p * 4 + c % 4" in SOURCE and "int row = (i0 + tid) / wp" in SOURCE
    assert "return chunks * 128 + (kh - 1) * g.dh * (g.w + 2 * g.pw) + (kw - 1) * g.dw;" in SOURCE
    assert "return (band_inputs(g, kh, kw, chunks) + 7) / 8 * 8;" in SOURCE


def _tf32(v: np.ndarray) -> np.ndarray:  # conv_shift.cuh's tf32_round
    return ((v.astype(np.float32).view(np.uint32) + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


def _toward_zero(v: np.ndarray) -> np.ndarray:  # float64 -> the float32 next toward zero
    f = v.astype(np.float32)
    over = np.abs(f.astype(np.float64)) > np.abs(v)
    f[over] = np.nextafter(f[over], np.float32(0))
    return f


def _accumulated(order: str, positions: int = 20000) -> float:
    """Max error / RMS of the truth of a 9-tap, 8-channel 3xTF32 dot product when each wgmma adds its k8 products
    into the float32 sum rounding toward zero (the tensor cores' accumulation; the products and their k8 sum taken
    exact), in the given order of the 27 products."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((positions, 9, 8)).astype(np.float32)
    w = (rng.standard_normal((9, 8)) / np.sqrt(72)).astype(np.float32)
    truth = np.einsum("ptk,tk->p", x.astype(np.float64), w.astype(np.float64))
    xb, wb = _tf32(x), _tf32(w)
    xs, ws = _tf32(x - xb), _tf32(w - wb)

    def mma(acc, a, b):
        return _toward_zero(acc.astype(np.float64) + a.astype(np.float64) @ b.astype(np.float64))

    small = [(xb[:, t], ws[t]) for t in range(9)] + [(xs[:, t], wb[t]) for t in range(9)]
    big = [(xb[:, t], wb[t]) for t in range(9)]
    acc = np.zeros(positions, np.float32)
    if order == "small first":
        for a, b in small + big:
            acc = mma(acc, a, b)
    else:  # tap by tap: small, small, big
        for t in range(9):
            for a, b in (small[t], small[9 + t], big[t]):
                acc = mma(acc, a, b)
    return float(np.abs(acc - truth).max() / np.sqrt((truth ** 2).mean()))


def test_small_products_first_keeps_the_truncating_accumulation_fp32_class():
    """The order conv_shift.cuh issues (every tap's small products, then the big ones) against tap by tap: the
    first leaves 9 of the 27 truncating accumulations at the sum's full size, the second 27. On the GPU tap by tap
    measured 2.5-3.6e-6 and a fresh partial a kernel row 1.0-1.5e-6 (bench/results/2026-11-29e_gpu, run 2); this model
    gives 2.5e-6 and 1.0e-6 for them."""
    first, tap_by_tap = _accumulated("small first"), _accumulated("tap by tap")
    assert first < 1.3e-6 < 2e-6 < tap_by_tap
    body = SOURCE[SOURCE.index("if constexpr (!kPartials) {"):SOURCE.index("float (&sum)[64]")]
    assert body.index("for (int pass = 0; pass < 2; ++pass)") < body.index("if (pass == 0) {")
    assert body.index("o.a_small, o.b_big") < body.index("o.a_big, o.b_small") < body.index("o.a_big, o.b_big")
    product = SOURCE[SOURCE.index("auto issue = [&](uint32_t x_addr, int chunk, float (&d)[64]) {"):]
    product = product[:product.index("wgmma_commit();")]
    assert product.index("for (int pass = 0; pass < 2; ++pass)") < product.index("if (pass == 0) {")
    assert product.index("desc_plain(a + Q::kATile, 1024, 128), b_big") < product.index("a_big, desc_plain(b + Q::kQuads") \
        < product.index("wgmma_n128(d, a_big, b_big)")
