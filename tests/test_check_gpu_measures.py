"""GPU measurements of fuseforge check: their pure parts on the CPU (kernel attribution, roofline, FLOPs,
the CUDA runtime structures), the measurements themselves on a GPU."""

import ctypes

import pytest
import torch
from torch import nn

from fuseforge.check import gpu, timing

MARKER = ("void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>", 1.0, 7, 1, 0)


def test_only_kernels_named_in_the_candidates_source_count_as_its_own():
    events = [MARKER, ("sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n", 90.0, 7, 2, 10),
              ("fused_sigmoid_scale_add_kernel(float const*, float, float*, int)", 10.0, 7, 3, 20)]
    summary = gpu.summarise_kernels(events, ["fused_sigmoid_scale_add_kernel"])
    assert summary["own_share"] == pytest.approx(0.1) and summary["side_stream_kernels"] == []
    assert [k["owner"] for k in summary["kernels"]] == ["library", "own"]


def test_without_known_kernel_names_unknown_kernels_count_as_own():
    events = [MARKER, ("my_kernel(float*)", 30.0, 7, 2, 10), ("nvjet_tst_64x8_64x16_2x1_v_bz_TNT", 10.0, 7, 3, 20)]
    assert gpu.summarise_kernels(events, [])["own_share"] == pytest.approx(0.75)


def test_a_kernel_on_another_stream_than_the_marker_is_a_side_stream_kernel():
    events = [("adv_side_linear_sigmoid_kernel(...)", 50.0, 13, 2, 5), MARKER]  # ran first, launched second
    summary = gpu.summarise_kernels(events, ["adv_side_linear_sigmoid_kernel"])
    assert summary["main_stream"] == 7 and summary["side_stream_kernels"] == ["adv_side_linear_sigmoid_kernel(...)"]


def test_no_kernel_at_all_means_the_profile_is_unavailable():
    assert gpu.summarise_kernels([], ["k"])["available"] is False


def test_the_roofline_floor_is_the_slower_of_compute_and_memory():
    ceilings = {"peak_flops": 1e14, "peak_bytes_per_s": 1e12}
    assert gpu.roofline_floor_ms(10**11, 10**6, ceilings) == pytest.approx(1.0)  # compute bound
    assert gpu.roofline_floor_ms(10**3, 2 * 10**9, ceilings) == pytest.approx(2.0)  # memory bound


def test_flops_are_counted_from_the_reference_forward():
    assert gpu.count_flops(nn.Linear(32, 16), [torch.rand(8, 32)]) == 2 * 8 * 32 * 16


def test_a_convolution_s_flops_count_at_the_same_tensor_core_rate_as_a_matrix_product():
    flops = gpu.count_flops(nn.Conv2d(3, 8, 3), [torch.rand(2, 3, 16, 16)])
    assert flops == 2 * (2 * 8 * 14 * 14) * (3 * 3 * 3)
    ceilings = {"peak_flops": 400e12, "peak_bytes_per_s": 3e12, "flops_source": "tf32 matmul 8192^3"}
    assert gpu.roofline_floor_ms(flops, 0, ceilings) == pytest.approx(1e3 * flops / 400e12)


def test_the_access_policy_window_matches_the_cuda_runtime_layout():
    assert ctypes.sizeof(timing._AttrValue) == 64 and timing._AccessPolicyWindow.num_bytes.offset == 8


@pytest.mark.gpu
def test_on_a_gpu_the_ceilings_are_plausible_and_the_timer_resets_and_reads_l2_state():
    dev = torch.device("cuda")
    ceilings = gpu.measure_ceilings(dev)
    assert 1e11 < ceilings["peak_bytes_per_s"] < 2e13 and 1e13 < ceilings["peak_flops"] < 5e15
    # a tensor-core rate (TF32), which cuDNN's convolutions and 3xTF32 GEMMs approach -- not SGEMM's ~51 TFLOP/s
    # on an H100, which honest convolutions beat
    assert ceilings["flops_source"].startswith("tf32") and ceilings["peak_flops"] > 3 * 51.3e12
    timer = timing.Timer.create(dev)
    assert timer.l2 is not None, "libcudart could not be loaded: the L2 checks would not run"
    x = torch.rand(1024, 1024, device=dev)
    timed = timer.call(lambda: x @ x)
    assert timed.ms > 0 and timed.wall_ms >= timed.ms * 0.5 and timed.l2 == {"persisting_limit_bytes": 0,
                                                                             "window_bytes": 0}
    timer.l2.lib.cudaDeviceSetLimit(0x06, ctypes.c_size_t(4 << 20))
    assert timer.l2.state()["persisting_limit_bytes"] > 0
    timer.call(lambda: x @ x)
    assert timer.l2.state()["persisting_limit_bytes"] == 0  # reset before the call


@pytest.mark.gpu
def test_on_a_gpu_the_profiler_attributes_torch_kernels_to_the_library():
    dev = torch.device("cuda")
    x = torch.rand(256, 256, device=dev)
    summary = gpu.profile_call(lambda: torch.sigmoid(x @ x), dev, ["my_kernel"])
    assert summary["available"] and summary["own_share"] == 0.0 and summary["side_stream_kernels"] == []
    assert len(summary["kernels"]) >= 2


def test_on_the_cpu_the_timer_has_no_stream_and_times_with_the_host_clock():
    timer = timing.Timer.create(torch.device("cpu"))
    timed = timer.call(lambda: torch.rand(4) @ torch.rand(4))
    assert timer.stream is None and timed.stream_left is None and timed.ms == timed.wall_ms > 0


@pytest.mark.gpu
def test_on_a_gpu_the_timer_times_on_its_own_stream_and_reports_another_stream_left_current():
    dev = torch.device("cuda")
    timer = timing.Timer.create(dev)
    x = torch.rand(512, 512, device=dev)
    side = torch.cuda.Stream()

    def switch():
        torch.cuda.set_stream(side)
        return x @ x

    timed = timer.call(switch)
    assert timed.stream_left is not None and torch.cuda.current_stream().cuda_stream == timer.stream.cuda_stream
    assert timer.call(lambda: x @ x).stream_left is None
    torch.cuda.set_stream(side)  # another stream current before the call: the timer's own is made current
    timed = timer.call(lambda: torch.cuda.current_stream().cuda_stream)
    assert timed.out == timer.stream.cuda_stream and timed.stream_left is None
