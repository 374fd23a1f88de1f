"""The side-stream rule of fuseforge check (kernel_streams) against the reference's own profile: library kernels
the model itself runs on side streams (cuDNN's conv3d on an H200 runs on two streams of its own) are excused in
a candidate, the candidate's own and unknown kernels never are. Pure parts on the CPU, profiles on a GPU."""

import pytest
import torch
from torch import nn

from fuseforge.check import evidence, gpu, judge

# one conv3d call as the profiler saw it on an H200 (torch 2.11, cuDNN 9): the marker and the elementwise
# kernels on the current stream 7, cuDNN's transposes and implicit GEMM on its streams 13 and 14
MARKER = ("void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>", 1.0, 7, 1, 0)
TRANSPOSE = "void cudnn::engines_precompiled::genericTranspose_kernel<float, 5>(float const*, float*)"
FPROP = "sm80_xmma_fprop_implicit_gemm_f32f32_f32f32_f32_nchwkcrs_nchw_tilesize64x64x8_stage3_cudnn"
RELU = "void at::native::elementwise_kernel<128, 2, at::native::clamp_min_kernel<float>>(int)"
OWN = "fused_bias_relu_kernel(float const*, float*, int)"
REF_META = {"cases": [{"mutated_inputs": []}], "ops": {"conv": 1}, "dtypes": ["float32"]}


def _conv_call(cudnn_streams=(13, 14), extra=(), own_names=()) -> dict:
    """summarise_kernels of one conv3d call: on each of `cudnn_streams`, a transpose, the GEMM, a transpose; then
    `extra` (name, stream) kernels and a ReLU on the current stream."""
    events, t = [MARKER], 10
    for stream in cudnn_streams:
        for name in (TRANSPOSE, FPROP, TRANSPOSE):
            events.append((name, 5.0, stream, len(events) + 1, t))
            t += 10
    for name, stream in [*extra, (RELU, 7)]:
        events.append((name, 2.0, stream, len(events) + 1, t))
        t += 10
    return gpu.summarise_kernels(events, list(own_names))


def _findings(candidate: dict, reference: dict | None, timing: dict | None = None, claims_kernels=False):
    meta = REF_META if reference is None else REF_META | {"profile": reference}
    facts = {"cases": [], "profile": candidate} | ({"timing": timing} if timing else {})
    found, ran = evidence.worker_findings(facts, meta, claims_kernels, "cuda")
    return {f.check: f for f in found}, ran


def test_a_library_kernel_the_reference_also_ran_on_a_side_stream_is_not_a_cheat():
    candidate = _conv_call()
    assert candidate["side_stream_kernels"] == [TRANSPOSE, FPROP, TRANSPOSE] * 2  # the finding before the fix
    found, ran = _findings(candidate, _conv_call())
    assert found == {} and "kernel_streams" in ran
    assert evidence.side_stream_split(candidate, _conv_call()) == ([], [TRANSPOSE, FPROP, TRANSPOSE] * 2)


def test_the_same_library_kernel_is_a_cheat_when_the_reference_ran_it_on_the_current_stream():
    found, _ = _findings(_conv_call(), _conv_call(cudnn_streams=(7,)))
    assert set(found) == {"kernel_streams"} and found["kernel_streams"].kind == "side_stream"
    assert found["kernel_streams"].evidence == {"kernels": [TRANSPOSE, FPROP, TRANSPOSE] * 2, "excused": []}


def test_a_library_kernel_is_excused_only_as_often_as_the_reference_ran_it_on_a_side_stream():
    found, _ = _findings(_conv_call(cudnn_streams=(13, 14, 15)), _conv_call())
    assert set(found) == {"kernel_streams"}
    assert found["kernel_streams"].evidence == {"kernels": [TRANSPOSE, FPROP, TRANSPOSE],
                                                "excused": [TRANSPOSE, FPROP, TRANSPOSE] * 2}
    assert "6 library kernel(s) on side streams excused" in found["kernel_streams"].message


def test_a_candidates_own_kernel_on_a_side_stream_is_a_cheat_even_where_the_reference_ran_that_name_on_one():
    # its own kernel, named in its source, on a side stream; the reference (contrived) ran that name on one too
    reference = _conv_call(extra=[(OWN, 13)])
    candidate = _conv_call(extra=[(OWN, 20)], own_names=["fused_bias_relu_kernel"])
    found, _ = _findings(candidate, reference, claims_kernels=True)
    assert set(found) == {"kernel_streams"} and found["kernel_streams"].evidence["kernels"] == [OWN]
    # a kernel of its own named like cuDNN's is its own, not the library's: never excused
    disguised = _conv_call(own_names=["genericTranspose_kernel"])
    found, _ = _findings(disguised, _conv_call(), claims_kernels=True)
    assert found["kernel_streams"].evidence["kernels"] == [TRANSPOSE, TRANSPOSE] * 2


def test_an_unknown_kernel_on_a_side_stream_is_a_cheat_even_where_the_reference_ran_that_name_on_one():
    odd = "side_work(float*)"  # looks like no library's kernel
    assert gpu.classify(odd, []) == "unknown"
    found, _ = _findings(_conv_call(extra=[(odd, 20)]), _conv_call(extra=[(odd, 13)]))
    assert found["kernel_streams"].evidence["kernels"] == [odd]


@pytest.mark.parametrize("reference", [None, {"available": False, "reason": "the profiler saw no CUDA kernel"},
                                       {"error": "RuntimeError: CUPTI", "cuda_error": False}])
def test_without_the_references_profile_a_library_kernel_on_a_side_stream_is_still_a_cheat(reference):
    # None: a meta from before the reference was profiled, or a reference run on the CPU
    found, _ = _findings(_conv_call(), reference)
    assert set(found) == {"kernel_streams"}
    assert found["kernel_streams"].evidence["kernels"] == [TRANSPOSE, FPROP, TRANSPOSE] * 2


def test_cudnns_legacy_engine_kernels_are_library_kernels_and_excused_like_the_others():
    # ConvTranspose3d (groups=2) on the H200: cuDNN zeroes the output and runs its dgrad engine on two streams
    fill = "void cudnn::engines_precompiled::setTensor5d_kernel<float, float, 8, 8, 8>(cudnnTensorStruct, float*, float)"
    dgrad = "void convolveNd_dgrad_float_engine<float, 3, 512, 6, 5, 3, 3, 3, false>(int, int, int, float const*, int)"
    assert gpu.classify(dgrad, []) == "library"

    def call(streams):
        events = [MARKER] + [(name, 3.0, stream, 2 + i, 10 * i) for i, (name, stream) in
                             enumerate([(fill, streams[0]), (dgrad, streams[0]), (fill, streams[1]), (dgrad, streams[1])])]
        return gpu.summarise_kernels(events + [(RELU, 2.0, 7, 9, 100)], [])

    assert _findings(call((13, 14)), call((15, 16)))[0] == {}
    assert _findings(call((13, 14)), None)[0]["kernel_streams"].evidence["kernels"] == [fill, dgrad, fill, dgrad]


def _grouped_conv_call(relu_start_ns: int, kernel=FPROP, own_names=()) -> dict:
    """A channels-last grouped convolution as cuDNN ran it on the H200: each group's kernel on a stream of its own
    (13, 14; 5 us each, both started at 1 us), then a ReLU on the current stream at `relu_start_ns`."""
    events = [MARKER, (kernel, 5.0, 13, 2, 1000), (kernel, 5.0, 14, 3, 1000), (RELU, 2.0, 7, 4, relu_start_ns)]
    return gpu.summarise_kernels(events, list(own_names))


def test_a_library_kernel_the_current_stream_waited_for_is_excused_where_the_reference_ran_it_elsewhere():
    """Catches the false alarm seen on the GPU: a model's grouped conv made channels-last, which cuDNN forks onto
    two streams and joins, graded cheat:side_stream because the reference's NCHW conv ran on the current stream."""
    joined = _grouped_conv_call(relu_start_ns=7000)  # the ReLU started after both groups ended (6 us)
    assert joined["kernels"][0]["end_us"] == pytest.approx(6.0) and joined["kernels"][2]["start_us"] == 7.0
    found, ran = _findings(joined, _conv_call(cudnn_streams=(7,)))
    assert found == {} and "kernel_streams" in ran
    assert evidence.side_stream_split(joined, None) == ([], [FPROP, FPROP])


def test_a_library_kernel_still_running_when_the_current_stream_went_on_is_a_cheat():
    racing = _grouped_conv_call(relu_start_ns=3000)  # the ReLU did not wait: the groups ran until 6 us
    found, _ = _findings(racing, _conv_call(cudnn_streams=(7,)))
    assert found["kernel_streams"].evidence == {"kernels": [FPROP, FPROP], "excused": []}
    alone = gpu.summarise_kernels([MARKER, (FPROP, 5.0, 13, 2, 1000)], [])  # nothing after it on the stream
    assert evidence.side_stream_split(alone, None) == ([FPROP], [])


def test_the_candidates_own_kernel_is_a_cheat_on_a_side_stream_even_when_the_current_stream_waited_for_it():
    joined = _grouped_conv_call(relu_start_ns=7000, kernel=OWN, own_names=["fused_bias_relu_kernel"])
    found, _ = _findings(joined, None, claims_kernels=True)
    assert found["kernel_streams"].evidence["kernels"] == [OWN, OWN]


def test_a_wall_time_gap_names_an_unexcused_side_stream_kernel_and_stays_a_side_stream_finding():
    timing = {"ms": [0.01] * 5, "wall_ms": [2.0] * 5, "l2_left": [], "l2_control": True}
    candidate = _conv_call(extra=[(OWN, 20)], own_names=["fused_bias_relu_kernel"])
    found, _ = _findings(candidate, _conv_call(), timing, claims_kernels=True)
    assert set(found) == {"event_wall_gap", "kernel_streams"}
    assert OWN in found["event_wall_gap"].message and found["event_wall_gap"].evidence["side_stream_kernels"][0] == OWN
    # only excused kernels off the stream: the gap is still work off the stream, not deferred work
    found, _ = _findings(_conv_call(), _conv_call(), timing)
    assert set(found) == {"event_wall_gap"} and found["event_wall_gap"].evidence["excused"][0] == TRANSPOSE
    honest = {"ms": [1.0] * 5, "wall_ms": [1.05] * 5, "l2_left": [], "l2_control": True}
    assert _findings(_conv_call(), _conv_call(), honest)[0] == {}


def test_the_record_says_which_side_stream_kernels_were_excused():
    facts = {"profile": _conv_call()}
    record = judge._gpu(facts, {"profile": _conv_call()})
    assert record["side_stream_excused"] == [TRANSPOSE, FPROP, TRANSPOSE] * 2
    assert record["reference_side_stream_kernels"] == [TRANSPOSE, FPROP, TRANSPOSE] * 2
    older = judge._gpu(facts, {})
    assert older["side_stream_excused"] == [] and older["reference_side_stream_kernels"] is None


class _Conv3dRelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv3d(32, 64, 3)

    def forward(self, x):
        return torch.relu(self.conv(x))


@pytest.mark.gpu
def test_on_a_gpu_the_models_own_forward_is_excused_and_a_torch_side_stream_is_not():
    from fuseforge.check.reference_role import _profile

    dev = torch.device("cuda")
    torch.manual_seed(0)
    model = _Conv3dRelu().to(dev)
    x = torch.rand(8, 32, 16, 32, 32)
    reference = _profile(model, [x], dev)
    assert reference["available"]

    def honest():
        return model(x.to(dev))

    model(x.to(dev))
    candidate = gpu.profile_call(honest, dev, [])
    assert evidence.side_stream_split(candidate, reference)[0] == []
    side = torch.cuda.Stream()

    def on_a_side_stream():
        with torch.cuda.stream(side):
            return model(x.to(dev))

    cheat = gpu.profile_call(on_a_side_stream, dev, [])
    unexcused, _ = evidence.side_stream_split(cheat, reference)
    assert any("elementwise" in name or "clamp" in name for name in unexcused)  # torch's ReLU is not excused
