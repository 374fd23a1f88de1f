"""Compiling a generated binding unit against torch's headers with g++ (syntax only), for every family's tests."""

import shutil
import subprocess
import sysconfig

from torch.utils.cpp_extension import include_paths

GXX = shutil.which("g++")


def compile_binding(binding: str, tmp_path) -> subprocess.CompletedProcess:
    """g++ -fsyntax-only -Wall on `binding` with torch's and Python's include paths."""
    source = tmp_path / "binding.cpp"
    source.write_text(binding)
    includes = [f"-I{p}" for p in include_paths()] + [f"-I{sysconfig.get_paths()['include']}"]
    return subprocess.run([GXX, "-std=c++20", "-fsyntax-only", "-Wall", *includes, str(source)],
                          capture_output=True, text=True, timeout=300)
