"""The tables of the static checks: names, flags and source patterns each check looks for."""

from __future__ import annotations

import ast
import re

WATCHED_ROOTS = ("torch", "time", "builtins", "numpy", "math", "functools", "random", "gc", "inspect")
BENIGN_ASSIGNMENTS = ("torch.backends.cudnn.benchmark", "torch.backends.cudnn.deterministic",
                      "torch.backends.cudnn.enabled", "torch._dynamo.config.", "torch._inductor.config.")
PRECISION_FLAGS = ("allow_tf32", "allow_fp16_reduced_precision_reduction",
                   "allow_bf16_reduced_precision_reduction", "fp32_precision")
THREAD_MODULES = {"threading", "_thread", "multiprocessing", "concurrent", "asyncio", "sched"}
INTROSPECTION_CALLS = {"gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._getframe",
                       "sys._current_frames", "inspect.currentframe", "inspect.stack", "inspect.trace",
                       "inspect.getouterframes"}
FRAME_ATTRIBUTES = {"f_back", "f_locals", "f_globals", "gi_frame", "tb_frame"}
FILE_LOADERS = {"runpy.run_path", "runpy.run_module", "importlib.util.spec_from_file_location",
                "importlib.machinery.SourceFileLoader"}
STREAM_NAMES = {"torch.cuda.Stream", "torch.cuda.stream", "torch.cuda.ExternalStream", "torch.cuda.StreamContext",
                "torch.cuda.set_stream", "torch.Stream", "torch.cuda.streams.Stream"}
LOW_PRECISION_NAMES = {"torch.float16", "torch.half", "torch.bfloat16", "torch.HalfTensor", "torch.BFloat16Tensor",
                       "torch.cuda.HalfTensor", "torch.cuda.BFloat16Tensor", "torch.autocast",
                       "torch.cuda.amp.autocast", "torch.amp.autocast", "torch.cpu.amp.autocast"}
CACHE_DECORATORS = {"functools.cache", "functools.lru_cache", "functools.cached_property"}
IDENTITY_CALLS = {"data_ptr", "untyped_storage", "storage", "_cdata"}
PASS_THROUGH = {"clone", "detach", "contiguous", "view_as", "reshape", "view", "to"}

SOURCE_PATTERNS = [  # (check, regex) over string constants (inline CUDA / C++)
    ("low_precision", re.compile(r"\b(__half2?|half2|__nv_bfloat162?|nv_bfloat16|__float2half\w*|"
                                 r"__float2bfloat16\w*|__half2float|__bfloat162float|at::Half|at::BFloat16|"
                                 r"torch::kHalf|torch::kBFloat16)\b|cuda_fp16\.h|cuda_bf16\.h")),
    # inline PTX: conversions to and tensor-core products in 16- and 8-bit formats (also as fragments, e.g.
    # "cvt.rn." + "f16.f32"), and C++ switches of cuBLAS/ATen to reduced-precision math
    ("low_precision", re.compile(r"\b(?:cvt|mma|wgmma)\.[\w.]*?\b(?:b?f16|e4m3|e5m2)(?:x2)?\b|"
                                 r"(?:^|[\s.\"'])(?:b?f16|e4m3|e5m2)(?:x2)?\.(?:f32|f16|bf16)\b|"
                                 r"\bsetAllow(?:TF32CuBLAS|FP16ReductionCuBLAS|BF16ReductionCuBLAS)\b|"
                                 r"\bsetFloat32MatmulPrecision\b|\bCUBLAS_COMPUTE_32F_FAST_\w+|"
                                 r"\bCUBLAS_TF32_TENSOR_OP_MATH\b")),
    ("tf32_source", re.compile(r"__float_to_tf32|precision::tf32|\btf32\b|\.tf32\b")),
    ("streams", re.compile(r"\bcudaStreamCreate\w*|\bgetStreamFromPool\b|\bcudaStreamNonBlocking\b|"
                           r"\bcudaStreamPerThread\b")),
    ("threads", re.compile(r"std::thread\b|\bpthread_create\b|std::async\b")),
    ("l2_api", re.compile(r"cudaLimitPersistingL2CacheSize|accessPolicyWindow|cudaAccessPropertyPersisting|"
                          r"cuda(Stream|Launch)AttributeAccessPolicyWindow")),
]
PY_L2_NAMES = {"cudaDeviceSetLimit", "cudaStreamSetAttribute", "cudaCtxSetLimit"}
# the grader's files and its process, named in a string (Python or C++): a process's /proc entries (not the
# candidate's own maps or status), the parent's pid, reading another process's memory, the job folder's files
GRADER_PATHS = re.compile(r"/proc/(?:\d+|self/(?:mem|fd|environ)|thread-self/mem|$)|\bgetppid\b|"
                          r"\bprocess_vm_readv\b|\bPTRACE_(?:ATTACH|SEIZE|PEEK\w*)\b|\bjob\.json\b|"
                          r"\bcandidate\.events\b|\bpositions\.pt\b|fuseforge-(?:check|reference)-")
GRADER_CALLS = {"os.getppid", "psutil.Process", "os.getpgid", "os.getsid"}
_KERNEL = re.compile(r"__global__\s+(?:[\w:<>,*&\s]+?\s+)?(\w+)\s*\(")
_ATTRIBUTE = re.compile(r"\b(?:__launch_bounds__|__cluster_dims__|__maxnreg__)\s*\(")
NATIVE_SUFFIXES = (".cu", ".cuh", ".cpp", ".cc", ".h")


def _without_attributes(text: str) -> str:
    """The text without its kernels' launch attributes, `__launch_bounds__(...)` and the like, whose arguments may
    hold parentheses of their own (`__launch_bounds__(256, sizeof(T) == 4 ? 8 : 4)`)."""
    out, at = [], 0
    for match in _ATTRIBUTE.finditer(text):
        if match.start() < at:
            continue
        depth, end = 1, match.end()
        while end < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[end], 0)
            end += 1
        out.append(text[at:match.start()])
        at = end
    return "".join(out) + text[at:]


def kernel_names(text: str) -> list[str]:
    """Names of the `__global__` functions defined in CUDA source text."""
    return _KERNEL.findall(_without_attributes(text)) if "__global__" in text else []


def docstring_ids(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids
