"""Static checks of fuseforge check: each fires on its trick, and not on the honest look-alike."""

import textwrap
from pathlib import Path

import pytest

from fuseforge.check.static import analyse, kernel_names

CANDIDATES = Path("/work/shared/candidates")
HEADER = "import torch\nimport torch.nn as nn\n"


def _fired(source: str, model_stem: str = "model") -> set[str]:
    report = analyse(HEADER + textwrap.dedent(source), "candidate.py", model_stem)
    assert report.syntax_error is None, report.syntax_error
    return {f.check for f in report.findings}


# (trick, honest look-alike, the check that must fire on the trick and not on the look-alike)
PAIRS = {
    "reference_import": ("from model import Model\nclass ModelNew(Model): pass",
                         "from torch.nn import Module as Model\nclass ModelNew(Model): pass"),
    "reference_by_path": ("import runpy\nref = runpy.run_path('model.py')", "import os\npath = os.path.join('a', 'b')"),
    "introspection": ("import sys\ndef f():\n    return sys._getframe(1).f_locals['eager']",
                      "import sys\nthis = sys.modules[__name__]"),
    "try_except": ("def forward(x):\n    try:\n        return kernel(x)\n    except Exception:\n        return x * 2",
                   "def forward(x):\n    try:\n        return kernel(x)\n    except RuntimeError as e:\n"
                   "        raise RuntimeError('kernel failed') from e"),
    "try_except_module_import": ("try:\n    ext = load_ext()\nexcept Exception:\n    ext = None",
                                 "try:\n    import triton\nexcept ImportError:\n    triton = None"),
    "streams": ("s = torch.cuda.Stream()\nwith torch.cuda.stream(s):\n    pass",
                "s = torch.cuda.current_stream()"),
    "streams_in_cuda": ("SRC = '''cudaStream_t s; cudaStreamCreate(&s);'''",
                        "SRC = '''kernel<<<g, b, 0, at::cuda::getCurrentCUDAStream()>>>();'''"),
    "threads": ("from concurrent.futures import ThreadPoolExecutor", "import queue"),
    "tensor_subclass": ("class Lazy(torch.Tensor):\n    pass", "class Plain(nn.Module):\n    pass"),
    "patches": ("torch.allclose = lambda *a, **k: True", "torch.backends.cudnn.benchmark = True"),
    "patches_setattr": ("import time\nsetattr(time, 'perf_counter', lambda: 0.0)", "class A: pass\nsetattr(A, 'x', 1)"),
    "output_cache": ("class ModelNew(nn.Module):\n    def forward(self, x):\n        if self.out is None:\n"
                     "            self.out = x * 2\n        return self.out",
                     "class ModelNew(nn.Module):\n    def weight_t(self):\n        self.wt = self.w.t()\n"
                     "        return self.wt\n    def forward(self, x):\n        return x @ self.weight_t()"),
    "output_cache_memo": ("import functools\n@functools.lru_cache(maxsize=8)\ndef run(x):\n    return x * 2",
                          "import functools\n@functools.cache\ndef _kernels():\n    return load_inline()"),
    "output_cache_identity": ("def forward(self, x):\n    return self.memo[x.data_ptr()]",
                              "def forward(self, x):\n    aligned = x.data_ptr() % 16 == 0\n    return x"),
    "low_precision": ("y = x.half()", "y = x.float()"),
    "low_precision_flag": ("torch.backends.cuda.matmul.allow_tf32 = True",
                           "torch.backends.cuda.matmul.allow_tf32 = False"),
    "low_precision_cuda": ("SRC = '''#include <cuda_fp16.h>\n__half h;'''", "SRC = '''float f; double d;'''"),
    "l2_api": ("SRC = '''attr.accessPolicyWindow.num_bytes = n;'''", "SRC = '''cudaMemcpyAsync(a, b, n, k);'''"),
}
CHECK_OF = {name: name.split("_in_")[0] for name in PAIRS}
CHECK_OF.update({"reference_by_path": "reference_import", "try_except_module_import": "try_except",
                 "patches_setattr": "patches", "output_cache_identity": "output_cache",
                 "output_cache_memo": "output_cache",
                 "low_precision_flag": "low_precision", "low_precision_cuda": "low_precision"})


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_each_static_check_fires_on_its_trick(name):
    trick, _ = PAIRS[name]
    assert CHECK_OF[name] in _fired(trick)


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_each_static_check_stays_silent_on_the_honest_look_alike(name):
    _, honest = PAIRS[name]
    assert CHECK_OF[name] not in _fired(honest)


def test_a_finding_names_its_check_kind_and_source_line():
    report = analyse(HEADER + "\n\ntorch.allclose = lambda *a: True\n", "c.py")
    (finding,) = report.findings
    assert (finding.check, finding.kind, finding.line) == ("patches", "monkey_patch", 5)
    assert finding.to_json()["where"] == "static" and finding.decisive


def test_aliases_are_resolved_through_imports():
    assert "patches" in _fired("from time import perf_counter\nimport time as t\nt.perf_counter = None")
    assert "streams" in _fired("from torch.cuda import Stream\ns = Stream()")
    assert "low_precision" in _fired("import torch as T\ny = x.to(T.bfloat16)")


def test_the_model_files_module_counts_as_the_reference_only_under_its_own_name():
    assert "reference_import" in _fired("import my_model", model_stem="my_model")
    assert "reference_import" not in _fired("import my_model", model_stem="other")


def test_tf32_in_kernel_source_is_only_a_hint():
    report = analyse("SRC = '''asm(\"cvt.rna.tf32.f32 %0, %1;\");'''\n", "c.py")
    (finding,) = report.findings
    assert finding.check == "tf32_source" and not finding.decisive


def test_a_syntax_error_is_reported_with_the_line_and_no_findings():
    report = analyse("def f(:\n    pass\n", "bad.py")
    assert report.syntax_error.startswith("bad.py:1:") and report.findings == []


def test_kernel_names_are_read_from_global_functions_templates_and_launch_bounds():
    source = """
    template <int N> __global__ void tiled_gemm(float* a) {}
    __global__ __launch_bounds__(256) void bias_relu(const float* x) {}
    __device__ float helper(float x) { return x; }
    """
    assert kernel_names(source) == ["tiled_gemm", "bias_relu"]


def test_kernel_names_are_read_past_launch_attributes_with_parentheses_inside():
    """Catches an honest tiled kernel counted as not the candidate's own (graded `cheat:torch_fallback`, seen on the
    GPU with fuseforge's own ModelNew) because its launch bounds hold a `sizeof(...)`."""
    source = """
    template <bool kQuads, typename index_t>
    __global__ void __launch_bounds__(128, kQuads && sizeof(index_t) == 4 ? 16 : 8) fused_relu_tiled_kernel(float* y) {}
    __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__((256)) paired(float* y) {}
    __global__ void __maxnreg__(64) lean(float* y) {}
    """
    assert kernel_names(source) == ["fused_relu_tiled_kernel", "paired", "lean"]


def test_kernels_in_a_cu_file_the_candidate_names_are_collected_but_not_judged(tmp_path):
    (tmp_path / "k.cu").write_text("__global__ void side(float* x) { cudaStreamCreate(0); }")
    report = analyse("from torch.utils.cpp_extension import load\next = load(name='k', sources=['k.cu'])\n",
                     "c.py", base_dir=tmp_path)
    assert report.kernel_names == ["side"] and report.claims_kernels and report.findings == []


def test_fuseforges_own_emitted_model_new_files_raise_no_static_finding():
    results = Path(__file__).resolve().parents[1] / "bench" / "results"
    files = sorted(results.glob("*/*/model_new.py"))
    if not files:
        pytest.skip("no emitted model_new.py under bench/results")
    for path in files:
        report = analyse(path.read_text(), path.name, path.parent.name, path.parent)
        assert report.findings == [], (path, [f.to_json() for f in report.findings])


@pytest.mark.parametrize("answer, kernel", [
    ("gemm_divide_sum_scaling.answer_000.py", "fused_gemm_div_sum_scale_kernel"),
    ("gemm_sigmoid_scaling_residualadd.answer_001.py", "fused_sigmoid_scale_add_kernel"),
])
def test_the_real_answers_that_parse_raise_no_static_finding(answer, kernel):
    path = CANDIDATES / answer
    if not path.exists():
        pytest.skip("shared candidates not present")
    report = analyse(path.read_text(), path.name, "gemm")
    assert report.findings == [] and report.kernel_names == [kernel] and report.claims_kernels


def test_the_real_answer_with_prose_in_the_code_is_invalid_python():
    path = CANDIDATES / "gemm_sigmoid_scaling_residualadd.answer_002.py"
    if not path.exists():
        pytest.skip("shared candidates not present")
    assert "unterminated string literal" in analyse(path.read_text(), path.name).syntax_error


@pytest.mark.parametrize("source", [
    'SRC = """asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));"""',
    'SRC = """asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(p) : "f"(a), "f"(b));"""',
    'SRC = "cvt.rn." + "f16.f32"',
    'SRC = """mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"""',
    'SRC = """wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3"""',
    'SRC = """at::globalContext().setAllowTF32CuBLAS(true);"""',
    'SRC = """cublasGemmEx(h, a, b, m, n, k, &al, A, CUDA_R_32F, m, B, CUDA_R_32F, k, &be, C, CUDA_R_32F, m, '
    'CUBLAS_COMPUTE_32F_FAST_16F, CUBLAS_GEMM_DEFAULT);"""',
])
def test_reduced_precision_inside_kernel_source_is_named_ptx_and_cublas_included(source):
    assert "low_precision" in _fired(source)


@pytest.mark.parametrize("source", [
    'SRC = """asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(t) : "f"(x));"""',  # TF32: a hint, not decisive
    'SRC = """mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"""',
    'SRC = """float buf16 = x; // f16 is not used here; int f16_count = 2;"""',
    'SRC = """cvt.rn.f32.s32 %0, %1;"""',
])
def test_fp32_and_tf32_kernel_source_is_not_named_low_precision(source):
    assert "low_precision" not in _fired(source)


@pytest.mark.parametrize("source", [
    "import os\nparent = os.getppid()",
    "import os\nfrom pathlib import Path\nPath(f'/proc/{os.getpid() - 1}/environ').read_text()",
    'SRC = """std::ifstream f("/proc/self/mem");"""',
    'SRC = """long n = process_vm_readv(pid, local, 1, remote, 1, 0);"""',
    "import json\nplan = json.load(open('../job.json'))",
    "from glob import glob\nfound = glob('/tmp/fuseforge-reference-*/private/*')",
])
def test_naming_the_grader_s_files_or_process_is_private_data(source):
    assert "grader_paths" in _fired(source)


@pytest.mark.parametrize("source", [
    "maps = open('/proc/self/maps').read()",
    "cpus = open('/proc/cpuinfo').read()",
    "import os\npid = os.getpid()",
    "import json\nconfig = json.load(open('config.json'))",
])
def test_a_candidate_s_own_process_entries_and_files_are_not_the_grader_s(source):
    assert "grader_paths" not in _fired(source)
