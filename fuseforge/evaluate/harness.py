"""Shared plumbing of verify and bench: load both files, build weight-identical pairs, draw inputs, run.

Every failure becomes an `EvalError` with a one-line message; its subclass says whose fault it is
(`ReferenceFailed`: the model file; `CandidateFailed`: the candidate; `InterfaceMismatch`: the candidate's
parameters and buffers differ from the model's). The original exception is kept as `__cause__`.

Inputs of seed `s` are drawn under `torch.manual_seed(INPUT_SEED_OFFSET + s)`, so they do not repeat the
random stream that initialised the weights under `torch.manual_seed(s)`, and do not depend on how many
random numbers the candidate's constructor consumed.

Where: by default models are built and inputs drawn on the CPU (what `fuseforge check` expects). With
`device=` a CUDA device, `build_pair` and `draw_inputs` run the file's own code with that device as the
default device (`with torch.device(...)`), so weights and inputs are drawn by the GPU's generator under the
same seeds, from the same distributions, without CPU random number generation and host-to-device copies
of large tensors; a file whose code fails that way (it calls `.numpy()`, say) is built or drawn on the CPU
as before.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import platform
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from fuseforge.load import LoadError, import_model_file

INPUT_SEED_OFFSET = 1_000_003
DISTRIBUTIONS = ("file", "signed")
SIGNED_SCALE = 4.0
# The file's inputs at magnitudes that expose a reduced-precision path where the model's own fp32 math stays
# finite: fp16 overflows past 65504 and flushes below 6e-8, and a large common offset cancels in a mean.
MAGNITUDES = {"large": "x 2^20", "tiny": "x 2^-20", "shifted": "+ 16 RMS"}
LARGE, TINY, SHIFT_RMS = 2.0**20, 2.0**-20, 16.0
_REASON_MAX = 400
_import_counter = itertools.count()


class EvalError(Exception):
    """Evaluation cannot go on; the message is one line saying why."""


class ReferenceFailed(EvalError):
    """The model file (Model, get_inputs, get_init_inputs) failed."""


class CandidateFailed(EvalError):
    """The candidate failed: import, construction, or forward."""


class InterfaceMismatch(CandidateFailed):
    """ModelNew's state_dict differs from Model's (names or shapes)."""

    def __init__(self, message: str, missing=(), unexpected=(), shapes=None):
        super().__init__(message)
        self.missing, self.unexpected, self.shapes = list(missing), list(unexpected), dict(shapes or {})

    def to_json(self) -> dict:
        return {"missing": self.missing, "unexpected": self.unexpected, "shape_mismatches": self.shapes}


def one_line(exc: BaseException) -> str:
    """'TypeName: first line of the message', cut to a readable length. A CUDA error named further down
    (a call that failed because an earlier kernel broke the context: "Error(s) in loading state_dict ...")
    is added to the first line: it is the cause."""
    lines = str(exc).strip().splitlines()
    first = lines[0] if lines else ""
    cuda = next((line.strip() for line in lines[1:] if "CUDA error" in line), None)
    if cuda and "CUDA error" not in first:
        first = f"{first.rstrip(': ')}: {cuda}"
    text = f"{type(exc).__name__}: {first}".rstrip(": ")
    return text if len(text) <= _REASON_MAX else text[: _REASON_MAX - 3] + "..."


@dataclass
class PrecisionFlags:
    """Global fp32 precision switches, captured before the candidate is imported.

    They are restored before every reference run, so a candidate that turns TF32 on globally cannot
    loosen the rule by making eager less accurate.
    """

    matmul: str
    cudnn_tf32: bool

    @classmethod
    def capture(cls) -> PrecisionFlags:
        return cls(torch.get_float32_matmul_precision(), bool(torch.backends.cudnn.allow_tf32))

    def restore(self) -> None:
        torch.set_float32_matmul_precision(self.matmul)
        torch.backends.cudnn.allow_tf32 = self.cudnn_tf32


@dataclass
class Programs:
    """The two imported files and what is needed to build and feed them."""

    model_path: Path
    candidate_path: Path | None
    model_cls: type
    candidate_cls: type | None
    get_inputs: object
    init_args: list
    precision: PrecisionFlags


def plain_tensors(module: nn.Module) -> list[tuple[nn.Module, str, torch.Tensor]]:
    """Tensors a module holds as plain attributes (`self.h0 = torch.randn(...)` in __init__): neither parameters nor
    buffers, so `.double()`, `.to()` and `state_dict()` pass them by."""
    found = []
    for m in module.modules():
        own = set(m._parameters) | set(m._buffers)
        found += [(m, k, v) for k, v in vars(m).items() if isinstance(v, torch.Tensor) and k not in own]
    return found


def as_float64(module: nn.Module) -> nn.Module:
    """`module.double()`, its floating plain tensor attributes included (a recurrent model's initial state)."""
    module = module.double()
    for m, name, value in plain_tensors(module):
        if value.is_floating_point():
            setattr(m, name, value.double())
    return module


LOWER_FLOATS = (torch.float32, torch.float16, torch.bfloat16)


class _Float64Dtypes(TorchDispatchMode):
    """An op asked for a lower float dtype by its `dtype` argument (a factory's float32, `x.float()`, `x.half()`)
    makes float64 instead, and a tensor constant built in a lower float dtype is its values in float64."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if kwargs.get("dtype") in LOWER_FLOATS:
            kwargs["dtype"] = torch.float64
        out = func(*args, **kwargs)
        if func is torch.ops.aten.lift_fresh.default and out.dtype in LOWER_FLOATS:  # torch.tensor(values, dtype=..)
            return out.double()  # the constant's own values, in float64
        return out


@contextlib.contextmanager
def float64_run():
    """While active, a model's float64 run computes in float64 throughout, as its float32 run does in float32: a
    tensor built without a dtype (`torch.zeros(1, b, h, device=x.device)`, a recurrent layer's initial state) or with
    the float32 dtype the trace recorded for `dtype=x.dtype`, and a cast to a lower float dtype (`x.float()`), give
    float64. Otherwise a float32 tensor meets float64 weights in a matrix product and the run stops: every float64
    run of a check (the model's own, the plan's, the emitted forward's, the verifier's and the grader's truth) uses it.
    Enter it inside the modes that make the run draw and round as float32 (random_draws.Float32Draws,
    cpu_check.Float32Constants): they then see the float64 requests."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        with _Float64Dtypes():
            yield
    finally:
        torch.set_default_dtype(before)


def guard(failure: type[EvalError], what: str, fn):
    """Call `fn()`; any exception but an EvalError becomes `failure` saying '`what` raised ...'."""
    try:
        return fn()
    except EvalError:
        raise
    except (Exception, SystemExit) as exc:
        raise failure(f"{what} raised {one_line(exc)}") from exc


def _import(path: Path, role: str, failure: type[EvalError]):
    try:
        return import_model_file(path, f"fuseforge_eval_{role}_{path.stem}_{next(_import_counter)}")
    except LoadError as exc:
        raise failure(f"{role} file: {exc}") from exc
    except SystemExit as exc:
        raise failure(f"{role} file: importing it called exit({exc.code})") from None


def _module_class(module, name: str, role: str, failure: type[EvalError]) -> type:
    cls = getattr(module, name, None)
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise failure(f"{role} file defines no class {name}(nn.Module)")
    return cls


def load_reference(model_path: str | Path) -> Programs:
    """Import the model file only (candidate_path and candidate_cls stay None): what a process that must
    never see the candidate needs (fuseforge check runs the reference in its own process)."""
    precision = PrecisionFlags.capture()
    model_path = Path(model_path).resolve()
    model_mod = _import(model_path, "model", ReferenceFailed)
    model_cls = _module_class(model_mod, "Model", "model", ReferenceFailed)
    for fn in ("get_inputs", "get_init_inputs"):
        if not callable(getattr(model_mod, fn, None)):
            raise ReferenceFailed(f"model file defines no {fn}()")
    init_args = guard(ReferenceFailed, "get_init_inputs()", model_mod.get_init_inputs)
    if not isinstance(init_args, (list, tuple)):
        raise ReferenceFailed(f"get_init_inputs() returned {type(init_args).__name__}; expected a list")
    return Programs(model_path, None, model_cls, None, model_mod.get_inputs, list(init_args), precision)


def load_programs(model_path: str | Path, candidate_path: str | Path) -> Programs:
    """Import the model file, then the candidate file, each as its own fresh module."""
    progs = load_reference(model_path)
    progs.candidate_path = Path(candidate_path).resolve()
    cand_mod = _import(progs.candidate_path, "candidate", CandidateFailed)
    progs.candidate_cls = _module_class(cand_mod, "ModelNew", "candidate", CandidateFailed)
    return progs


def _check_interface(ref: nn.Module, cand: nn.Module) -> None:
    ref_sd, cand_sd = ref.state_dict(), cand.state_dict()
    missing = [k for k in ref_sd if k not in cand_sd]
    unexpected = [k for k in cand_sd if k not in ref_sd]
    shapes = {k: [list(ref_sd[k].shape), list(cand_sd[k].shape)]
              for k in ref_sd if k in cand_sd and ref_sd[k].shape != cand_sd[k].shape}
    if missing or unexpected or shapes:
        parts = [f"{label} {', '.join(keys)}" for label, keys in
                 (("missing", missing), ("unexpected", unexpected), ("shape differs for", list(shapes)))
                 if keys]
        raise InterfaceMismatch("ModelNew state_dict differs from Model's: " + "; ".join(parts),
                                missing, unexpected, shapes)


def _default_device(device: torch.device | None):
    """`with torch.device(device)` for an accelerator; nothing for the CPU or None."""
    if device is None or torch.device(device).type == "cpu":
        return contextlib.nullcontext()
    return torch.device(device)


def _on_device_or_cpu(device: torch.device | None, make):
    """`make()` with `device` as the default device; if that raises, `make()` as on the CPU."""
    if device is None or torch.device(device).type == "cpu":
        return make()
    try:
        with _default_device(device):
            return make()
    except EvalError:
        return make()


def build_pair(progs: Programs, seed: int, device: torch.device | None = None) -> tuple[nn.Module, nn.Module]:
    """Model and ModelNew built under `seed` (train mode), with the same weights: on the CPU, or with
    `device` as the default device (module docstring)."""
    def build():
        torch.manual_seed(seed)
        ref = guard(ReferenceFailed, "Model(*get_init_inputs())", lambda: progs.model_cls(*progs.init_args))
        cand = guard(CandidateFailed, "ModelNew(*get_init_inputs())",
                      lambda: progs.candidate_cls(*progs.init_args))
        return ref, cand

    ref, cand = _on_device_or_cpu(device, build)
    _check_interface(ref, cand)
    try:
        cand.load_state_dict(ref.state_dict(), strict=True)
    except Exception as exc:
        raise InterfaceMismatch(f"ModelNew.load_state_dict(Model's) raised {one_line(exc)}") from exc
    return ref, cand


def _get_inputs(progs: Programs) -> list:
    inputs = guard(ReferenceFailed, "get_inputs()", progs.get_inputs)
    if not isinstance(inputs, (list, tuple)):
        raise ReferenceFailed(f"get_inputs() returned {type(inputs).__name__}; expected a list")
    return list(inputs)


def _with_batch(progs: Programs, first: list, batch: int) -> list:
    """Each tensor input's dim 0 becomes `batch`: concatenate fresh get_inputs() draws, keep `batch` rows."""
    sizes = [x.shape[0] for x in first if isinstance(x, torch.Tensor) and x.dim() >= 1 and x.shape[0] > 0]
    if not sizes:
        raise ReferenceFailed("no input has a batch dimension")
    draws = [first] + [_get_inputs(progs) for _ in range(max(math.ceil(batch / s) for s in sizes) - 1)]
    return [torch.cat([d[i] for d in draws])[:batch]
            if isinstance(x, torch.Tensor) and x.dim() >= 1 and x.shape[0] > 0 else x
            for i, x in enumerate(first)]


def auto_extra_batch(batch: int) -> int:
    return batch // 2 + 1 if batch >= 4 else batch + 3


def batch_sizes(batch: int, extra: int | None) -> list[int]:
    """The other batch sizes a model is checked at (`check`, and `optimize`'s verification where the batch is
    free): a smaller one (or `extra`), twice the file's, and 1."""
    if extra == 0:
        return []
    sizes = [extra if extra is not None else auto_extra_batch(batch), 2 * batch, 1]
    return [s for s in dict.fromkeys(sizes) if s != batch and s > 0]


def rms(x: torch.Tensor) -> float:
    return x.float().square().mean().sqrt().item() if x.numel() else 0.0


def finite(tensors) -> bool:
    """Every floating tensor among `tensors` is finite (a magnitude case runs only where the model's own math is)."""
    return all(bool(torch.isfinite(t).all()) for t in tensors if isinstance(t, torch.Tensor) and t.is_floating_point())


def magnitude(inputs: list, kind: str) -> list:
    """The floating inputs scaled (large, tiny) or shifted by 16 times their RMS (shifted)."""
    def move(x):
        if not (isinstance(x, torch.Tensor) and x.is_floating_point()):
            return x
        if kind == "large":
            return x * LARGE
        if kind == "tiny":
            return x * TINY
        return x + SHIFT_RMS * max(rms(x), 1e-3)
    return [move(x) for x in inputs]


def draw_inputs(progs: Programs, seed: int, distribution: str = "file", batch: int | None = None,
                device: torch.device | None = None) -> list:
    """Inputs: 'file' is get_inputs(); 'signed' redraws floating ones as randn * 4; a MAGNITUDES name moves the
    file's floating inputs there (`magnitude`). On the CPU, or with `device` as the default device (module
    docstring)."""
    if distribution not in DISTRIBUTIONS and distribution not in MAGNITUDES:
        raise ValueError(f"unknown input distribution {distribution!r}")

    def draw():
        torch.manual_seed(INPUT_SEED_OFFSET + seed)
        inputs = _get_inputs(progs)
        if batch:
            inputs = guard(ReferenceFailed, f"building inputs of batch {batch}",
                            lambda: _with_batch(progs, inputs, batch))
        if distribution == "signed":
            inputs = [torch.randn_like(x) * SIGNED_SCALE
                      if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
        return magnitude(inputs, distribution) if distribution in MAGNITUDES else inputs

    return _on_device_or_cpu(device, draw)


def redraws_nothing(inputs: list) -> bool:
    """True when the 'signed' distribution and the magnitudes leave these inputs as they are (no floating tensor
    among them): their cases are then the 'file' case's very computation."""
    return not any(isinstance(x, torch.Tensor) and x.is_floating_point() for x in inputs)


def to_device(inputs: list, device: torch.device, float_dtype: torch.dtype | None = None) -> list:
    """Fresh copies of the tensors on `device` (a run that mutates its inputs spoils no other run);
    floating ones also cast to `float_dtype` if given, there (a float64 copy of a float32 input moves half the
    bytes to the GPU, and the GPU converts it; the values are the same)."""
    def move(x):
        if not isinstance(x, torch.Tensor):
            return x
        dtype = float_dtype if float_dtype is not None and x.is_floating_point() else x.dtype
        if dtype == x.dtype or torch.device(device) == x.device:
            return x.to(device=device, dtype=dtype, copy=True)
        return x.to(device=device).to(dtype)  # a copy on the other device, converted there
    return [move(x) for x in inputs]


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def forward(module: nn.Module, inputs: list, device: torch.device, who: str,
            failure: type[EvalError]) -> tuple[list[torch.Tensor], bool]:
    """Run `module(*inputs)` to completion; return (outputs as a list, whether it was a tuple)."""
    def run():
        result = module(*inputs)
        synchronize(device)  # an asynchronous CUDA error surfaces here, blamed on `who`
        return result
    out = guard(failure, f"{who} forward", run)
    if isinstance(out, torch.Tensor):
        return [out], False
    if isinstance(out, (tuple, list)) and out and all(isinstance(o, torch.Tensor) for o in out):
        return list(out), True
    raise failure(f"{who} forward returned {type(out).__name__}; expected a tensor or a tuple of tensors")


def _free_cached_blocks(device: torch.device) -> list[int]:
    """Sizes in bytes of the blocks that PyTorch's CUDA allocator holds free (cached) on `device`."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    try:
        segments = torch.cuda.memory_snapshot()
    except Exception:  # an allocator backend without snapshots: only the fresh block gets poisoned
        return []
    return [block["size"] for segment in segments if segment["device"] == index
            for block in segment["blocks"] if block["state"] == "inactive"]


def poison(device: torch.device, nbytes: int) -> None:
    """Make memory the next run may get read as NaN: a fresh ~2 x `nbytes` float32 block, and on CUDA
    also every block the caching allocator holds free, which may hold the reference's very results.

    Each free cached block is taken by asking for exactly its size (largest first, so the allocator's
    best fit lands on it); all the blocks are filled with NaN, then freed together.
    """
    held = []
    if device.type == "cuda":
        sizes = sorted(_free_cached_blocks(device), reverse=True)
        held = [torch.empty(size // 4, dtype=torch.float32, device=device) for size in sizes]
    try:
        held.append(torch.empty(max(1, 2 * nbytes // 4), dtype=torch.float32, device=device))
    except torch.OutOfMemoryError:
        pass  # best effort: the cached blocks are poisoned all the same
    for buf in held:
        buf.fill_(float("nan"))
    synchronize(device)
    del held


def check_device(device: torch.device) -> None:
    """Raise an EvalError unless `device` is the CPU or a CUDA GPU that torch can see."""
    if device.type == "cuda" and not torch.cuda.is_available():
        raise EvalError("device cuda was asked for, but torch sees no CUDA GPU")
    if device.type not in ("cuda", "cpu"):
        raise EvalError(f"unsupported device {str(device)!r}; use cuda or cpu")


def environment(device: torch.device) -> dict:
    """Versions and the GPU, for the JSON records."""
    env = {"torch": torch.__version__, "python": platform.python_version(), "device": str(device),
           "cuda": torch.version.cuda, "gpu": None, "capability": None,
           "float32_matmul_precision": torch.get_float32_matmul_precision(),
           "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32)}
    if device.type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(device)
        env["capability"] = "{}.{}".format(*torch.cuda.get_device_capability(device))
    return env
