"""Runtime guards used inside the worker processes, set up before any candidate code is imported.

- `FunctionGuard`: references to the functions the grader relies on (allclose, CUDA events, synchronize,
  timers, Module.__call__ ...), taken at import of this module, and every attribute of the namespaces in
  NAMESPACES (torch, torch._C and its function table, Tensor, Module, torch.cuda, time, os, gc, builtins
  ...); `changed()` lists those that are no longer the same object (compared by identity, class attributes
  read with `inspect.getattr_static`; torch's own wrappers and attributes torch adds later are not changes).
- `InterpreterState`: the interpreter's hooks (profile, trace, sys.monitoring tools, threading's hooks)
  and torch's mode stacks (dispatch, function); `changed()` lists what a candidate left installed.
- `ThreadWatch`: Python threads started after `start()` (a `threading.setprofile` hook sees even
  short-lived ones) and threads still alive that were not there before -- but those torch starts for
  itself (torch.compile's workers: `Thread.start` is wrapped to see who calls it).
- `PrecisionFlags`: the global fp32 precision switches; `loosened()` lists those a candidate loosened.
- `OpRecorder`: a TorchDispatchMode that records the ATen ops of a call and the dtypes they produce;
  `op_class` normalises names so that the reference's and the candidate's ops can be compared.
- `poison`: fill memory the next call may be handed with a value (NaN, or a finite sentinel).
"""

from __future__ import annotations

import importlib
import inspect
import sys
import threading
import warnings
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from fuseforge.evaluate import harness

WATCHED = [
    "torch.allclose", "torch.isclose", "torch.equal", "torch.testing.assert_close", "torch.isnan", "torch.isfinite",
    "torch.save", "torch.load", "torch.manual_seed", "torch.from_numpy",
    "torch.cuda.synchronize", "torch.cuda.Event", "torch.cuda.Stream", "torch.cuda.current_stream",
    "torch.cuda.default_stream", "torch.cuda.set_stream", "torch._C._cuda_synchronize",
    "torch.cuda.Event.__init__", "torch.cuda.Event.__new__", "torch.cuda.Event.record",
    "torch.cuda.Event.elapsed_time", "torch.cuda.Event.synchronize", "torch.cuda.Event.query",
    "torch.cuda.Event.wait", "torch.cuda.Stream.synchronize", "torch.cuda.Stream.wait_stream",
    "torch.profiler.profile", "time.perf_counter", "time.perf_counter_ns", "time.time", "time.monotonic",
    "torch.Tensor.__eq__", "torch.Tensor.__sub__", "torch.Tensor.abs", "torch.Tensor.double", "torch.Tensor.float",
    "torch.Tensor.to", "torch.Tensor.cpu", "torch.Tensor.clone", "torch.Tensor.copy_", "torch.Tensor.data_ptr",
    "torch.Tensor.equal", "torch.Tensor.allclose", "torch.Tensor.sum", "torch.Tensor.item",
    "torch.Tensor.__torch_function__", "torch.Tensor.__repr__",
    "torch.nn.Module.__call__", "torch.nn.Module._call_impl", "torch.nn.Module.load_state_dict",
    "torch.nn.Module.state_dict", "torch.nn.Module.to",
    "builtins.isinstance", "builtins.type", "builtins.open", "json.dump", "json.dumps",
]

_MISSING = object()


def _lookup(qualified: str):
    """The object a dotted name refers to now (class attributes without descriptor binding)."""
    parts = qualified.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            getter = inspect.getattr_static if isinstance(obj, type) else getattr
            obj = getter(obj, name, _MISSING)
            if obj is _MISSING:
                return _MISSING
        return obj
    return _MISSING


_TORCH_DIR = str(Path(torch.__file__).resolve().parent)


def _torch_code(fn) -> bool:
    """Whether `fn` (a function or bound method) is defined in torch's own files."""
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    return code is not None and str(Path(code.co_filename).resolve()).startswith(_TORCH_DIR)


def _torch_wrapper_of(obj, original) -> bool:
    """True when `obj` is torch's own wrapper around `original` (torch._dynamo wraps torch.manual_seed
    with `_disable_dynamo` when it is first imported, and torch.nn.Module.__init__ when it first compiles):
    every wrapper in the `__wrapped__` chain is code from torch's own files, and the chain ends at the
    original or a wrapper closes over it."""
    for _ in range(8):
        code = getattr(obj, "__code__", None)
        if code is None or not str(Path(code.co_filename).resolve()).startswith(_TORCH_DIR):
            return False
        cells = [c.cell_contents for c in (getattr(obj, "__closure__", None) or ()) if _filled(c)]
        if any(c is original for c in cells):  # torch._dynamo's patched Module.__init__ closes over the original
            return True
        obj = getattr(obj, "__wrapped__", None)
        if obj is original:
            return True
    return False


def _filled(cell) -> bool:
    try:
        return cell.cell_contents is not _MISSING
    except ValueError:  # an empty cell
        return False


NAMESPACES = ["torch", "torch._C", "torch._C._VariableFunctions", "torch.Tensor", "torch._C.TensorBase",
              "torch.nn.Module", "torch.nn.functional", "torch.cuda", "torch.cuda.Event", "torch.cuda.Stream",
              "torch.backends.cuda", "torch.backends.cudnn", "torch.autograd", "torch.profiler", "torch.random",
              "torch.serialization", "torch.utils._python_dispatch", "time", "os", "gc", "sys", "threading",
              "builtins", "json", "pickle", "io", "ctypes", "numpy", "numpy.random"]


def _namespace(qualified: str) -> dict:
    """A module's attributes, or a class's as its instances see them (inherited ones included, so that an
    attribute set on a subclass to shadow its base's shows)."""
    obj = _lookup(qualified)
    if obj is _MISSING:
        return {}
    if isinstance(obj, type):
        return {name: inspect.getattr_static(obj, name, _MISSING) for name in dir(obj)}
    try:
        return dict(vars(obj))
    except TypeError:
        return {}


class FunctionGuard:
    def __init__(self, names: list[str] = WATCHED, namespaces: list[str] = NAMESPACES):
        self.reference = {name: _lookup(name) for name in names}
        self.namespaces = {ns: _namespace(ns) for ns in namespaces}

    def changed(self) -> list[str]:
        changed = []
        for name, obj in self.reference.items():
            now = _lookup(name)
            if now is not obj and not _torch_wrapper_of(now, obj):
                changed.append(name)
        for ns, before in self.namespaces.items():
            now = _namespace(ns)
            for key, obj in before.items():
                if key.startswith("__") and key.endswith("__") and key not in _DUNDERS:
                    continue
                if not (callable(obj) or isinstance(obj, (staticmethod, classmethod, property))):
                    continue
                new = now.get(key, _MISSING)
                if new is not obj and not _torch_wrapper_of(new, obj) and f"{ns}.{key}" not in changed:
                    changed.append(f"{ns}.{key}")
        return changed


_DUNDERS = {"__eq__", "__ne__", "__sub__", "__add__", "__getitem__", "__setitem__", "__call__", "__init__",
            "__new__", "__torch_function__", "__torch_dispatch__", "__repr__", "__float__", "__bool__",
            "__len__", "__iter__", "__array__", "__deepcopy__", "__reduce_ex__", "__setstate__", "__abs__",
            "__lt__", "__le__", "__gt__", "__ge__", "__mul__", "__truediv__", "__import__"}


class InterpreterState:
    """Hooks that let code run behind the grader's back; a snapshot, and what differs from it now."""

    def __init__(self):
        self.before = self.read()

    @staticmethod
    def read() -> dict:
        state = {"sys.getprofile": sys.getprofile(), "sys.gettrace": sys.gettrace(),
                 "threading.getprofile": getattr(threading, "getprofile", lambda: None)(),
                 "threading.gettrace": getattr(threading, "gettrace", lambda: None)(),
                 "torch dispatch modes": torch._C._len_torch_dispatch_stack(),
                 "torch function modes": torch._C._len_torch_function_stack()}
        monitoring = getattr(sys, "monitoring", None)
        if monitoring is not None:
            for tool in range(6):
                state[f"sys.monitoring tool {tool}"] = monitoring.get_tool(tool)
        return state

    def changed(self) -> list[str]:
        now = self.read()
        return [k for k, v in now.items() if v is not self.before.get(k) and v != self.before.get(k)]


class ThreadWatch:
    def __init__(self):
        self.before: set[int] = set()
        self.started: list[str] = []

    def start(self) -> None:
        self.before = {t.ident for t in threading.enumerate()}

        def hook(frame, event, arg):  # runs first thing in every thread started through threading
            thread = threading.current_thread()
            if not _torch_thread(thread):  # torch.compile's own helpers
                self.started.append(thread.name)
            sys.setprofile(None)

        threading.setprofile(hook)
        original = threading.Thread.start
        if not getattr(original, "_fuseforge_origin", False):
            def start(thread, *args, **kwargs):  # who starts it: torch (its compile workers) or someone else
                thread._fuseforge_by_torch = _started_by_torch(sys._getframe(1))
                return original(thread, *args, **kwargs)
            start._fuseforge_origin = True
            threading.Thread.start = start

    def new_threads(self) -> list[str]:
        alive = [t.name for t in threading.enumerate() if t.ident not in self.before and t.is_alive()
                 and not _torch_thread(t)]
        return sorted(set(alive) | set(self.started))


_STDLIB_DIR = str(Path(threading.__file__).resolve().parent)


def _started_by_torch(frame) -> bool:
    """The nearest frame outside the standard library (a thread pool starting its workers) and outside the
    installed libraries other than torch (tqdm's monitor thread, started by torch.compile's progress bars)
    is torch's. A library called straight from the candidate's code still counts as the candidate's."""
    while frame is not None:
        name = frame.f_code.co_filename
        if not (name.startswith(_STDLIB_DIR) or name.startswith("<")):
            path = str(Path(name).resolve())
            if path.startswith(_TORCH_DIR):
                return True
            if not _installed_library(path):
                return False
        frame = frame.f_back
    return False


def _installed_library(path: str) -> bool:
    return any(part in ("site-packages", "dist-packages") for part in Path(path).parts)


def _torch_thread(thread) -> bool:
    return bool(getattr(thread, "_fuseforge_by_torch", False)) or _torch_code(getattr(thread, "_target", None))


class PrecisionFlags:
    """Global switches that make fp32 math less accurate; `loosened()` compares against a snapshot."""

    _GETTERS = {
        "float32_matmul_precision": lambda: torch.get_float32_matmul_precision(),
        "cuda.matmul.allow_tf32": lambda: torch.backends.cuda.matmul.allow_tf32,
        "cudnn.allow_tf32": lambda: torch.backends.cudnn.allow_tf32,
        "cuda.matmul.allow_fp16_reduced_precision_reduction":
            lambda: torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
        "cuda.matmul.allow_bf16_reduced_precision_reduction":
            lambda: torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
        "fp32_precision": lambda: torch.backends.fp32_precision,
        "cuda.matmul.fp32_precision": lambda: torch.backends.cuda.matmul.fp32_precision,
    }
    _RANK = {"highest": 0, "high": 1, "medium": 2, False: 0, True: 1, "ieee": 0, "none": 0, "tf32": 1, "bf16": 2}

    def __init__(self):
        self.before = self.read()

    @classmethod
    def read(cls) -> dict:
        values = {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for name, get in cls._GETTERS.items():
                try:
                    values[name] = get()
                except Exception:
                    pass
        return values

    def loosened(self) -> dict:
        now = self.read()
        return {name: [self.before[name], value] for name, value in now.items()
                if name in self.before and self._RANK.get(value, 1) > self._RANK.get(self.before[name], 1)}

    def restore(self) -> None:
        torch.set_float32_matmul_precision(self.before.get("float32_matmul_precision", "highest"))
        if "cuda.matmul.allow_tf32" in self.before:
            torch.backends.cuda.matmul.allow_tf32 = self.before["cuda.matmul.allow_tf32"]


_IGNORED_OPS = {
    "view", "_unsafe_view", "reshape", "_reshape_alias", "t", "transpose", "permute", "expand", "expand_as",
    "squeeze", "unsqueeze", "slice", "select", "as_strided", "detach", "alias", "clone", "copy", "_to_copy",
    "to", "contiguous", "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros",
    "zeros_like", "ones", "ones_like", "full", "full_like", "new_zeros", "new_ones", "new_full", "fill", "zero",
    "lift_fresh", "lift_fresh_copy", "_local_scalar_dense", "item", "split", "split_with_sizes", "chunk",
    "unbind", "cat", "stack", "resize", "set", "arange", "scalar_tensor", "unfold", "flatten", "narrow",
    "index_select", "_pin_memory", "is_pinned", "record_stream", "randn", "rand", "normal", "uniform",
    "randn_like", "rand_like", "copy_", "detach_", "_conj", "conj", "resolve_conj", "resolve_neg",
    "_has_compatible_shallow_copy_type", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset",
    "is_same_size", "_copy_from", "_copy_from_and_resize", "equal", "isnan", "isfinite",
}
_GEMM = {"addmm", "mm", "bmm", "baddbmm", "addbmm", "matmul", "linear", "_addmm_activation", "addmv", "mv",
         "dot", "vdot", "einsum", "_scaled_mm", "tensordot", "inner", "outer", "addr"}


def op_class(qualified: str) -> str | None:
    """'aten::addmm.out' -> 'gemm'; views, copies and allocations -> None (they do no arithmetic)."""
    name = qualified.split("::")[-1].split(".")[0]
    if name.endswith("_") and not name.startswith("_"):
        name = name[:-1]
    if name in _IGNORED_OPS or qualified.split("::")[0] not in ("aten", "prims"):
        return None
    if name in _GEMM:
        return "gemm"
    for family in ("convolution", "batch_norm", "layer_norm", "group_norm", "instance_norm", "log_softmax",
                   "softmax", "max_pool", "avg_pool", "rms_norm", "embedding"):
        if family in name:
            return "conv" if family == "convolution" else family
    if name.startswith(("conv", "cudnn_conv", "mkldnn_conv")):
        return "conv"
    return name


class OpRecorder(TorchDispatchMode):
    """Records every op dispatched in its scope and the floating dtypes of what they return."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # keeps __torch_dispatch__ unwrapped: wrapping imports torch._dynamo (~2 s)

    def __init__(self):
        super().__init__()
        self.ops: list[str] = []
        self.dtypes: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.ops.append(str(func._schema.name))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor) and t.is_floating_point():
                self.dtypes.add(str(t.dtype).removeprefix("torch."))
        return out

    def classes(self) -> dict[str, int]:
        """How many ops of each class ran (views, copies and allocations left out)."""
        counts: dict[str, int] = {}
        for c in filter(None, map(op_class, self.ops)):
            counts[c] = counts.get(c, 0) + 1
        return dict(sorted(counts.items()))


def _fill(buf: torch.Tensor, fill, index: int) -> None:
    if isinstance(fill, float):
        buf.fill_(fill)
        return
    # copied from where the data is into the block's bytes: no device copy of it (the blocks hold the free memory)
    data = fill[index % len(fill)].detach().contiguous().reshape(-1).view(torch.uint8)
    raw = buf.view(torch.uint8)
    n = min(raw.numel(), data.numel())
    raw[:n].copy_(data[:n])


def poison(device: torch.device, fill, sizes: list[int], copies: int = 4) -> None:
    """Fill memory the next allocations may be handed: `fill` is a float (every element: NaN, a finite
    sentinel) or a list of tensors whose bytes are copied to the start of each block (the "plant" of
    the reference's outputs, block i getting tensor i mod n).

    CUDA: every block the caching allocator holds free, and one fresh block per size (as the
    evaluator does). CPU: `copies` blocks of each size in bytes, freed again (malloc tends to hand the
    most recently freed chunk of a size back first: best effort, not a guarantee).
    """
    held = []
    if device.type == "cuda":
        held = [torch.empty(max(1, s // 4), dtype=torch.float32, device=device)
                for s in sorted(harness._free_cached_blocks(device), reverse=True)]
    for size in sizes:
        for _ in range(1 if device.type == "cuda" else copies):
            try:
                held.append(torch.empty(max(1, size // 4), dtype=torch.float32, device=device))
            except (torch.OutOfMemoryError, RuntimeError):
                break
    for i, buf in enumerate(held):
        _fill(buf, fill, i)
    harness.synchronize(device)
    del held
