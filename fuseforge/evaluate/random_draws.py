"""Random ops in the float64 truth run draw what the float32 runs draw.

A model with dropout, `rand_like`, `randn` or `bernoulli` in its forward is compared seed for seed: the
truth, eager and the candidate each start their forward from the same generator state (`FORWARD_SEED`), so
a candidate that calls the same random ops in the same order reproduces eager's draws. But the generators
map states to values per dtype: on an H100 (torch 2.11) `F.dropout` of a float64 tensor keeps other elements
than of a float32 one, and `rand_like` gives other numbers (`dev/kernels/probe_random_streams.py`). A float64
truth that drew its own values would differ from eager by the whole random term, and a bound of 2x that
error could not fail. `Float32Draws` makes the truth run draw in float32:

    random op on float64 tensors  ->  the op on float32 copies, its result back in float64
    native_dropout(x, p, train)   ->  the float32 call's mask, applied to x in float64: x * mask / (1 - p)
    rrelu_with_noise(x, noise, ..) ->  training: the float32 call's slopes drawn into noise, x * noise in float64
                                      (noise is 1 where x > 0); eval: no draw, the op itself in float64
    ops that write into arguments  ->  each written argument (an in-place draw's self: uniform_, ...; an out=; the
                                      in-place rrelu's noise) drawn into a float32 copy, copied back, by name as
                                      the op's schema marks it (not "the first argument": rrelu writes its second)

The draws are values of the random stream, exact in both dtypes; everything else in the truth run stays
float64.
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

FORWARD_SEED = 20251124  # every compared forward (truth, eager, candidate) starts from this generator state


def _is_random(func) -> bool:
    return torch.Tag.nondeterministic_seeded in getattr(func, "tags", ())


def _to32(value):
    if isinstance(value, torch.Tensor) and value.dtype == torch.float64:
        return value.float()
    return torch.float32 if value is torch.float64 else value


def _to64(value):
    return value.double() if isinstance(value, torch.Tensor) and value.dtype == torch.float32 else value


def _has_float64(args, kwargs) -> bool:
    found = []
    tree_map(lambda v: found.append(v is torch.float64 or (isinstance(v, torch.Tensor) and v.dtype == torch.float64)),
             (args, kwargs))
    return any(found)


class Float32Draws(TorchDispatchMode):
    """While active, random ops on float64 tensors draw as they would on float32 ones (module docstring)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not _is_random(func) or not _has_float64(args, kwargs):
            return func(*args, **kwargs)
        if func is torch.ops.aten.native_dropout.default:
            x, p, train = (list(args) + [kwargs.get("p"), kwargs.get("train")])[:3]
            if train is None or train:
                _, mask = func(x.float(), p, train)
                kept = mask.to(x.dtype)
                return (x * kept * (1.0 / (1.0 - p)) if p < 1 else x * 0.0), mask
            return func(*args, **kwargs)
        if func is torch.ops.aten.rrelu_with_noise.default:
            return _rrelu_with_noise(func, args, kwargs)
        return _drawn_in_float32(func, args, kwargs)


def _drawn_in_float32(func, args, kwargs):
    """The op on float32 copies of its float64 arguments; the arguments it writes into (an in-place draw's self, an
    out=, rrelu's noise) get the copies' values back, and a result that is one of them is that argument itself."""
    schema = func._schema
    args32, kwargs32 = tree_map(_to32, list(args)), tree_map(_to32, kwargs)
    out = func(*args32, **kwargs32)
    given = dict(zip((a.name for a in schema.arguments), zip(args, args32))) | \
        {k: (v, kwargs32[k]) for k, v in kwargs.items()}
    returned = schema.returns[0].alias_info if len(schema.returns) == 1 else None
    result = None
    for a in schema.arguments:
        if a.alias_info is None or not a.alias_info.is_write or a.name not in given:
            continue
        caller, copy = given[a.name]
        if isinstance(caller, torch.Tensor) and caller is not copy:
            caller.copy_(copy)
        if returned is not None and set(returned.before_set) == set(a.alias_info.before_set):
            result = caller
    return result if result is not None else tree_map(_to64, out)


def _rrelu_with_noise(func, args, kwargs):
    """rrelu: in training, the slopes drawn as float32 draws them (into noise), applied to x in float64; in eval mode
    no draw, the op itself (a leaky relu of slope (lower + upper) / 2) in float64."""
    bound = dict(zip((a.name for a in func._schema.arguments), args)) | kwargs
    x, noise = bound["self"], bound["noise"]
    if not bound.get("training", False):
        return func(*args, **kwargs)
    noise32 = noise.float()
    rest = {k: v for k, v in bound.items() if k not in ("self", "noise")}
    func(x.float(), noise32, **rest)
    noise.copy_(noise32)
    return x * noise
