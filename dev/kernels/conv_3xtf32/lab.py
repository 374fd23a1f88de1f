"""The 3xTF32 tensor-core convolution lab (`conv_tf32x3.cuh`): its instances, the CUDA source the bench builds, and
a float64 numpy transliteration of the kernel's tiling, fragment layout and index math.

The transliteration follows the kernel step by step: the input tile copied into a flat shared-memory array at the
kernel's addresses (NaN where the kernel writes nothing, so a read of an unwritten slot shows), the weights written
in fragment order, each lane's A and B registers read at the kernel's addresses, the mma's 16 x 8 x 8 product
assembled from the lanes' registers by the PTX fragment layout, and each accumulator stored at the kernel's output
index (a count per output catches a slot written twice or never). With `split=True` the operands are rounded to
TF32 as the kernel does (cvt.rna), so its error against float64 is the 3xTF32 representation error alone (the
tensor core's fp32 accumulation is not modelled).
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(REPO))
from fuseforge.families.conv import tiling  # noqa: E402

TILE_W = 32


@dataclass(frozen=True)
class Instance:
    """One instantiation: C input channels, window KD x KH x KW, NT n8 tiles (8 * NT output channels a block),
    WH warps (output rows) a block. `direct`: also instantiate the product's direct kernel for this shape
    (stride 1, no dilation), to compare."""

    name: str
    c: int
    kd: int
    kh: int
    kw: int
    nt: int
    wh: int
    direct: bool = False

    @property
    def cp(self) -> int:
        return (self.c + 7) // 8 * 8

    @property
    def steps(self) -> int:
        return self.kd * (self.cp // 8) * self.kh * self.kw

    @property
    def block_k(self) -> int:
        return 8 * self.nt


INSTANCES = (
    # the KernelBench development set's few-channel convolutions (dev/kernels/conv_direct/README.md): 4 warps a block,
    # fewer where half an SM's shared memory is short (8 warps, capped at 128 registers for two blocks an SM, spilled)
    Instance("c8_k3x3_n64_w4", 8, 1, 3, 3, 8, 4, direct=True),  # 57 65 67 73 85 87 (8 -> 64, 3x3)
    Instance("c3_k3x3x3_n16", 3, 3, 3, 3, 2, 4, direct=True),   # 48 83 (3 -> 16, 3x3x3)
    Instance("c3_k3x3x3_n24", 3, 3, 3, 3, 3, 4, direct=True),   # 24 (3 -> 24)
    Instance("c3_k4x4x4_n16", 3, 4, 4, 4, 2, 1, direct=True),   # 27 (3 -> 16, 4x4x4)
    Instance("c3_k3x3_n64", 3, 1, 3, 3, 8, 4, direct=True),     # an RGB stem, 3 -> 64
    # odd instances for the GPU's correctness cases
    Instance("c16_k3x3_n32", 16, 1, 3, 3, 4, 4),                # two channel blocks
    Instance("c5_k5x5_n8", 5, 1, 5, 5, 1, 2),                   # padded channels, one n8 tile
)


def plane(th_in: int, tw_in: int) -> int:
    return (th_in * tw_in + 23) // 32 * 32 + 8


def geometry(x_shape, k: int, window, stride, padding, dilation) -> list[int]:
    """The kernel's 18 geometry ints (n c d h w, k od oh ow, stride, padding, dilation; depth, rows, columns) of a
    2-D (x [N, C, H, W], window (KH, KW)) or 3-D convolution."""
    if len(x_shape) == 4:
        x_shape = (x_shape[0], x_shape[1], 1, *x_shape[2:])
        window, stride, padding, dilation = (1, *window), (1, *stride), (0, *padding), (1, *dilation)
    n, c, d, h, w = x_shape
    out = [(size + 2 * p - dl * (kk - 1) - 1) // s + 1
           for size, kk, s, p, dl in zip((d, h, w), window, stride, padding, dilation, strict=True)]
    return [n, c, d, h, w, k, *out, *stride, *padding, *dilation]


# ---- CUDA source ----------------------------------------------------------------------------------------------

EPILOGUES = r"""
// Epilogues (acc, k, at): 0 = + bias; 1 = + bias, relu; 2 = + bias, - a, - b, mish (a conv-subtract-mish tail).
struct LabEpi {
    const float* bias;  // nullptr: none
    int kind;
    float a, b;
    __device__ __forceinline__ float operator()(float acc, int k, int64_t) const {
        float v = acc + (bias ? __ldg(bias + k) : 0.0f);
        if (kind == 1) return ff_relu(v);
        if (kind == 2) return ff_mish((v - a) - b);
        return v;
    }
};
"""


def _geometry_init(ns: str) -> str:
    return (f"    const {ns}::Geometry g{{geom[0], geom[1], geom[2], geom[3], geom[4], geom[5], geom[6], geom[7], "
            "geom[8], geom[9], geom[10], geom[11], geom[12], geom[13], geom[14], geom[15], geom[16], geom[17]};\n")


def _launcher(inst: Instance) -> str:
    head = (f'extern "C" int conv3x_{inst.name}(const float* x, const float* w, const float* bias, float* y, '
            "const int* geom, int kind, float a, float b, void* stream) {\n")
    body = (_geometry_init("ff_conv_tf32x3") + "    const LabEpi epi{bias, kind, a, b};\n"
            f"    return (int)ff_conv_tf32x3::launch<{inst.c}, {inst.kd}, {inst.kh}, {inst.kw}, {inst.nt}, {inst.wh}>"
            "(x, w, y, g, epi, static_cast<cudaStream_t>(stream));\n}\n")
    text = head + body
    if inst.direct:
        t = tiling.choose(inst.c, inst.block_k, (inst.kd, inst.kh, inst.kw), (1, 1, 1), (1, 1, 1), 1 << 20)
        assert isinstance(t, tiling.Tiling), t
        text += (f'extern "C" int direct_{inst.name}(const float* x, const float* w, const float* bias, float* y, '
                 "const int* geom, int kind, float a, float b, void* stream) {\n" + _geometry_init("ff_conv_direct")
                 + "    const LabEpi epi{bias, kind, a, b};\n"
                 f"    return (int)ff_conv_direct::launch<{inst.c}, {inst.kd}, {inst.kh}, {inst.kw}, {t.kpt}, {t.wk}, "
                 f"{t.wh}, {t.ph}, true>(x, w, y, g, epi, static_cast<cudaStream_t>(stream));\n}}\n")
    return text


def lab_source(instances=INSTANCES) -> str:
    """One .cu file: the pointwise prelude, the product's direct kernel, this kernel, the epilogue and the C
    launchers conv3x_NAME (and direct_NAME) (x, w, bias, y, geom[18], kind, a, b, stream) -> cudaError_t."""
    parts = [
        "#include <cstdint>\n#include <cuda_runtime.h>\n",
        (REPO / "fuseforge" / "cuda" / "prelude.cuh").read_text(),
        (REPO / "fuseforge" / "families" / "conv" / "direct.cuh").read_text(),
        (HERE / "conv_tf32x3.cuh").read_text(),
        EPILOGUES,
    ]
    parts += [_launcher(inst) for inst in instances]
    return "\n".join(parts)


# ---- float64 transliteration ----------------------------------------------------------------------------------

def to_tf32(v: np.ndarray) -> np.ndarray:
    """cvt.rna.tf32.f32 of float32 values: 10 mantissa bits, round to nearest, ties away from zero."""
    bits = np.asarray(v, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bits = ((bits + 0x1000) & 0xFFFFE000).astype(np.uint32)
    return bits.view(np.float32)


def _split(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    v = np.asarray(v, dtype=np.float32)
    hi = to_tf32(v)
    lo = to_tf32((v - hi).astype(np.float32))
    return hi.astype(np.float64), lo.astype(np.float64)


def simulate(x: np.ndarray, w: np.ndarray, geom: list[int], inst: Instance, split: bool = True) -> np.ndarray:
    """The kernel's output (before any epilogue) for x [N, C, D, H, W] and w [K, C, KD, KH, KW] (float32 arrays),
    in float64. Raises if a read touches a slot the kernel never wrote or an output is written other than once."""
    n_, c_, d_, h_, w_, k_, od_, oh_, ow_, sd, sh, sw, pd, ph, pw, dd, dh, dw = geom
    kd_, kh_, kw_, nt_, wh_ = inst.kd, inst.kh, inst.kw, inst.nt, inst.wh
    assert c_ == inst.c and w.shape == (k_, c_, kd_, kh_, kw_)
    cp, cb_n = inst.cp, inst.cp // 8
    tw_in = (TILE_W - 1) * sw + (kw_ - 1) * dw + 1
    th_in = (wh_ - 1) * sh + (kh_ - 1) * dh + 1
    pl = plane(th_in, tw_in)
    tiles_w, tiles_h = math.ceil(ow_ / TILE_W), math.ceil(oh_ / wh_)
    tiles = n_ * od_ * tiles_h * tiles_w
    xf, wf = x.reshape(-1), w.reshape(-1)
    y = np.full(n_ * k_ * od_ * oh_ * ow_, np.nan)
    writes = np.zeros(y.size, dtype=np.int64)
    lane = np.arange(32)
    grp, tig = lane >> 2, lane & 3

    def tile_coords(t):
        return t % tiles_w, (t // tiles_w) % tiles_h, (t // tiles_w // tiles_h) % od_, t // tiles_w // tiles_h // od_

    for by in range(math.ceil(k_ / inst.block_k)):
        k0 = by * inst.block_k
        # weights in fragment order: w_s[step][nt][lane] = (hi b0, hi b1, lo b0, lo b1); b0 = W[k][c], b1 = W[k][c + 4]
        w_hi = np.zeros((inst.steps, nt_, 32, 2))
        w_lo = np.zeros((inst.steps, nt_, 32, 2))
        for step in range(inst.steps):
            s, r = step % kw_, (step // kw_) % kh_
            cb, kd = (step // kw_ // kh_) % cb_n, step // kw_ // kh_ // cb_n
            for nt in range(nt_):
                k = k0 + nt * 8 + grp
                for hh in range(2):
                    ch = cb * 8 + tig + 4 * hh
                    ok = (k < k_) & (ch < c_)
                    idx = ((((np.where(ok, k, 0) * c_ + np.where(ok, ch, 0)) * kd_ + kd) * kh_ + r) * kw_ + s)
                    v = np.where(ok, wf[idx], 0.0).astype(np.float32)
                    hi, lo = _split(v) if split else (v.astype(np.float64), np.zeros(32))
                    w_hi[step, nt, :, hh], w_lo[step, nt, :, hh] = hi, lo
        for t in range(tiles):
            tw, th, od, n = tile_coords(t)
            buf = np.full(kd_ * cp * pl, np.nan)
            gd0, gh0, gw0 = od * sd - pd, th * wh_ * sh - ph, tw * TILE_W * sw - pw
            for q in range(kd_ * cp * th_in):  # load_tile
                hh, c, kd = q % th_in, (q // th_in) % cp, q // th_in // cp
                gd, gh = gd0 + kd * dd, gh0 + hh
                row_ok = c < c_ and 0 <= gd < d_ and 0 <= gh < h_
                gw = gw0 + np.arange(tw_in)
                ok = row_ok & (gw >= 0) & (gw < w_)
                src = ((n * c_ + (c if row_ok else 0)) * d_ + (gd if row_ok else 0)) * h_ * w_ + \
                    (gh if row_ok else 0) * w_
                dst = (kd * cp + c) * pl + hh * tw_in + np.arange(tw_in)
                buf[dst] = np.where(ok, xf[np.where(ok, src + gw, 0)], 0.0)
            for wh in range(wh_):
                acc = np.zeros((2, nt_, 4, 32))
                xa = tig * pl + (wh * sh) * tw_in + grp * sw
                for kdcb in range(kd_ * cb_n):
                    kd, cb = kdcb // cb_n, kdcb % cb_n
                    xk = xa + (kd * cp + cb * 8) * pl
                    for r in range(kh_):
                        for s in range(kw_):
                            xt = xk + r * dh * tw_in + s * dw
                            step = (kdcb * kh_ + r) * kw_ + s
                            a_regs = np.empty((2, 4, 32))
                            for m in range(2):
                                for i, off in enumerate((0, 8 * sw, 4 * pl, 8 * sw + 4 * pl)):
                                    a_regs[m, i] = buf[xt + m * 16 * sw + off]
                            if np.isnan(a_regs).any():
                                raise AssertionError(f"tile {t} warp {wh} step {step}: read an unwritten slot")
                            a_hi, a_lo = _split(a_regs) if split else (a_regs, np.zeros_like(a_regs))
                            for nt in range(nt_):
                                b_hi, b_lo = w_hi[step, nt], w_lo[step, nt]
                                for m in range(2):
                                    for a_, b_ in ((a_lo[m], b_hi), (a_hi[m], b_lo), (a_hi[m], b_hi)):
                                        acc[m, nt] += _mma(a_, b_)
                ow_base = tw * TILE_W
                oh = th * wh_ + wh
                if oh >= oh_:
                    continue
                for nt in range(nt_):
                    for i in range(4):
                        k = k0 + nt * 8 + 2 * tig + (i & 1)
                        for m in range(2):
                            ow = ow_base + m * 16 + grp + 8 * (i >> 1)
                            ok = (k < k_) & (ow < ow_)
                            at = ((n * k_ + k[ok]) * od_ + od) * oh_ * ow_ + oh * ow_ + ow[ok]
                            y[at] = acc[m, nt, i][ok]
                            np.add.at(writes, at, 1)
    if (writes != 1).any():
        raise AssertionError(f"{int((writes == 0).sum())} outputs never written, {int((writes > 1).sum())} twice")
    return y.reshape(n_, k_, od_, oh_, ow_)


def _mma(a_regs: np.ndarray, b_regs: np.ndarray) -> np.ndarray:
    """mma.m16n8k8 (tf32, row.col) of the warp's registers: a_regs [4][32], b_regs [32][2] -> the D fragment
    [4][32] to add to the accumulators. PTX layout: a_i = A[grp + 8 (i & 1)][tig + 4 (i >> 1)], b_j =
    B[tig + 4 j][grp], d_i = D[grp + 8 (i >> 1)][2 tig + (i & 1)]."""
    lane = np.arange(32)
    grp, tig = lane >> 2, lane & 3
    a = np.zeros((16, 8))
    b = np.zeros((8, 8))
    for i in range(4):
        a[grp + 8 * (i & 1), tig + 4 * (i >> 1)] = a_regs[i]
    for j in range(2):
        b[tig + 4 * j, grp] = b_regs[:, j]
    d = a @ b
    return np.stack([d[grp + 8 * (i >> 1), 2 * tig + (i & 1)] for i in range(4)])
