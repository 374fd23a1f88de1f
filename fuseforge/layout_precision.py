"""Plan step after `layout`, on a GPU: a convolution runs channels-last only where that keeps its precision.

cuDNN picks its algorithm per shape and layout, and the channels-last form of a convolution can land in
another precision class than eager's NCHW call (TF32 where eager's is exact fp32). The verifier holds every
output to eager's own error, so such a plan fails verification. This step measures each convolution the
layout step chose, on the GPU, in both layouts on its own shapes (`evaluate/conv_precision.py`, a child
process holding the GPU lease), and keeps channels-last only for those that stay in eager's precision
class (the same class, or within the verifier's bound of the NCHW error: conv_precision.stays_in_class). The others run in eager's layout. The numbers go to
OUT/25_conv_precision.json and into the report.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import torch
from torch import fx

from .evaluate.conv_precision import ConvCall, convolutions
from .traced import size_hint

ARTEFACT = "25_conv_precision.json"
_MEASURED: dict[tuple[ConvCall, str], dict] = {}  # the measurements of this process: a rung of the ladder keeping the
# layout asks about the same convolutions again


def conv_call(node: fx.Node) -> ConvCall:
    """The aten.convolution call a convolution node makes (its op run on meta tensors of its shapes, a
    symbolic batch at the model file's size)."""
    def meta(value):
        if isinstance(value, fx.Node):
            val = value.meta["val"]  # a symbolic batch at the size the model file runs it
            return torch.empty([size_hint(d) for d in val.shape], dtype=val.dtype, device="meta")
        if isinstance(value, (list, tuple)):
            return type(value)(meta(v) for v in value)
        return value

    args, kwargs = meta(node.args), {k: meta(v) for k, v in node.kwargs.items()}
    return convolutions(lambda: node.target(*args, **kwargs), [])[0]


def measured(names: frozenset[str], graph: fx.Graph, out_dir: Path, device: str = "cuda",
             timeout_s: float = 300) -> dict[str, dict]:
    """Each named convolution's errors and classes (conv_precision.measure): the calls not measured yet in
    this process are measured in a child process; every one is written to OUT/25_conv_precision.json."""
    by_name = {n.name: n for n in graph.nodes}
    calls = {name: conv_call(by_name[name]) for name in sorted(names)}
    todo = {name: asdict(call) for name, call in calls.items() if (call, device) not in _MEASURED}
    if todo:
        request = out_dir / "25_conv_calls.json"
        request.write_text(json.dumps(todo, indent=1) + "\n")
        subprocess.run([sys.executable, "-m", "fuseforge.evaluate.conv_precision", "--calls", str(request),
                        "--device", device, "--out", str(out_dir / ARTEFACT)], check=True, timeout=timeout_s,
                       capture_output=True, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        request.unlink()
        for name, row in json.loads((out_dir / ARTEFACT).read_text()).items():
            _MEASURED[calls[name], device] = row
    rows = {name: _MEASURED[call, device] for name, call in calls.items()}
    (out_dir / ARTEFACT).write_text(json.dumps(rows, indent=1) + "\n")
    return rows


def measured_or_error(names: frozenset[str], graph: fx.Graph, out_dir: Path) -> dict[str, dict]:
    """`measured`, or {"error": why} (one line: the child's last line of stderr) where the measurement failed."""
    try:
        return measured(names, graph, out_dir)
    except (subprocess.SubprocessError, OSError, ValueError, KeyError) as exc:
        lines = (getattr(exc, "stderr", None) or str(exc)).strip().splitlines()
        return {"error": lines[-1] if lines else type(exc).__name__}


def keep_in_class(channels_last: frozenset[str], graph: fx.Graph, out_dir: Path) -> tuple[frozenset[str], dict]:
    """The layout step's channels-last convolutions that stay in class, and the measurements (or, where
    the measurement itself failed, none kept and {"error": why}: eager's layout is always in class; the
    pipeline puts the reason in the report)."""
    precision = measured_or_error(channels_last, graph, out_dir)
    return (frozenset(), precision) if "error" in precision else (in_class(channels_last, precision), precision)


def in_class(channels_last: frozenset[str], precision: dict[str, dict]) -> frozenset[str]:
    """The channels-last convolutions whose measurement keeps them in eager's precision class."""
    return frozenset(n for n in channels_last if precision.get(n, {}).get("channels_last_in_class"))
