"""The CUDA C++ that the package ships as files (`fuseforge/cuda/` and each kernel family's folder), read as text
with `importlib.resources`, so an installed package reads them where it is installed.

A generated extension is one kernel file and one binding file, so a source that includes a shared header of
`fuseforge/cuda/` (`#include "tiles.cuh"`, `#include "welford.cuh"`), or a header of its own family's folder
(`#include "igemm_ptx.cuh"`), gets the header's text pasted in place of that line (`paste_include`)."""

from __future__ import annotations

from importlib.resources import files


class MissingCudaSource(RuntimeError):
    """The installed package lacks one of its CUDA sources (a build that left out its package data)."""


def cuda_source(package: str, name: str) -> str:
    """The text of NAME, a path relative to the folder of PACKAGE, exactly as written."""
    path = files(package).joinpath(name)
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise MissingCudaSource(f"fuseforge is installed without its CUDA source {package.replace('.', '/')}/{name} "
                                f"(looked for {path}): reinstall it from a complete wheel or checkout") from None


def paste_include(text: str, header: str, package: str = "fuseforge", folder: str = "cuda/") -> str:
    """TEXT with its line `#include "HEADER"` replaced by the text of the header: by default the shared one,
    `fuseforge/cuda/HEADER`; with `package` and `folder=""`, a family's own header next to its sources."""
    directive = f'#include "{header}"'
    if directive not in text:
        raise ValueError(f"no line {directive} to paste {package.replace('.', '/')}/{folder}{header} into")
    return text.replace(directive, cuda_source(package, f"{folder}{header}"), 1)
