"""The reference worker: runs only the model file, in a process that never sees the candidate.

Writes two folders. `public/` is all the candidate's process gets: the init args, the state_dict of each
seed, the inputs of each case, the timing pool's inputs, the fingerprint positions and `public.json`
(case list, output sizes for poisoning). `private/` holds what the grader compares against (eager fp32
and fp64 truth outputs and buffers, sampled outputs of the pool, `meta.json`: signatures, state_dict
shapes, the reference's ops and dtypes, which inputs it mutates, eager/compile timings -- and
torch.compile(mode="max-autotune")'s when the job asks for them --, FLOPs, bytes, ceilings); the parent
loads it and deletes it before the candidate starts.

Cases: seeds 0..N-1 x distributions ("file", "signed"), then seed 0 / "file" at an extra batch size
(auto: b // 2 + 1 for a file batch b >= 4, else b + 3) unless the model itself fails at that size.
"""

from __future__ import annotations

import copy
import inspect

import torch

from fuseforge.check import gpu
from fuseforge.check.guards import OpRecorder
from fuseforge.check.timing import Timer, stats, synchronize
from fuseforge.evaluate import harness
from fuseforge.evaluate.harness import ReferenceFailed

POOL_SEED_OFFSET = 2_000_003
FINGERPRINT_SIZE = 4096
MAX_AUTOTUNE_OFF = "off (no --max-autotune)"


def auto_extra_batch(batch: int) -> int:
    return batch // 2 + 1 if batch >= 4 else batch + 3


def signature(fn) -> dict:
    """Positional parameters after self: names, and how many are required."""
    try:
        params = list(inspect.signature(fn).parameters.values())[1:]
    except (TypeError, ValueError):
        return {"names": None, "required": None, "variadic": True}
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return {"names": [p.name for p in positional],
            "required": sum(p.default is p.empty for p in positional),
            "variadic": any(p.kind == p.VAR_POSITIONAL for p in params)}


def _nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


def _cpu(tensors: list) -> list:
    return [t.detach().cpu() if isinstance(t, torch.Tensor) else t for t in tensors]


def _cases(progs, job: dict) -> list[tuple[int, str, int | None]]:
    cases = [(s, d, None) for s in range(job["seeds"]) for d in harness.DISTRIBUTIONS]
    extra = job.get("extra_batch")
    if extra is None:
        first = next((x for x in harness.draw_inputs(progs, 0) if isinstance(x, torch.Tensor) and x.dim()), None)
        extra = auto_extra_batch(first.shape[0]) if first is not None else 0
    return cases + ([(0, "file", extra)] if extra else [])


def _run_case(progs, dev, seed, dist, batch, states: dict, record_ops: bool):
    torch.manual_seed(seed)
    ref = harness.guard(ReferenceFailed, "Model(*get_init_inputs())", lambda: progs.model_cls(*progs.init_args))
    states.setdefault(seed, {k: v.clone() for k, v in ref.state_dict().items()})
    inputs = harness.draw_inputs(progs, seed, dist, batch)
    truth_model = copy.deepcopy(ref).to(dev).double()
    eager_model = ref.to(dev)
    recorder = OpRecorder()
    with torch.no_grad():
        truth, _ = harness.forward(truth_model, harness.to_device(inputs, dev, torch.float64), dev,
                                   "Model (float64)", ReferenceFailed)
        eager_inputs = harness.to_device(inputs, dev)
        if record_ops:
            with recorder:
                eager, is_tuple = harness.forward(eager_model, eager_inputs, dev, "Model", ReferenceFailed)
        else:
            eager, is_tuple = harness.forward(eager_model, eager_inputs, dev, "Model", ReferenceFailed)
    mutated = [i for i, (a, b) in enumerate(zip(inputs, eager_inputs))
               if isinstance(a, torch.Tensor) and not torch.equal(a, b.cpu())]
    params = {n for n, _ in eager_model.named_parameters()}
    buffers = {n: [eager_model.state_dict()[n].detach().cpu(), t.detach().cpu()]
               for n, t in truth_model.state_dict().items() if n not in params}
    outputs = {"eager": _cpu(eager), "truth": _cpu(truth), "is_tuple": is_tuple, "buffers": buffers}
    meta = {"seed": seed, "distribution": dist, "batch": batch, "skipped": False, "reason": None,
            "input_shapes": [list(x.shape) if isinstance(x, torch.Tensor) else None for x in inputs],
            "output_bytes": [t.numel() * t.element_size() for t in eager], "mutated_inputs": mutated}
    return inputs, outputs, meta, recorder


def _pool(progs, job, dev, public, private) -> int:
    """Fresh input sets for the timed calls; the grader keeps sampled eager/truth values of their outputs."""
    set_bytes = max(1, _nbytes(harness.draw_inputs(progs, 0)))
    size = int(min(job["trials"], max(2, job["pool_budget_bytes"] // set_bytes)))
    torch.manual_seed(0)
    model = progs.model_cls(*progs.init_args)
    truth_model, eager_model = copy.deepcopy(model).to(dev).double(), model.to(dev)
    gen = torch.Generator().manual_seed(job["secret"])
    positions = None
    for k in range(size):
        inputs = harness.draw_inputs(progs, POOL_SEED_OFFSET + k)
        torch.save(inputs, public / f"pool_{k}.pt")
        with torch.no_grad():
            truth, _ = harness.forward(truth_model, harness.to_device(inputs, dev, torch.float64), dev,
                                       "Model (float64)", ReferenceFailed)
            eager, _ = harness.forward(eager_model, harness.to_device(inputs, dev), dev, "Model", ReferenceFailed)
        if positions is None:
            positions = [torch.randperm(t.numel(), generator=gen)[:FINGERPRINT_SIZE] for t in eager]
            torch.save(positions, public / "positions.pt")
        private[f"pool_{k}"] = {"eager": [e.reshape(-1)[p.to(dev)].cpu() for e, p in zip(eager, positions)],
                                "truth": [t.reshape(-1)[p.to(dev)].cpu() for t, p in zip(truth, positions)]}
    return size


def _time_variant(model, pool: list, timer: Timer, job: dict, dev) -> dict:
    def call(k):
        args = harness.to_device(pool[k % len(pool)], dev)
        return timer.call(lambda: model(*args))
    with torch.no_grad():
        for w in range(max(1, job["warmup"])):
            call(w)
        synchronize(dev)
        samples = [call(t) for t in range(job["trials"])]
    return stats([s.ms for s in samples]) | {"status": "ok", "reason": None}


def _timings(progs, job, dev, public, pool_size) -> dict:
    pool = [torch.load(public / f"pool_{k}.pt", weights_only=True) for k in range(pool_size)]
    timer = Timer.create(dev)
    torch.manual_seed(0)
    model = progs.model_cls(*progs.init_args).to(dev)
    result = {"eager": _time_variant(model, pool, timer, job, dev), "timer": timer.name,
              "l2_flush_bytes": timer.flush_bytes, "pool_size": pool_size}
    result["compile"] = _compiled_variant(model, pool, timer, job, dev, job["compile"], "--no-compile")
    result["compile_max_autotune"] = _compiled_variant(model, pool, timer, job, dev, job.get("max_autotune", False),
                                                       MAX_AUTOTUNE_OFF, mode="max-autotune")
    return result


def _compiled_variant(model, pool, timer, job, dev, wanted: bool, off_reason: str, **options) -> dict:
    """torch.compile(its own deepcopy of model, **options), timed as eager is; skipped when not wanted or
    not on CUDA, {"status": "error", "reason"} when compiling or running it fails."""
    if not wanted or dev.type != "cuda":
        return {"status": "skipped", "reason": off_reason if not wanted else "not on cuda"}
    try:
        return _time_variant(torch.compile(copy.deepcopy(model), **options), pool, timer, job, dev)
    except Exception as exc:
        return {"status": "error", "reason": harness.one_line(exc)}


def run(job: dict, io, result: dict) -> None:
    dev = torch.device(job["device"])
    harness.check_device(dev)
    progs = harness.load_reference(job["model"])
    public, private_dir = io.dir / "public", io.dir / "private"
    public.mkdir(exist_ok=True)
    private_dir.mkdir(exist_ok=True)
    io.event("loaded")
    torch.save(list(progs.init_args), public / "init.pt")
    states, private, cases, recorder = {}, {}, [], None
    for i, (seed, dist, batch) in enumerate(_cases(progs, job)):
        try:
            inputs, outputs, meta, rec = _run_case(progs, dev, seed, dist, batch, states, record_ops=i == 0)
        except ReferenceFailed as exc:
            if batch is None:
                raise
            cases.append({"seed": seed, "distribution": dist, "batch": batch, "skipped": True,
                          "reason": f"Model itself fails at batch {batch}: {exc}"})
            continue
        recorder = recorder or rec
        torch.save(inputs, public / f"inputs_{i}.pt")
        private[f"case_{i}"] = outputs
        cases.append(meta)
        io.event("case", index=i)
    for seed, state in states.items():
        torch.save(state, public / f"state_{seed}.pt")
    pool_size = _pool(progs, job, dev, public, private)
    io.event("pool", size=pool_size)
    torch.manual_seed(0)
    model = progs.model_cls(*progs.init_args)
    first = harness.draw_inputs(progs, 0)
    meta = {"init_signature": signature(progs.model_cls.__init__), "forward_signature": signature(model.forward),
            "state_shapes": {k: list(v.shape) for k, v in model.state_dict().items()},
            "ops": recorder.classes(), "dtypes": sorted(recorder.dtypes), "cases": cases,
            "is_tuple": private["case_0"]["is_tuple"], "pool_size": pool_size,
            "min_bytes": _nbytes(first) + _nbytes(private["case_0"]["eager"]) + _nbytes(model.state_dict().values()),
            "timing": _timings(progs, job, dev, public, pool_size) if job["trials"] else None,
            "flops": None, "ceilings": None, "environment": harness.environment(dev)}
    if dev.type == "cuda":
        meta["flops"] = gpu.count_flops(model.to(dev), harness.to_device(first, dev))
        meta["ceilings"] = gpu.measure_ceilings(dev)
    torch.save(private, private_dir / "outputs.pt")
    io.write_json(private_dir / "meta.json", meta)
    io.write_json(public / "public.json", {"cases": cases, "pool_size": pool_size, "is_tuple": meta["is_tuple"],
                                           "init_signature": meta["init_signature"],
                                           "forward_signature": meta["forward_signature"]})
    result["ok"] = True
