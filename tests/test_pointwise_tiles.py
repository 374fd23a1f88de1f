"""Pointwise kernels read a channels-last operand through shared-memory tiles and write contiguous outputs.

The generated text (a tiled kernel, chosen by the launcher from `ff_prepare`'s runtime flag), nvcc and
ptxas on it (no spills, no local memory), g++ on the binding, and on a GPU the kernel against the same
ops in torch fp32 on odd sizes, with the channels-last operand first, second or both.
"""

import re
import shutil
import subprocess

import pytest
import torch
from compile_check import GXX, compile_binding
from test_partition import _captured
from torch import nn

from fuseforge.codegen import generate
from fuseforge.codegen.runtime import BINDING_RUNTIME
from fuseforge.partition import partition

NVCC = shutil.which("nvcc")


class BiasTanhScaleResidual(nn.Module):
    """A convolution's epilogue: per-channel bias, tanh, a scalar parameter, a constant, a residual."""

    def __init__(self, c=5):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(c))
        self.scale = nn.Parameter(torch.tensor(0.75))

    def forward(self, x, y):
        return torch.tanh(x + self.bias.view(-1, 1, 1)) * self.scale * 0.5 + y


def _eager(x, bias, scale, y):
    """The same fp32 ops as the model, for any rank."""
    return torch.tanh(x + bias.view(-1, *[1] * (x.dim() - 2))) * scale * 0.5 + y


@pytest.fixture(scope="module")
def generated():
    captured = _captured(BiasTanhScaleResidual(), torch.randn(2, 5, 7, 9), torch.randn(2, 5, 7, 9))
    plan = partition(captured.graph)
    (group,) = plan.groups
    assert group.inputs == ("x", "view", "p_scale", "y")
    return group, generate(plan, captured.graph, "bias_tanh_scale_residual.py")


def test_a_channels_last_operand_is_read_through_a_tile_and_the_output_is_contiguous(generated):
    group, ext = generated
    (kernel,) = ext.kernels
    name = group.name
    tiled = kernel.cuda[kernel.cuda.index(f"{name}_tiled_kernel("):kernel.cuda.index(f"int launch_{name}(")]
    assert "__shared__ __align__(16) float tile[FF_TILE_SLOTS];" in tiled
    # one kernel per path (quads or single elements), the host's FFTiles passed in
    assert "int tiled, FFTiles tiles) {" in tiled and "tiles.quads = kQuads;" in tiled
    # the tiled operand is read along channels by FFTiles' fixed phase (16-byte loads with quads, else all
    # 4 single loads before the stores: runtime.py, run on the host by test_tiles.py), then the tile is
    # computed and written along positions
    load = "tiles.load_channels_last(tile, src, n, c0, s0, C, S);"
    assert load in tiled and tiled.index(load) < tiled.index("__syncthreads();")
    assert "void load_channels_last(float* tile, const float* __restrict__ src" in ext.cuda  # FFTiles is there
    # quads: one 16-byte store along positions of each contiguous output
    assert "for (int k = 0; k < FF_TILE_QUADS; ++k) {" in tiled
    assert "tiles.quad_along_positions(FFTiles::item(k), p, ch);" in tiled
    assert "ff_store4(add_21, i, add_21_q);" in tiled
    # single elements otherwise, written along positions
    assert "for (int j = 0; j < 4 * FF_TILE_QUADS; ++j) {" in tiled
    assert "tiles.element_along_positions(FFTiles::item(j), p, ch);" in tiled
    assert "const index_t i = ((index_t)n * C + c) * S + s;" in tiled
    assert "add_21[i] = add_21_v;" in tiled
    # each input is the tile or an ordinary load, chosen by the runtime flag: never a runtime index into
    # the operand descriptors (that would put them in local memory)
    for k, i in enumerate(group.inputs):
        assert (f"const float {i}_v = tiled == {k} ? tile[tiles.slot(p, ch)] "
                f": ff_load_ncs(shape, {i}, i, (index_t)n, c, s);") in tiled
        assert (f"if (tiled == {k}) {{ for (int j = 0; j < 4; ++j) {i}_q[j] = row[j]; }} "
                f"else ff_load4_ncs(shape, {i}, i, (index_t)n, c, s, {i}_q);") in tiled
    assert "tiled == 0 ? x.ptr : tiled == 1 ? view.ptr : tiled == 2 ? p_scale.ptr : y.ptr" in tiled
    assert tiled.count("__syncthreads();") == 2  # one tile at a time, whichever path
    # the launcher takes the flag and launches the tiled kernel, and only it, when it is set
    launcher = kernel.cuda[kernel.cuda.index(f"int launch_{name}("):]
    branch = launcher[launcher.index("if (tiled >= 0) {"):launcher.index("const int blocks = ff_blocks(vectorized")]
    for quads in ("true", "false"):
        for index_t in ("uint32_t", "uint64_t"):
            assert f"{name}_tiled_kernel<{quads}, {index_t}><<<tiles.blocks(), FF_TILE_THREADS, 0, s>>>" in branch
    assert "const FFTiles tiles = FFTiles::of(shape, vectorized);" in branch and f"{name}_kernel<" not in branch
    assert "return (int)cudaGetLastError();" in branch
    assert "int tiled, void* stream)" in kernel.launcher_decl
    # the binding hands over ff_prepare's choice; the output stays a plain (contiguous) empty tensor
    assert "call.vectorizable, call.tiled, reinterpret_cast<void*>(stream)" in kernel.binding
    assert "torch::empty(call.out_sizes, x.options())" in kernel.binding
    assert "call.tiled = (int)k;" in BINDING_RUNTIME


def _ptxas_report(stderr: str) -> dict[str, dict[str, int]]:
    """Registers, stack frame and spills of every entry function in `ptxas -v` output."""
    report, current = {}, None
    for line in stderr.splitlines():
        if m := re.search(r"Function properties for (\S+)", line):
            current = report.setdefault(m.group(1), {})
        elif current is not None and (m := re.search(
                r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)):
            current.update(stack=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
        elif current is not None and (m := re.search(r"Used (\d+) registers", line)):
            current["registers"] = int(m.group(1))
            current = None
    return report


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def _hopper_report(cuda: str, tmp_path) -> dict:
    """ptxas's registers, stack and spills per function, compiled with every warning an error (spills included)."""
    source = tmp_path / "kernels.cu"
    source.write_text(cuda)
    result = subprocess.run(
        [NVCC, "-cubin", "-O3", "-gencode=arch=compute_90a,code=sm_90a", "-Werror", "all-warnings",
         "-Xptxas", "-v,-warn-spills,-warn-lmem-usage", "-o", str(tmp_path / "k.cubin"), str(source)],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "warning" not in result.stderr.lower(), result.stderr[-3000:]
    return _ptxas_report(result.stderr)


def test_the_tiled_kernel_compiles_for_hopper_without_spills_or_local_memory(generated, tmp_path):
    group, ext = generated
    assert "__launch_bounds__(FF_TILE_THREADS, kQuads && sizeof(index_t) == 4 ? FF_TILE_MIN_BLOCKS_MANY_INPUTS : 8)" \
        in ext.cuda  # four inputs: 12 blocks a multiprocessor, 40 registers
    report = _hopper_report(ext.cuda, tmp_path)
    tiled = {f: r for f, r in report.items() if f"{group.name}_tiled_kernel" in f}
    assert len(tiled) == 4  # quads or single elements, 32- or 64-bit indices
    assert len(report) == 8  # and the four flat kernels, unchanged
    for function, r in report.items():
        assert r["stack"] == r["spill_stores"] == r["spill_loads"] == 0, (function, r)
        assert r["registers"] <= 64, (function, r)
    # the common path (quads, 32-bit indices) compiles on its own: at most 40 registers, twelve blocks of 128
    # threads per multiprocessor (one kernel for both paths took 64). Each of the four inputs' quads is loaded
    # before the element function runs (ff_load4_ncs; fewer registers when loaded one element at a time, but
    # the epilogue of dev/kernels/bench_tiles.py went from 0.062 to 0.052 ms on the H100).
    (quads32,) = [r for f, r in tiled.items() if "_tiled_kernelILb1EjE" in f]
    assert quads32["registers"] <= 40, quads32


class BiasGelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(5))

    def forward(self, x):
        return nn.functional.gelu(x + self.bias.view(-1, 1, 1)) * 2.0


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_a_tiled_kernel_of_few_inputs_fits_sixteen_blocks_a_multiprocessor_without_spills(tmp_path):
    """Catches a common-path kernel (a conv's bias and activation) compiled for fewer blocks than the 2048 threads a
    multiprocessor holds (measured 7-13 % slower on the H200, tiles.cuh), or one that spills to fit them."""
    captured = _captured(BiasGelu(), torch.randn(2, 5, 7, 9))
    plan = partition(captured.graph)
    (group,) = plan.groups
    assert len(group.inputs) == 2
    ext = generate(plan, captured.graph, "bias_gelu.py")
    assert "kQuads && sizeof(index_t) == 4 ? FF_TILE_MIN_BLOCKS : 8)" in ext.cuda
    report = _hopper_report(ext.cuda, tmp_path)
    assert all(r["stack"] == r["spill_stores"] == 0 for r in report.values()), report
    (quads32,) = [r for f, r in report.items() if "_tiled_kernelILb1EjE" in f]
    assert quads32["registers"] <= 32, quads32  # 65536 registers / (16 blocks x 128 threads)


@pytest.mark.skipif(GXX is None, reason="g++ is not installed")
def test_the_binding_with_the_tiled_flag_compiles_against_torch_headers(generated, tmp_path):
    _, ext = generated
    result = compile_binding(ext, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]


# ---------------------------------------------------------------------------------------- GPU

# N = 1 (merged space [C, S]) and N = 3 ([N, C, S]); C and S mostly no multiple of 32; 5-D (NDHWC) too
# quads (16-byte accesses) where C and S are multiples of 4: C in {16, 20, 64} with 128 x 128 or 12 x 12
SHAPES = [(n, c, *spatial) for n in (1, 3) for c in (1, 5, 16, 20, 33, 64)
          for spatial in ((7, 9), (128, 128), (12, 12), (1, 1), (3, 5, 7))]
# (x channels-last, y channels-last)
LAYOUTS = [(False, False), (True, False), (False, True), (True, True)]


def _layout(t, channels_last):
    if not channels_last:
        return t.contiguous()
    return t.contiguous(memory_format=torch.channels_last if t.dim() == 4 else torch.channels_last_3d)


def _tiles(shape, layout):
    """Whether ff_prepare picks the tiled kernel: a channels-last operand with C > 1 and S > 1."""
    spatial = 1
    for d in shape[2:]:
        spatial *= d
    return any(layout) and shape[1] > 1 and spatial > 1


def _case(shape, layout, device="cuda"):
    torch.manual_seed(hash((shape, layout)) % 2**31)
    x = torch.randn(shape, device=device) * 3
    y = torch.randn(shape, device=device)
    flat = x.view(-1)
    flat[::97] = float("nan")  # NaN and infinities propagate as torch's ops propagate them
    flat[13::101] = float("inf")
    flat[29::103] = -float("inf")
    bias = torch.randn(shape[1], device=device)
    scale = torch.tensor(0.75, device=device)
    return _layout(x, layout[0]), bias, scale, _layout(y, layout[1])


@pytest.fixture(scope="module")
def built(generated):
    from torch.utils.cpp_extension import load_inline

    group, ext = generated
    kernels = load_inline(name=ext.name, cpp_sources=[ext.binding], cuda_sources=[ext.cuda],
                          functions=list(ext.functions), extra_cflags=list(ext.cflags), extra_cuda_cflags=list(ext.nvcc_flags),
                          no_implicit_headers=True)
    return group, getattr(kernels, group.name)


def _call(kernel, x, bias, scale, y):
    view = bias.view(-1, *[1] * (x.dim() - 2))
    return kernel(x, view, scale, y, torch.cuda.current_stream().cuda_stream)


@pytest.mark.gpu
def test_on_a_gpu_the_kernel_matches_torch_for_channels_last_and_contiguous_operands_on_odd_sizes(built):
    _, kernel = built
    failures = []
    for shape in SHAPES:
        for layout in LAYOUTS:
            x, bias, scale, y = _case(shape, layout)
            got = _call(kernel, x, bias, scale, y)
            again = _call(kernel, x, bias, scale, y)
            want = _eager(x, bias, scale, y)
            where = f"{list(shape)} channels-last (x, y) = {layout}"
            if tuple(got.shape) != shape or not got.is_contiguous():
                failures.append(f"{where}: shape {tuple(got.shape)}, strides {got.stride()}")
                continue
            try:
                torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6, equal_nan=True)
            except AssertionError as error:
                failures.append(f"{where}: {str(error).splitlines()[:4]}")
            if not torch.equal(got.nan_to_num(), again.nan_to_num()) or not torch.equal(got.isnan(), again.isnan()):
                failures.append(f"{where}: two runs differ")
    assert not failures, "\n".join(failures)


@pytest.mark.gpu
def test_on_a_gpu_a_channels_last_operand_off_the_16_byte_grid_is_read_one_element_at_a_time(built):
    _, kernel = built
    for shape in [(3, 16, 12, 12), (1, 64, 8, 8)]:
        x, bias, scale, y = _case(shape, (True, False))
        # the same channels-last strides, the data one float past a 16-byte boundary
        shifted = torch.empty(x.numel() + 1, device="cuda")[1:].as_strided(x.shape, x.stride())
        shifted.copy_(x)
        assert shifted.data_ptr() % 16 != 0 and shifted.stride() == x.stride()
        torch.testing.assert_close(_call(kernel, shifted, bias, scale, y), _eager(x, bias, scale, y),
                                   rtol=1e-6, atol=1e-6, equal_nan=True)


@pytest.mark.gpu
def test_on_a_gpu_the_tiled_kernel_runs_exactly_when_an_operand_is_channels_last(built):
    group, kernel = built
    from torch.profiler import ProfilerActivity, profile

    cases = [(shape, layout) for shape in [(1, 5, 7, 9), (3, 33, 128, 128), (3, 16, 3, 5, 7), (3, 64, 1, 1),
                                           (1, 1, 7, 9)]
             for layout in LAYOUTS]
    for shape, layout in cases:
        inputs = _case(shape, layout)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            _call(kernel, *inputs)
            torch.cuda.synchronize()
        names = [e.name for e in prof.events() if group.name in e.name]
        assert len(names) == 1, (shape, layout, names)
        assert ("_tiled_kernel" in names[0]) == _tiles(shape, layout), (shape, layout, names)
