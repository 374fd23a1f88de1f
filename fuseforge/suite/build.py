"""The default build phase of a suite job: `python -m fuseforge.suite.build MODEL OUT [--candidate FILE]`.

1. optimize jobs: the CPU stages of `fuseforge optimize` (load ... emit and the CPU check) into OUT;
   check jobs: load and capture the model only (the candidate is the artefact to build).
2. OUT/suite_roofline.json: the roofline floor of the model (below; best effort for check jobs).
3. With a CUDA build of torch: import OUT/40_model_new.py (or the candidate) and call its `_kernels()` if
   it has one: this compiles the CUDA extension into TORCH_EXTENSIONS_DIR, where the run phase finds it.
   Nothing to do with a CPU build of torch.
Exit 0: built; 1: the CPU stages failed; 3 (BUILD_FAILED_EXIT): the extension or the candidate did not build.
A failure ends with one line `fuseforge: FILE: STAGE: message` (as `fuseforge optimize` prints it), which
the suite records as the job's reason: for the CPU stages the failing stage's one-line error, for the
extension "build: the CUDA extension did not compile: " and the compiler's first error line.

suite_roofline.json:
    schema      "fuseforge.suite.roofline/1"
    flops       FLOPs of one forward by the cost model's formulas (GEMMs and convolutions 2 x MACs, any
                other op one per output element)
    min_bytes   bytes the forward must move at least: every input, parameter and buffer read once, every
                output and mutated buffer written once
    compute_ms  sum of FLOPs / rate over the ops (rates below: GEMMs and convolutions at the TF32
                tensor-core rate, the peak that cuDNN's TF32 convolutions and fuseforge's own 3xTF32 GEMM
                kernels run toward; any other op at SGEMM's); memory_ms: min_bytes / bandwidth
    floor_ms    max(compute_ms, memory_ms): no implementation is faster on these ceilings
    ceilings    {"tf32_flops", "sgemm_flops", "conv_flops", "bandwidth"}: the H100 rates of fuseforge/rates.py
"""

from __future__ import annotations

import argparse
import json
import operator
import re
import sys
import traceback
from pathlib import Path

from fuseforge.family_switches import SWITCHES, left_on

BUILD_FAILED_EXIT = 3  # verdict build_failed (fuseforge/suite/execute.py)
ROOFLINE_FILE = "suite_roofline.json"


def roofline(captured) -> dict:
    """The roofline floor of a captured graph (see the module docstring)."""
    from fuseforge.cost import VIEW_OPS, flops, is_product, nbytes
    from fuseforge.rates import BANDWIDTH, CONV_FLOPS, SGEMM_FLOPS, TF32_FLOPS

    graph = captured.graph
    compute_s = total = 0.0
    for node in graph.nodes:
        if node.op != "call_function" or node.target is operator.getitem or str(node.target) in VIEW_OPS:
            continue
        fl, rate = flops(node)
        # a floor takes the tensor cores' peak for products and convolutions (cuDNN runs those on TF32)
        rate = TF32_FLOPS if is_product(node) else rate
        total, compute_s = total + fl, compute_s + fl / rate
    by_name = {n.name: n for n in graph.nodes}
    written = ({o for o in captured.user_outputs if o} | set(captured.buffer_mutations.values())
               | set(captured.input_mutations.values()))
    min_bytes = sum(nbytes(n) for n in graph.nodes if n.op == "placeholder")
    min_bytes += sum(nbytes(by_name[o]) for o in written if o in by_name)
    memory_s = min_bytes / BANDWIDTH
    return {"schema": "fuseforge.suite.roofline/1", "flops": total, "min_bytes": min_bytes,
            "compute_ms": compute_s * 1e3, "memory_ms": memory_s * 1e3, "floor_ms": max(compute_s, memory_s) * 1e3,
            "ceilings": {"tf32_flops": TF32_FLOPS, "sgemm_flops": SGEMM_FLOPS, "conv_flops": CONV_FLOPS,
                         "bandwidth": BANDWIDTH}}


def _cpu_stages(model: Path, out: Path, families: frozenset[str], every_kernel: bool = False):
    """optimize's CPU stages with these kernel families on; returns the captured graph (raises StageFailed)."""
    from fuseforge.config import OptimizeConfig
    from fuseforge.pipeline import optimize

    config = OptimizeConfig(model_path=model.resolve(), out_dir=out, gpu=False,
                            gpu_skip_reason="suite build phase: CPU stages only", families=families,
                            every_kernel=every_kernel)
    return optimize(config).captured


def _capture_only(model: Path):
    from fuseforge.capture import capture
    from fuseforge.load import load_model_file

    try:
        return capture(load_model_file(model))
    except Exception as exc:  # the floor is a nicety for check jobs; the candidate is what gets built
        print(f"roofline: the model could not be captured ({exc}); no floor", flush=True)
        return None


def compiler_error(text: str) -> str:
    """The first line of a failed build's output that states an error (nvcc's or the C++ compiler's), else
    the last line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if re.search(r"(^|[\s:])(fatal )?error( [A-Z]*\d+)?:", ln) and not ln.startswith("FAILED:"):
            return ln
    return lines[-1] if lines else ""


def first_line(text: str) -> str:
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    return lines[0] if lines else ""


def build_extension(target: Path) -> int:
    import torch

    from fuseforge.load import import_model_file

    if torch.version.cuda is None:
        print(f"torch {torch.__version__} is a CPU build: no CUDA extension to prebuild", flush=True)
        return 0
    print(f"building the CUDA extension of {target}", flush=True)
    try:
        module = import_model_file(target)
        if hasattr(module, "_kernels"):
            module._kernels()
    except BaseException as exc:  # noqa: BLE001 - any failure to import or compile is "does not build"
        traceback.print_exc()
        print(f"fuseforge: {target.name}: build: the CUDA extension did not compile: {type(exc).__name__}: "
              f"{compiler_error(str(exc))}", flush=True)
        return BUILD_FAILED_EXIT
    print("built", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fuseforge.suite.build", description=__doc__.splitlines()[0])
    p.add_argument("model", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--candidate", type=Path, help="a check job: build this file instead of fuseforge's ModelNew")
    p.add_argument("--no-extension", action="store_true", help="skip step 3")
    for flag in SWITCHES:
        p.add_argument(flag, action="store_true", help="as fuseforge optimize's")
    p.add_argument("--every-kernel", action="store_true", help="as fuseforge optimize's")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.candidate is None:
        from fuseforge.pipeline import StageFailed

        try:
            captured = _cpu_stages(args.model, args.out, left_on(vars(args)), args.every_kernel)
        except StageFailed as exc:
            print(f"fuseforge: {args.model.name}: {first_line(exc)}", flush=True)
            return 1
    else:
        captured = _capture_only(args.model)
    if captured is not None:
        (args.out / ROOFLINE_FILE).write_text(json.dumps(roofline(captured), indent=1) + "\n")
    if args.no_extension:
        return 0
    return build_extension(args.candidate or args.out / "40_model_new.py")


if __name__ == "__main__":
    sys.exit(main())
