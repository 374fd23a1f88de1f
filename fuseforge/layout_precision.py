"""Plan step after `layout`, on a GPU: a convolution runs channels-last only where that keeps its precision and
is faster; every convolution's measured time goes to the cost model.

cuDNN picks its algorithm per shape and layout, and the channels-last form of a convolution can land in
another precision class than eager's NCHW call (TF32 where eager's is exact fp32). The verifier holds every
output to eager's own error, so such a plan fails verification. This step measures every convolution of the
graph (eager calls cuDNN for each; the plan, for those it leaves as torch calls) on the GPU, in both layouts on
its own shapes (`evaluate/conv_precision.py`, a child process holding the GPU lease): its error vs float64 and
its time (with and without its bias). A convolution the layout step chose runs channels-last only where it stays
in eager's precision class (the same class, or within the verifier's bound of the NCHW error:
conv_precision.stays_in_class) and its channels-last call, plus the input's and weight's conversion by the
extension's kernel (`conversion_ms`), was measured faster than the NCHW one (cuDNN has shapes, a transposed 3-D
convolution among them, where channels-last is slower). The others run in eager's layout. The numbers go to OUT/25_conv_precision.json, into the report and into the
cost model (`cost.estimate`: eager's and the plan's convolutions at their measured times).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from dataclasses import asdict, replace
from pathlib import Path

import torch
from torch import fx

from .evaluate.conv_precision import ConvCall, convolutions
from .rates import BANDWIDTH, LAUNCH_S
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
    """Each named convolution's errors, classes and (on CUDA) times (conv_precision.measure, timed): the calls not
    measured yet in this process are measured in a child process; every one is written to
    OUT/25_conv_precision.json."""
    by_name = {n.name: n for n in graph.nodes}
    calls = {name: conv_call(by_name[name]) for name in sorted(names)}
    # asked with a bias, so both times are measured: eager's convolution has its bias, the plan's call (its bias
    # rewritten into the kernel after it) has none, and the cost model prices each at its own
    todo = {name: asdict(replace(call, bias=True)) for name, call in calls.items() if (call, device) not in _MEASURED}
    if todo:
        request = out_dir / "25_conv_calls.json"
        request.write_text(json.dumps(todo, indent=1) + "\n")
        subprocess.run([sys.executable, "-m", "fuseforge.evaluate.conv_precision", "--calls", str(request), "--time",
                        "--device", device, "--out", str(out_dir / ARTEFACT)], check=True, timeout=timeout_s,
                       capture_output=True, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        request.unlink()
        for name, row in json.loads((out_dir / ARTEFACT).read_text()).items():
            _MEASURED[calls[name], device] = row
    rows = {name: _MEASURED[call, device] for name, call in calls.items()}
    (out_dir / ARTEFACT).write_text(json.dumps(rows, indent=1) + "\n")
    return rows


ROW = "ff_conv_measured"  # node meta: the convolution's `measured` row, put there by the pipeline (`put_on_nodes`)


def put_on_nodes(graph: fx.Graph, rows: dict[str, dict]) -> None:
    """Each measured convolution's row on its node, for the stages after the measurement (the conv family's gate)."""
    for node in graph.nodes:
        if isinstance(rows.get(node.name), dict):
            node.meta[ROW] = rows[node.name]


def measured_or_error(names: frozenset[str], graph: fx.Graph, out_dir: Path) -> dict[str, dict]:
    """`measured`, or {"error": why} (one line: the child's last line of stderr) where the measurement failed."""
    try:
        return measured(names, graph, out_dir)
    except (subprocess.SubprocessError, OSError, ValueError, KeyError) as exc:
        lines = (getattr(exc, "stderr", None) or str(exc)).strip().splitlines()
        return {"error": lines[-1] if lines else type(exc).__name__}


def graph_convolutions(graph: fx.Graph) -> frozenset[str]:
    """Every convolution of the graph: eager calls cuDNN for each; the plan, for those it leaves as torch calls."""
    return frozenset(n.name for n in graph.nodes if is_conv(n))


def kept_channels_last(channels_last: frozenset[str], rows: dict[str, dict], graph: fx.Graph) -> frozenset[str]:
    """The layout step's channels-last convolutions that the measurements (`measured_or_error`) find in class and
    faster; none where the measurement itself failed ({"error": why}: eager's layout is always in class)."""
    if "error" in rows:
        return frozenset()
    by_name = {n.name: n for n in graph.nodes}
    return frozenset(n for n in in_class(channels_last, rows)
                     if faster_channels_last(rows[n], conv_has_bias(by_name[n]), conversion_ms(by_name[n])))


def in_class(channels_last: frozenset[str], precision: dict[str, dict]) -> frozenset[str]:
    """The channels-last convolutions whose measurement keeps them in eager's precision class."""
    return frozenset(n for n in channels_last if precision.get(n, {}).get("channels_last_in_class"))


def measured_ms(row: dict, bias: bool, channels_last: bool = False) -> float | None:
    """A convolution's measured time in ms (cuDNN's call in that layout, with or without its bias pass), or None
    where the measurement has no times (a CPU one)."""
    return row.get(f"ms_{'channels_last' if channels_last else 'nchw'}{'' if bias else '_no_bias'}")


def faster_channels_last(row: dict, bias: bool, conversion: float) -> bool:
    """The channels-last call, after the input's `conversion` (ms), measured faster than the NCHW one (True where
    the measurement has no times: a CPU one)."""
    nchw, cl = measured_ms(row, bias), measured_ms(row, bias, channels_last=True)
    if nchw is None or cl is None:
        return True
    return cl + conversion < nchw


def conversion_ms(node: fx.Node) -> float:
    """The plan's conversion of a convolution's input and weight to channels-last, in ms: the extension's
    ff_channels_last kernel, a read and a write of each at the memory bandwidth and a launch each (PyTorch's own
    conversion, which the measurement times as ms_to_channels_last, is several times slower on some shapes: 2.3 ms
    for a 537 MB input on an H100)."""
    moved = 0
    for value in [a for a in node.all_input_nodes if isinstance(a.meta.get("val"), torch.Tensor)][:2]:
        val = value.meta["val"]
        moved += 2 * math.prod(size_hint(d) for d in val.shape) * val.element_size()
    return 1e3 * (moved / BANDWIDTH + 2 * LAUNCH_S)


def conv_has_bias(node: fx.Node) -> bool:
    """A convolution given a bias tensor (its third argument in every convolution's schema)."""
    return len(node.args) > 2 and isinstance(node.args[2], fx.Node)


def is_conv(node: fx.Node) -> bool:
    """A convolution (aten.conv*, aten.convolution) of an input and a weight."""
    tensors = [a for a in node.all_input_nodes if isinstance(a.meta.get("val"), torch.Tensor)]
    return node.op == "call_function" and str(node.target).startswith("aten.conv") and len(tensors) >= 2
