"""Compiling generated code for every family's tests: the binding unit against torch's headers with g++
(syntax only), the kernel unit for Hopper with nvcc (no warnings, no spills)."""

import re
import shutil
import subprocess
import sysconfig

from torch.utils.cpp_extension import include_paths

GXX = shutil.which("g++")
NVCC = shutil.which("nvcc")


def compile_binding(extension, tmp_path) -> subprocess.CompletedProcess:
    """g++ -fsyntax-only -Wall on an extension's binding unit as `load_inline` builds it: the binding with the Python
    module that `load_inline(functions=...)` appends (each function wrapped in torch::wrap_pybind_function), with
    torch's and Python's include paths."""
    source = tmp_path / "binding.cpp"
    module = ["PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {",
              *[f'm.def("{f}", torch::wrap_pybind_function({f}), "{f}");' for f in extension.functions], "}"]
    source.write_text("\n".join([extension.binding, *module]) + "\n")
    includes = [f"-I{p}" for p in include_paths()] + [f"-I{sysconfig.get_paths()['include']}"]
    return subprocess.run([GXX, "-std=c++20", "-fsyntax-only", "-Wall", "-DTORCH_EXTENSION_NAME=ff_binding_check",
                           *includes, str(source)], capture_output=True, text=True, timeout=300)


def compiles_for_hopper(cuda: str, tmp_path) -> subprocess.CompletedProcess:
    """nvcc -cubin for sm_90a of a generated kernel unit, as optimize's build compiles it (no warnings-as-errors, no
    spill check: for units of random plans, whose few spills are a matter of speed, not of whether they build)."""
    source = tmp_path / "unit.cu"
    source.write_text(cuda)
    return subprocess.run([NVCC, "-std=c++17", "-cubin", "-O3", "-gencode=arch=compute_90a,code=sm_90a", "-o",
                           str(tmp_path / "unit.cubin"), str(source)], capture_output=True, text=True, timeout=600)


def assert_compiles_for_hopper_without_spills(cuda: str, tmp_path, std: str = "c++17", max_registers: int = 128,
                                              limits: dict[str, int] | None = None) -> str:
    """nvcc -cubin for sm_90a with warnings as errors and ptxas -v: no spills, no kernel over `max_registers`
    registers (a kernel whose name contains a key of `limits`: over that key's value). Returns ptxas' report."""
    source = tmp_path / "kernels.cu"
    source.write_text(cuda)
    result = subprocess.run(
        [NVCC, f"-std={std}", "-cubin", "-O3", "-gencode=arch=compute_90a,code=sm_90a", "-Werror", "all-warnings",
         "-Xptxas", "-v,-warn-spills,-warn-lmem-usage", "-o", str(tmp_path / "k.cubin"), str(source)],
        capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    spills = [line for line in result.stderr.splitlines() if "spill" in line]
    assert spills and all("0 bytes spill stores, 0 bytes spill loads" in line for line in spills)
    for name, used in re.findall(r"Compiling entry function '(\w+)'.*?Used (\d+) registers", result.stderr, re.S):
        limit = next((v for k, v in (limits or {}).items() if k in name), max_registers)
        assert int(used) <= limit, f"{name}: {used} registers, over {limit}"
    return result.stderr


def host_program(source: str, folder, name: str, *flags: str):
    """A C++ checker built for the host with g++ -std=c++17 (its `flags` after), as a path to run; fails the test with
    g++'s errors when it does not build."""
    path, binary = folder / f"{name}.cpp", folder / name
    path.write_text(source)
    built = subprocess.run([GXX, "-std=c++17", *flags, "-o", str(binary), str(path)], capture_output=True, text=True,
                           timeout=300)
    assert built.returncode == 0, built.stderr
    return binary


# A statistics struct over a row in one running update (`one`) and in four parts merged in a tree (`merged`), as
# threads merge theirs, each finalised with `cols`; then the prologue of a host `main` that reads a row of float32
# values from the file argv[1] into `v` (n values).
READ_ROW = r"""
#include <cstdio>
#include <vector>
template <class S>
void one_and_four_parts(const std::vector<float>& v, S& one, S& merged, int cols) {
    one.init();
    for (float x : v) one.add(x);
    one.finalize(cols, 0.0f);
    S parts[4];
    for (auto& p : parts) p.init();
    for (size_t i = 0; i < v.size(); ++i) parts[i % 4].add(v[i]);
    parts[0].merge(parts[1]);
    parts[2].merge(parts[3]);
    parts[0].merge(parts[2]);
    parts[0].finalize(cols, 0.0f);
    merged = parts[0];
}
int main(int argc, char** argv) {
    FILE* f = std::fopen(argv[1], "rb");
    std::fseek(f, 0, SEEK_END);
    const long n = std::ftell(f) / 4;
    std::fseek(f, 0, SEEK_SET);
    std::vector<float> v(n);
    if (std::fread(v.data(), 4, n, f) != (size_t)n) return 3;
    std::fclose(f);
"""


def row_program(cuda: str, body: str, folder, name: str):
    """The generated unit `cuda` with a host `main` (READ_ROW, then `body`, which ends the function), built with nvcc for
    the host: a function of a float32 numpy row that runs it and returns its stdout split into floats."""
    (folder / f"{name}.cu").write_text(cuda + READ_ROW + body)
    built = subprocess.run([NVCC, "-std=c++17", "-O2", "-o", str(folder / name), str(folder / f"{name}.cu")],
                           capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]

    def run(values) -> list[float]:
        path = folder / "row.bin"
        values.astype("float32").tofile(path)
        out = subprocess.run([str(folder / name), str(path)], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return [float(x) for x in out.stdout.split()]
    return run


def lab_kernels_for_hopper(source: str, tmp_path, kernel: str) -> list[str]:
    """nvcc -cubin for sm_90a of a lab's source with ptxas -v: asserts it builds without spills and without ptxas
    serialising its wgmmas, and returns the entry functions whose name contains `kernel` (its instances)."""
    (tmp_path / "lab.cu").write_text(source)
    proc = subprocess.run([NVCC, "-cubin", "-gencode=arch=compute_90a,code=sm_90a", "-std=c++17", "-O3", "-Xptxas",
                           "-v,-warn-spills,-warn-lmem-usage", "-o", str(tmp_path / "lab.cubin"),
                           str(tmp_path / "lab.cu")], capture_output=True, text=True, timeout=600)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-3000:]
    assert "spill" not in log.replace("0 bytes spill stores, 0 bytes spill loads", ""), log[-3000:]
    assert "serialized" not in log and "Potential Performance Loss" not in log, log[-3000:]
    return re.findall(rf"Compiling entry function '(\w*{kernel}\w*)'", log)
