"""A stand-in job for dry runs and tests: `python -m fuseforge.suite.fake_job build|run MODEL OUT [ARGS...]`.

Needs no GPU and imports no torch, so a cluster or a laptop can exercise the whole suite in seconds:

    fuseforge suite DIR --gpus 2 \\
        --build-command "{python} -m fuseforge.suite.fake_job build {model} {out}" \\
        --run-command "{python} -m fuseforge.suite.fake_job run {model} {out} {no_gpu} {no_compile}"

What it does is read from `# fake-job:` lines of the model file (and of `--candidate FILE`, which wins):
key=value words,

    build=ok|fail|stagefail|crash|segfault|hang
                                         fail: exit 3, the suite's "build_failed"; stagefail: as `optimize`
                                         when every plan failed a CPU stage: each plan's artefacts moved into
                                         OUT/attempts/, then `fuseforge: MODEL: verify: ...` and exit 1
    run=correct|incorrect|crash|segfault|hang|cpu_only
    sleep=SECONDS                        wait this long first (default 0)
    gpu_sleep=SECONDS                    the run phase's "GPU work": this long holding the GPU lease
                                         (FUSEFORGE_GPU_LEASE, when the suite gives one; default 0)
    eager_ms=, speedup=, compile_ms=     timings for 60_bench.json (defaults 1, 1, eager_ms)
    flops=, min_bytes=, floor_ms=        suite_roofline.json, written by the build phase
    gpu=NAME, torch=VERSION              the environment the fake evaluator reports

With --no-gpu the run phase ends like `optimize --no-gpu` (exit 0, no verdict) unless it must crash or
hang; with --no-compile the compile variant is "skipped"; with --max-autotune a compile_max_autotune variant
(max_autotune_ms=, default eager_ms) is written. Like the evaluator, the run phase reads the baseline cache
FUSEFORGE_BASELINES (fuseforge/evaluate/baselines.py, key: the model's hash, the fake GPU and torch,
FAKE_SETTINGS): a cached eager or compile variant is taken from it and marked cached, one it "measures" is
added to it. Each phase writes OUT/fake_job_<phase>.json
({argv, cuda_visible_devices, niceness, pid, affinity, timing_cpus, gpu_lease, omp_num_threads, start, end, and for a run
phase that got to its GPU work gpu_start, gpu_end}; end is null if it crashed or hung). "hang" first starts
a child (pid in OUT/hang_child.pid) that outlives the job unless the suite kills its whole process group.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from fuseforge.evaluate import baselines, lease

BUILD_COMMAND = "{python} -m fuseforge.suite.fake_job build {model} {out}"
RUN_COMMAND = "{python} -m fuseforge.suite.fake_job run {model} {out} {no_gpu} {no_compile}"
CHECK_RUN_COMMAND = RUN_COMMAND + " --candidate {candidate}"
FAKE_SETTINGS = {"trials": 50, "warmup": 5, "seed": 0, "distribution": "file", "l2_flush_bytes": 0, "timer": "fake"}


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


def write_results(out: Path, d: dict, correct: bool, compile_timed: bool, autotuned: bool = False,
                  model: Path | None = None) -> None:
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
    measured = {"eager": _variant(eager),
                "compile": _variant(float(d.get("compile_ms", eager))) if compile_timed else
                {"status": "skipped", "reason": "--no-compile"}}
    if autotuned:
        measured["compile_max_autotune"] = _variant(float(d.get("max_autotune_ms", eager)))
    key = baselines.make_key(baselines.model_hash(model), env["gpu"], env["torch"], FAKE_SETTINGS) if model else None
    cache = baselines.path_from_env()
    entries = baselines.read(cache)
    variants, cached, fresh = {}, [], []
    for name, record in measured.items():
        found = baselines.lookup(entries, key, name) if key and record["status"] == "ok" else None
        if found is not None:
            variants[name] = baselines.as_variant(found)
            cached.append(name)
        else:
            variants[name] = record
            fresh += [name] if record["status"] == "ok" else []
    if cache is not None and key is not None:
        baselines.add(cache, [baselines.entry(key, name, variants[name], "fake_job") for name in fresh])
    variants["candidate"] = _variant(ours)
    compile_ms = variants["compile"].get("median_ms")
    bench = {"schema": "fuseforge.bench/1", "environment": env, "variants": variants, "error": None,
             "settings": FAKE_SETTINGS,
             "baselines": {"key": key, "file": str(cache) if cache else None, "cached": cached, "stored": fresh},
             "speedup": {"vs_eager": variants["eager"]["median_ms"] / ours,
                         "vs_compile": compile_ms / ours if compile_ms else None}}
    (out / "60_bench.json").write_text(json.dumps(bench))


def _set_aside_and_fail(model: Path, out: Path) -> int:
    """What `optimize` does when every plan fails a CPU stage: each plan's artefacts go to OUT/attempts/
    (the suite's log of this phase among them, if it were in OUT), then one failure line, exit 1."""
    for rung in ("1_every-kernel-family", "2_pointwise-kernels-only"):
        kept = out / "attempts" / rung
        kept.mkdir(parents=True, exist_ok=True)
        for path in list(out.iterdir()):
            if path.name != "attempts":
                shutil.move(str(path), str(kept / path.name))
    print("Traceback (most recent call last):\n  ...\nRuntimeError: expected m1 and m2 to have the same dtype", flush=True)
    print(f"fuseforge: {model.name}: verify: CPU check failed: the program differs from the model in float64: "
          "output: error 3.1e-01 > 1e-09", flush=True)
    return 1


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
              "affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
              "timing_cpus": os.environ.get(lease.CPUS_ENV), "gpu_lease": os.environ.get(lease.LEASE_ENV),
              "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
              "start": time.time(), "end": None}
    (out / f"fake_job_{phase}.json").write_text(json.dumps(record))  # again at the end, if it gets there
    time.sleep(float(d.get("sleep", 0)))
    action = d.get(phase, "ok" if phase == "build" else "correct")
    _misbehave(action, out)
    code = 0
    if phase == "build":
        if action == "stagefail":
            return _set_aside_and_fail(model, out)
        if any(k in d for k in ("flops", "min_bytes", "floor_ms")):
            roof = {k: float(d[k]) for k in ("flops", "min_bytes", "floor_ms") if k in d}
            (out / "suite_roofline.json").write_text(json.dumps(roof))
        code = 3 if action == "fail" else 0
        print(f"fuseforge: {model.name}: build: fake compile error" if code else "built", flush=True)
    elif "--no-gpu" not in rest and action in ("correct", "incorrect"):
        held = lease.from_env(f"fake_job {model.name}")
        if held is not None:
            held.acquire()
        record["gpu_start"] = time.time()
        time.sleep(float(d.get("gpu_sleep", 0)))
        write_results(out, d, action == "correct", "--no-compile" not in rest, "--max-autotune" in rest, model)
        record["gpu_end"] = time.time()
        if held is not None:
            held.release()
        code = 0 if action == "correct" else 1
    record["end"] = time.time()
    (out / f"fake_job_{phase}.json").write_text(json.dumps(record))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
