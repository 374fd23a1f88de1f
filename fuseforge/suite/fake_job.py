"""A stand-in job for dry runs and tests: `python -m fuseforge.suite.fake_job build|run MODEL OUT [ARGS...]`.

Needs no GPU and imports no torch, so a cluster or a laptop can exercise the whole suite in seconds:

    fuseforge suite DIR --gpus 2 \\
        --build-command "{python} -m fuseforge.suite.fake_job build {model} {out}" \\
        --run-command "{python} -m fuseforge.suite.fake_job run {model} {out} {no_gpu} {no_compile}"

What it does is read from `# fake-job:` lines of the model file (and of `--candidate FILE`, which wins):
key=value words,

    build=ok|fail|crash|segfault|hang    fail: exit 3, the suite's "build_failed"
    run=correct|incorrect|crash|segfault|hang|cpu_only
    sleep=SECONDS                        wait this long first (default 0)
    eager_ms=, speedup=, compile_ms=     timings for 60_bench.json (defaults 1, 1, eager_ms)
    flops=, min_bytes=, floor_ms=        suite_roofline.json, written by the build phase
    gpu=NAME, torch=VERSION              the environment the fake evaluator reports

With --no-gpu the run phase ends like `optimize --no-gpu` (exit 0, no verdict) unless it must crash or
hang; with --no-compile the compile variant is "skipped"; with --max-autotune a compile_max_autotune variant
(max_autotune_ms=, default eager_ms) is written. Each phase writes OUT/fake_job_<phase>.json
({argv, cuda_visible_devices, niceness, pid, start, end}; end is null if it crashed or hung). "hang" first starts
a child (pid in OUT/hang_child.pid) that outlives the job unless the suite kills its whole process group.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

BUILD_COMMAND = "{python} -m fuseforge.suite.fake_job build {model} {out}"
RUN_COMMAND = "{python} -m fuseforge.suite.fake_job run {model} {out} {no_gpu} {no_compile}"
CHECK_RUN_COMMAND = RUN_COMMAND + " --candidate {candidate}"


def write_model(path: Path, **directives) -> Path:
    """A model file the suite finds, whose fake jobs behave as `directives` say (e.g. run="hang")."""
    words = " ".join(f"{k}={v}" for k, v in directives.items())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# fake-job: {words}\n# {path.name}: files of different names are different models\nclass Model:\n    pass\n\n\ndef get_inputs():\n    return []\n\n\n"
                    "def get_init_inputs():\n    return []\n")
    return path


def directives(*files: Path) -> dict[str, str]:
    found: dict[str, str] = {}
    for path in files:
        for line in path.read_text().splitlines():
            if line.strip().startswith("# fake-job:"):
                found.update(w.split("=", 1) for w in line.split(":", 1)[1].split() if "=" in w)
    return found


def _environment(d: dict) -> dict:
    try:
        torch = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch = "none"
    return {"gpu": d.get("gpu", "FakeGPU"), "torch": d.get("torch", torch), "device": "fake"}


def _variant(ms: float) -> dict:
    return {"status": "ok", "reason": None, "median_ms": ms, "p10_ms": ms * 0.95, "p90_ms": ms * 1.05,
            "min_ms": ms * 0.9, "mean_ms": ms, "trials": 50, "peak_bytes": 2**20, "peak_abs_bytes": 2**21}


def write_results(out: Path, d: dict, correct: bool, compile_timed: bool, autotuned: bool = False) -> None:
    env = _environment(d)
    worst = {"case": "seed 0 / file", "name": "output", "cand_rel_err": 1e-7 if correct else 0.5,
             "ref_rel_err": 1e-7, "ratio": 0.5 if correct else 1e6}
    verify = {"schema": "fuseforge.verify/1", "verdict": "correct" if correct else "incorrect",
              "reason": None if correct else "seed 0 / file: output: fake wrong answer", "environment": env,
              "allclose": correct, "worst": worst, "cases": [{"seed": 0, "passed": correct}]}
    (out / "50_verify.json").write_text(json.dumps(verify))
    if not correct:
        return
    eager = float(d.get("eager_ms", 1.0))
    ours = eager / float(d.get("speedup", 1.0))
    variants = {"eager": _variant(eager), "candidate": _variant(ours),
                "compile": _variant(float(d.get("compile_ms", eager))) if compile_timed else
                {"status": "skipped", "reason": "--no-compile"}}
    if autotuned:
        variants["compile_max_autotune"] = _variant(float(d.get("max_autotune_ms", eager)))
    bench = {"schema": "fuseforge.bench/1", "environment": env, "variants": variants, "error": None,
             "speedup": {"vs_eager": eager / ours,
                         "vs_compile": variants["compile"]["median_ms"] / ours if compile_timed else None}}
    (out / "60_bench.json").write_text(json.dumps(bench))


def _misbehave(action: str, out: Path) -> None:
    if action == "crash":
        raise RuntimeError("fake job crashed on purpose")
    if action == "segfault":
        os.kill(os.getpid(), signal.SIGSEGV)
    if action == "hang":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        (out / "hang_child.pid").write_text(str(child.pid))
        time.sleep(600)


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[0] not in ("build", "run"):
        print(__doc__, file=sys.stderr)
        return 2
    phase, model, out, rest = argv[0], Path(argv[1]), Path(argv[2]), argv[3:]
    out.mkdir(parents=True, exist_ok=True)
    files = [model] + ([Path(rest[rest.index("--candidate") + 1])] if "--candidate" in rest else [])
    d = directives(*files)
    record = {"argv": argv, "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
              "niceness": os.getpriority(os.PRIO_PROCESS, 0), "pid": os.getpid(),
              "start": time.time(), "end": None}
    (out / f"fake_job_{phase}.json").write_text(json.dumps(record))  # again at the end, if it gets there
    time.sleep(float(d.get("sleep", 0)))
    action = d.get(phase, "ok" if phase == "build" else "correct")
    _misbehave(action, out)
    code = 0
    if phase == "build":
        if any(k in d for k in ("flops", "min_bytes", "floor_ms")):
            roof = {k: float(d[k]) for k in ("flops", "min_bytes", "floor_ms") if k in d}
            (out / "suite_roofline.json").write_text(json.dumps(roof))
        code = 3 if action == "fail" else 0
        print("fuseforge: build failed: fake compile error" if code else "built", flush=True)
    elif "--no-gpu" not in rest and action in ("correct", "incorrect"):
        write_results(out, d, action == "correct", "--no-compile" not in rest, "--max-autotune" in rest)
        code = 0 if action == "correct" else 1
    record["end"] = time.time()
    (out / f"fake_job_{phase}.json").write_text(json.dumps(record))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
