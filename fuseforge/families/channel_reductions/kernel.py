"""Spell one planned channel-reduction or pool group: its Op struct (pool, prologue, reduction, epilogue), launcher
and binding.

The Op struct is what the template of `runtime.py` calls. Its member functions compute the
group's ops with one named local per graph value (the graph's names), spelled by the pointwise table and,
for the reduction, by the channel-reduction table (`table.py`):
- `init` / `combine`: the accumulator's start value and how two partial results combine;
- `reduced`: the prologue, from one element's full-shape inputs to the value reduced;
- `element`: the reduced value from the combined accumulator, then the epilogue: the outputs of one
  (sample, position);
- with a pool (`pools.py`): `window` (the window of a pooled position) and `pool` (the pooled value of one
  channel's plane), whose value `ff_pool` the prologue starts from; the pool's window prologue (pointwise ops
  before the pool) is computed inside `pool` from each window element `ff_raw`; a pool kernel (no reduction)
  has `pooled_element` (the outputs of one pooled element) instead of init, combine and element.
Per-channel, per-position and scalar inputs are read through the read-only cache (`ff_cred_ldg`).
"""

from __future__ import annotations

from torch import fx

from ... import pointwise
from ...codegen.pointwise_kernel import KernelSource, binding_head, binding_return, cpp_name
from ...codegen.writer import Writer
from ...plan import KernelGroup
from . import pools, table

_CLASS_ENUM = {"full": "FF_CRED_FULL", "channel": "FF_CRED_CHANNEL", "scalar": "FF_CRED_SCALAR",
               "reduced": "FF_CRED_REDUCED", "pooled": "FF_CRED_POOLED"}
_ROLE = {"channel": "one value per channel", "scalar": "one value", "reduced": "one value per (sample, position)",
         "pooled": "the pool's input, [N, C, *in_size]"}


class _Layout:
    """Names and roles of one channel-reduction group's values."""

    def __init__(self, group: KernelGroup, by_name: dict[str, fx.Node]):
        spec = group.spec
        self.group, self.by_name, self.spec = group, by_name, spec
        self.red = spec.reduction
        self.classes = dict(spec.operands)
        self.full = [i for i in group.inputs if self.classes[i] == "full"]
        self.value = (self.red.values or spec.anchor) if self.red else None  # the graph value of the reduced result
        self.pool = spec.pool
        self.pool_value = (self.pool.values or spec.pool_node) if self.pool else None  # the pooled value
        self.pooled = next((i for i in group.inputs if self.classes[i] == "pooled"), None)  # read through windows
        self.members = set(group.nodes)

    def needed(self, targets: list[str], stop: set[str]) -> list[str]:
        """Members (in order) and inputs that `targets` depend on, not looking past `stop`."""
        found, todo = set(), list(targets)
        while todo:
            name = todo.pop()
            if name in found:
                continue
            found.add(name)
            if name in self.members and name not in stop and name != self.pool_value:
                todo += [a.name for a in self.by_name[name].all_input_nodes]
        return [n for n in [*self.group.inputs, *self.group.nodes] if n in found]


def _load(lay: _Layout, name: str, w: Writer) -> None:
    cls, c = lay.classes[name], cpp_name(name)
    if cls == "full":
        w.line(f"const float {c} = ff_in[{lay.full.index(name)}];")
    elif cls == "channel":
        w.line(f"const float {c} = ff_cred_ldg({c}_channel + ff_c);")
    elif cls == "reduced":
        w.line(f"const float {c} = ff_cred_ldg({c}_reduced + ff_at);")
    elif cls == "pooled":
        w.line(f"const float {c} = ff_raw;  // one element of the window")
    else:
        w.line(f"const float {c} = ff_cred_ldg({c}_scalar);")


def _body(lay: _Layout, names: list[str], w: Writer) -> None:
    for name in names:
        if name in lay.classes:
            _load(lay, name, w)
        elif name == lay.pool_value:
            w.line(f"const float {cpp_name(name)} = ff_pool;  // {lay.pool.op} pool of {lay.pool.data}")
        elif name == lay.value:
            expr = table.spell_final(lay.red, "ff_acc", "ff_channels")
            w.line(f"const float {cpp_name(name)} = {expr};  // {lay.red.op} over the channels")
        elif name not in (lay.spec.anchor, lay.spec.pool_node):
            node = lay.by_name[name]
            expr = pointwise.spell(node, lambda n: cpp_name(n.name))
            w.line(f"const {pointwise.result_type(node)} {cpp_name(name)} = {expr};")


def _window_prologue(lay: _Layout) -> tuple[list[str], list[str], bool]:
    """C++ of the pool's window prologue: the per-channel and scalar loads (once per window), the ops that compute
    the pooled value `ff_x` from one window element `ff_raw`, and whether it reads a per-channel operand;
    ([], [], False) without a window prologue."""
    if not lay.spec.window_nodes:
        return [], [], False
    names = lay.needed([lay.pool.data], stop=set())
    once = [n for n in names if lay.classes.get(n) in ("channel", "scalar")]
    loads, ops = Writer(), Writer()
    _body(lay, once, loads)
    _body(lay, [n for n in names if n not in once], ops)
    ops.line(f"const float ff_x = {cpp_name(lay.pool.data)};")
    return loads.text().splitlines(), ops.text().splitlines(), any(lay.classes[n] == "channel" for n in once)


def _pool_functions(lay: _Layout, w: Writer) -> None:
    pool = lay.pool
    w.line(f"// {pool.describe} of {pool.data}" + (f", computed per window element from {lay.pooled}"
                                                    if lay.spec.window_nodes else ""))
    w.line("FF_HD FFPoolWindow window(const FFCredDims& d, int64_t ff_s) const {")
    with w.indent():
        w.lines("\n".join(pools.spell_window(pool)))
        w.line("return ff_w;")
    w.line("}")
    w.line("// kNHWC: the pool's input is channels-last (a position's C values are contiguous); ff_c: the channel")
    w.line("template <bool kNHWC = false>")
    w.line("FF_HD float pool(const float* ff_plane, const FFCredDims& d, const FFPoolWindow& ff_w, int ff_c) const {")
    with w.indent():
        loads, ops, per_channel = _window_prologue(lay)
        if not per_channel:
            w.line("(void)ff_c;")
        w.lines("\n".join(loads + pools.spell_pool(pool, ops)))
        w.line("return ff_v;")
    w.line("}")


def _prologue(lay: _Layout, w: Writer, targets: list[str], stop: set[str]) -> list[str]:
    names = lay.needed(targets, stop=stop)
    _body(lay, names, w)
    if not any(lay.classes.get(n) == "channel" for n in names):
        w.line("(void)ff_c;")
    if lay.pool_value not in names:
        w.line("(void)ff_pool;")
    return names


def _op_struct(lay: _Layout) -> str:
    g, red = lay.group, lay.red
    outputs = "one value per (sample, position)" if red else "one value per pooled element"
    w = Writer()
    w.line(f"struct {g.name}_op {{")
    with w.indent():
        w.line(f"// {red.op} of {red.data} over the channel axis -> {lay.value}" if red else
               f"// {lay.pool.op} pool of {lay.pool.data}, then the pointwise ops after it")
        w.line(f"static constexpr int kFull = {len(lay.full)};  // full-shape inputs: {', '.join(lay.full) or 'none'}")
        w.line(f"static constexpr int kOut = {len(g.outputs)};  // outputs, {outputs}: {', '.join(g.outputs)}")
        w.line(f"static constexpr bool kPool = {'true' if lay.pool else 'false'};")
        w.line(f"const float* full[{max(1, len(lay.full))}];")
        w.line("float* out[kOut];")
        for name in g.inputs:
            cls = lay.classes[name]
            if cls == "pooled":
                w.line(f"const float* pooled;  // {name}: {_ROLE[cls]}")
            elif cls != "full":
                w.line(f"const float* {cpp_name(name)}_{cls};  // {_ROLE[cls]}")
        w.line("")
        if lay.pool:
            _pool_functions(lay, w)
        if red is None:
            w.line("// the pointwise ops after the pool: the outputs of one pooled element of channel ff_c")
            w.line("FF_HD void pooled_element(const float* ff_in, int ff_c, float ff_pool, float* ff_out) const {")
            with w.indent():
                _prologue(lay, w, list(g.outputs), stop=set())
                for k, o in enumerate(g.outputs):
                    w.line(f"ff_out[{k}] = {cpp_name(o)};")
            w.line("}")
            w.line("};")
            return w.text()
        w.line(f"FF_HD static float init() {{ return {table.spell_init(red)}; }}")
        w.line(f"FF_HD static float combine(float a, float b) {{ return {table.spell_combine(red, 'a', 'b')}; }}")
        w.line("// prologue: the value reduced, from the inputs of one element of channel ff_c" +
               (" and its pooled value" if lay.pool else ""))
        w.line("FF_HD float reduced(const float* ff_in, int ff_c, float ff_pool) const {")
        with w.indent():
            _prologue(lay, w, [red.data], stop=set())
            w.line(f"return {cpp_name(red.data)};")
        w.line("}")
        w.line("// the reduced value and the epilogue: the outputs of position ff_at = n * S + s")
        w.line("FF_HD void element(float ff_acc, int ff_channels, int64_t ff_at, float* ff_out) const {")
        with w.indent():
            epilogue = lay.needed(list(g.outputs), stop={lay.value})
            _body(lay, epilogue, w)
            if not any(lay.classes.get(n) == "reduced" for n in epilogue):
                w.line("(void)ff_at;")
            if red.op != "mean":
                w.line("(void)ff_channels;")
            for k, o in enumerate(g.outputs):
                w.line(f"ff_out[{k}] = {cpp_name(o)};")
        w.line("}")
    w.line("};")
    return w.text()


def _launcher_signature(lay: _Layout) -> str:
    params = ([f"const float* {cpp_name(i)}" for i in lay.group.inputs]
              + [f"float* {cpp_name(o)}" for o in lay.group.outputs] + ["FFCredDims dims", "void* stream"])
    return f"int launch_{lay.group.name}({', '.join(params)})"


def _launcher(lay: _Layout) -> str:
    w = Writer()
    w.line(_launcher_signature(lay) + " {")
    with w.indent():
        w.line(f"{lay.group.name}_op op;")
        for k, name in enumerate(lay.full):
            w.line(f"op.full[{k}] = {cpp_name(name)};")
        for k, name in enumerate(lay.group.outputs):
            w.line(f"op.out[{k}] = {cpp_name(name)};")
        for name in lay.group.inputs:
            if lay.classes[name] == "pooled":
                w.line(f"op.pooled = {cpp_name(name)};")
            elif lay.classes[name] != "full":
                w.line(f"op.{cpp_name(name)}_{lay.classes[name]} = {cpp_name(name)};")
        if not lay.full:
            w.line("op.full[0] = nullptr;")
        w.line(f"return {'ff_cred_launch' if lay.red else 'ff_pool_launch'}(op, dims, stream);")
    w.line("}")
    return w.text()


def _pool_call(lay: _Layout, first: str, keepdim: str, extremum: str, w: Writer) -> None:
    pool = lay.pool
    for what, values in (("k", pool.kernel), ("s", pool.stride), ("p", pool.padding), ("dil", pool.dilation)):
        w.line(f"const int64_t pool_{what}[{pool.dims}] = {{{', '.join(map(str, values))}}};")
    w.line(f"FFCredCall call = ff_cred_of_pool(kernel, {first}, {pool.dims}, pool_k, pool_s, pool_p, pool_dil, "
           f"/*ceil_mode=*/{'true' if pool.ceil_mode else 'false'}, /*keepdim=*/{keepdim}, "
           f"/*needs_channels=*/{extremum}, /*reduce=*/{'true' if lay.red else 'false'});")


def _binding(lay: _Layout) -> str:
    g = lay.group
    ins, outs = [cpp_name(i) for i in g.inputs], [cpp_name(o) for o in g.outputs]
    first = cpp_name(lay.pooled if lay.pool else lay.full[0])
    keepdim = "true" if lay.red and lay.red.keepdim else "false"
    extremum = "true" if lay.red and lay.red.op in ("amin", "amax") else "false"
    w = Writer()
    w.line(binding_head(g.name, ins, outs))
    with w.indent():
        w.line(f'const char* kernel = "{g.name}";')
        if lay.pool:
            _pool_call(lay, first, keepdim, extremum, w)
        else:
            w.line(f"FFCredCall call = ff_cred_of(kernel, {first}.sizes().vec(), /*keepdim=*/{keepdim}, "
                   f"/*needs_channels=*/{extremum});")
        # full inputs may be channels-last in a reduction (a pool kernel reads them in contiguous order)
        full = [cpp_name(i) for i in lay.full] if lay.red else []
        pooled = f"&{cpp_name(lay.pooled)}" if lay.pool else "nullptr"
        w.line(f"ff_cred_set_layout(call, {{{', '.join(full)}}}, {pooled});")
        for name, i in zip(g.inputs, ins):
            w.line(f'const torch::Tensor {i}_c = ff_cred_operand(kernel, "{name}", {i}, call, {first}, '
                   f"{_CLASS_ENUM[lay.classes[name]]});")
        for o in outs:
            w.line(f"torch::Tensor {o} = torch::empty(call.out_sizes, {first}.options());")
        args = [f"{i}_c.data_ptr<float>()" for i in ins] + [f"{o}.data_ptr<float>()" for o in outs]
        args += ["call.dims", "reinterpret_cast<void*>(stream)"]
        w.line(f"ff_check(kernel, launch_{g.name}({', '.join(args)}));")
        w.line(binding_return(outs))
    w.line("}")
    return w.text()


def channel_reduce_kernel_source(group: KernelGroup, by_name: dict[str, fx.Node]) -> KernelSource:
    lay = _Layout(group, by_name)
    tuples = {lay.red.values if lay.red else None, lay.pool.values if lay.pool else None}
    ops = " -> ".join(f"{n} ({pointwise.op_key(by_name[n]).removeprefix('aten.')})" for n in group.nodes
                      if n not in tuples)
    spec = group.spec
    reads = ", ".join(f"{i} ({c})" for i, c in spec.operands)
    pooled = f"{spec.pool.describe} of {spec.pool.data}" if spec.pool else ""
    what = (f"{pooled + ', then ' if pooled else ''}{lay.red.op} of {lay.red.data} over axis 1 of {list(group.shape)} "
            f"-> {list(spec.out_shape)}") if lay.red else f"{pooled} -> {list(group.shape)}"
    kind = "channel-reduction kernel" if lay.red else "pool kernel"
    header = (f"// ---- {group.name} ({kind}): {ops}\n"
              f"// {what}; reads {reads}; writes {', '.join(group.outputs)}\n")
    cuda = header + "\n".join([_op_struct(lay), _launcher(lay)])
    return KernelSource(group.name, cuda, _binding(lay), _launcher_signature(lay) + ";")
