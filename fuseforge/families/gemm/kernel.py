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
from ...codegen import epilogue
from ...codegen.pointwise_kernel import KernelSource, binding_head, binding_return, cpp_name
from ...codegen.writer import Writer
from ...cpp_literals import cpp_float
from ...plan import KernelGroup

_INDEX = {"full": "ff_at", "row": "ff_row_at", "col": "ff_col", "scalar": "0"}
_ROLE = {"full": "one value per output element", "row": "one value per row", "col": "one value per column",
         "scalar": "one value"}
_CLASS_ENUM = {"full": "FF_GEMM_FULL", "row": "FF_GEMM_ROW", "col": "FF_GEMM_COL", "scalar": "FF_GEMM_SCALAR"}


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
        epilogue.fields(w, group, _ROLE)
        w.line("")
        w.line("__device__ __forceinline__ float operator()(float ff_acc, int ff_batch, int ff_row, int ff_col) const {")
        with w.indent():
            classes = {cls for _, cls in spec.operands}
            need_at = "full" in classes or len(group.outputs) > 1
            if need_at or "row" in classes:
                w.line("const int64_t ff_row_at = (int64_t)ff_batch * ff_m + ff_row;")
            if need_at:
                w.line("const int64_t ff_at = ff_row_at * ff_n + ff_col;")
            anchor = f"const float {cpp_name(spec.anchor)} = {_anchor_expr(group)};  // {spec.gemm.op}: the GEMM's value"
            epilogue.chain(w, group, by_name, _INDEX, anchor)
        w.line("}")
    w.line("};")
    return w.text()


def _launcher_params(group: KernelGroup) -> list[str]:
    return (epilogue.launcher_pointers(group, ["const float* ff_a", "const float* ff_b"])
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
        epilogue.assign_fields(w, group)
        w.line(f"// {g.layout}: B is read as [N, K] rows ({'x @ W.T' if g.b_transposed else 'the binding copied the [K, N] B'})")
        w.line(f"return ff_gemm_launch(ff_a, ff_b, {cpp_name(group.outputs[0])}, "
               "batch, m, n, k, lda, ldb, stride_a, stride_b, epi, stream);")
    w.line("}")
    return w.text()


def _binding(group: KernelGroup) -> str:
    g = group.spec.gemm
    ins, outs = [cpp_name(i) for i in group.inputs], [cpp_name(o) for o in group.outputs]
    w = Writer()
    w.line(binding_head(group.name, ins, outs))
    with w.indent():
        w.line(f'const char* kernel = "{group.name}";')
        w.line(f"const FFGemm g = ff_gemm_prepare(kernel, {cpp_name(g.a)}, {cpp_name(g.b)}, "
               f"{'true' if g.batched else 'false'}, {'true' if g.op == 'linear' else 'false'});"
               "  // B as [N, K] rows (copied when it is not: NN)")
        epilogue.binding_operands(w, group, "ff_gemm_operand", "g", _CLASS_ENUM)
        for o in outs:
            w.line(f"torch::Tensor {o} = torch::empty(g.out_sizes, g.a.options());")
        args = ["g.a.data_ptr<float>()", "g.b.data_ptr<float>()", *epilogue.pointer_arguments(group)]
        args += ["g.batch", "g.m", "g.n", "g.k", "g.lda", "g.ldb", "g.stride_a", "g.stride_b",
                 "reinterpret_cast<void*>(stream)"]
        w.line(f"ff_check(kernel, launch_{group.name}({', '.join(args)}));")
        w.line(binding_return(outs))
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
