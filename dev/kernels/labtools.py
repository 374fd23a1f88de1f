"""What the lab's benches share: building a CUDA source into a shared library with nvcc (loaded with ctypes, no
torch extension), the torch binding of a conv bench's `extern "C"` launchers, and timing a call with CUDA events
after an L2 flush (median of reps, three warm-up calls)."""

from __future__ import annotations

import ctypes
import statistics
import subprocess
import tempfile
from pathlib import Path

import torch


def nvcc_library(source: str, name: str, workdir: Path | None = None) -> ctypes.CDLL:
    """Compile `source` for sm_90a into NAME.so (in a fresh temporary folder unless `workdir`) and load it."""
    workdir = Path(workdir or tempfile.mkdtemp())
    cu, so = workdir / f"{name}.cu", workdir / f"{name}.so"
    cu.write_text(source)
    subprocess.run(
        [
            "nvcc",
            "-O3",
            "-shared",
            "-Xcompiler",
            "-fPIC",
            "-gencode=arch=compute_90a,code=sm_90a",
            "-o",
            str(so),
            str(cu),
        ],
        check=True,
    )
    return ctypes.CDLL(str(so))


def timed(fn, reps: int, flush: torch.Tensor) -> float:
    """Median milliseconds of `fn()` over `reps` calls, each after `flush.zero_()`, timed with CUDA events."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


CONV_BINDING = r"""
#include <torch/extension.h>
#include <string>
%(decls)s
torch::Tensor run(const std::string& which, torch::Tensor x, torch::Tensor w, torch::Tensor b, std::vector<int64_t> q,
                  std::vector<int64_t> out_sizes, int64_t stream) {
    std::vector<int> qi(q.begin(), q.end());
    auto y = torch::empty(out_sizes, x.options());
    int err = -1;
    %(dispatch)s
    TORCH_CHECK(err == 0, which, ": CUDA error ", err);
    return y;
}
%(extra)s
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("run", &run); %(defs)s }
"""


def conv_binding(decls: list[str], dispatch: list[str], extra: str = "", defs: str = "") -> str:
    """The torch binding of a conv bench's launchers: `run(which, x, w, b, geometry, out_sizes, stream)` allocates
    the output and calls the launcher `dispatch` picks by `which` (`if (which == ...) err = ...;` lines; `decls` their
    `extern "C"` declarations); `extra` C++ and `defs` (more `m.def(...)`) for a bench's own functions."""
    return CONV_BINDING % {"decls": "\n".join(decls), "dispatch": "\n    ".join(dispatch), "extra": extra,
                           "defs": defs}
