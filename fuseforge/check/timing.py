"""Per-call timing shared by the reference and the candidate worker (the same procedure for both).

Each timed call, on CUDA: zero a 256 MiB buffer (flushes the L2), reset the L2 persistence state (limit
0, no access policy window on the current stream, persisting lines demoted), make the timer's stream --
the stream that was current when the timer was made, before any candidate code was imported -- the
current stream again, record a CUDA event on it and wait for it, call, record an event on it, synchronize
the device; the call's time is the events' elapsed time, its wall time the host clock from the start
event's completion to after the synchronize (work hidden from the current stream shows up as wall time far
above event time; another process's kernels queued before the start, on a shared GPU, do not). After the
call the L2 state is read back: a persisting limit or a window the call left behind is reported, and so is
another stream left current (`stream_left`). On the CPU the host clock times the call.

Every function used here was referenced when this module was imported, before any candidate code.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from fuseforge.evaluate import lease

L2_FLUSH_BYTES = 256 * 2**20
_LIMIT_PERSISTING_L2 = 0x06  # cudaLimitPersistingL2CacheSize
_ATTR_ACCESS_POLICY_WINDOW = 1  # cudaStreamAttributeAccessPolicyWindow

_perf_counter = time.perf_counter
_Event = torch.cuda.Event
_record = torch.cuda.Event.record
_wait = torch.cuda.Event.synchronize
_elapsed = torch.cuda.Event.elapsed_time
_cuda_sync = getattr(torch._C, "_cuda_synchronize", None)
_current_stream = torch.cuda.current_stream
_set_stream = torch.cuda.set_stream


class _AccessPolicyWindow(ctypes.Structure):
    _fields_ = [("base_ptr", ctypes.c_void_p), ("num_bytes", ctypes.c_size_t), ("hitRatio", ctypes.c_float),
                ("hitProp", ctypes.c_int), ("missProp", ctypes.c_int)]


class _AttrValue(ctypes.Union):  # cudaStreamAttrValue / cudaLaunchAttributeValue: 64 bytes
    _fields_ = [("window", _AccessPolicyWindow), ("pad", ctypes.c_char * 64)]


def _loaded_cudart() -> list[str]:
    """Paths of CUDA runtimes already mapped into this process (torch's own comes first)."""
    try:
        maps = open("/proc/self/maps").read().splitlines()
    except OSError:
        return []
    paths = [line.split()[-1] for line in maps if "libcudart" in line and line.split()[-1].startswith("/")]
    return list(dict.fromkeys(paths))


def _load_cudart():
    """The CUDA runtime torch uses (a second, different runtime would talk to the same context, but may
    not match the driver)."""
    names = ["libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"]
    found = ctypes.util.find_library("cudart")
    for name in _loaded_cudart() + ([found] if found else []) + names:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


class L2Control:
    """Reset and read the L2 persistence state through the CUDA runtime (None where unavailable)."""

    def __init__(self, lib):
        self.lib = lib

    @classmethod
    def load(cls) -> L2Control | None:
        lib = _load_cudart()
        return cls(lib) if lib is not None and hasattr(lib, "cudaDeviceGetLimit") else None

    def _stream(self) -> ctypes.c_void_p:
        return ctypes.c_void_p(_current_stream().cuda_stream)

    def reset(self) -> None:
        self.lib.cudaDeviceSetLimit(_LIMIT_PERSISTING_L2, ctypes.c_size_t(0))
        self.lib.cudaStreamSetAttribute(self._stream(), _ATTR_ACCESS_POLICY_WINDOW, ctypes.byref(_AttrValue()))
        self.lib.cudaCtxResetPersistingL2Cache()

    def state(self) -> dict:
        limit, value = ctypes.c_size_t(0), _AttrValue()
        self.lib.cudaDeviceGetLimit(ctypes.byref(limit), _LIMIT_PERSISTING_L2)
        self.lib.cudaStreamGetAttribute(self._stream(), _ATTR_ACCESS_POLICY_WINDOW, ctypes.byref(value))
        return {"persisting_limit_bytes": int(limit.value), "window_bytes": int(value.window.num_bytes)}


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        (_cuda_sync or torch.cuda.synchronize)()


@dataclass
class TimedCall:
    ms: float
    wall_ms: float
    out: object
    l2: dict | None = None
    stream_left: str | None = None  # another stream left current by the call


@dataclass
class Timer:
    device: torch.device
    flush_bytes: int = 0
    l2: L2Control | None = None
    l2_left: list = field(default_factory=list)  # L2 states found after calls
    _flush: torch.Tensor | None = None
    stream: object = None  # the stream current when the timer was made

    @classmethod
    def create(cls, device: torch.device) -> Timer:
        if device.type != "cuda":
            return cls(device)
        flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.float32, device=device)
        return cls(device, L2_FLUSH_BYTES, L2Control.load(), [], flush, _current_stream(device))

    @property
    def name(self) -> str:
        return "cuda_events" if self.device.type == "cuda" else "perf_counter"

    def call(self, fn) -> TimedCall:
        if self.device.type != "cuda":
            start = _perf_counter()
            out = fn()
            ms = (_perf_counter() - start) * 1e3
            return TimedCall(ms, ms, out)
        _set_stream(self.stream)
        self._flush.zero_()
        if self.l2 is not None:
            self.l2.reset()
        start, end = _Event(enable_timing=True), _Event(enable_timing=True)
        synchronize(self.device)
        _record(start, self.stream)
        _wait(start)  # the GPU has reached the start: a wait for another process's kernels is not the call's wall time
        wall = _perf_counter()
        out = fn()
        _record(end, self.stream)
        synchronize(self.device)
        wall = (_perf_counter() - wall) * 1e3
        now = _current_stream(self.device)
        left = None if now.cuda_stream == self.stream.cuda_stream else f"stream {now.cuda_stream:#x}"
        _set_stream(self.stream)
        state = self.l2.state() if self.l2 is not None else None
        if state and (state["persisting_limit_bytes"] or state["window_bytes"]):
            self.l2_left.append(state)
        return TimedCall(_elapsed(start, end), wall, out, state, left)


def pinned_for_timing(job: dict):
    """Run the block on the CPUs the grading process keeps for timed calls (its suite's FUSEFORGE_TIMING_CPUS,
    handed over in the worker's job: a worker's environment has no fuseforge variables); nothing elsewhere."""
    return lease.pinned(set(job.get("timing_cpus") or ()))


def stats(samples: list[float]) -> dict:
    a = np.asarray(samples, dtype=np.float64)
    p10, median, p90 = np.percentile(a, [10, 50, 90])
    return {"median_ms": float(median), "p10_ms": float(p10), "p90_ms": float(p90), "min_ms": float(a.min()),
            "mean_ms": float(a.mean()), "trials": len(samples)}
