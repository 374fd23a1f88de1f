"""Spell one planned GEMM kernel: its epilogue functor, launcher and binding.

The functor is what `gemm3x::launch<true>` (TN; the lab's 3xTF32 GEMM, `runtime.py`) calls for every
output element inside the kernel's bounds-checked store loop:

    __device__ float operator()(float acc, int batch, int row, int col) const

It computes the group's ops with one named local per graph value (the graph's names), spelled by the
pointwise table: first the anchor's own value (linear: acc + bias[col]; addmm: alpha * acc + beta * bias),
then the epilogue chain. It returns the group's first output (the kernel stores it) and writes any other
outputs itself. Epilogue inputs are read through the read-only cache by their class: full (the element's
own value), per row, per column, scalar; the binding makes them and the outputs contiguous.
"""

from __future__ import annotations

from torch import fx

from ... import pointwise
from ...codegen.pointwise_kernel import KernelSource, cpp_name
from ...codegen.writer import Writer
from ...cpp_literals import cpp_float
from ...plan import KernelGroup

_INDEX = {"full": "ff_at", "row": "ff_row_at", "col": "ff_col", "scalar": "0"}
_ROLE = {"full": "one value per output element", "row": "one value per row", "col": "one value per column",
         "scalar": "one value"}
_CLASS_ENUM = {"full": "FF_GEMM_FULL", "row": "FF_GEMM_ROW", "col": "FF_GEMM_COL", "scalar": "FF_GEMM_SCALAR"}


def _field(name: str, cls: str) -> str:
    return f"{cpp_name(name)}_{cls}"


def _anchor_expr(group: KernelGroup) -> str:
    g = group.spec.gemm
    acc = "ff_acc" if g.alpha == 1.0 else f"{cpp_float(g.alpha)} * ff_acc"
    if g.bias is None:
        return acc
    bias = cpp_name(g.bias) if g.beta == 1.0 else f"{cpp_float(g.beta)} * {cpp_name(g.bias)}"
    return f"{acc} + {bias}"


def _functor(group: KernelGroup, by_name: dict[str, fx.Node]) -> str:
    spec = group.spec
    w = Writer()
    w.line(f"struct {group.name}_epilogue {{")
    with w.indent():
        w.line("int64_t ff_m, ff_n;  // rows per batch and columns of the output")
        for name, cls in spec.operands:
            w.line(f"const float* {_field(name, cls)};  // {name}: {_ROLE[cls]}")
        for name in group.outputs[1:]:
            w.line(f"float* out_{name};  // {name}, written here (the kernel stores {group.outputs[0]})")
        w.line("")
        w.line("__device__ __forceinline__ float operator()(float ff_acc, int ff_batch, int ff_row, int ff_col) const {")
        with w.indent():
            classes = {cls for _, cls in spec.operands}
            need_at = "full" in classes or len(group.outputs) > 1
            if need_at or "row" in classes:
                w.line("const int64_t ff_row_at = (int64_t)ff_batch * ff_m + ff_row;")
            if need_at:
                w.line("const int64_t ff_at = ff_row_at * ff_n + ff_col;")
            for name, cls in spec.operands:
                w.line(f"const float {cpp_name(name)} = __ldg({_field(name, cls)} + {_INDEX[cls]});")
            for name in group.nodes:
                if name == spec.anchor:
                    op = spec.gemm.op
                    w.line(f"const float {cpp_name(name)} = {_anchor_expr(group)};  // {op}: the GEMM's value")
                    continue
                node = by_name[name]
                expr = pointwise.spell(node, lambda n: cpp_name(n.name))
                w.line(f"const {pointwise.result_type(node)} {cpp_name(name)} = {expr};")
            for name in group.outputs[1:]:
                w.line(f"out_{name}[ff_at] = {cpp_name(name)};")
            w.line(f"return {cpp_name(group.outputs[0])};")
        w.line("}")
    w.line("};")
    return w.text()


def _launcher_params(group: KernelGroup) -> list[str]:
    return (["const float* ff_a", "const float* ff_b", f"float* {cpp_name(group.outputs[0])}"]
            + [f"const float* {_field(n, c)}" for n, c in group.spec.operands]
            + [f"float* {cpp_name(o)}" for o in group.outputs[1:]]
            + ["int64_t batch", "int64_t m", "int64_t n", "int64_t k", "int64_t lda", "int64_t ldb",
               "int64_t stride_a", "int64_t stride_b", "void* stream"])


def _launcher_signature(group: KernelGroup) -> str:
    return f"int launch_{group.name}({', '.join(_launcher_params(group))})"


def _launcher(group: KernelGroup) -> str:
    g = group.spec.gemm
    w = Writer()
    w.line(_launcher_signature(group) + " {")
    with w.indent():
        w.line(f"{group.name}_epilogue epi;")
        w.line("epi.ff_m = m;")
        w.line("epi.ff_n = n;")
        for name, cls in group.spec.operands:
            w.line(f"epi.{_field(name, cls)} = {_field(name, cls)};")
        for name in group.outputs[1:]:
            w.line(f"epi.out_{name} = {cpp_name(name)};")
        w.line(f"// {g.layout}: B is read as [N, K] rows ({'x @ W.T' if g.b_transposed else 'the binding copied the [K, N] B'})")
        w.line(f"return ff_gemm_launch(ff_a, ff_b, {cpp_name(group.outputs[0])}, "
               "batch, m, n, k, lda, ldb, stride_a, stride_b, epi, stream);")
    w.line("}")
    return w.text()


def _binding(group: KernelGroup) -> str:
    spec, g = group.spec, group.spec.gemm
    ins, outs = [cpp_name(i) for i in group.inputs], [cpp_name(o) for o in group.outputs]
    single = len(outs) == 1
    w = Writer()
    w.line(f"{'torch::Tensor' if single else 'std::vector<torch::Tensor>'} {group.name}("
           f"{', '.join([f'torch::Tensor {i}' for i in ins] + ['int64_t stream'])}) {{")
    with w.indent():
        w.line(f'const char* kernel = "{group.name}";')
        w.line(f"const FFGemm g = ff_gemm_prepare(kernel, {cpp_name(g.a)}, {cpp_name(g.b)}, "
               f"{'true' if g.batched else 'false'}, {'true' if g.op == 'linear' else 'false'});"
               "  // B as [N, K] rows (copied when it is not: NN)")
        for name, cls in spec.operands:
            w.line(f'const torch::Tensor {_field(name, cls)} = ff_gemm_operand(kernel, "{name}", {cpp_name(name)}, g, '
                   f"{_CLASS_ENUM[cls]});")
        for o in outs:
            w.line(f"torch::Tensor {o} = torch::empty(g.out_sizes, g.a.options());")
        args = ["g.a.data_ptr<float>()", "g.b.data_ptr<float>()", f"{outs[0]}.data_ptr<float>()"]
        args += [f"{_field(n, c)}.data_ptr<float>()" for n, c in spec.operands]
        args += [f"{o}.data_ptr<float>()" for o in outs[1:]]
        args += ["g.batch", "g.m", "g.n", "g.k", "g.lda", "g.ldb", "g.stride_a", "g.stride_b",
                 "reinterpret_cast<void*>(stream)"]
        w.line(f"ff_check(kernel, launch_{group.name}({', '.join(args)}));")
        w.line(f"return {outs[0]};" if single else f"return {{{', '.join(outs)}}};")
    w.line("}")
    return w.text()


def gemm_kernel_source(group: KernelGroup, by_name: dict[str, fx.Node]) -> KernelSource:
    g = group.spec.gemm
    ops = " -> ".join(f"{n} ({pointwise.op_key(by_name[n]).removeprefix('aten.')})" for n in group.nodes)
    reads = ", ".join([f"{g.a} (A)", f"{g.b} (B)"] + [f"{i} ({c})" for i, c in group.spec.operands])
    header = (f"// ---- {group.name} (GEMM kernel, 3xTF32, {g.layout}{', batched' if g.batched else ''}): {ops}\n"
              f"// output {list(group.shape)}; reads {reads}; writes {', '.join(group.outputs)}\n")
    cuda = header + "\n".join([_functor(group, by_name), _launcher(group)])
    return KernelSource(group.name, cuda, _binding(group), _launcher_signature(group) + ";")
