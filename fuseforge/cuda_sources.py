"""The CUDA C++ that the package ships as files (`fuseforge/cuda/` and each kernel family's folder), read as text
with `importlib.resources`, so an installed package reads them where it is installed."""

from __future__ import annotations

from importlib.resources import files


def cuda_source(package: str, name: str) -> str:
    """The text of NAME, a path relative to the folder of PACKAGE, exactly as written."""
    return files(package).joinpath(name).read_text(encoding="utf-8")
