"""Spell one planned pointwise kernel: its element function, its CUDA kernel, launcher and binding.

The element function computes every op of the group for one element, one named local per op
(the graph's names), and is `__host__ __device__` so tests can run it on the CPU. The kernel walks
the iteration space with a grid-stride loop, four elements per step with 16-byte loads and stores
when every dense operand is aligned, one element per step otherwise; operands that are broadcast
(bias vectors, per-channel scales) are read through their strides.

A second kernel, `<name>_tiled_kernel`, runs when the binding's `ff_prepare` finds a channels-last
operand (NHWC or NDHWC memory of an [N, C, S...] iteration; see runtime.py): reading it in the output's
order would be strided by C. A block of 4 warps takes a tile of one sample (`cuda/tiles.cuh`'s `FFTiles`: up to
32 channels x 1024 / width positions, so a 16-channel tensor gets 16 x 64 tiles and no idle lanes; each
thread moves eight elements, as two 16-byte accesses on either side when C and S are multiples of 4, on the
channels-last side when C is), reads
the tiled operand along channels into shared memory with the fixed `FFTiles::load_channels_last` (shared
with `ff_channels_last`, layout_kernel.py), and then computes and writes the tile along positions, so both
the read and the contiguous (NCHW) output writes are coalesced. A quad of the write phase is four positions
of one channel, so every other input's four values come from one offset (`ff_load4_ncs`; per element, the
epilogue of dev/kernels/bench_tiles.py took 0.062 ms against the flat path's 0.052, now 0.052). Which
operand is tiled is a runtime argument; each input is spelled as a choice between the tile and an
ordinary load, so the operand descriptors are never indexed at run time (no local memory). The tiled
kernel is compiled once per path (quads or single elements), so each gets the registers it needs; the quads path
with 32-bit indices for 16 blocks a multiprocessor (FF_TILE_MIN_BLOCKS: 32 registers; 7-13 % faster than 6
blocks, tiles.cuh), or 12 with four or more inputs (FF_TILE_MIN_BLOCKS_MANY_INPUTS), the other paths for 8, as
they spilled with fewer registers.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import fx

from .. import pointwise
from ..plan import KernelGroup
from .writer import Writer

CPP_RESERVED = {
    "and", "or", "not", "xor", "bitand", "bitor", "compl", "new", "delete", "default", "int", "float",
    "double", "char", "bool", "long", "short", "signed", "unsigned", "auto", "const", "static", "case",
    "switch", "for", "while", "do", "if", "else", "return", "class", "struct", "union", "template",
    "this", "true", "false", "operator", "register", "volatile", "inline", "friend", "private", "public",
    "protected", "virtual", "typename", "namespace", "using", "goto", "break", "continue", "asm",
    "extern", "enum", "sizeof", "typedef", "try", "catch", "throw", "explicit", "mutable", "export",
    "shape", "n", "i", "q", "j", "stream", "first", "stride", "s", "threads", "blocks", "call", "torch",
    # the tiled kernel's locals
    "c", "t", "C", "S", "p", "ch", "v", "at", "row", "tile", "tiled", "tiles", "src", "s0", "c0", "aligned", "k",
}


def cpp_name(graph_name: str) -> str:
    """A C++ local for a graph value; the graph's own name unless it is reserved."""
    return f"v_{graph_name}" if graph_name in CPP_RESERVED else graph_name


def binding_head(name: str, inputs: list[str], outputs: list[str]) -> str:
    """The first line of a kernel's binding: it takes the inputs as tensors and the stream, returns the outputs."""
    ret = "torch::Tensor" if len(outputs) == 1 else "std::vector<torch::Tensor>"
    return f"{ret} {name}({', '.join([f'torch::Tensor {i}' for i in inputs] + ['int64_t stream'])}) {{"


def binding_return(outputs: list[str]) -> str:
    return f"return {outputs[0]};" if len(outputs) == 1 else f"return {{{', '.join(outputs)}}};"


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


def _element_at_i(group: KernelGroup, values: list[str], w: Writer) -> None:
    """The element function on the input values `values`, its outputs stored at index i."""
    outs = _names(group)[1]
    w.line(f"float {', '.join(f'{o}_v' for o in outs)};")
    w.line(f"{group.name}_element({', '.join(values + [f'{o}_v' for o in outs])});")
    for o in outs:
        w.line(f"{o}[i] = {o}_v;")


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
                _element_at_i(group, [f"ff_load(shape, {i}, i)" for i in ins], w)
            w.line("}")
        w.line("}")
    w.line("}")
    return w.text()


def _tiled_kernel(group: KernelGroup) -> str:
    ins, outs = _names(group)
    params = ["FFShape shape"] + [f"FFOperand {i}" for i in ins] + [f"float* __restrict__ {o}" for o in outs]
    # the tiled operand's data: a chain of choices on `tiled`, never a runtime index into the operands
    src = ins[-1] + ".ptr"
    for k in range(len(ins) - 2, -1, -1):
        src = f"tiled == {k} ? {ins[k]}.ptr : {src}"
    w = Writer()
    w.line("// Operand `tiled` is channels-last over [N, C, S] (or [C, S]): a block moves one tile (FFTiles: up to")
    w.line("// 32 channels x 1024 / width positions of one sample) through shared memory, reading along C and")
    w.line("// computing and writing along S; eight elements per thread, as two 16-byte accesses each way when")
    w.line("// tiles.quads. kQuads is tiles.quads: one kernel per path, so that each gets the registers its own")
    w.line("// path needs (with both in one kernel the quads path ran at 64 registers, four blocks per SM).")
    blocks = "FF_TILE_MIN_BLOCKS" if len(ins) <= 3 else "FF_TILE_MIN_BLOCKS_MANY_INPUTS"
    w.line(f"// The quads path with 32-bit indices is compiled for {blocks} blocks a multiprocessor (tiles.cuh); the")
    w.line("// others spilled there, and have 64 registers.")
    w.line("template <bool kQuads, typename index_t>")
    w.line(f"__global__ void __launch_bounds__(FF_TILE_THREADS, kQuads && sizeof(index_t) == 4 ? {blocks} : 8) "
           f"{group.name}_tiled_kernel("
           f"{', '.join(params)}, int tiled, FFTiles tiles) {{")
    with w.indent():
        w.line("__shared__ __align__(16) float tile[FF_TILE_SLOTS];  // [channel][position], rows of tiles.pitch()")
        w.line("tiles.quads = kQuads;  // a constant for the phases' branches")
        w.line("const index_t C = (index_t)tiles.channels, S = (index_t)tiles.positions;")
        w.line(f"const float* __restrict__ src = {src};")
        w.line("for (int64_t t = blockIdx.x; t < tiles.count; t += gridDim.x) {")
        with w.indent():
            w.line("int64_t n, c0, s0;")
            w.line("tiles.origin(t, n, c0, s0);")
            w.line("tiles.load_channels_last(tile, src, n, c0, s0, C, S);  // read the tiled operand along channels")
            w.line("__syncthreads();")
            w.line("int p, ch;")
            w.line("if (kQuads) {  // compute and write along positions: quads of four positions of one channel")
            with w.indent():
                w.line("#pragma unroll")
                w.line("for (int k = 0; k < FF_TILE_QUADS; ++k) {")
                with w.indent():
                    w.line("tiles.quad_along_positions(FFTiles::item(k), p, ch);")
                    w.line("const index_t s = (index_t)(s0 + p), c = (index_t)(c0 + ch);")
                    w.line("if (c < C && s < S) {")
                    with w.indent():
                        w.line("const index_t i = ((index_t)n * C + c) * S + s;")
                        w.line("const float4 q = *reinterpret_cast<const float4*>(tile + tiles.slot(p, ch));")
                        w.line("const float row[4] = {q.x, q.y, q.z, q.w};")
                        for k, i in enumerate(ins):
                            w.line(f"float {i}_q[4];")
                            w.line(f"if (tiled == {k}) {{ for (int j = 0; j < 4; ++j) {i}_q[j] = row[j]; }} "
                                   f"else ff_load4_ncs(shape, {i}, i, (index_t)n, c, s, {i}_q);")
                        w.line(f"float {', '.join(f'{o}_q[4]' for o in outs)};")
                        w.line("#pragma unroll")
                        w.line("for (int j = 0; j < 4; ++j) {")
                        with w.indent():
                            args = [f"{i}_q[j]" for i in ins] + [f"{o}_q[j]" for o in outs]
                            w.line(f"{group.name}_element({', '.join(args)});")
                        w.line("}")
                        for o in outs:
                            w.line(f"ff_store4({o}, i, {o}_q);")
                    w.line("}")
                w.line("}")
            w.line("} else {  // compute and write along positions: a warp's 32 outputs are consecutive")
            with w.indent():
                # (fully unrolled, ptxas spilled the 32-bit-index kernel at 64 registers)
                w.line("#pragma unroll 4")
                w.line("for (int j = 0; j < 4 * FF_TILE_QUADS; ++j) {")
                with w.indent():
                    w.line("tiles.element_along_positions(FFTiles::item(j), p, ch);")
                    w.line("const index_t s = (index_t)(s0 + p), c = (index_t)(c0 + ch);")
                    w.line("if (c < C && s < S) {")
                    with w.indent():
                        w.line("const index_t i = ((index_t)n * C + c) * S + s;")
                        for k, i in enumerate(ins):
                            w.line(f"const float {i}_v = tiled == {k} ? tile[tiles.slot(p, ch)] "
                                   f": ff_load_ncs(shape, {i}, i, (index_t)n, c, s);")
                        _element_at_i(group, [f"{i}_v" for i in ins], w)
                    w.line("}")
                w.line("}")
            w.line("}")
            w.line("__syncthreads();")
        w.line("}")
    w.line("}")
    return w.text()


def _launcher_signature(group: KernelGroup) -> str:
    ins, outs = _names(group)
    params = ["FFShape shape"] + [f"FFOperand {i}" for i in ins] + [f"float* {o}" for o in outs]
    extra = ["int64_t n", "bool vectorized", "int tiled", "void* stream"]
    return f"int launch_{group.name}({', '.join(params + extra)})"


def _launcher(group: KernelGroup) -> str:
    args = ", ".join(["shape", *_names(group)[0], *_names(group)[1]])
    w = Writer()
    w.line(_launcher_signature(group) + " {")
    with w.indent():
        w.line("if (n == 0) return 0;")
        w.line("const int threads = 256;")
        w.line("cudaStream_t s = static_cast<cudaStream_t>(stream);")
        w.line("if (tiled >= 0) {  // a channels-last operand: one block per tile")
        with w.indent():
            w.line("const FFTiles tiles = FFTiles::of(shape, vectorized);")
            for index_t, cond in (("uint32_t", "if (n <= INT32_MAX) {"), ("uint64_t", "} else {")):
                w.line(cond)
                with w.indent():
                    for quads in ("true", "false"):
                        launch = (f"{group.name}_tiled_kernel<{quads}, {index_t}><<<tiles.blocks(), FF_TILE_THREADS, 0, s>>>"
                                  f"({args}, tiled, tiles);")
                        w.line(f"if (tiles.quads) {launch}" if quads == "true" else f"else {launch}")
            w.line("}")
            w.line("return (int)cudaGetLastError();")
        w.line("}")
        w.line("const int blocks = ff_blocks(vectorized ? n / 4 : n, threads);")
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
    w = Writer()
    w.line(binding_head(group.name, ins, outs))
    with w.indent():
        w.line(f'FFCall call = ff_prepare("{group.name}", {{{", ".join(ins)}}});')
        for o in outs:
            w.line(f"torch::Tensor {o} = torch::empty(call.out_sizes, {ins[0]}.options());")
        operands = [f"call.operands[{k}]" for k in range(len(ins))]
        ptrs = [f"{o}.data_ptr<float>()" for o in outs]
        args = ", ".join(["call.shape", *operands, *ptrs, "call.numel", "call.vectorizable", "call.tiled",
                          "reinterpret_cast<void*>(stream)"])
        w.line(f'ff_check("{group.name}", launch_{group.name}({args}));')
        w.line(binding_return(outs))
    w.line("}")
    return w.text()


def kernel_source(group: KernelGroup, by_name: dict[str, fx.Node]) -> KernelSource:
    ops = " -> ".join(f"{n} ({pointwise.op_key(by_name[n]).removeprefix('aten.')})" for n in group.nodes)
    header = (f"// ---- {group.name}: {ops}\n"
              f"// reads {', '.join(group.inputs)}; writes {', '.join(group.outputs)}; "
              f"iteration shape {list(group.shape)}\n")
    cuda = header + "\n".join([element_function(group, by_name), _kernel(group), _tiled_kernel(group),
                                _launcher(group)])
    return KernelSource(group.name, cuda, _binding(group), _launcher_signature(group) + ";")
