"""Spell one planned pointwise kernel: its element function, its CUDA kernel, launcher and binding.

The element function computes every op of the group for one element, one named local per op
(the graph's names), and is `__host__ __device__` so tests can run it on the CPU. The kernel walks
the iteration space with a grid-stride loop, four elements per step with 16-byte loads and stores
when every dense operand is aligned, one element per step otherwise; operands that are broadcast
(bias vectors, per-channel scales) are read through their strides.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import fx

from .. import pointwise
from ..partition import KernelGroup
from .writer import Writer

CPP_RESERVED = {
    "and", "or", "not", "xor", "bitand", "bitor", "compl", "new", "delete", "default", "int", "float",
    "double", "char", "bool", "long", "short", "signed", "unsigned", "auto", "const", "static", "case",
    "switch", "for", "while", "do", "if", "else", "return", "class", "struct", "union", "template",
    "this", "true", "false", "operator", "register", "volatile", "inline", "friend", "private", "public",
    "protected", "virtual", "typename", "namespace", "using", "goto", "break", "continue", "asm",
    "extern", "enum", "sizeof", "typedef", "try", "catch", "throw", "explicit", "mutable", "export",
    "shape", "n", "i", "q", "j", "stream", "first", "stride", "s", "threads", "blocks", "call", "torch",
}


def cpp_name(graph_name: str) -> str:
    """A C++ local for a graph value; the graph's own name unless it is reserved."""
    return f"v_{graph_name}" if graph_name in CPP_RESERVED else graph_name


@dataclass(frozen=True)
class KernelSource:
    name: str
    cuda: str  # element function, kernel and launcher (kernel translation unit)
    binding: str  # torch-facing function (binding translation unit)
    launcher_decl: str


def element_function(group: KernelGroup, by_name: dict[str, fx.Node]) -> str:
    w = Writer()
    params = [f"float {cpp_name(i)}" for i in group.inputs] + [f"float& out_{o}" for o in group.outputs]
    # out_ prefixes keep the outputs apart from the locals of the same value
    w.line(f"FF_HD void {group.name}_element({', '.join(params)}) {{")
    with w.indent():
        for name in group.nodes:
            node = by_name[name]
            expr = pointwise.spell(node, lambda n: cpp_name(n.name))
            w.line(f"const {pointwise.result_type(node)} {cpp_name(name)} = {expr};")
        for o in group.outputs:
            w.line(f"out_{o} = {cpp_name(o)};")
    w.line("}")
    return w.text()


def _names(group: KernelGroup) -> tuple[list[str], list[str]]:
    return [cpp_name(i) for i in group.inputs], [cpp_name(o) for o in group.outputs]


def _kernel(group: KernelGroup) -> str:
    ins, outs = _names(group)
    params = ["FFShape shape"] + [f"FFOperand {i}" for i in ins] + [f"float* __restrict__ {o}" for o in outs]
    w = Writer()
    w.line("template <bool kVectorized, typename index_t>")
    w.line(f"__global__ void {group.name}_kernel({', '.join(params)}, index_t n) {{")
    with w.indent():
        w.line("const index_t stride = (index_t)gridDim.x * blockDim.x;")
        w.line("const index_t first = (index_t)blockIdx.x * blockDim.x + threadIdx.x;")
        w.line("if (kVectorized) {")
        with w.indent():
            w.line("for (index_t q = first; q < n / 4; q += stride) {")
            with w.indent():
                w.line("const index_t i = q * 4;")
                for i in ins:
                    w.line(f"float {i}_v[4]; ff_load4(shape, {i}, i, {i}_v);")
                w.line(f"float {', '.join(f'{o}_v[4]' for o in outs)};")
                w.line("#pragma unroll")
                args = [f"{i}_v[j]" for i in ins] + [f"{o}_v[j]" for o in outs]
                w.line(f"for (int j = 0; j < 4; ++j) {group.name}_element({', '.join(args)});")
                for o in outs:
                    w.line(f"ff_store4({o}, i, {o}_v);")
            w.line("}")
        w.line("} else {")
        with w.indent():
            w.line("for (index_t i = first; i < n; i += stride) {")
            with w.indent():
                w.line(f"float {', '.join(f'{o}_v' for o in outs)};")
                args = [f"ff_load(shape, {i}, i)" for i in ins] + [f"{o}_v" for o in outs]
                w.line(f"{group.name}_element({', '.join(args)});")
                for o in outs:
                    w.line(f"{o}[i] = {o}_v;")
            w.line("}")
        w.line("}")
    w.line("}")
    return w.text()


def _launcher_signature(group: KernelGroup) -> str:
    ins, outs = _names(group)
    params = ["FFShape shape"] + [f"FFOperand {i}" for i in ins] + [f"float* {o}" for o in outs]
    return f"int launch_{group.name}({', '.join(params + ['int64_t n', 'bool vectorized', 'void* stream'])})"


def _launcher(group: KernelGroup) -> str:
    args = ", ".join(["shape", *_names(group)[0], *_names(group)[1]])
    w = Writer()
    w.line(_launcher_signature(group) + " {")
    with w.indent():
        w.line("if (n == 0) return 0;")
        w.line("const int threads = 256;")
        w.line("const int blocks = ff_blocks(vectorized ? n / 4 : n, threads);")
        w.line("cudaStream_t s = static_cast<cudaStream_t>(stream);")
        w.line("if (n <= INT32_MAX) {")
        with w.indent():
            for vec in ("true", "false"):
                cond = "if (vectorized)" if vec == "true" else "else"
                w.line(f"{cond} {group.name}_kernel<{vec}, uint32_t><<<blocks, threads, 0, s>>>({args}, (uint32_t)n);")
        w.line("} else {")
        with w.indent():
            for vec in ("true", "false"):
                cond = "if (vectorized)" if vec == "true" else "else"
                w.line(f"{cond} {group.name}_kernel<{vec}, uint64_t><<<blocks, threads, 0, s>>>({args}, (uint64_t)n);")
        w.line("}")
        w.line("return (int)cudaGetLastError();")
    w.line("}")
    return w.text()


def _binding(group: KernelGroup) -> str:
    ins, outs = _names(group)
    single = len(outs) == 1
    ret = "torch::Tensor" if single else "std::vector<torch::Tensor>"
    params = [f"torch::Tensor {i}" for i in ins] + ["int64_t stream"]
    w = Writer()
    w.line(f"{ret} {group.name}({', '.join(params)}) {{")
    with w.indent():
        w.line(f'FFCall call = ff_prepare("{group.name}", {{{", ".join(ins)}}});')
        for o in outs:
            w.line(f"torch::Tensor {o} = torch::empty(call.out_sizes, {ins[0]}.options());")
        operands = [f"call.operands[{k}]" for k in range(len(ins))]
        ptrs = [f"{o}.data_ptr<float>()" for o in outs]
        args = ", ".join(["call.shape", *operands, *ptrs, "call.numel", "call.vectorizable",
                          "reinterpret_cast<void*>(stream)"])
        w.line(f'ff_check("{group.name}", launch_{group.name}({args}));')
        w.line(f"return {outs[0]};" if single else f"return {{{', '.join(outs)}}};")
    w.line("}")
    return w.text()


def kernel_source(group: KernelGroup, by_name: dict[str, fx.Node]) -> KernelSource:
    ops = " -> ".join(f"{n} ({pointwise.op_key(by_name[n]).removeprefix('aten.')})" for n in group.nodes)
    header = (f"// ---- {group.name}: {ops}\n"
              f"// reads {', '.join(group.inputs)}; writes {', '.join(group.outputs)}; "
              f"iteration shape {list(group.shape)}\n")
    cuda = header + "\n".join([element_function(group, by_name), _kernel(group), _launcher(group)])
    return KernelSource(group.name, cuda, _binding(group), _launcher_signature(group) + ";")
