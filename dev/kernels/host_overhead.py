"""Where a forward's host time goes: enqueue time per call, and the CPU time of each op (GPU machine).

    .venv/bin/python dev/kernels/host_overhead.py MODEL.py --new MODEL_NEW.py --out $OUT/host.json

The benchmark times a call with CUDA events after a 256 MiB L2 flush; while the flush runs (~0.1 ms) the
host enqueues the forward, so a forward whose host time exceeds the flush plus its GPU time is timed by
its host time. For Model (eager) and ModelNew: the host time of one call while the GPU is busy (enqueue
only), the wall time of a call followed by a synchronize, and the profiler's CPU self time per op name,
per call. Prints a table last.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


def _measure(model, inputs, calls: int) -> dict:
    busy = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    for _ in range(5):
        model(*inputs)
    torch.cuda.synchronize()
    enqueue, wall = [], []
    for _ in range(calls):
        busy.zero_()  # the GPU is busy: the call below only enqueues
        start = time.perf_counter()
        model(*inputs)
        enqueue.append((time.perf_counter() - start) * 1e6)
        torch.cuda.synchronize()
        start = time.perf_counter()
        model(*inputs)
        torch.cuda.synchronize()
        wall.append((time.perf_counter() - start) * 1e6)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            model(*inputs)
        torch.cuda.synchronize()
    ops = sorted(((e.key, e.self_cpu_time_total / calls, e.count // calls) for e in prof.key_averages()),
                 key=lambda t: -t[1])
    return {"enqueue_us": statistics.median(enqueue), "wall_us": statistics.median(wall),
            "ops": [{"name": k, "self_us": us, "count": n} for k, us, n in ops[:25]]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("--new", type=Path, required=True)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    ref, new = _load(args.model), _load(args.new)
    torch.manual_seed(0)
    init = ref.get_init_inputs()
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in ref.get_inputs()]
    results = {}
    with torch.no_grad():
        for name, cls in (("eager", ref.Model), ("ours", new.ModelNew)):
            results[name] = _measure(cls(*init).cuda(), inputs, args.calls)
    for name, r in results.items():
        print(f"== {name}: enqueue {r['enqueue_us']:.1f} us, call + synchronize {r['wall_us']:.1f} us")
        for op in r["ops"][:15]:
            print(f"   {op['self_us']:8.1f} us  x{op['count']:<3} {op['name'][:90]}")
    if args.out:
        args.out.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                                        "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
