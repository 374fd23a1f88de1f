"""Host-side helpers for conv_direct.cu: its instantiations, its geometry, and a float64 numpy model of its
tiling and index math (a line-by-line transliteration of the kernel: tile decode, halo copy with zero fill,
weight transpose, per-thread rows/columns/channels, both row paths, bounded stores).

The model checks the indexing without a GPU (tests/test_conv_direct_lab.py); it says nothing about the
kernel's speed or its fp32 rounding.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SOURCE = Path(__file__).resolve().parent / "conv_direct.cu"
KERNEL = Path(__file__).resolve().parents[3] / "fuseforge" / "families" / "conv" / "direct.cuh"  # the package's kernel


def lab_source() -> str:
    """The lab's launchers with the package's kernel pasted in place of its #include (one translation unit)."""
    return SOURCE.read_text().replace('#include "direct.cuh"', KERNEL.read_text(), 1)
TILE_W = 32


@dataclass(frozen=True)
class Config:
    """One CONV_DIRECT_LAUNCHER instantiation: C, kernel window, KPT channels x PH rows per thread, WK x WH warps."""

    name: str
    c: int
    kd: int
    kh: int
    kw: int
    kpt: int
    wk: int
    wh: int
    ph: int

    @property
    def threads(self) -> int:
        return 32 * self.wk * self.wh

    @property
    def tile_h(self) -> int:
        return self.wh * self.ph

    @property
    def block_k(self) -> int:
        return self.wk * self.kpt

    @property
    def weight_floats(self) -> int:
        return self.c * self.kd * self.kh * self.kw * self.block_k

    @property
    def dims(self) -> int:
        return 2 if self.kd == 1 else 3


@dataclass(frozen=True)
class Geometry:
    """Mirrors conv_direct::Geometry (the 18 ints a launcher takes, in this order)."""

    n: int
    c: int
    d: int
    h: int
    w: int
    k: int
    od: int
    oh: int
    ow: int
    sd: int
    sh: int
    sw: int
    pd: int
    ph: int
    pw: int
    dd: int
    dh: int
    dw: int

    def ints(self) -> list[int]:
        return [getattr(self, f) for f in self.__dataclass_fields__]


def parse_configs(source: str | None = None) -> list[Config]:
    text = SOURCE.read_text() if source is None else source
    found = re.findall(r"^CONV_DIRECT_LAUNCHER\((\w+),\s*([\d,\s]+)\)", text, re.M)
    return [Config(name, *(int(v) for v in values.split(","))) for name, values in found]


def _out(size: int, k: int, s: int, p: int, d: int) -> int:
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


def geometry(x_shape, k_out: int, window, stride, padding, dilation) -> Geometry:
    """The launcher's geometry for input x_shape ([N,C,H,W] or [N,C,D,H,W]) and per-axis window/stride/... tuples."""
    if len(x_shape) == 4:
        x_shape = (x_shape[0], x_shape[1], 1, *x_shape[2:])
        window, stride, padding, dilation = ((1, *window), (1, *stride), (0, *padding), (1, *dilation))
    n, c, d, h, w = x_shape
    od, oh, ow = (_out(v, *a) for v, a in zip((d, h, w), zip(window, stride, padding, dilation), strict=True))
    return Geometry(n, c, d, h, w, k_out, od, oh, ow, *stride, *padding, *dilation)


def pick_config(configs: list[Config], c: int, window: tuple[int, ...], k_out: int) -> Config | None:
    """The instantiation for (C, window): the one wasting the fewest channel slots, then the widest."""
    window = tuple(window) if len(window) == 3 else (1, *window)
    fits = [cf for cf in configs if (cf.c, cf.kd, cf.kh, cf.kw) == (c, *window)]
    if not fits:
        return None
    return min(fits, key=lambda cf: (-(-k_out // cf.block_k) * cf.block_k - k_out, -cf.block_k))


def tw_in(cf: Config, g: Geometry) -> int:
    return (TILE_W - 1) * g.sw + (cf.kw - 1) * g.dw + 1


def th_in(cf: Config, g: Geometry) -> int:
    return (cf.tile_h - 1) * g.sh + (cf.kh - 1) * g.dh + 1


def tile_floats(cf: Config, g: Geometry) -> int:
    return cf.c * cf.kd * th_in(cf, g) * tw_in(cf, g)


def smem_bytes(cf: Config, g: Geometry) -> int:
    return 4 * (cf.weight_floats + 2 * tile_floats(cf, g))


def tiles(cf: Config, g: Geometry) -> int:
    return g.n * g.od * -(-g.oh // cf.tile_h) * -(-g.ow // TILE_W)


def _decode(cf: Config, g: Geometry, t: int) -> tuple[int, int, int, int]:
    tiles_w, tiles_h = -(-g.ow // TILE_W), -(-g.oh // cf.tile_h)
    tw, th, od = t % tiles_w, (t // tiles_w) % tiles_h, (t // tiles_w // tiles_h) % g.od
    return t // tiles_w // tiles_h // g.od, od, th, tw


def _load_tile(cf: Config, g: Geometry, x: np.ndarray, t: int) -> np.ndarray:
    """The kernel's load_tile: [C][KD][TH_IN][TW_IN], zero outside the input. x is flat [N,C,D,H,W]."""
    n, od, th, tw = _decode(cf, g, t)
    ti, wi = th_in(cf, g), tw_in(cf, g)
    buf = np.full(tile_floats(cf, g), np.nan)  # every slot must be written
    gd0, gh0, gw0 = od * g.sd - g.pd, th * cf.tile_h * g.sh - g.ph, tw * TILE_W * g.sw - g.pw
    for q in range(cf.c * cf.kd * ti):
        hh, kd, c = q % ti, (q // ti) % cf.kd, q // ti // cf.kd
        gd, gh = gd0 + kd * g.dd, gh0 + hh
        row_ok = 0 <= gd < g.d and 0 <= gh < g.h
        src = ((n * cf.c + c) * g.d + (gd if row_ok else 0)) * g.h * g.w + (gh if row_ok else 0) * g.w
        gw = gw0 + np.arange(wi)
        ok = row_ok & (gw >= 0) & (gw < g.w)
        buf[q * wi: (q + 1) * wi] = np.where(ok, x[np.where(ok, src + gw, 0)], 0.0)
    return buf


def _load_weights(cf: Config, g: Geometry, w: np.ndarray, k0: int) -> np.ndarray:
    """[C][KD][KW][KH][BK] from PyTorch's flat [K][C][KD][KH][KW]; channels past K are zero."""
    i = np.arange(cf.weight_floats)
    kk, row = i % cf.block_k, i // cf.block_k
    r, s = row % cf.kh, (row // cf.kh) % cf.kw
    kd, c = (row // cf.kh // cf.kw) % cf.kd, row // cf.kh // cf.kw // cf.kd
    k = k0 + kk
    src = (((k * cf.c + c) * cf.kd + kd) * cf.kh + r) * cf.kw + s
    return np.where(k < g.k, w[np.where(k < g.k, src, 0)], 0.0)


def model_conv(cf: Config, g: Geometry, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None,
               unit_rows: bool | None = None) -> np.ndarray:
    """The output the kernel computes (float64, epilogue = bias), block by block and warp by warp."""
    if unit_rows is None:
        unit_rows = g.sh == 1 and g.dh == 1
    assert not unit_rows or (g.sh == 1 and g.dh == 1)
    x, w = np.asarray(x, np.float64).ravel(), np.asarray(w, np.float64).ravel()
    y = np.full(g.n * g.k * g.od * g.oh * g.ow, np.nan)
    ti, wi, bk = th_in(cf, g), tw_in(cf, g), cf.block_k
    lane = np.arange(32)
    for group in range(-(-g.k // bk)):
        k0 = group * bk
        w_s = _load_weights(cf, g, w, k0)
        for t in range(tiles(cf, g)):
            cur = _load_tile(cf, g, x, t)
            n, od, th, tw = _decode(cf, g, t)
            for warp in range(cf.wk * cf.wh):
                wk, wh = warp % cf.wk, warp // cf.wk
                acc = np.zeros((cf.ph, cf.kpt, 32))
                row0, col0 = wh * cf.ph * g.sh, lane * g.sw
                for ckd in range(cf.c * cf.kd):  # c outer, kd inner
                    xs = (ckd * ti + row0) * wi + col0
                    ws = ckd * (cf.kw * cf.kh * bk) + wk * cf.kpt
                    for s in range(cf.kw):
                        wv = [w_s[ws + (s * cf.kh + r) * bk: ws + (s * cf.kh + r) * bk + cf.kpt] for r in range(cf.kh)]
                        xc = xs + s * g.dw
                        if unit_rows:
                            xv = [cur[xc + i * wi] for i in range(cf.ph + cf.kh - 1)]
                            for r in range(cf.kh):
                                for j in range(cf.ph):
                                    acc[j] += wv[r][:, None] * xv[j + r][None, :]
                        else:
                            for r in range(cf.kh):
                                for j in range(cf.ph):
                                    acc[j] += wv[r][:, None] * cur[xc + (j * g.sh + r * g.dh) * wi][None, :]
                ow = tw * TILE_W + lane
                oh0 = th * cf.tile_h + wh * cf.ph
                for kk in range(cf.kpt):
                    k = k0 + wk * cf.kpt + kk
                    if k >= g.k:
                        break
                    for j in range(cf.ph):
                        if oh0 + j < g.oh:
                            keep = ow < g.ow
                            idx = ((n * g.k + k) * g.od + od) * g.oh * g.ow + (oh0 + j) * g.ow + ow[keep]
                            y[idx] = acc[j, kk, keep] + (0.0 if bias is None else bias[k])
    return y.reshape(g.n, g.k, g.od, g.oh, g.ow)
