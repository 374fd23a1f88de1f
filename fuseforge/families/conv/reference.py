"""The conv kernel's float64 reference: the convolution as the kernel computes it, a sum over the window's taps of
the weight times the zero-padded input read at the tap's strided, dilated offsets, from the plan's own geometry
(channels, window, stride, padding, dilation), not from the graph's op. A geometry the plan got wrong (a padding
or stride misread from the graph) therefore differs from the graph's convolution in the CPU check."""

from __future__ import annotations

import torch

from .group import ConvAnchor


def direct_conv(conv: ConvAnchor, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """y[n, k, o] = sum over c and taps t of w[k, c, t] * x_padded[n, c, o * stride + t * dilation] (+ bias[k])."""
    if conv.dims == 2:
        x, w = x.unsqueeze(2), w.unsqueeze(2)  # depth 1
    (kd, kh, kw), (sd, sh, sw), (pd, ph, pw), (dd, dh, dw) = conv.window, conv.stride, conv.padding, conv.dilation
    if x.shape[1] != conv.c or tuple(w.shape) != (conv.k, conv.c, kd, kh, kw):
        raise ValueError(f"the conv kernel takes {conv.c} -> {conv.k} channels, window {conv.window}; got input "
                         f"{list(x.shape)}, weight {list(w.shape)}")
    xp = torch.nn.functional.pad(x, (pw, pw, ph, ph, pd, pd))
    n, _, d, h, wi = xp.shape
    od, oh, ow = ((d - dd * (kd - 1) - 1) // sd + 1, (h - dh * (kh - 1) - 1) // sh + 1, (wi - dw * (kw - 1) - 1) // sw + 1)
    y = x.new_zeros((n, conv.k, od, oh, ow))
    for a in range(kd):
        for b in range(kh):
            for e in range(kw):
                tap = xp[:, :, a * dd: a * dd + (od - 1) * sd + 1: sd, b * dh: b * dh + (oh - 1) * sh + 1: sh,
                         e * dw: e * dw + (ow - 1) * sw + 1: sw]
                y += torch.einsum("ncdhw,kc->nkdhw", tap, w[:, :, a, b, e])
    if bias is not None:
        y += bias.reshape(1, -1, 1, 1, 1)
    return y.squeeze(2) if conv.dims == 2 else y
