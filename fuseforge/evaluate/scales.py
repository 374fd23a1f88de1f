"""The scale of the values each output was computed from, recorded during the float64 reference run.

An output that is ~0 by cancellation (the mean of a normalised tensor, `(x - x.mean()).sum()`, a
difference of equal terms) has RMS(truth) ~ 0, while eager's and any correct kernel's rounding errors are
~1e-7 of the values it was computed from. `numerics.compare` takes that scale for its floor
(floor = 1e-7 * max(RMS(truth), scale) + 1e-12, see numerics.py).

`ScaleTracker` is a `TorchDispatchMode` for the reference run. It gives every floating tensor a scale

    scale(t) = max(RMS(t), carried(t))

where a tensor the run did not compute (an input, a parameter, a buffer, a constant) has carried = 0,
and a computed one carries what its operands hand on, by the kind of op that computed it:

    same units       the largest scale of the operands, for ops whose result has the units of their
                     operands, does not grow their rounding errors, and is near zero where they cancel or
                     are near zero: add, sub, neg, sum, mean, cat, views and copies, indexing, where, clamp,
                     relu, max/min, pools, padding, and the activations through zero with a slope of about 1
                     (tanh, gelu, silu, mish, hardswish, elu, erf, ...).
    products         a product by a scalar (a Python number or a one-element tensor) carries the other
                     operand's scale times |c| (divided by |c| for a division by it); an elementwise product
                     of two tensors carries max(scale(a) RMS(b), RMS(a) scale(b)).
    running mean     a train-mode batch norm's new running mean, (1 - m) old + m mean(x) over its input x: the
                     units of x, and near zero where x's values cancel, so it carries (1 - m) scale(old) +
                     m scale(x) (its running variance, a mean of squares, keeps its own RMS).
    everything else  nothing (carried = 0): contractions (matmul, linear, convolution: their operands have
                     other units), norms and softmax (they remove the units), exp, log, sigmoid, division by a
                     tensor (other units, or errors they can grow). Their result gets its own RMS.

So scale >= RMS(truth), and it is larger exactly where an output is smaller than the values it came from
through ops of its own units: cancellation, averaging of values of mixed signs, saturation. The floor is
then 1e-7 of those values -- about one fp32 rounding of them, still 1e5 times below a bug that moves the
output by 1 % of them. The result of a contraction, a norm or an exponential keeps its own RMS, as before.
A non-finite RMS anywhere (an overflow) makes the scale unknown; `scale_of` then returns None and the
floor falls back to RMS(truth).

The scales are 0-dim float64 tensors on the run's device (no synchronisation per op); `scale_of` reads
one. Tracking never changes the reference's results: each op runs as it would without the mode, and a
failure of the bookkeeping only loses the scale of that op's results.
"""

from __future__ import annotations

import contextlib
import math

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.weak import WeakTensorKeyDictionary

from fuseforge.evaluate import harness
from fuseforge.evaluate.harness import ReferenceFailed
from fuseforge.evaluate.random_draws import FORWARD_SEED, Float32Draws

# Ops whose result has its operands' units and does not grow their rounding errors (slope <= ~1), and
# whose result is near zero where their operands cancel or are near zero.
SAME_UNITS = frozenset("""
    add sub rsub neg sum nansum mean nanmean cumsum cat concat concatenate stack hstack vstack
    clone _to_copy copy copy_ detach alias lift_fresh lift_fresh_copy contiguous
    view _unsafe_view reshape expand expand_as permute transpose t squeeze unsqueeze flatten unflatten
    slice select narrow split split_with_sizes chunk unbind as_strided diagonal tril triu flip roll
    repeat tile index index_select gather take masked_select where masked_fill
    clamp clamp_min clamp_max hardtanh relu relu6 leaky_relu threshold abs maximum minimum fmax fmin
    max min amax amin max_pool1d max_pool2d max_pool3d max_pool2d_with_indices max_pool3d_with_indices
    adaptive_max_pool1d adaptive_max_pool2d adaptive_max_pool3d avg_pool1d avg_pool2d avg_pool3d
    adaptive_avg_pool1d adaptive_avg_pool2d adaptive_avg_pool3d _adaptive_avg_pool2d _adaptive_avg_pool3d
    constant_pad_nd pad reflection_pad1d reflection_pad2d reflection_pad3d replication_pad1d
    replication_pad2d replication_pad3d upsample_nearest1d upsample_nearest2d upsample_nearest3d
    upsample_bilinear2d upsample_linear1d upsample_trilinear3d pixel_shuffle pixel_unshuffle
    channel_shuffle tanh sin atan erf gelu silu mish hardswish elu celu lerp
""".split())
PRODUCTS = frozenset(("mul", "multiply", "div", "divide", "true_divide"))
# Batch norms that update running statistics: the positions of the running mean, the momentum and the training flag
# (None: always training) among the arguments, and of the new running mean among the results (None: updated in place).
RUNNING_MEANS = {
    "native_batch_norm": (3, 6, 5, None), "_native_batch_norm_legit": (3, 6, 5, None),
    "cudnn_batch_norm": (3, 6, 5, None), "_native_batch_norm_legit_functional": (3, 6, 5, 3),
    "_batch_norm_with_update": (3, 5, None, None), "_batch_norm_with_update_functional": (3, 5, None, 4),
}


def rms_tensor(t: torch.Tensor) -> torch.Tensor:
    """RMS of `t` as a 0-dim float64 tensor on t's device (0 for an empty tensor)."""
    if t.numel() == 0:
        return torch.zeros((), dtype=torch.float64, device=t.device)
    return torch.linalg.vector_norm(t.detach(), dtype=torch.float64) / math.sqrt(t.numel())


def _floating(x) -> bool:
    return isinstance(x, torch.Tensor) and x.is_floating_point()


class ScaleTracker(TorchDispatchMode):
    """Record `scale(t)` (module docstring) for every floating tensor computed while the mode is active."""

    def __init__(self):
        super().__init__()
        self._scales = WeakTensorKeyDictionary()

    def scale_of(self, t: torch.Tensor) -> float | None:
        """The scale of `t` (its RMS if the run did not compute it); None if it is not finite."""
        if not _floating(t):
            return None
        value = float(self._scale(t).item())
        return value if math.isfinite(value) else None

    def _scale(self, t: torch.Tensor) -> torch.Tensor:
        found = self._scales.get(t)
        if found is None:
            found = rms_tensor(t)
            self._scales[t] = found
        return found

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        running = None
        try:
            running = self._running_mean_before(name, args)
        except Exception:  # noqa: BLE001 - bookkeeping must never change the reference run
            pass
        out = func(*args, **kwargs)
        try:
            self._record(name.rstrip("_"), args, kwargs, out)
            if running is not None:
                self._running_mean_after(running, out)
        except Exception:  # noqa: BLE001 - bookkeeping must never change the reference run
            pass
        return out

    def _running_mean_before(self, name: str, args) -> tuple | None:
        """(the running mean's tensor or None, the scale its new value carries, the result index) of a train-mode
        batch norm's call, taken before the call updates it in place."""
        where = RUNNING_MEANS.get(name)
        if where is None or len(args) <= max(i for i in where[:3] if i is not None):
            return None
        mean_at, momentum_at, training_at, result_at = where
        running, momentum = args[mean_at], _number(args[momentum_at])
        if not _floating(args[0]) or not _floating(running) or momentum is None:
            return None
        if training_at is not None and args[training_at] is not True:
            return None
        carried = self._scale(running) * (1.0 - momentum) + self._scale(args[0]) * momentum
        return (running if result_at is None else None), carried, result_at

    def _running_mean_after(self, running: tuple, out) -> None:
        tensor, carried, result_at = running
        if tensor is None:
            tensor = out[result_at]
        own = rms_tensor(tensor)
        self._scales[tensor] = torch.maximum(own, carried.to(own.device))

    def _record(self, name: str, args, kwargs, out) -> None:
        results = [t for t in tree_flatten(out)[0] if _floating(t)]
        if not results:
            return
        carried = self._carried(name, args, kwargs)
        for t in results:
            own = rms_tensor(t)
            self._scales[t] = own if carried is None else torch.maximum(own, carried.to(own.device))

    def _carried(self, name: str, args, kwargs) -> torch.Tensor | None:
        operands = [x for x in tree_flatten((args, kwargs))[0] if _floating(x)]
        if not operands:
            return None
        if name in SAME_UNITS:
            # one-element operands (a Python number wrapped by the dispatcher, a bias scalar) only count
            # when every operand is one: then they are the values (scalar sums subtracted, say)
            scales = [self._scale(x) for x in ([x for x in operands if x.numel() > 1] or operands)]
            alpha = kwargs.get("alpha")
            if name in ("add", "sub", "rsub") and isinstance(alpha, (int, float)) and len(scales) == 2:
                scales[-1] = scales[-1] * abs(alpha)
            return _largest(scales)
        if name in PRODUCTS:
            return self._product(name != "mul" and name != "multiply", args[:2])
        return None

    def _product(self, divide: bool, pair) -> torch.Tensor | None:
        """What a * b or a / b carries (module docstring); None for a division by a tensor."""
        if len(pair) != 2:
            return None
        a, b = pair
        if not _floating(a) and not (_floating(b) and not divide):
            return None
        if _floating(a) and (_number(b) is not None or (_floating(b) and b.numel() == 1)):
            c = abs(_number(b)) if _number(b) is not None else b.detach().double().abs().reshape(())
            return self._scale(a) / c if divide else self._scale(a) * c
        if divide:
            return None
        if _floating(b) and (_number(a) is not None or (_floating(a) and a.numel() == 1)):
            c = abs(_number(a)) if _number(a) is not None else a.detach().double().abs().reshape(())
            return self._scale(b) * c
        if _floating(a) and _floating(b):
            return torch.maximum(self._scale(a) * rms_tensor(b), rms_tensor(a) * self._scale(b))
        return None


def _number(x) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _largest(scales: list[torch.Tensor]) -> torch.Tensor | None:
    if not scales:
        return None
    device = scales[0].device
    best = scales[0]
    for s in scales[1:]:
        best = torch.maximum(best, s.to(device))
    return best


def tracked_truth(model, inputs: list, dev) -> tuple[list, list, dict]:
    """The float64 model's outputs on `inputs` (copied to `dev` in float64), with the scale of the values each output
    and each buffer was computed from: (truth, [scale or None], {buffer name: scale}); random ops draw what float32
    draws. The verifier's and the grader's truth both come from here. Where the forward fails under the tracker, the
    buffers it may have updated are put back and it runs once more without it: the error, or the result, is then the
    model's own, with no scales."""
    def forward(tracking):
        torch.manual_seed(FORWARD_SEED)
        with Float32Draws(), tracking, harness.float64_run():
            return harness.forward(model, harness.to_device(inputs, dev, torch.float64), dev, "Model (float64)",
                                   ReferenceFailed)[0]

    buffers = {name: b.detach().clone() for name, b in model.named_buffers()}
    tracker = ScaleTracker()
    try:
        truth = forward(tracker)
        return truth, [tracker.scale_of(t) for t in truth], {n: tracker.scale_of(b) for n, b in model.named_buffers()}
    except ReferenceFailed:
        with torch.no_grad():
            for name, b in model.named_buffers():
                b.copy_(buffers[name])
        truth = forward(contextlib.nullcontext())
        return truth, [None] * len(truth), {}
