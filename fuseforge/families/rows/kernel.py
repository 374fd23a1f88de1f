"""Spell one planned row kernel: its Op struct (prologue, per-row values, epilogue), launcher and binding.

The Op struct is what the row templates of `runtime.py` call. Its three member functions compute the
group's ops with one named local per graph value (the graph's names), spelled by the pointwise table and,
for the reduction itself, by the row-reduction table (`table.spell`):
- `reduced`: the prologue, from one element's full-shape inputs to the value the statistics accumulate;
- `row_values`: the values with one per row, once the statistics are final; writes the per-row outputs;
- `element`: the epilogue, the full-shape outputs of one element (the prologue is recomputed from the
  element's cached inputs where the epilogue needs it).
Only the values a function needs are computed in it. Per-column, per-row and scalar inputs are read
through the read-only cache (`ff_ldg`).
"""

from __future__ import annotations

from torch import fx

from ... import pointwise
from ...codegen.pointwise_kernel import KernelSource, binding_head, binding_return, cpp_name
from ...codegen.writer import Writer
from ...plan import KernelGroup
from . import table

_ROLE = {"col": "one value per column", "row": "one value per row", "row-flat": "one value per row",
         "scalar": "one value"}
_FIELD = {"col": "col", "row": "row", "row-flat": "row", "scalar": "scalar"}  # the pointer's suffix
_CLASS_ENUM = {"full": "FF_ROW_FULL", "col": "FF_ROW_COL", "row": "FF_ROW_ROW", "row-flat": "FF_ROW_ROW_FLAT",
               "scalar": "FF_ROW_SCALAR"}


class _Layout:
    """Names and roles of one row group's values."""

    def __init__(self, group: KernelGroup, by_name: dict[str, fx.Node]):
        spec = group.spec
        self.group, self.by_name, self.spec = group, by_name, spec
        self.red = spec.reduction
        self.classes = dict(spec.operands)
        self.full = [i for i in group.inputs if self.classes[i] == "full"]
        self.row_nodes = set(spec.row_nodes)
        self.full_outputs = [o for o in group.outputs if o not in self.row_nodes]
        self.row_outputs = [o for o in group.outputs if o in self.row_nodes]
        self.members = set(group.nodes)

    def needed(self, targets: list[str], stop: set[str]) -> list[str]:
        """Members (in order) and inputs that `targets` depend on, not looking past `stop`."""
        found, todo = set(), list(targets)
        while todo:
            name = todo.pop()
            if name in found:
                continue
            found.add(name)
            if name in self.members and name not in stop:
                todo += self._operands(name)
        return [n for n in [*self.group.inputs, *self.group.nodes] if n in found]

    def _operands(self, name: str) -> list[str]:
        node = self.by_name[name]
        if name == self.spec.anchor:
            return [self.red.data, *[p for p in self.red.params if p]]
        return [a.name for a in node.all_input_nodes]

    def keepdim(self, name: str) -> bool:
        return self.by_name[name].meta["val"].dim() == len(self.spec.full_shape)


def _load(lay: _Layout, name: str, w: Writer) -> None:
    """One input as a local: from the element's cached inputs, or through its pointer."""
    cls, c = lay.classes[name], cpp_name(name)
    if cls == "full":
        w.line(f"const float {c} = ff_in[{lay.full.index(name)}];")
    elif cls == "col":
        w.line(f"const float {c} = ff_ldg({c}_col + ff_col);")
    elif cls in ("row", "row-flat"):
        w.line(f"const float {c} = ff_ldg({c}_row + ff_row);")
    else:
        w.line(f"const float {c} = ff_ldg({c}_scalar);")


def _compute(lay: _Layout, name: str, w: Writer) -> None:
    node = lay.by_name[name]
    if name == lay.spec.anchor:
        params = {p: cpp_name(p) for p in lay.red.params if p}
        expr = table.spell(lay.red, cpp_name(lay.red.data), params)
        w.line(f"const float {cpp_name(name)} = {expr};")
        return
    expr = pointwise.spell(node, lambda n: cpp_name(n.name))
    w.line(f"const {pointwise.result_type(node)} {cpp_name(name)} = {expr};")


def _row_type(lay: _Layout, name: str) -> str:
    """The C++ type of a value with one per row: the reduction's float, or its pointwise op's (float or bool)."""
    return "float" if name == lay.spec.anchor else pointwise.result_type(lay.by_name[name])


def _body(lay: _Layout, names: list[str], w: Writer, row_from_struct: bool) -> None:
    for name in names:
        if name in lay.classes:
            _load(lay, name, w)
        elif row_from_struct and name in lay.row_nodes:
            w.line(f"const {_row_type(lay, name)} {cpp_name(name)} = ff_r.{cpp_name(name)};")
        else:
            _compute(lay, name, w)


def _op_struct(lay: _Layout) -> str:
    g, red = lay.group, lay.red
    w = Writer()
    w.line(f"struct {g.name}_op {{")
    with w.indent():
        w.line(f"using Stats = {red.stats};  // {red.op} of {red.data} {red.over}")
        w.line(f"static constexpr float kEps = {table.eps_literal(red)};")
        w.line(f"static constexpr int kFull = {len(lay.full)};  // full-shape inputs: {', '.join(lay.full)}")
        w.line(f"static constexpr int kOut = {len(lay.full_outputs)};  // full-shape outputs: "
               f"{', '.join(lay.full_outputs) or 'none'}")
        w.line("const float* full[kFull];")
        w.line(f"float* out[{max(1, len(lay.full_outputs))}];")
        for name in g.inputs:
            cls = lay.classes[name]
            if cls != "full":
                w.line(f"const float* {cpp_name(name)}_{_FIELD[cls]};  // {_ROLE[cls]}")
        for name in lay.row_outputs:
            w.line(f"float* {cpp_name(name)}_out;  // one value per row")
        row_nodes = [n for n in g.nodes if n in lay.row_nodes]
        row_fields = [cpp_name(n) for n in row_nodes]
        if any(_row_type(lay, n) != "float" for n in row_nodes):  # a comparison's bool among them
            w.line(f"struct Row {{ {' '.join(f'{_row_type(lay, n)} {cpp_name(n)};' for n in row_nodes)} }};")
        else:
            w.line(f"struct Row {{{' float ' + ', '.join(row_fields) + '; ' if row_fields else ''}}};")
        w.line("")
        w.line("// prologue: the value the statistics accumulate")
        w.line("FF_HD float reduced(const float* ff_in, int64_t ff_row, int ff_col) const {")
        with w.indent():
            _body(lay, lay.needed([red.data], stop=set()), w, row_from_struct=False)
            w.line(f"return {cpp_name(red.data)};")
        w.line("}")
        w.line("// values with one per row, from the final statistics; `ff_write`: this thread writes the row's outputs")
        w.line("FF_HD Row row_values(const Stats& ff_st, int64_t ff_row, int ff_cols, bool ff_write) const {")
        with w.indent():
            row_order = [n for n in g.nodes if n in lay.row_nodes]
            _body(lay, lay.needed(row_order, stop={lay.spec.anchor}), w, row_from_struct=False)
            if lay.row_outputs:
                w.line("if (ff_write) {")
                with w.indent():
                    for o in lay.row_outputs:
                        w.line(f"{cpp_name(o)}_out[ff_row] = {cpp_name(o)};")
                w.line("}")
            w.line(f"return Row{{{', '.join(row_fields)}}};")
        w.line("}")
        if lay.full_outputs:
            _element(lay, w)
    w.line("};")
    return w.text()


def _element(lay: _Layout, w: Writer) -> None:
    w.line("// epilogue: the full-shape outputs of one element")
    w.line("FF_HD void element(const float* ff_in, const Stats& ff_st, const Row& ff_r, int64_t ff_row, int ff_col, "
           "float* ff_out) const {")
    with w.indent():
        _body(lay, lay.needed(lay.full_outputs, stop=lay.row_nodes), w, row_from_struct=True)
        for k, o in enumerate(lay.full_outputs):
            w.line(f"ff_out[{k}] = {cpp_name(o)};")
    w.line("}")


def _pointer_params(lay: _Layout) -> list[str]:
    return ([f"const float* {cpp_name(i)}" for i in lay.group.inputs]
            + [f"float* {cpp_name(o)}" for o in lay.full_outputs + lay.row_outputs])


def _reads_nhwc(lay: _Layout) -> bool:
    """Whether the kernel can read its one full input channels-last (rows along the channel axis)."""
    return lay.red.channels and len(lay.full) == 1


def _launcher_signature(lay: _Layout) -> str:
    nhwc = ["bool nhwc"] if _reads_nhwc(lay) else []
    params = _pointer_params(lay) + ["int64_t rows", "int64_t cols", "int64_t positions", *nhwc, "void* stream"]
    return f"int launch_{lay.group.name}({', '.join(params)})"


def _launcher(lay: _Layout) -> str:
    w = Writer()
    w.line(_launcher_signature(lay) + " {")
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
                w.line(f"op.{cpp_name(name)}_{_FIELD[lay.classes[name]]} = {cpp_name(name)};")
        for name in lay.row_outputs:
            w.line(f"op.{cpp_name(name)}_out = {cpp_name(name)};")
        if lay.red.channels:
            nhwc = "nhwc" if _reads_nhwc(lay) else "/*nhwc=*/false"
            w.line(f"return ff_row_channels_launch(op, rows, cols, positions, {nhwc}, stream);")
        else:
            w.line("(void)positions;  // 1: each row's values are adjacent")
            w.line("return ff_row_launch(op, rows, cols, stream);")
    w.line("}")
    return w.text()


def _binding(lay: _Layout) -> str:
    g = lay.group
    ins, outs = [cpp_name(i) for i in g.inputs], [cpp_name(o) for o in g.outputs]
    first = cpp_name(lay.full[0])
    w = Writer()
    w.line(binding_head(g.name, ins, outs))
    with w.indent():
        w.line(f'const char* kernel = "{g.name}";')
        w.line(f"const FFRows rows = ff_rows_of(kernel, {first}, {lay.red.axes}, "
               f"{'true' if lay.red.channels else 'false'});  // a row: {lay.red.over.removeprefix('over ')}")
        if _reads_nhwc(lay):
            w.line(f"const bool nhwc = ff_row_reads_nhwc({first});  // channels-last: read as it is")
        for name, i in zip(g.inputs, ins):
            operand = (f'ff_row_operand(kernel, "{name}", {i}, rows, {first}, {_CLASS_ENUM[lay.classes[name]]})')
            if _reads_nhwc(lay) and name == lay.full[0]:
                operand = f"nhwc ? {i} : {operand}"
            w.line(f"const torch::Tensor {i}_c = {operand};")
        if lay.row_outputs:
            w.line('TORCH_CHECK(rows.cols > 0 || rows.rows == 0, kernel, ": a reduction over rows of length 0");')
        for name, o in zip(g.outputs, outs):
            sizes = "rows.sizes" if name not in lay.row_nodes else \
                f"ff_per_row_sizes(rows, {'true' if lay.keepdim(name) else 'false'})"
            w.line(f"torch::Tensor {o} = torch::empty({sizes}, {first}.options());")
        args = [f"{i}_c.data_ptr<float>()" for i in ins]
        args += [f"{cpp_name(o)}.data_ptr<float>()" for o in lay.full_outputs + lay.row_outputs]
        args += ["rows.rows", "rows.cols", "rows.positions", *(["nhwc"] if _reads_nhwc(lay) else []),
                 "reinterpret_cast<void*>(stream)"]
        w.line(f"ff_check(kernel, launch_{g.name}({', '.join(args)}));")
        w.line(binding_return(outs))
    w.line("}")
    return w.text()


def row_kernel_source(group: KernelGroup, by_name: dict[str, fx.Node]) -> KernelSource:
    lay = _Layout(group, by_name)
    ops = " -> ".join(f"{n} ({pointwise.op_key(by_name[n]).removeprefix('aten.')})" for n in group.nodes)
    reads = ", ".join(f"{i} ({c})" for i, c in group.spec.operands)
    header = (f"// ---- {group.name} (row kernel): {ops}\n"
              f"// {lay.red.op} of {lay.red.data} {lay.red.over} of {list(group.shape)}; reads {reads}; "
              f"writes {', '.join(group.outputs)}\n")
    cuda = header + "\n".join([_op_struct(lay), _launcher(lay)])
    return KernelSource(group.name, cuda, _binding(lay), _launcher_signature(lay) + ";")
