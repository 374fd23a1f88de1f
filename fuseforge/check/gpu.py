"""CUDA-only measurements: kernels of one call (profiler), the roofline's ceilings and the model's FLOPs.

`profile_call` runs one call under torch.profiler after a marker kernel on the current stream, and
returns every kernel of the call with its GPU time and stream; kernels are the candidate's own when their
name contains a kernel name the candidate defines (static.kernel_names), torch's/vendor's when it looks
like a library kernel, and "unknown" otherwise (counted as own only when the candidate's kernel names are
not known). A kernel on a stream other than the
marker's ran on a side stream. The reference's call is profiled the same way (reference_role.py), so that
library kernels the model itself runs on side streams (cuDNN does for some convolutions) are excused in a
candidate (evidence.side_stream_split), as are library kernels the current stream waited for (a later kernel of
its started after they ended: cuDNN's grouped convolutions in channels-last fork and join so); the candidate's own
and unknown kernels never are.

`measure_ceilings` measures the device's copy bandwidth and its TF32 tensor-core matmul rate (the fastest
any fp32-class kernel could go: 3xTF32 needs three such products), `count_flops` the model's FLOPs with
torch's FlopCounterMode. floor = max(FLOPs / peak FLOP/s, minimum bytes / peak bytes/s).
"""

from __future__ import annotations

import re

import torch

from fuseforge.check.timing import _elapsed, _Event, _record, synchronize

_LIBRARY = re.compile(r"at::|at_cuda_detail|c10::|cutlass|cublas|cudnn|xmma|nvjet|gemm|gemv|sm\d\d_|ampere_|volta_|"
                      r"turing_|hopper_|elementwise_kernel|reduce_kernel|nchwToNhwc|nhwcToNchw|triton_|"
                      r"splitKreduce|cunn_|Memcpy|Memset|memcpy|memset|flush|vectorized|unrolled|"
                      r"convolveNd_|implicit_convolve|explicit_convolve|convolve_common_engine|fft[23]d_")


def _kernel_events(prof) -> list[tuple[str, float, int, int, int]]:
    """(name, microseconds, stream, correlation id, start ns) of the CUDA kernels the profiler saw."""
    events = []
    for e in prof.profiler.kineto_results.events():
        name = e.name()
        if e.device_type() == torch.autograd.DeviceType.CUDA and not re.search("memcpy|memset", name, re.I):
            events.append((name, e.duration_ns() / 1e3, e.device_resource_id(), e.correlation_id(), e.start_ns()))
    return events


def classify(name: str, own_names: list[str]) -> str:
    if any(re.search(rf"\b{re.escape(n)}\b", name) for n in own_names):
        return "own"
    return "library" if _LIBRARY.search(name) else "unknown"


def summarise_kernels(events: list[tuple[str, float, int, int, int]], own_names: list[str]) -> dict:
    """The call's kernels (the first event, in launch order, is the marker on the current stream)."""
    if not events:
        return {"available": False, "reason": "the profiler saw no CUDA kernel"}
    events = sorted(events, key=lambda e: (e[3], e[4]))
    main_stream, origin = events[0][2], events[0][4]
    # start_us, end_us: from the marker's start (the profiler's clock is one for all streams)
    kernels = [{"name": name[:200], "us": us, "stream": stream, "owner": classify(name, own_names),
                "start_us": round((start - origin) / 1e3, 3), "end_us": round((start - origin) / 1e3 + us, 3)}
               for name, us, stream, _, start in events[1:]]
    total = sum(k["us"] for k in kernels)
    # With the candidate's kernel names known, only those count as its own; without, anything that does
    # not look like a library kernel does.
    owned = ("own",) if own_names else ("own", "unknown")
    own = sum(k["us"] for k in kernels if k["owner"] in owned)
    return {"available": True, "main_stream": main_stream, "kernels": kernels,
            "own_share": own / total if total else 0.0, "own_us": own, "total_us": total,
            "side_stream_kernels": [k["name"] for k in kernels if k["stream"] != main_stream]}


def profile_call(fn, device: torch.device, own_names: list[str]) -> dict:
    """Kernels of one call of `fn`: names, GPU time, stream; own share; side-stream kernels."""
    from torch.profiler import ProfilerActivity, profile

    marker = torch.zeros(1, device=device)
    synchronize(device)
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        marker.add_(1)
        out = fn()
        synchronize(device)
    del out
    return summarise_kernels(_kernel_events(prof), own_names)


def _best_ms(fn, repeats: int = 5) -> float:
    fn()
    synchronize(torch.device("cuda"))
    best = float("inf")
    for _ in range(repeats):
        start, end = _Event(enable_timing=True), _Event(enable_timing=True)
        _record(start)
        fn()
        _record(end)
        synchronize(torch.device("cuda"))
        best = min(best, _elapsed(start, end))
    return best


def _copy_ms(n_bytes: int, device: torch.device) -> float:
    src = torch.empty(n_bytes // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    return _best_ms(lambda: dst.copy_(src))


def measure_ceilings(device: torch.device) -> dict:
    """Peak copy bandwidth (bytes/s) and TF32 matmul rate (FLOP/s), measured on this GPU."""
    n_bytes = 512 * 2**20
    bandwidth = 2 * n_bytes / (_copy_ms(n_bytes, device) / 1e3)
    n = 8192
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        flops = 2 * n**3 / (_best_ms(lambda: a @ b) / 1e3)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before
    return {"peak_bytes_per_s": bandwidth, "peak_flops": flops, "flops_source": "tf32 matmul 8192^3"}


def count_flops(model, inputs) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        model(*inputs)
    return int(counter.get_total_flops())


def roofline_floor_ms(flops: int, min_bytes: int, ceilings: dict) -> float:
    return 1e3 * max(flops / ceilings["peak_flops"], min_bytes / ceilings["peak_bytes_per_s"])
