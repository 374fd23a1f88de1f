"""Stage `load`: import a model file and build `Model(*get_init_inputs())` and its inputs.

A model file defines `class Model(nn.Module)`, `get_inputs()` and `get_init_inputs()`. Every way such
a file can be unusable ends in a `LoadError` whose message is one line saying what to fix.
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import torch
from torch import nn

_REQUIRED = ("Model", "get_inputs", "get_init_inputs")
_module_counter = itertools.count()


class LoadError(Exception):
    """The model file cannot be used; the message says why in one line."""


@dataclass
class LoadedModel:
    path: Path
    source: str
    module: ModuleType
    model: nn.Module
    init_args: list
    inputs: list  # tensors, and Python numbers
    outputs: list[torch.Tensor]  # eager fp32 outputs on the CPU, flattened (of the first two samples where
    # the batch is free)
    output_is_tuple: bool

    @property
    def stem(self) -> str:
        return self.path.stem


def _where(exc: BaseException, path: Path) -> str:
    """'file.py:LINE' of the deepest frame of `exc` that lies in the model file."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename) == path]
    return f"{path.name}:{frames[-1].lineno}" if frames else path.name


def import_model_file(path: str | Path, module_name: str | None = None) -> ModuleType:
    """Execute a model file as a fresh module; syntax and import errors become LoadError."""
    path = Path(path).resolve()
    if not path.is_file():
        raise LoadError(f"{path}: no such file")
    source = path.read_text()
    try:
        compile(source, str(path), "exec")
    except SyntaxError as exc:
        raise LoadError(f"{path.name}:{exc.lineno}: syntax error: {exc.msg}") from None
    name = module_name or f"fuseforge_user_{path.stem}_{next(_module_counter)}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise LoadError(f"{_where(exc, path)}: importing the file raised {type(exc).__name__}: {exc}") from None
    return module


def _flatten_outputs(out, path: Path) -> tuple[list[torch.Tensor], bool]:
    if isinstance(out, torch.Tensor):
        return [out], False
    if isinstance(out, (tuple, list)) and out and all(isinstance(o, torch.Tensor) for o in out):
        return list(out), True
    kind = type(out).__name__
    if isinstance(out, (tuple, list)):
        kinds = ", ".join(sorted({type(o).__name__ for o in out})) or "nothing"
        kind = f"{kind} of {kinds}"
    raise LoadError(f"{path.name}: Model.forward returned {kind}; expected a tensor or a tuple of tensors")


def _check_inputs(inputs, path: Path) -> list[torch.Tensor]:
    if not isinstance(inputs, (list, tuple)):
        raise LoadError(f"{path.name}: get_inputs() returned {type(inputs).__name__}; expected a list of tensors")
    if not inputs:
        raise LoadError(f"{path.name}: get_inputs() returned no inputs")
    for i, t in enumerate(inputs):
        if isinstance(t, (bool, int, float)):  # a Python number: built into the plan, guarded in ModelNew
            continue
        if not isinstance(t, torch.Tensor):
            raise LoadError(f"{path.name}: input {i} from get_inputs() is a {type(t).__name__}; only tensors and "
                            "Python numbers are supported")
        if t.numel() == 0:
            raise LoadError(f"{path.name}: input {i} from get_inputs() has zero elements (shape {tuple(t.shape)})")
    return list(inputs)


def _call(fn, what: str, path: Path):
    try:
        return fn()
    except LoadError:
        raise
    except Exception as exc:
        raise LoadError(f"{_where(exc, path)}: {what} raised {type(exc).__name__}: {exc}") from None


def _first_forward(model: nn.Module, inputs: list[torch.Tensor], path: Path):
    """One eager forward on the CPU: on the first two samples where every input has a batch of 3 or more
    (a model's forward is seconds at full size on a CPU), else, or if that fails, on the inputs as given."""
    with torch.no_grad():
        batches = {t.shape[0] if t.dim() else None for t in inputs if isinstance(t, torch.Tensor)}
        if len(batches) == 1 and (batch := next(iter(batches))) is not None and batch >= 3:
            try:
                return model(*[t[:2] if isinstance(t, torch.Tensor) else t for t in inputs])
            except Exception:  # the model fixes its batch size somewhere: run it as given
                pass
        return _call(lambda: model(*inputs), "Model.forward", path)


def load_model_file(path: str | Path, seed: int = 0) -> LoadedModel:
    """Import the file, build the model and inputs under `seed`, and run one eager forward on the CPU."""
    path = Path(path).resolve()
    module = import_model_file(path)
    missing = [n for n in _REQUIRED if not hasattr(module, n)]
    if missing:
        raise LoadError(f"{path.name}: missing {', '.join(missing)} (a model file defines {', '.join(_REQUIRED)})")
    if not (isinstance(module.Model, type) and issubclass(module.Model, nn.Module)):
        raise LoadError(f"{path.name}: Model is not a subclass of torch.nn.Module")

    init_args = _call(module.get_init_inputs, "get_init_inputs()", path)
    if not isinstance(init_args, (list, tuple)):
        raise LoadError(f"{path.name}: get_init_inputs() returned {type(init_args).__name__}; expected a list")
    torch.manual_seed(seed)
    model = _call(lambda: module.Model(*init_args), "Model(*get_init_inputs())", path)
    inputs = _check_inputs(_call(module.get_inputs, "get_inputs()", path), path)
    out = _first_forward(model, inputs, path)
    outputs, is_tuple = _flatten_outputs(out, path)
    # The forward above ran in train mode and may have updated buffers (BatchNorm running stats):
    # rebuild the model under the same seed so that capture sees the pristine state.
    del model, out
    torch.manual_seed(seed)
    model = module.Model(*init_args)
    return LoadedModel(path, path.read_text(), module, model, list(init_args), inputs, outputs, is_tuple)
