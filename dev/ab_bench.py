"""Time several ModelNew files of one model against each other in one process on one GPU: an A/B that the spread
between machines (5-10 % between fresh H100s of the same kind, `bench/results/2026-11-28b_gpu/README.md`) cannot blur.

    .venv/bin/python dev/ab_bench.py MODEL.py A/model_new.py B/model_new.py [...] [--trials 60] [--out ab.json]

Each ModelNew gets the eager model's state (as the verifier does), is called on the model file's inputs and compared
with eager (max abs difference over the outputs' RMS, printed, not judged: `fuseforge check` judges), then all of them
and eager are timed in interleaved rounds (the order rotates every round), each call after an L2 flush, with CUDA
events: the product's own timer (`evaluate.bench`). Prints each file's median and its ratio to the first file's.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
from pathlib import Path

import torch

from fuseforge.evaluate.bench import _time_rounds, _Timer


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _tensors(out) -> list[torch.Tensor]:
    return [out] if isinstance(out, torch.Tensor) else [t for t in out if isinstance(t, torch.Tensor)]


def _distance(ours, eager) -> float:
    worst = 0.0
    for a, b in zip(_tensors(ours), _tensors(eager)):
        scale = b.double().pow(2).mean().sqrt().clamp_min(1e-30)
        worst = max(worst, ((a.double() - b.double()).abs().max() / scale).item())
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("candidates", type=Path, nargs="+")
    parser.add_argument("--trials", type=int, default=60)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = _load(args.model, "ab_model")
    inputs = [t.cuda() if isinstance(t, torch.Tensor) else t for t in model.get_inputs()]
    eager = model.Model(*model.get_init_inputs()).cuda()
    calls = {"eager": lambda: eager(*inputs)}
    with torch.no_grad():
        for i, path in enumerate(args.candidates):
            new = _load(path, f"ab_candidate_{i}").ModelNew(*model.get_init_inputs()).cuda()
            new.load_state_dict(eager.state_dict())
            name = f"{i}:{path}"
            print(f"{name}: max |ours - eager| / RMS = {_distance(new(*inputs), eager(*inputs)):.2e}", flush=True)
            calls[name] = lambda new=new: new(*inputs)
        for call in calls.values():  # warm-up: builds, cuDNN's algorithm search, caches
            for _ in range(3):
                call()
        torch.cuda.synchronize()
        samples = _time_rounds(calls, _Timer(torch.device("cuda")), args.trials)
    medians = {name: statistics.median(s) for name, s in samples.items()}
    first = medians[next(n for n in medians if n != "eager")]
    for name, ms in medians.items():
        print(f"{ms:9.4f} ms  {first / ms:5.3f}x of the first file's speed  {name}")
    if args.out:
        args.out.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                                        "medians_ms": medians, "samples_ms": samples}, indent=1))


if __name__ == "__main__":
    main()
