"""Spell one planned conv kernel: its epilogue functor, launcher and binding.

The functor is what `ff_conv_direct::launch` (`direct.cuh`) or `ff_conv_igemm::launch` (`igemm.cuh`) calls for
every output value before its one store:

    __device__ float operator()(float acc, int k, int64_t at) const   // k: output channel, at: flat index

It computes the group's ops with one named local per graph value (the graph's names), spelled by the pointwise
table: first the convolution's own value (acc, + its bias per channel where it has one), then the epilogue chain.
It returns the group's first output (the kernel stores it) and writes any other outputs itself. Epilogue inputs
are read through the read-only cache by their class: full (the element's own value), per channel, scalar. The
kernel's template arguments (channels, window, tiling) and the convolution's stride, padding and dilation are
constants of the plan; the batch and spatial sizes are read from the tensors at each call. The implicit-GEMM
kernel's binding also re-lays the weight as [K][taps][C rounded up to the chunk], rounded to TF32 (3xTF32: [2K],
the small parts after), at each call (a few hundred KB), and on its channels-last path gives the launcher a scratch
tensor for the input's channels-last copy (3xTF32: both parts).

A group ending in a reduction (`ConvSpec.reduction`) returns the reduced value from the functor instead of its
output. For a spatial sum the launcher calls `ff_conv_direct::launch_spatial_sum` with a scratch of N x K doubles
(the binding's) and the scale (1, or 1 / the spatial size for a mean), and the binding allocates the [N, K] result
(with unit spatial axes where it keeps them). For a channel reduction the functor also spells the reduction
(`init`, `combine`, `finish`: the channel-reduction table's C++), the launcher calls
`ff_conv_direct::launch_channel_reduce` (or `ff_conv_igemm::launch` with its channel-reduction argument: the
tensor-core kernel's tile then holds every channel and `reduce_tile` combines them), and the binding allocates
[N, (1,) (OD,) OH, OW].
"""

from __future__ import annotations

from torch import fx

from ... import pointwise
from ...codegen import epilogue
from ...codegen.pointwise_kernel import KernelSource, binding_head, binding_return, cpp_name
from ...codegen.writer import Writer
from ...plan import KernelGroup
from ..channel_norms.kernel import channel_apply_source
from ..channel_reductions import table as channel_table
from . import tiling
from .norm import split

_INDEX = {"full": "ff_at", "channel": "ff_k", "scalar": "0"}
_ROLE = {"full": "one value per output element", "channel": "one value per output channel", "scalar": "one value"}
_CLASS_ENUM = {"full": "FF_CONV_FULL", "channel": "FF_CONV_CHANNEL", "scalar": "FF_CONV_SCALAR"}


def _functor(group: KernelGroup, by_name: dict[str, fx.Node]) -> str:
    conv = group.spec.conv
    w = Writer()
    w.line(f"struct {group.name}_epilogue {{")
    with w.indent():
        epilogue.fields(w, group, _ROLE)
        if conv.kernel == "igemm":  # igemm.cuh's WritesOutputs: a functor that writes nothing else runs for every row
            writes = "true" if len(group.outputs) > 1 else "false"
            w.line(f"static constexpr bool kWritesOutputs = {writes};  // outputs of its own (igemm.cuh)")
        w.line("")
        w.line("__device__ __forceinline__ float operator()(float ff_acc, int ff_k, int64_t ff_at) const {")
        with w.indent():
            bias = f" + {cpp_name(conv.bias)}" if conv.bias else ""
            anchor = f"const float {cpp_name(group.spec.anchor)} = ff_acc{bias};  // {conv.op}: the convolution's value"
            red = group.spec.reduction
            # plain loads, which the compiler merges: direct.cuh computes a channel's rows before storing them, and
            # igemm.cuh's store_tile a channel's rows where the functor writes nothing else (WritesOutputs)
            epilogue.chain(w, group, by_name, _INDEX, anchor, (red.data, red.members) if red else None,
                           plain_loads=True)
        w.line("}")
        if red and red.over == "channels":  # the reduction over the output channels, in the table's C++
            r = red.channel
            w.line(f"// {red.describe()}")
            w.line(f"__device__ __forceinline__ float init() const {{ return {channel_table.spell_init(r)}; }}")
            w.line("__device__ __forceinline__ float combine(float a, float b) const { return "
                   f"{channel_table.spell_combine(r, 'a', 'b')}; }}")
            w.line(f"__device__ __forceinline__ float finish(float acc) const {{ return "
                   f"{channel_table.spell_final(r, 'acc', str(conv.k))}; }}")
    w.line("};")
    return w.text()


def _main_pointers(group: KernelGroup) -> list[str]:
    sums = ["double* ff_sums"] if group.spec.norm else []  # the statistics' sums per unit
    if group.spec.conv.transposed:  # the input, the model's weight, the scratch of its re-laying per class, ..
        return ["const float* ff_x", "const float* ff_w", "float* ff_w_re", "float* ff_x_cl", *sums]
    if group.spec.conv.kernel == "igemm":  # the NCHW input, the re-laid weight, the channels-last scratch
        return ["const float* ff_x", "const float* ff_w_re", "float* ff_x_cl", *sums]
    if (group.spec.reduction and group.spec.reduction.over == "spatial") or group.spec.norm:
        return ["const float* ff_x", "const float* ff_w", "double* ff_sums"]  # and the sums per (n, k) or per unit
    return ["const float* ff_x", "const float* ff_w"]


def _launcher_params(group: KernelGroup) -> list[str]:
    return (epilogue.launcher_pointers(group, _main_pointers(group))
            + ["int64_t ff_n", "int64_t ff_d", "int64_t ff_h", "int64_t ff_w_in", "int64_t ff_od", "int64_t ff_oh",
               "int64_t ff_ow", "void* stream"])


def _launcher_signature(group: KernelGroup) -> str:
    return f"int launch_{group.name}({', '.join(_launcher_params(group))})"


def _template_args(group: KernelGroup) -> str:
    c = group.spec.conv
    t = c.tiling
    unit_rows = c.stride[1] == 1 and c.dilation[1] == 1
    return ", ".join(map(str, [c.c, *c.window, t.kpt, t.wk, t.wh, t.ph])) + f", {'true' if unit_rows else 'false'}"


def _igemm_launcher(group: KernelGroup) -> str:
    c = group.spec.conv
    t = c.tiling
    bd, bh, bw = t.box
    out = cpp_name(group.outputs[0])
    w = Writer()
    w.line(_launcher_signature(group) + " {")
    with w.indent():
        w.line(f"{group.name}_epilogue epi;")
        epilogue.assign_fields(w, group)
        strides = ", stride" if c.transposed else ""
        w.line("// n c cp cq d h w, k od oh ow, window, padding, dilation (depth, rows, columns), pixel box, NCHW box width"
               + strides)
        w.line(f"const ff_conv_igemm::Geometry g{{(int)ff_n, {c.c}, {t.cp}, {t.cq}, (int)ff_d, (int)ff_h, (int)ff_w_in, "
               f"{c.k}, (int)ff_od, (int)ff_oh, (int)ff_ow, {', '.join(map(str, c.window + c.padding + c.dilation))}, "
               f"{bd}, {bh}, {bw}, {t.box_width}{''.join(f', {v}' for v in c.stride) if c.transposed else ''}}};")
        w.line("const cudaStream_t s = static_cast<cudaStream_t>(stream);")
        if t.nchw:
            w.line("(void)ff_x_cl;  // null: the NCHW path reads ff_x itself")
            src = "ff_x"
        else:
            parts = (", true);  // channels-last, TF32 big parts then small parts" if t.split
                     else ");  // channels-last, TF32-rounded")
            w.line(f"const int ff_copied = ff_conv_igemm::prepare_input(ff_x, ff_x_cl, (int)ff_n, {c.c}, {t.cp}, "
                   f"ff_d * ff_h * ff_w_in, s{parts}")
            w.line("if (ff_copied != 0) return ff_copied;")
            src = "ff_x_cl"
        launch = ", persistent" if t.persistent else ""
        w.line(f"// {t.name}; {t.stages} stages, {t.min_blocks} block(s) per SM{launch}")
        red, norm = group.spec.reduction, group.spec.norm
        output, stats = "kStore", ""
        if red:  # a channel reduction (the only one the tensor-core kernel takes; one tile holds every channel)
            w.line(f"// each pixel's {c.k} channels reduced in the epilogue ({red.describe()}): one value a pixel")
            output = "kChannelReduce"
        elif norm:
            unit = "one sample's group of channels" if norm.stat_groups else "one channel"
            w.line(f"// stores {group.outputs[0]} and adds the sum and the sum of squares of each unit ({unit}) "
                   f"for the {norm.channel.norm.describe}")
            output, stats = "kStoreStats", f", ff_sums, {norm.stat_groups}"
        args = f"<{'true' if t.nchw else 'false'}, {t.bn}, {t.stages}, {t.min_blocks}, false{_igemm_options(t, output)}>"
        if c.transposed:
            w.line("// the weight re-laid with each output parity class's taps together, then one launch of every class (a "
                   "block: one class's tile, its outputs s apart)")
            w.line(f"return ff_conv_igemm::launch_transposed{args}({src}, ff_w, ff_w_re, {out}, g, epi, s{stats});")
        else:
            parities = ", nullptr" if stats else ""
            w.line(f"return ff_conv_igemm::launch{args}({src}, ff_w_re, {out}, g, epi, s{parities}{stats});")
    w.line("}")
    return w.text()


def _igemm_options(t: tiling.IgemmTiling, output: str) -> str:
    """The launch's template arguments after the first five: chunk, chunks, 3xTF32, persistent, tile pixels, cluster,
    what it does with its values (`output`: "kStore", "kChannelReduce", "kStoreStats"), as far as one differs from its
    default (persistent where 3xTF32, 128 pixels, 1 block, kStore)."""
    values = [t.chunk, t.chunks, "true" if t.split else "false", "true" if t.persistent else "false", t.bm, t.cluster,
              f"ff_conv_igemm::{output}"]
    defaults = [None, None, "false", "true" if t.split else "false", tiling.IGEMM_BM, 1, "ff_conv_igemm::kStore"]
    last = max((i for i, (v, d) in enumerate(zip(values, defaults)) if v != d and d is not None), default=-1)
    return "".join(f", {v}" for v in values[:last + 1])


def _launcher(group: KernelGroup) -> str:
    if group.spec.conv.kernel == "igemm":
        return _igemm_launcher(group)
    c = group.spec.conv
    w = Writer()
    w.line(_launcher_signature(group) + " {")
    with w.indent():
        w.line(f"{group.name}_epilogue epi;")
        epilogue.assign_fields(w, group)
        w.line("// n c d h w, k od oh ow, stride, padding, dilation (depth, rows, columns)")
        w.line(f"const ff_conv_direct::Geometry g{{(int)ff_n, {c.c}, (int)ff_d, (int)ff_h, (int)ff_w_in, {c.k}, (int)ff_od, "
               f"(int)ff_oh, (int)ff_ow, {', '.join(map(str, c.stride + c.padding + c.dilation))}}};")
        t = c.tiling
        if c.kernel == "direct":
            w.line(f"// C, KD, KH, KW; {t.kpt} channels x {t.ph} rows a thread, {t.wk} x {t.wh} warps; unit-row path")
        red = group.spec.reduction
        if red and red.over == "channels":
            w.line(f"return (int)ff_conv_direct::launch_channel_reduce<{_template_args(group)}>(ff_x, ff_w, "
                   f"{cpp_name(group.outputs[0])}, g, epi, static_cast<cudaStream_t>(stream));  // {red.describe()}")
        elif group.spec.norm:
            norm = group.spec.norm
            unit = "one sample's group of channels" if norm.stat_groups else "one channel"
            w.line(f"// stores {group.outputs[0]} and adds the sum and the sum of squares of each unit ({unit}) "
                   f"for the {norm.channel.norm.describe}")
            w.line(f"return (int)ff_conv_direct::launch_store_stats<{_template_args(group)}>(ff_x, ff_w, "
                   f"{cpp_name(group.outputs[0])}, ff_sums, g, epi, {norm.stat_groups}, "
                   "static_cast<cudaStream_t>(stream));")
        elif red:
            scale = "1.0 / (static_cast<double>(ff_od) * ff_oh * ff_ow)" if red.op == "mean" else "1.0"
            w.line(f"const double scale = {scale};  // {red.describe()}")
            if c.kernel == "shift":
                w.line(f"// 3xTF32 tensor cores, each tap a shifted descriptor; {t.name}")
                call = f"ff_conv_shift::launch_spatial_sum<{c.c}, {c.window[1]}, {c.window[2]}, {t.chunks}>"
            else:
                call = f"ff_conv_direct::launch_spatial_sum<{_template_args(group)}>"
            w.line(f"return (int){call}(ff_x, ff_w, ff_sums, {cpp_name(group.outputs[0])}, g, epi, scale, "
                   "static_cast<cudaStream_t>(stream));")
        else:
            w.line(f"return (int)ff_conv_direct::launch<{_template_args(group)}>(ff_x, ff_w, "
                   f"{cpp_name(group.outputs[0])}, g, epi, static_cast<cudaStream_t>(stream));")
    w.line("}")
    return w.text()


def _prepare(w: Writer, group: KernelGroup, conv_part: KernelGroup) -> None:
    """The binding's first lines: the convolution's operands checked (`ff_conv_prepare`), then its epilogue's."""
    c = group.spec.conv
    geometry = [c.c, c.k, *c.window, *c.stride, *c.padding, *c.dilation]
    w.line(f'const char* kernel = "{group.name}";')
    if c.transposed:
        w.line(f"const FFConv c = ff_conv_prepare(kernel, {cpp_name(c.x)}, {cpp_name(c.w)}, {c.dims}, "
               f"{{{', '.join(map(str, geometry))}}}, {{{', '.join(map(str, c.output_padding))}}});  "
               "// C K KD KH KW, stride, padding, dilation; transposed: its output padding")
    else:
        w.line(f"const FFConv c = ff_conv_prepare(kernel, {cpp_name(c.x)}, {cpp_name(c.w)}, {c.dims}, "
               f"{{{', '.join(map(str, geometry))}}});  // C K KD KH KW, stride, padding, dilation")
    epilogue.binding_operands(w, conv_part, "ff_conv_operand", "c", _CLASS_ENUM)


def _igemm_operands(w: Writer, c) -> list[str]:
    """The tensor-core kernel's operands, as the binding prepares them: the re-laid weight (TF32-rounded; 3xTF32: both
    parts; a transposed convolution's is re-laid by the launcher into this scratch) and, on the channels-last path, the
    scratch of the input's copy. Returns the launcher's first pointer arguments."""
    t = c.tiling
    halves = 2 if t.split else 1
    rows = "[2K] (big parts, then small)" if t.split else "[K]"
    if c.transposed:
        taps = c.window[0] * c.window[1] * c.window[2]
        w.line(f"torch::Tensor w_re = torch::empty({{{halves * c.k * taps * t.cq}}}, c.x.options());  "
               f"// per output parity class {rows}[its taps][{t.cq}], TF32-rounded by the launcher")
    elif t.split:
        w.line(f"const torch::Tensor w_re = ff_conv_igemm_weight(c.w, {t.cq}, true);  // {rows}[taps][{t.cq}]")
    else:
        w.line(f"const torch::Tensor w_re = ff_conv_igemm_weight(c.w, {t.cq});  // [K][taps][{t.cq}], TF32-rounded")
    weight = ["c.w.data_ptr<float>()"] if c.transposed else []
    if t.nchw:  # the kernel reads the input itself: no channels-last copy
        return ["ff_conv_igemm_aligned(c.x).data_ptr<float>()", *weight, "w_re.data_ptr<float>()", "nullptr"]
    copies = "2 * " if t.split else ""
    w.line(f"const torch::Tensor x_cl = torch::empty({{{copies}c.n * c.d * c.h * c.w_ * {t.cp}}}, "
           "c.x.options());  // the input's channels-last copy" + (" (both parts)" if t.split else ""))
    return ["c.x.data_ptr<float>()", *weight, "w_re.data_ptr<float>()", "x_cl.data_ptr<float>()"]


def _binding(group: KernelGroup) -> str:
    c = group.spec.conv
    ins, outs = [cpp_name(i) for i in group.inputs], [cpp_name(o) for o in group.outputs]
    w = Writer()
    w.line(binding_head(group.name, ins, outs))
    with w.indent():
        _prepare(w, group, group)
        red = group.spec.reduction
        for o in outs:
            if red and red.over == "channels":
                sizes = ["c.n"] + (["1"] if red.keepdim else []) + (["c.od"] if c.dims == 3 else []) + ["c.oh", "c.ow"]
                w.line(f"torch::Tensor {o} = torch::empty({{{', '.join(sizes)}}}, c.x.options());  // {red.describe()}")
            elif red:
                ones = ", 1" * c.dims if red.keepdim else ""
                w.line(f"torch::Tensor {o} = torch::empty({{c.n, {c.k}{ones}}}, c.x.options());  // {red.describe()}")
                w.line(f"torch::Tensor sums = torch::empty({{c.n * {c.k}}}, c.x.options().dtype(torch::kDouble));")
            else:
                w.line(f"torch::Tensor {o} = torch::empty(c.out_sizes, c.x.options());")
        if c.kernel == "igemm":
            main = _igemm_operands(w, c)
        elif red and red.over == "spatial":
            main = ["c.x.data_ptr<float>()", "c.w.data_ptr<float>()", "sums.data_ptr<double>()"]
        else:
            main = ["c.x.data_ptr<float>()", "c.w.data_ptr<float>()"]
        args = [*main, *epilogue.pointer_arguments(group)]
        args += ["c.n", "c.d", "c.h", "c.w_", "c.od", "c.oh", "c.ow", "reinterpret_cast<void*>(stream)"]
        check = "ff_conv_igemm_check" if c.kernel == "igemm" else "ff_check"
        w.line(f"{check}(kernel, launch_{group.name}({', '.join(args)}));")
        w.line(binding_return(outs))
    w.line("}")
    return w.text()


def _norm_binding(group: KernelGroup, conv_part: KernelGroup, launch_norm) -> str:
    """Both kernels of a conv group that goes into a channel norm: the conv kernel writes the normalised tensor (a
    scratch of the binding) and the statistics' sums, the channel kernels normalise it (`launch_norm`: the channel
    family's lines that launch its normalising pass)."""
    norm = group.spec.norm
    ins, outs = [cpp_name(i) for i in group.inputs], [cpp_name(o) for o in group.outputs]
    data, groups = cpp_name(norm.data), norm.stat_groups
    w = Writer()
    w.line(binding_head(group.name, ins, outs))
    with w.indent():
        _prepare(w, group, conv_part)
        read = "; an output too" if norm.data in group.outputs else ""
        w.line(f"torch::Tensor {data} = torch::empty(c.out_sizes, c.x.options());  // the convolution's output{read}")
        units = "c.out_sizes[1]" if groups == 0 else f"c.n * {groups}"
        w.line(f"torch::Tensor sums = torch::empty({{2 * {units}}}, c.x.options().dtype(torch::kDouble));  "
               "// sum and sum of squares per unit")
        c = group.spec.conv
        main = ([*_igemm_operands(w, c), "sums.data_ptr<double>()"] if c.kernel == "igemm"
                else ["c.x.data_ptr<float>()", "c.w.data_ptr<float>()", "sums.data_ptr<double>()"])
        args = [*main, *epilogue.pointer_arguments(conv_part),
                "c.n", "c.d", "c.h", "c.w_", "c.od", "c.oh", "c.ow", "reinterpret_cast<void*>(stream)"]
        check = "ff_conv_igemm_check" if c.kernel == "igemm" else "ff_check"
        w.line(f"{check}(kernel, launch_{conv_part.name}({', '.join(args)}));")
        launch_norm(w, data, "sums")
        w.line(binding_return(outs))
    w.line("}")
    return w.text()


def _norm_source(group: KernelGroup, by_name: dict[str, fx.Node], header: str) -> KernelSource:
    conv_part, norm_part = split(group, by_name)
    apply, apply_signature, launch_norm = channel_apply_source(norm_part, by_name)
    cuda = header + "\n".join([_functor(conv_part, by_name), _launcher(conv_part), apply])
    return KernelSource(group.name, cuda, _norm_binding(group, conv_part, launch_norm),
                        f"{_launcher_signature(conv_part)};\n{apply_signature};")


def conv_kernel_source(group: KernelGroup, by_name: dict[str, fx.Node]) -> KernelSource:
    c = group.spec.conv
    ops = " -> ".join(f"{n} ({pointwise.op_key(by_name[n]).removeprefix('aten.')})" for n in group.nodes)
    reads = ", ".join([f"{c.x} (input)", f"{c.w} (weight)"] + [f"{i} ({k})" for i, k in group.spec.operands])
    how = (f"{c.tiling.precision} implicit GEMM, tensor cores" if c.kernel == "igemm" else
           "3xTF32 tensor cores, each tap a shifted descriptor" if c.kernel == "shift" else "direct fp32")
    red = group.spec.reduction
    output = (f"output {list(group.shape)}, reduced ({red.describe()}) as it is computed" if red
              else f"output {list(group.shape)} and its statistics, then the {group.spec.norm.describe()}"
              if group.spec.norm else f"output {list(group.shape)}")
    header = (f"// ---- {group.name} (conv kernel, {how}, {c.geometry_text()}): {ops}\n"
              f"// {output}; reads {reads}; writes {', '.join(group.outputs)}\n")
    if group.spec.norm:
        return _norm_source(group, by_name, header)
    cuda = header + "\n".join([_functor(group, by_name), _launcher(group)])
    return KernelSource(group.name, cuda, _binding(group), _launcher_signature(group) + ";")
