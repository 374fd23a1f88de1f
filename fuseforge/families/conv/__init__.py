"""Conv kernels: a 2-D or 3-D convolution and the pointwise chain after it, as one convolution kernel whose
epilogue computes the chain: the direct exact-fp32 kernel for short dot products (few input channels, a small
window), the implicit-GEMM kernel on tensor cores in TF32 where eager's cuDNN itself runs TF32 and in 3xTF32 where it
runs exact fp32 (measured on the GPU), transposed convolutions included (one stride-1 implicit GEMM per output parity
class).

- `anchor.py`: the convolution a conv kernel computes (`ConvAnchor`: channels, window, geometry, the kernel's tiling);
- `group.py`: recognise such a convolution (which kernel), and how its group grows (the epilogue's operand classes);
- `price.py`: what each kernel is expected to take, and whether that beats cuDNN plus the passes its tail saves;
- `reduction.py`: the reductions a direct kernel's group may end in (over the spatial axes or the channels);
- `norm.py`: the channel norm a direct kernel's output may go into (the kernel takes its statistics as it stores);
- `parity.py`: a transposed convolution as the implicit-GEMM kernel computes it (one stride-1 convolution per output
  parity class);
- `tiling.py`: how each kernel tiles one convolution (a rule of its channels, window and output extents);
- `kernel.py`: the generated epilogue functor, launcher and binding of one group;
- `reference.py`: the float64 reference of the convolution from the plan's geometry;
- `direct.cuh`: the direct kernel (exact fp32 FFMA, weights and double-buffered input tiles in shared memory);
- `igemm.cuh`: the implicit-GEMM kernel (TMA boxes per tap, wgmma TF32 or 3xTF32; sm_90a), written with the PTX of
  `igemm_ptx.cuh`;
- `shift.cuh`: the shifted-tap kernel (3xTF32 wgmma, each tap a shifted descriptor over one shared-memory band;
  sm_90a) of a few-channel stride-1 2-D convolution ending in a spatial sum (`--every-kernel` plans only, until its
  GPU tests have run);
- `binding.h`: the binding's checks and output sizes; `igemm_binding.h`: the implicit-GEMM kernel's weight re-layout.
"""

from __future__ import annotations

from ...cost import nbytes
from ...cuda_sources import cuda_source, paste_include
from ...plan import KernelGroup, Runtime
from ...rates import (
    BANDWIDTH,
    CONV_DIRECT_3D,
    CONV_DIRECT_FLOPS,
    CONV_SHIFT_SUM_FLOPS,
    CUDNN_SHORT_DOT_FLOPS,
    IGEMM_L2_BYTES_PER_S,
    IGEMM_SPLIT_CHUNK8_L2_BYTES_PER_S,
    IGEMM_SPLIT_FLOPS,
    LAUNCH_S,
)
from ...words import counted, with_article
from ..base import FamilyBase
from ..channel_norms import FAMILY as CHANNEL_NORMS
from ..channel_norms import table as norm_table
from .group import (
    IGEMM_MIN_CHANNELS,
    assumed_class,
    conv_op_reason,
    form_conv_groups,
    form_conv_reduction_groups,
    igemm_candidate,
    is_conv_op,
    mark_eager_classes,
    mark_measured,
)
from .kernel import conv_kernel_source
from .norm import split
from .price import direct_seconds
from .reference import direct_conv

DIRECT_KERNEL = cuda_source(__package__, "direct.cuh")  # the kernel and its launch template
# the implicit-GEMM kernel and its launch template, with the PTX it is written in pasted in
IGEMM_KERNEL = paste_include(cuda_source(__package__, "igemm.cuh"), "igemm_ptx.cuh", __package__, "")
# the shifted-descriptor tensor-core kernel (a convolution ending in a spatial sum), with the same PTX pasted in (its
# include guard keeps one copy where both kernels are in a unit); after the direct kernel, whose helpers it uses
SHIFT_KERNEL = paste_include(cuda_source(__package__, "shift.cuh"), "igemm_ptx.cuh", __package__, "")
CONV_BINDING = cuda_source(__package__, "binding.h")  # the binding's checks and output sizes
IGEMM_BINDING = cuda_source(__package__, "igemm_binding.h")  # the implicit-GEMM kernel's weight re-layout
IGEMM_CUDA_FLAGS = ("-gencode=arch=compute_90a,code=sm_90a",)  # wgmma needs sm_90a: H100/H200


_HOW = {
    "direct": ("Conv kernels, direct: each thread sums 8 output channels x up to 8 rows of one column in fp32 "
               "registers, from the weights and a double-buffered input tile in shared memory "
               "(`families/conv/direct.cuh`)."),
    "igemm": ("Conv kernels, implicit GEMM: a block computes 128 output pixels x 64 or 128 output channels; per tap "
              "and 32 input channels the copy engine brings the shifted input box and the weight tile into shared "
              "memory and two warpgroups multiply them on the tensor cores in TF32 (wgmma); the weight is re-laid "
              "and rounded to TF32 at each call (`families/conv/igemm.cuh`). A transposed convolution of stride s is, "
              "for each output parity class (o mod s per axis), an ordinary stride-1 convolution of its input with the "
              "class's taps in reverse: one launch computes every class, a block one class's tile, storing every s-th "
              "output. Where eager's cuDNN runs the convolution in exact fp32, the kernel runs 3xTF32: each operand "
              "is a TF32 big part and a small part (the input copy and the weight hold both), each k-tile's three "
              "products (small x big, big x small, big x big) go into a fresh accumulator that is then added in fp32, "
              "and with fewer than 32 input channels a k-tile is up to 4 taps of 8 channels."),
    "shift": ("Conv kernels, shifted taps (a few-channel, stride-1 2-D convolution ending in a spatial sum): a band of "
              "the input sits in shared memory as pixels x 4-channel planes in the padded rows' order, so that every "
              "tap's operand is the same band read from an address moved by the tap's offset (a wgmma descriptor "
              "without swizzle); one warpgroup multiplies 64 output channels x 128 positions per wgmma on the tensor "
              "cores in 3xTF32 (each operand a TF32 big part and a small part: fp32-class), every tap's small "
              "products before the big ones, while the next band's copy is in flight (`families/conv/shift.cuh`)."),
}
_HOW_EPILOGUE = "A conv kernel's generated epilogue functor applies the fused ops before the one store."
_HOW_CHANNELS = ("A conv kernel ending in a channel reduction holds every output channel in one block: each thread "
                 "combines its channels' values per position, the block's warps combine their partials through shared "
                 "memory in a fixed order, and one value per position is stored.")
_HOW_SUM = ("A conv kernel ending in a spatial sum stores nothing: its threads add their values up in registers and "
            "shuffles (the direct kernel: each thread its rows, the warp its columns; the shifted-tap kernel: each "
            "thread its positions of a band, its quad's lanes), and one lane adds the partial into a double per "
            "sample and channel (atomicAdd); a small kernel then scales the sums into the float32 result.")
_HOW_NORM = ("A conv kernel whose output goes into a channel norm stores it and, as it does, adds each unit's sum and "
             "sum of squares (a unit: a channel, or one sample's group of channels) into doubles: each thread in double "
             "over its rows, the warp over its columns (shuffles), a block's channels in shared memory (batch norm) or, "
             "once the thread has added up its channels of one group, straight into the unit's doubles (group norm; "
             "atomicAdd); a small kernel turns them into each unit's "
             "count, mean and M2 (M2 = sum of squares - sum x mean, in double), and the channel kernels' normalising "
             "pass applies them: no statistics pass over the convolution's output.")
_EXPECTED = {
    "direct": (f"direct conv kernels run at {CONV_DIRECT_FLOPS[2] / 1e12:.0f} TFLOP/s in 2-D and, in 3-D, "
               f"{CONV_DIRECT_3D[0] * 1e12:.1f} ps an output plus the products at {CONV_DIRECT_3D[1] / 1e12:.0f} "
               "TFLOP/s (15-20 TFLOP/s in all; exact fp32, measured on an H100) where cuDNN ran such "
               f"convolutions at {CUDNN_SHORT_DOT_FLOPS[2] / 1e12:.0f} and {CUDNN_SHORT_DOT_FLOPS[3] / 1e12:.0f}"),
    "igemm": ("implicit-GEMM conv kernels take the time of their tiles' reads from L2 at "
              f"{IGEMM_L2_BYTES_PER_S[2] / 1e12:.1f} TB/s in 2-D and {IGEMM_L2_BYTES_PER_S[3] / 1e12:.1f} in 3-D "
              "(each tile reads its input box and weight tile per tap; fitted to its times on an H100)"),
    "shift": (f"shifted-tap conv kernels ending in a spatial sum run at {CONV_SHIFT_SUM_FLOPS / 1e12:.0f} TFLOP/s of "
              "convolution, the positions of a padded row's last columns and of the last band counted as work "
              "(measured on an H200: 54-65 TFLOP/s on 8-channel 3x3 shapes, in the lab)"),
    "split": ("3xTF32 implicit-GEMM conv kernels read twice the TF32 form's bytes at those rates, or with 8-channel "
              f"chunks at {IGEMM_SPLIT_CHUNK8_L2_BYTES_PER_S / 1e12:.2f} TB/s, and do three products for one at "
              f"{IGEMM_SPLIT_FLOPS / 1e12:.0f} TFLOP/s, the slower of the two (measured on an H200: 0.8-1.5x of "
              "this price with 32-channel chunks)"),
}


def _operands(group: KernelGroup) -> list[tuple[str, str]]:
    """The epilogue's operands and, with a channel norm, its pass's (the normalised tensor is the kernel's own)."""
    norm = group.spec.norm
    return list(group.spec.operands) + [o for o in (norm.channel.operands if norm else ()) if o[0] != norm.data]


def _kinds(groups: list[KernelGroup]) -> set[str]:
    return {g.spec.conv.kernel for g in groups}


class Conv(FamilyBase):
    name = "conv"
    summary = ("2-D/3-D convolutions with the pointwise chain after them, as one convolution kernel with a fused "
               "epilogue: direct fp32 for few input channels and a small window (which may also reduce its values over "
               "the spatial axes or the channels), TF32 tensor cores where eager's cuDNN runs TF32 (measured on the GPU)")
    order = 4

    def claim_first(self, claim, pointwise_groups, not_fused):
        """Convolutions whose epilogue ends in a reduction (a spatial sum, a channel reduction), before the row or
        channel-reduction family would take it."""
        return form_conv_reduction_groups(claim, pointwise_groups, not_fused)

    def claim(self, claim, pointwise_groups, not_fused):
        return form_conv_groups(claim, pointwise_groups, not_fused)

    def measure_on_gpu(self, graph, out_dir) -> list[str]:
        """Each convolution's measurement (`layout_precision.measured`, a child process; the pipeline's own
        measurement of every convolution makes it a lookup): eager's precision class, for the implicit-GEMM kernel,
        which runs TF32 and so takes only those that eager's cuDNN runs TF32 too; and cuDNN's times, at which each
        conv kernel's gate prices cuDNN."""
        from ...layout_precision import ROW, measured_or_error  # the GPU side: imported where there is a GPU

        convs = [n for n in graph.nodes if is_conv_op(n)]
        names = frozenset(n.name for n in convs)
        if not names:
            return []
        known = {n.name: n.meta[ROW] for n in convs if ROW in n.meta}  # the pipeline's measurement of every conv
        rows = measured_or_error(names - set(known), graph, out_dir) if names - set(known) else {}
        rows = rows if "error" in rows else {**known, **rows}
        if "error" in rows:  # a failed measurement leaves the tensor-core kernel's convolutions cuDNN's, and says so
            candidates = sum(1 for n in graph.nodes if igemm_candidate(n))
            return [f"the {counted(len(names), 'convolution')} could not be measured ({rows['error']}): cuDNN is priced "
                    f"by the rates" + (f", and the {counted(candidates, 'convolution')} the tensor-core kernel could "
                                      "take stay cuDNN calls" if candidates else "")]
        mark_measured(graph, rows)
        return []

    def assume_unmeasured(self, graph) -> list[str]:
        """Every convolution the implicit-GEMM kernel could take is taken as the precision class in which it can
        (as if measured so): TF32-class, or fp32-class (its 3xTF32 form) below the TF32 form's input channels, so
        that its kernel -- transposed ones too -- is planned and generated without a GPU."""
        classes = {n.name: assumed_class(n) for n in graph.nodes if igemm_candidate(n)}
        if not classes:
            return []
        mark_eager_classes(graph, classes)
        fp32 = sum(1 for c in classes.values() if c == "fp32")
        return [f"no GPU to measure eager's precision on {counted(len(classes), 'convolution')}: --every-kernel takes "
                "them as TF32-class" + (f" ({fp32} of fewer than {IGEMM_MIN_CHANNELS} input channels as fp32-class, "
                                        "for the 3xTF32 form)" if fp32 else "")
                + " (not measured), so their tensor-core conv kernels are generated and checked on the CPU only"]

    def describe(self, group: KernelGroup) -> list[str]:
        c = group.spec.conv
        t = c.tiling
        bias = f" + {c.bias} (bias)" if c.bias else ""
        kernel = (f"implicit GEMM on tensor cores, {t.name}" if c.kernel == "igemm" else
                  f"3xTF32 tensor cores, each tap a shifted descriptor, {t.name}" if c.kernel == "shift" else
                  f"direct fp32, {t.kpt} channels x {t.ph} rows a thread, {t.wk} x {t.wh} warps")
        red, norm = group.spec.reduction, group.spec.norm
        chain = len(group.nodes) - 1 - (len(red.members) if red else 0) - (len(norm.members) if norm else 0)
        tail = (f"epilogue of {chain} pointwise ops" + (f", then the {red.describe()}" if red else "")
                + (f", its output's statistics per unit; then {norm.describe()} with {len(norm.members)} ops "
                   "(channel kernels' normalising pass)" if norm else ""))
        return [f"    conv kernel: {c.op} ({c.x} * {c.w}{bias}) -> {list(group.shape)}, {c.geometry_text()}; "
                f"{kernel}; {tail}",
                f"    reads {', '.join([c.x + ' (input)', c.w + ' (weight)'] + [f'{i} ({k})' for i, k in _operands(group)])}; "
                f"writes {', '.join(group.outputs)}"]

    def source(self, group: KernelGroup, by_name):
        return conv_kernel_source(group, by_name)

    def runtime(self) -> Runtime:
        return Runtime((DIRECT_KERNEL, IGEMM_KERNEL), (CONV_BINDING, IGEMM_BINDING), IGEMM_CUDA_FLAGS)

    def runtime_for(self, groups: list[KernelGroup]) -> Runtime:
        """The implicit-GEMM kernel (sm_90a) only where a group uses it; the channel kernels' runtime where a group
        goes into a channel norm."""
        kinds = _kinds(groups)
        base = (self.runtime() if "igemm" in kinds else Runtime((DIRECT_KERNEL,), (CONV_BINDING,)))
        if "shift" in kinds:  # sm_90a too; after the direct kernel, whose helpers it uses
            base = Runtime((*base.cuda, SHIFT_KERNEL), base.binding, IGEMM_CUDA_FLAGS)
        if not any(g.spec.norm for g in groups):
            return base
        norms = CHANNEL_NORMS.runtime()
        return Runtime(norms.cuda + base.cuda, norms.binding + base.binding, base.nvcc_flags)

    def check_operands(self, group: KernelGroup, inputs: dict) -> None:
        """The input and weight have the channels and window the kernel was generated for; each epilogue input
        fits its class against the output they make (what the binding checks); so does each input of the norm's
        pass."""
        c = group.spec.conv
        operands = _operands(group)
        x, w = inputs[c.x], inputs[c.w]
        window = tuple(w.shape[2:])
        channels = (c.c, c.k) if c.transposed else (c.k, c.c)  # a transposed convolution's weight is [C, K, window]
        if x.dim() != c.dims + 2 or x.shape[1] != c.c or tuple(w.shape[:2]) != channels or \
                window != c.window[3 - c.dims:]:
            raise ValueError(f"{group.name}: convolution of {list(x.shape)} by {list(w.shape)} is not the "
                             f"{c.c} -> {c.k} channels and window it was generated for")
        out = [x.shape[0], c.k] + [c.out_extent(size, axis) for axis, size in
                                   zip(range(3 - c.dims, 3), x.shape[2:])]
        for name, cls in operands:
            t = inputs[name]
            if cls == "full":
                ok = list(t.shape) == out
            elif cls == "channel":
                ok = t.numel() == c.k and (t.dim() <= 1 or ([1] * (len(out) - t.dim()) + list(t.shape))[1] == c.k)
            else:
                ok = t.numel() == 1
            if not ok:
                raise ValueError(f"{group.name}: input {name} of shape {list(t.shape)} is not {cls} for output {out}")

    def references(self, group: KernelGroup) -> dict:
        """The convolution from the plan's geometry; a channel norm by the channel kernels' formulas."""
        c = group.spec.conv

        def convolved(local):
            return direct_conv(c, local[c.x], local[c.w], local[c.bias] if c.bias else None)

        if not group.spec.norm:
            return {group.spec.anchor: convolved}
        norm = group.spec.norm.channel.norm

        def normalised(local):
            return norm_table.reference(norm, local[norm.data], {p: local[p] for p in norm.params})

        return {group.spec.anchor: convolved, group.spec.norm.node: normalised}

    def call_comment(self, group: KernelGroup) -> str:
        conv = group.spec.conv
        kind = (f"{conv.tiling.precision} tensor cores" if conv.kernel == "igemm" else
                "3xTF32 tensor cores, shifted taps" if conv.kernel == "shift" else "direct fp32")
        return f"one conv kernel ({kind}, epilogue fused)"

    def why_torch(self, node, on: bool) -> str | None:
        if not is_conv_op(node):
            return None
        if not on:
            return f"convolution kept as the cuDNN call eager makes (conv kernels turned off, `{self.flag}`)."
        reason = conv_op_reason(node)
        return "convolution kept as the cuDNN call eager makes: it is no conv kernel" + (f" ({reason})." if reason else ".")

    def replaced(self, group: KernelGroup) -> tuple[str, str]:
        red, norm = group.spec.reduction, group.spec.norm
        chain = len(group.nodes) - 1 - (len(red.members) if red else 0) - (len(norm.members) if norm else 0)
        epilogue = (f", its {counted(chain, 'pointwise op')} applied to each value before the one store, so the "
                    "convolution's output is never written and read back" if chain else "")
        if norm:
            ops = f"its {counted(chain, 'pointwise op')} applied to each value, " if chain else ""
            epilogue = (f", {ops}its output's statistics for the {norm.channel.norm.describe} taken as it is stored, "
                        "so the channel kernels only normalise it: the output is read once, not twice")
        if red:
            ops = f"its {counted(chain, 'pointwise op')} applied to each value and " if chain else ""
            axes = "spatial axes" if red.over == "spatial" else "output channels"
            epilogue = (f", {ops}the {red.op} over the {axes} taken as the values are computed, so the "
                        "convolution's output is never written")
        c = group.spec.conv
        if c.kernel == "igemm":
            classes = c.stride[0] * c.stride[1] * c.stride[2]
            how = ("as an implicit GEMM" if not c.transposed else
                   "as the implicit GEMM of the stride-1 convolution it is (its window's taps in reverse)" if classes == 1
                   else f"as one stride-1 implicit GEMM per output parity class ({classes} classes in one launch, "
                        "each writing every stride-th output)")
            precision = ("in 3xTF32 (each operand a TF32 big part and a small part: fp32-class products), as eager's "
                         "cuDNN runs it in exact fp32" if c.tiling.split else
                         "in TF32, the precision eager's cuDNN runs it at")
            return "conv kernel", (f"{with_article(c.op)} ({c.terms} products an output) {how} on "
                                   f"tensor cores {precision} (measured on the GPU before planning), expected faster "
                                   f"than cuDNN{epilogue}")
        if c.kernel == "shift":
            return "conv kernel", (f"{with_article(c.op)} with short dot products ({c.terms} products an output) on "
                                   "tensor cores in 3xTF32 (fp32-class, as eager's cuDNN runs it in exact fp32), each "
                                   f"tap a shifted read of one shared-memory band{epilogue}")
        return "conv kernel", (f"{with_article(c.op)} with short dot products "
                               f"({c.terms} products an output) as exact-fp32 FFMAs, expected faster "
                               f"than cuDNN at this size{epilogue}")

    def launches(self, group: KernelGroup) -> int:
        red = group.spec.reduction  # a spatial sum: zeroing the sums, the kernel, their scaling
        if group.spec.norm:  # zeroing the sums, the kernel, the statistics from the sums, normalising
            return 4
        return 3 if red and red.over == "spatial" else 1

    def fusion(self, group: KernelGroup, ops: str, count: int, saved: str) -> str | None:
        red = group.spec.reduction
        if group.spec.norm:
            return (f"- `{group.name}` ({count} ops): four launches (zeroing the sums, the conv kernel, the statistics "
                    f"from its sums, the normalising pass), and about {saved} less traffic per call: the epilogue's "
                    "values stay in registers, the convolution's output is written once and read once (no statistics "
                    "pass), the normalised value and the ops after it stay in registers.")
        if not red:
            return None
        if red.over == "channels":
            return (f"- `{group.name}` ({count} ops): one launch instead of {count}, and about {saved} less traffic per "
                    "call: the convolution's output and the epilogue's values are never written; the kernel writes "
                    "one value per position.")
        return (f"- `{group.name}` ({count} ops): three launches (zeroing the sums, the kernel, scaling them), and "
                f"about {saved} less traffic per call: the convolution's output and the epilogue's values are never "
                f"written; the kernel writes one value per sample and channel.")

    def how(self) -> list[str]:
        return [_HOW["direct"], _HOW["igemm"], _HOW["shift"], _HOW_EPILOGUE]

    def how_for(self, groups: list[KernelGroup]) -> list[str]:
        kinds = _kinds(groups)
        overs = {g.spec.reduction.over for g in groups if g.spec.reduction}
        sums = [_HOW_SUM] * ("spatial" in overs) + [_HOW_CHANNELS] * ("channels" in overs)
        sums += [_HOW_NORM] * any(g.spec.norm for g in groups)
        return [_HOW[k] for k in ("direct", "igemm", "shift") if k in kinds] + [_HOW_EPILOGUE] + sums

    def call_shape(self, group: KernelGroup) -> str:
        c, red = group.spec.conv, group.spec.reduction
        summed = ("" if not red else f", {red.op} over the spatial axes -> one value per (n, k)" if red.over == "spatial"
                  else f", {red.op} over the output channels -> one value per position")
        if group.spec.norm:
            summed = f", its statistics per unit, then {group.spec.norm.describe()}"
        return (f"{c.op} of {c.x} by {c.w} -> {list(group.shape)} ({c.geometry_text()}){summed}"
                + (f", epilogue reads {', '.join(f'{i} ({k})' for i, k in _operands(group))}"
                   if _operands(group) else ""))

    def expected(self) -> list[str]:
        return [_EXPECTED["direct"], _EXPECTED["igemm"], _EXPECTED["split"], _EXPECTED["shift"]]

    def expected_for(self, groups: list[KernelGroup]) -> list[str]:
        kinds = _kinds(groups)
        three = any(g.spec.conv.kernel == "igemm" and g.spec.conv.tiling.split for g in groups)
        return ([_EXPECTED[k] for k in ("direct", "igemm") if k in kinds] + [_EXPECTED["split"]] * three
                + [_EXPECTED["shift"]] * ("shift" in kinds))

    def seconds(self, group: KernelGroup, by_name) -> float | None:
        """The kernel's measured rate with its tiles' tails, or its traffic where that takes longer; with a channel
        norm, the conv kernel writing its output, then the normalising pass: a memory-bound read of that output and
        the norm part's other inputs, and its writes."""
        parts = split(group, by_name) if group.spec.norm else (group,)
        conv_part = parts[0]
        moved = sum(nbytes(by_name[i]) for i in conv_part.inputs) + sum(nbytes(by_name[o]) for o in conv_part.outputs)
        seconds = max(direct_seconds(by_name[group.spec.anchor], group.spec.conv), moved / BANDWIDTH)
        for norm_part in parts[1:]:
            seconds += (sum(nbytes(by_name[i]) for i in norm_part.inputs)
                        + sum(nbytes(by_name[o]) for o in norm_part.outputs)) / BANDWIDTH
        return seconds + self.launches(group) * LAUNCH_S


FAMILY = Conv()
