"""The conv kernel's float64 reference: the convolution as the kernel computes it, a sum over the window's taps of
the weight times the zero-padded input read at the tap's strided, dilated offsets, from the plan's own geometry
(channels, window, stride, padding, dilation), not from the graph's op. A geometry the plan got wrong (a padding
or stride misread from the graph) therefore differs from the graph's convolution in the CPU check."""

from __future__ import annotations

import torch

from .anchor import ConvAnchor


def direct_conv(conv: ConvAnchor, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """y[n, k, o] = sum over c and taps t of w[k, c, t] * x_padded[n, c, o * stride + t * dilation] (+ bias[k]);
    a transposed convolution by its own definition (`transposed_conv`)."""
    if conv.transposed:
        return transposed_conv(conv, x, w, bias)
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


def transposed_conv(conv: ConvAnchor, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """Each input element scatters its window: y_full[n, k, i * stride + t * dilation] += x[n, c, i] * w[c, k, t]
    over an output grown by the padding on both sides and the output padding after it; y = y_full without the
    padding's rows (+ bias[k])."""
    if conv.dims == 2:
        x, w = x.unsqueeze(2), w.unsqueeze(2)  # depth 1
    if x.shape[1] != conv.c or tuple(w.shape) != (conv.c, conv.k, *conv.window):
        raise ValueError(f"the conv kernel takes a transposed {conv.c} -> {conv.k} channels, window {conv.window}; "
                         f"got input {list(x.shape)}, weight {list(w.shape)}")
    n, _, *size = x.shape
    out = [conv.out_extent(s, a) for a, s in enumerate(size)]
    full = [o + 2 * p for o, p in zip(out, conv.padding)]  # the output before the padding is cut away
    y = x.new_zeros((n, conv.k, *full))
    (kd, kh, kw), (sd, sh, sw), (dd, dh, dw) = conv.window, conv.stride, conv.dilation
    for a in range(kd):
        for b in range(kh):
            for e in range(kw):
                o = (a * dd, b * dh, e * dw)
                part = torch.einsum("ncdhw,ck->nkdhw", x, w[:, :, a, b, e])
                y[:, :, o[0]: o[0] + (size[0] - 1) * sd + 1: sd, o[1]: o[1] + (size[1] - 1) * sh + 1: sh,
                  o[2]: o[2] + (size[2] - 1) * sw + 1: sw] += part
    (pd, ph, pw) = conv.padding
    y = y[:, :, pd: pd + out[0], ph: ph + out[1], pw: pw + out[2]]
    if bias is not None:
        y = y + bias.reshape(1, -1, 1, 1, 1)
    return y.squeeze(2) if conv.dims == 2 else y
