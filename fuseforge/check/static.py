"""Static checks: read the candidate's source (Python AST and its string constants), never run it.

`analyse(source, ...)` parses the file (a SyntaxError makes the verdict `invalid_python`), resolves import
aliases (`import torch.nn.functional as F`, `from time import perf_counter`), and reports one `Finding`
per suspicious construct with the check's name and the line. String constants are scanned too, since
that is where inline CUDA lives (fp16 types, stream creation, L2 persistence); docstrings are not.
It also collects the names of the kernels the candidate defines (`__global__` functions in its strings
or in .cu files it names, `@triton.jit` functions): the profiler check counts GPU time spent in them.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

from fuseforge.check.kinds import Finding
from fuseforge.check.static_cache import CacheRules
from fuseforge.check.static_rules import (
    BENIGN_ASSIGNMENTS,
    CACHE_DECORATORS,
    FILE_LOADERS,
    FRAME_ATTRIBUTES,
    GRADER_CALLS,
    GRADER_PATHS,
    INTROSPECTION_CALLS,
    LOW_PRECISION_NAMES,
    NATIVE_SUFFIXES,
    PRECISION_FLAGS,
    PY_L2_NAMES,
    SOURCE_PATTERNS,
    STREAM_NAMES,
    THREAD_MODULES,
    WATCHED_ROOTS,
    docstring_ids,
    kernel_names,
)

__all__ = ["StaticReport", "analyse", "kernel_names"]

@dataclass
class StaticReport:
    syntax_error: str | None = None
    findings: list[Finding] = field(default_factory=list)
    kernel_names: list[str] = field(default_factory=list)
    claims_kernels: bool = False  # defines kernels or builds an extension

    def to_json(self) -> dict:
        return {"syntax_error": self.syntax_error, "kernel_names": self.kernel_names,
                "claims_kernels": self.claims_kernels, "findings": [f.to_json() for f in self.findings]}


def _syntax_error(source: str, filename: str) -> str | None:
    try:
        compile(source, filename, "exec")
    except SyntaxError as exc:
        text = (exc.text or "").strip()
        return f"{filename}:{exc.lineno}: {exc.msg}" + (f": {text[:120]}" if text else "")
    except ValueError as exc:  # e.g. null bytes
        return f"{filename}: {exc}"
    return None


def analyse(source: str, filename: str = "candidate.py", model_stem: str | None = None,
            base_dir: Path | None = None) -> StaticReport:
    """All static checks on one candidate source."""
    error = _syntax_error(source, filename)
    if error:
        return StaticReport(syntax_error=error)
    scanner = _Scanner(ast.parse(source), model_stem, base_dir)
    scanner.run()
    report = StaticReport(findings=scanner.findings, kernel_names=sorted(set(scanner.kernels)),
                          claims_kernels=bool(scanner.kernels) or scanner.builds)
    return report


class _Scanner(CacheRules):
    def __init__(self, tree: ast.Module, model_stem: str | None, base_dir: Path | None):
        self.tree, self.model_stem, self.base_dir = tree, model_stem, base_dir
        self.findings: list[Finding] = []
        self.kernels: list[str] = []
        self.builds = False
        self.aliases: dict[str, str] = {}
        self.parents: dict[int, ast.AST] = {}
        self.defined: set[str] = set()
        self._seen: set[tuple[str, int | None]] = set()

    def flag(self, check: str, node: ast.AST | int | None, message: str) -> None:
        line = node if isinstance(node, int) or node is None else getattr(node, "lineno", None)
        if (check, line) not in self._seen:
            self._seen.add((check, line))
            self.findings.append(Finding(check, message, line))

    # ---- name resolution
    def _collect_names(self) -> None:
        for node in ast.walk(self.tree):
            for child in ast.iter_child_nodes(node):
                self.parents[id(child)] = node
            if isinstance(node, ast.Import):
                for a in node.names:
                    self.aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    self.aliases[a.asname or a.name] = f"{node.module}.{a.name}"
        for node in self.tree.body:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                self.defined.add(node.name)
            elif isinstance(node, ast.Assign):
                for t in node.targets:
                    if isinstance(t, ast.Name):
                        self.defined.add(t.id)
                        value = self.resolve(node.value)
                        if value and value.split(".")[0] in self.aliases.values():
                            self.aliases[t.id] = value

    def resolve(self, node: ast.AST) -> str | None:
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id, node.id)
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value)
            return f"{base}.{node.attr}" if base else None
        return None

    # ---- the walk
    def run(self) -> None:
        self._collect_names()
        docstrings = docstring_ids(self.tree)
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                self._string(node)
            handler = getattr(self, f"_{type(node).__name__}", None)
            if handler:
                handler(node)
        self._returns_of_stored_state()

    def _string(self, node: ast.Constant) -> None:
        text = node.value
        for check, pattern in SOURCE_PATTERNS:
            match = pattern.search(text)
            if match:
                line = node.lineno + text.count("\n", 0, match.start())
                self.flag(check, line, f"kernel source uses {match.group(0)!r}")
        self.kernels += kernel_names(text)
        match = GRADER_PATHS.search(text)
        if match:
            line = node.lineno + text.count("\n", 0, match.start())
            self.flag("grader_paths", line, f"names {match.group(0)!r} (the grader's files or process)")
        if text in ("__torch_function__", "__torch_dispatch__"):
            self.flag("tensor_subclass", node, f"names {text}")
        if self.base_dir and text.endswith(NATIVE_SUFFIXES) and "\n" not in text:
            path = self.base_dir / text
            if path.is_file():  # kernels in a .cu file it builds: names only (see module docstring)
                self.kernels += kernel_names(path.read_text(errors="replace"))

    def _imported(self, module: str, node: ast.AST) -> None:
        top = module.split(".")[0]
        if self.model_stem and top == self.model_stem:
            self.flag("reference_import", node, f"imports the model file's module {module!r}")
        if top in THREAD_MODULES:
            self.flag("threads", node, f"imports {module}")

    def _Import(self, node: ast.Import) -> None:
        for a in node.names:
            self._imported(a.name, node)

    def _ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module and not node.level:
            self._imported(node.module, node)
        if any(a.name == "Model" for a in node.names) and not (node.module or "").startswith("torch"):
            self.flag("reference_import", node, f"imports Model from {node.module or '.'}")

    def _Call(self, node: ast.Call) -> None:
        name = self.resolve(node.func) or ""
        literal = node.args[0].value if node.args and isinstance(node.args[0], ast.Constant) else None
        if name in FILE_LOADERS:
            self.flag("reference_import", node, f"loads a Python file with {name}")
        elif name in ("__import__", "importlib.import_module", "importlib.__import__") and isinstance(literal, str):
            self._imported(literal, node)
        elif name == "Model" and "Model" not in self.defined:
            self.flag("reference_import", node, "calls Model, which the candidate does not define")
        if name in INTROSPECTION_CALLS:
            self.flag("introspection", node, f"calls {name}")
        if name in GRADER_CALLS:
            self.flag("grader_paths", node, f"calls {name} (the grading process)")
        if name in ("os.fork", "os.forkpty"):
            self.flag("threads", node, f"calls {name}")
        if name.endswith(("cpp_extension.load_inline", "cpp_extension.load")):
            self.builds = True
        func_attr = node.func.attr if isinstance(node.func, ast.Attribute) else None
        if func_attr in ("as_subclass", "_make_subclass", "_make_wrapper_subclass"):
            self.flag("tensor_subclass", node, f"calls {func_attr}")
        if func_attr in ("half", "bfloat16") and not node.args:
            self.flag("low_precision", node, f"casts with .{func_attr}()")
        if name == "torch.set_float32_matmul_precision" and literal != "highest":
            self.flag("low_precision", node, f"set_float32_matmul_precision({literal!r})")
        if name in ("setattr", "delattr", "builtins.setattr", "object.__setattr__") and node.args:
            target = self.resolve(node.args[0]) or ""
            if target.split(".")[0] in WATCHED_ROOTS:
                self.flag("patches", node, f"{name}({target}, ...)")
        if name == "contextlib.suppress":
            self.flag("try_except", node, "contextlib.suppress swallows exceptions")
        if func_attr in ("get", "setdefault", "pop") and node.args and self._identity_key(node.args[0]):
            self.flag("output_cache", node, f"looks up .{func_attr}() by tensor identity")

    def _Name(self, node: ast.Name) -> None:
        if node.id in self.aliases and not isinstance(self.parents.get(id(node)), ast.Attribute):
            self._named(self.aliases[node.id], node)  # `from torch.cuda import Stream`, then `Stream()`

    def _named(self, name: str, node: ast.AST) -> None:
        if name in STREAM_NAMES:
            self.flag("streams", node, f"uses {name}")
        if name in LOW_PRECISION_NAMES or name.startswith("torch.float8"):
            self.flag("low_precision", node, f"uses {name}")

    def _Attribute(self, node: ast.Attribute) -> None:
        name = self.resolve(node) or ""
        parent = self.parents.get(id(node))
        if isinstance(parent, ast.Attribute):
            return  # judged as part of the longer name
        self._named(name, node)
        if node.attr in FRAME_ATTRIBUTES:
            self.flag("introspection", node, f"reads frame attribute {node.attr}")
        if name == "sys.modules" and not (isinstance(parent, ast.Subscript) and isinstance(parent.slice, ast.Name)
                                          and parent.slice.id == "__name__"):
            self.flag("introspection", node, "reads sys.modules")
        if node.attr in PY_L2_NAMES:
            self.flag("l2_api", node, f"calls the CUDA runtime's {node.attr}")

    def _assigned(self, target: ast.AST, value: ast.AST | None, node: ast.AST) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            for t in target.elts:
                self._assigned(t, None, node)
            return
        if isinstance(target, ast.Subscript):
            name = self.resolve(target.value) or ""
            if name.split(".")[0] in WATCHED_ROOTS and name.endswith("__dict__"):
                self.flag("patches", node, f"writes into {name}")
            return
        if not isinstance(target, ast.Attribute):
            return
        name = self.resolve(target) or ""
        if name.split(".")[0] not in WATCHED_ROOTS or name.startswith(BENIGN_ASSIGNMENTS):
            return
        if target.attr in PRECISION_FLAGS:
            strict = isinstance(value, ast.Constant) and value.value in (False, "ieee")
            if not strict and name != "torch.backends.cudnn.allow_tf32":  # cuDNN TF32 is eager's default
                self.flag("low_precision", node, f"sets {name}")
            return
        self.flag("patches", node, f"assigns {name}")

    def _Assign(self, node: ast.Assign) -> None:
        for t in node.targets:
            self._assigned(t, node.value, node)

    def _AugAssign(self, node: ast.AugAssign) -> None:
        self._assigned(node.target, node.value, node)

    def _AnnAssign(self, node: ast.AnnAssign) -> None:
        self._assigned(node.target, node.value, node)

    def _Delete(self, node: ast.Delete) -> None:
        for t in node.targets:
            self._assigned(t, None, node)

    def _FunctionDef(self, node: ast.FunctionDef) -> None:
        if node.name in ("__torch_function__", "__torch_dispatch__"):
            self.flag("tensor_subclass", node, f"defines {node.name}")
        for deco in node.decorator_list:
            name = self.resolve(deco.func if isinstance(deco, ast.Call) else deco) or ""
            params = [a.arg for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs
                      if a.arg not in ("self", "cls")]
            if name in CACHE_DECORATORS and (params or node.args.vararg or node.args.kwarg):
                # a memo keyed by arguments; a zero-argument builder (`@functools.cache def _kernels()`,
                # as fuseforge emits) only builds once
                self.flag("output_cache", deco, f"{node.name}({', '.join(params)}) is memoised with {name}")
            if name.endswith("triton.jit") or name.endswith("triton.autotune"):
                self.kernels.append(node.name)
                self.builds = True

    _AsyncFunctionDef = _FunctionDef

    def _ClassDef(self, node: ast.ClassDef) -> None:
        for base in node.bases:
            name = self.resolve(base) or ""
            if name in ("torch.Tensor", "torch._C.TensorBase", "torch._C._TensorBase", "torch.nn.Parameter"):
                self.flag("tensor_subclass", node, f"class {node.name} subclasses {name}")

    def _Try(self, node: ast.Try) -> None:
        in_function = self._enclosing_function(node) is not None
        does_work = any(isinstance(n, ast.Call) for stmt in node.body for n in ast.walk(stmt))
        if not node.handlers or not (in_function or does_work):
            return
        for handler in node.handlers:
            if not any(isinstance(n, ast.Raise) for n in ast.walk(handler)):
                self.flag("try_except", handler, "an except clause that does not re-raise")

    _TryStar = _Try
