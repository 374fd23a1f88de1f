"""Every candidate conv of the fuzz models marked fp32-class: plan, generate, float64-check on the CPU (optimize --no-gpu
--every-kernel with assumed_class forced to fp32), to exercise the 3xTF32 codegen across shapes."""
import sys, pathlib, traceback
from unittest import mock
from fuseforge import pipeline
from fuseforge.config import OptimizeConfig
import fuseforge.families.conv as conv_pkg
models = sorted(pathlib.Path('/tmp/fz19/models').glob('*.py'))
ok = bad = split = 0
with mock.patch.object(conv_pkg, "assumed_class", lambda node: "fp32"):
    for m in models:
        src = m.read_text()
        if "Conv" not in src and "conv" not in src:
            continue
        out = pathlib.Path('/tmp/allfp32') / m.stem
        try:
            run = pipeline.optimize(OptimizeConfig(model_path=m, out_dir=out, gpu=False, every_kernel=True))
            groups = [g for g in run.plan.groups if g.kind == "conv" and g.spec.conv.kernel == "igemm"]
            s = sum(1 for g in groups if g.spec.conv.tiling.split)
            split += s
            passed = run.cpu_check.passed if run.cpu_check else None
            ok += 1
            print(m.stem, "split kernels", s, "cpu check", passed, "ladder", len(run.ladder), flush=True)
        except Exception as exc:
            bad += 1
            print(m.stem, "ERROR", type(exc).__name__, str(exc)[:200], flush=True)
print("ok", ok, "errors", bad, "split kernels", split)
