"""Spell one planned channel group: its Op struct (prologue, per-channel results, epilogue), launcher and binding.

The Op struct is what the channel templates of `runtime.py` call. Its member functions compute
the group's ops with one named local per graph value (the graph's names), spelled by the pointwise table
and, for the norm's results, by the channel-norm table (`table.py`):
- `reduced`: the prologue, from one element's full-shape inputs to the value whose statistics are taken;
- `channel_values`: the per-channel results (batch mean, inverse std, new running mean and variance)
  that are kernel outputs, from the finalised statistics;
- `element`: the normalised value and the epilogue, the full-shape outputs of one element (the prologue
  is recomputed from the element's inputs where it is needed).
Per-channel and scalar inputs are read through the read-only cache (`ff_chan_ldg`).
"""

from __future__ import annotations

from collections.abc import Callable

from torch import fx

from ... import pointwise
from ...codegen.pointwise_kernel import KernelSource, binding_head, binding_return, cpp_name
from ...codegen.writer import Writer
from ...cpp_literals import cpp_float
from ...plan import KernelGroup
from . import table

_CLASS_ENUM = {"full": "FF_CHAN_FULL", "channel": "FF_CHAN_CHANNEL", "scalar": "FF_CHAN_SCALAR"}


class _Layout:
    """Names and roles of one channel group's values."""

    def __init__(self, group: KernelGroup, by_name: dict[str, fx.Node]):
        spec = group.spec
        self.group, self.by_name, self.spec = group, by_name, spec
        self.norm = spec.norm
        self.classes = dict(spec.operands)
        self.results = dict(spec.results)
        self.full = [i for i in group.inputs if self.classes[i] == "full"]
        self.channel_nodes = set(spec.channel_nodes)
        self.full_outputs = [o for o in group.outputs if o not in self.channel_nodes]
        self.channel_outputs = [o for o in group.outputs if o in self.channel_nodes]
        self.members = set(group.nodes)

    def needed(self, targets: list[str]) -> list[str]:
        """Members (in order) and inputs that `targets` depend on."""
        found, todo = set(), list(targets)
        while todo:
            name = todo.pop()
            if name in found:
                continue
            found.add(name)
            if name in self.members:
                todo += self._operands(name)
        return [n for n in [*self.group.inputs, *self.group.nodes] if n in found]

    def _operands(self, name: str) -> list[str]:
        if self.results.get(name) == 0:  # the normalised value
            return [self.norm.data, *[p for p in (self.norm.weight, self.norm.bias) if p]]
        return [a.name for a in self.by_name[name].all_input_nodes]


def _load(lay: _Layout, name: str, w: Writer) -> None:
    cls, c = lay.classes[name], cpp_name(name)
    if cls == "full":
        w.line(f"const float {c} = ff_in[{lay.full.index(name)}];")
    elif cls == "channel":
        w.line(f"const float {c} = ff_chan_ldg({c}_channel + ff_c);")
    else:
        w.line(f"const float {c} = ff_chan_ldg({c}_scalar);")


def _body(lay: _Layout, names: list[str], w: Writer) -> None:
    for name in names:
        if name in lay.classes:
            _load(lay, name, w)
        elif lay.results.get(name) == 0:
            params = {p: cpp_name(p) for p in (lay.norm.weight, lay.norm.bias) if p}
            expr = table.spell_normalised(lay.norm, cpp_name(lay.norm.data), params)
            w.line(f"const float {cpp_name(name)} = {expr};  // {lay.norm.op} (normalised)")
        else:
            node = lay.by_name[name]
            expr = pointwise.spell(node, lambda n: cpp_name(n.name))
            w.line(f"const {pointwise.result_type(node)} {cpp_name(name)} = {expr};")


def _channel_value(lay: _Layout, name: str) -> str:
    """The per-channel result `name` from ff_n (mean, invstd), ff_m2 and ff_count."""
    index = lay.results[name]
    norm = lay.norm
    if index == 1:
        return "ff_n.mean"
    if index == 2:
        return "ff_n.invstd"
    if index == 3:
        return f"kMomentum * ff_n.mean + kKeep * ff_chan_ldg({cpp_name(norm.running_mean)}_channel + ff_c)"
    return (f"kMomentum * (ff_m2 / (ff_count - 1.0f)) + kKeep * "
            f"ff_chan_ldg({cpp_name(norm.running_var)}_channel + ff_c)")


def _op_struct(lay: _Layout) -> str:
    g, norm = lay.group, lay.norm
    eps, momentum = table.literals(norm)
    keep = cpp_float(1.0 - norm.momentum)
    w = Writer()
    w.line(f"struct {g.name}_op {{")
    with w.indent():
        w.line(f"// {norm.describe} of {norm.data}: statistics per {'group of channels' if norm.groups else 'channel'}")
        w.line(f"static constexpr float kEps = {eps};")
        w.line(f"static constexpr float kMomentum = {momentum};")
        w.line(f"static constexpr float kKeep = {keep};  // 1 - momentum")
        w.line(f"static constexpr int kFull = {len(lay.full)};  // full-shape inputs: {', '.join(lay.full)}")
        w.line(f"static constexpr int kOut = {len(lay.full_outputs)};  // full-shape outputs: "
               f"{', '.join(lay.full_outputs) or 'none'}")
        w.line("const float* full[kFull];")
        w.line(f"float* out[{max(1, len(lay.full_outputs))}];")
        for name in g.inputs:
            cls = lay.classes[name]
            if cls != "full":
                w.line(f"const float* {cpp_name(name)}_{cls};  // one value{' per channel' if cls == 'channel' else ''}")
        for name in lay.channel_outputs:
            w.line(f"float* {cpp_name(name)}_out;  // one value per channel: "
                   f"{table.RESULTS[lay.results[name]][0]}")
        w.line("")
        w.line("// prologue: the value whose statistics are taken")
        w.line("FF_HD float reduced(const float* ff_in, int ff_c) const {")
        with w.indent():
            _body(lay, lay.needed([norm.data]), w)
            w.line(f"return {cpp_name(norm.data)};")
        w.line("}")
        w.line("// the per-channel results, once the statistics are final (one thread per channel)")
        w.line("FF_HD void channel_values(const FFChanNorm& ff_n, float ff_m2, float ff_count, int ff_c) const {")
        with w.indent():
            for name in lay.channel_outputs:
                w.line(f"{cpp_name(name)}_out[ff_c] = {_channel_value(lay, name)};")
            if not lay.channel_outputs:
                w.line("(void)ff_n; (void)ff_m2; (void)ff_count; (void)ff_c;")
        w.line("}")
        if lay.full_outputs:
            w.line("// normalise + epilogue: the full-shape outputs of one element")
            w.line("FF_HD void element(const float* ff_in, const FFChanNorm& ff_n, int ff_c, float* ff_out) const {")
            with w.indent():
                _body(lay, lay.needed(lay.full_outputs), w)
                for k, o in enumerate(lay.full_outputs):
                    w.line(f"ff_out[{k}] = {cpp_name(o)};")
            w.line("}")
        else:
            w.line("FF_HD void element(const float*, const FFChanNorm&, int, float*) const {}")
    w.line("};")
    return w.text()


def _launcher_signature(lay: _Layout, sums: bool = False) -> str:
    params = ([f"const float* {cpp_name(i)}" for i in lay.group.inputs]
              + [f"float* {cpp_name(o)}" for o in lay.full_outputs + lay.channel_outputs]
              + ["FFChanDims dims", "float* partial"] + (["const double* sums"] if sums else []) + ["void* stream"])
    return f"int launch_{lay.group.name}({', '.join(params)})"


def _launcher(lay: _Layout, sums: bool = False) -> str:
    w = Writer()
    w.line(_launcher_signature(lay, sums) + " {")
    with w.indent():
        w.line(f"{lay.group.name}_op op;")
        for k, name in enumerate(lay.full):
            w.line(f"op.full[{k}] = {cpp_name(name)};")
        for k, name in enumerate(lay.full_outputs):
            w.line(f"op.out[{k}] = {cpp_name(name)};")
        if not lay.full_outputs:
            w.line("op.out[0] = nullptr;")
        for name in lay.group.inputs:
            if lay.classes[name] != "full":
                w.line(f"op.{cpp_name(name)}_{lay.classes[name]} = {cpp_name(name)};")
        for name in lay.channel_outputs:
            w.line(f"op.{cpp_name(name)}_out = {cpp_name(name)};")
        if sums:
            w.line("return ff_chan_launch_with_sums(op, dims, sums, partial, stream);  // the statistics: `sums`")
        else:
            w.line("return ff_chan_launch(op, dims, partial, stream);")
    w.line("}")
    return w.text()


def _launch_lines(w: Writer, lay: _Layout, first: str, one_full: bool, sums: str | None = None) -> None:
    """The binding's lines from its sizes to the launch: the call's sizes from tensor `first` (a full-shape input),
    each input checked against its class, the outputs and the partials' workspace allocated, the launcher called
    (with `sums`, the statistics another kernel took: `channel_apply_source`'s launcher)."""
    g = lay.group
    w.line(f"const FFChanCall call = ff_channels_of(kernel, {first}, {lay.norm.groups}, "
           f"{'true' if one_full else 'false'});")
    for name in g.inputs:
        i = cpp_name(name)
        w.line(f'const torch::Tensor {i}_c = ff_chan_operand(kernel, "{name}", {i}, call, {first}, '
               f"{_CLASS_ENUM[lay.classes[name]]});")
    for name in g.outputs:
        sizes = "{call.dims.channels}" if name in lay.channel_nodes else "call.sizes"
        w.line(f"torch::Tensor {cpp_name(name)} = torch::empty({sizes}, {first}.options());")
    w.line(f"torch::Tensor ff_partial = torch::empty({{ff_chan_workspace(call.dims)}}, "
           f"{first}.options());  // statistics per (unit, part)")
    args = [f"{cpp_name(i)}_c.data_ptr<float>()" for i in g.inputs]
    args += [f"{cpp_name(o)}.data_ptr<float>()" for o in lay.full_outputs + lay.channel_outputs]
    args += ["call.dims", "ff_partial.data_ptr<float>()", *([f"{sums}.data_ptr<double>()"] if sums else []),
             "reinterpret_cast<void*>(stream)"]
    w.line(f"ff_check(kernel, launch_{g.name}({', '.join(args)}));")


def _binding(lay: _Layout) -> str:
    g = lay.group
    ins, outs = [cpp_name(i) for i in g.inputs], [cpp_name(o) for o in g.outputs]
    w = Writer()
    w.line(binding_head(g.name, ins, outs))
    with w.indent():
        w.line(f'const char* kernel = "{g.name}";')
        _launch_lines(w, lay, cpp_name(lay.full[0]), len(lay.full) == 1)
        w.line(binding_return(outs))
    w.line("}")
    return w.text()


def channel_kernel_source(group: KernelGroup, by_name: dict[str, fx.Node]) -> KernelSource:
    lay = _Layout(group, by_name)
    ops = " -> ".join(f"{n} ({pointwise.op_key(by_name[n]).removeprefix('aten.')})" for n in group.nodes
                      if n not in lay.results)
    reads = ", ".join(f"{i} ({c})" for i, c in group.spec.operands)
    header = (f"// ---- {group.name} (channel kernels: statistics, then normalise): {ops}\n"
              f"// {lay.norm.describe} of {lay.norm.data} over {list(group.shape)}; "
              f"reads {reads}; writes {', '.join(group.outputs)}\n")
    cuda = header + "\n".join([_op_struct(lay), _launcher(lay)])
    return KernelSource(group.name, cuda, _binding(lay), _launcher_signature(lay) + ";")


def channel_apply_source(group: KernelGroup, by_name: dict[str, fx.Node]) -> tuple[str, str, Callable]:
    """The Op struct of a channel group whose statistics another kernel took (a conv kernel's sum and sum of squares
    per unit, `ff_chan_launch_with_sums`), and its launcher: (CUDA, the launcher's signature, and the writer of the
    binding's lines that launch it: `launch_lines(w, first, sums)`, with `first` the C++ tensor the group normalises
    and `sums` the doubles' tensor). Its launcher takes the sums after the partials' workspace."""
    lay = _Layout(group, by_name)
    return ("\n".join([_op_struct(lay), _launcher(lay, sums=True)]), _launcher_signature(lay, sums=True),
            lambda w, first, sums: _launch_lines(w, lay, first, False, sums))
