"""The candidate worker: imports and runs only the candidate, with the reference's inputs and weights.

It records facts; the grader (judge.py) turns them into findings. In order:

1. guards (function references, precision flags) exist from this module's import; threads watched;
2. build: import the candidate file (its load_inline compiles here), bind `ModelNew(*init)` and
   `forward(*inputs)` to their signatures, construct under seed 0 -> event "built";
3. cases: per case, ModelNew under the case's seed with Model's state_dict loaded (strict), memory
   poisoned with NaN, one forward on fresh copies of the inputs; outputs, buffers, output types and
   which inputs changed are saved;
4. probes on the case-0 instance: finite-sentinel poison and no poison (stale memory), the case-1
   inputs in new memory and in the case-0 buffers overwritten in place (fresh inputs), every output
   compared by address with all earlier ones (aliasing), and one call under an op recorder;
5. timing: warm-up, then per-call timing (timing.py) on fresh copies of the pool's inputs, each output
   fingerprinted at the reference's sample positions; on CUDA one profiled call (gpu.py);
6. the guards read again; threads and precision flags compared;
7. last, "plant": the parent hands over eager's case-0 outputs, they are copied into fresh memory and
   freed, and the candidate is called once more (does a wrong output become right on the leftovers?).
"""

from __future__ import annotations

import inspect
import json
import time
import traceback
from pathlib import Path

import torch
from torch import nn

from fuseforge.check import guards
from fuseforge.check.timing import Timer, synchronize
from fuseforge.evaluate import harness
from fuseforge.evaluate.harness import CandidateFailed

GUARD = guards.FunctionGuard()  # before any candidate code is imported
FLAGS = guards.PrecisionFlags()
SENTINEL = 1234.5
PLANT_WAIT_S = 60.0


class InterfaceError(Exception):
    pass


def _bind_error(fn, what: str, n_args: int) -> str | None:
    try:
        inspect.signature(fn).bind(None, *range(n_args))
    except TypeError as exc:
        return f"{what} cannot take the model's {n_args} argument(s): {exc}"
    except ValueError:
        return None
    return None


def _outputs(out) -> tuple[list, bool]:
    if isinstance(out, torch.Tensor):
        return [out], False
    if isinstance(out, (tuple, list)) and out and all(isinstance(o, torch.Tensor) for o in out):
        return list(out), True
    raise InterfaceError(f"ModelNew.forward returned {type(out).__name__}; expected a tensor or tuple of tensors")


def _plain_cpu(t: torch.Tensor) -> torch.Tensor:
    with torch._C.DisableTorchFunctionSubclass():
        return t.as_subclass(torch.Tensor).detach().to("cpu", copy=True)


def _same(a, b) -> bool:
    if not isinstance(a, torch.Tensor):
        return True
    return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all()) if a.is_floating_point() else torch.equal(a, b)


class CandidateRun:
    def __init__(self, job: dict, io, result: dict):
        self.job, self.io, self.result = job, io, result
        self.dev = torch.device(job["device"])
        self.public, self.out = io.dir / "public", io.dir / "cand"
        self.out.mkdir(exist_ok=True)
        self.pub = json.loads((self.public / "public.json").read_text())
        self.init = torch.load(self.public / "init.pt", weights_only=True)
        self.kept: list[tuple[str, list]] = []  # every output returned so far, kept alive (aliasing)
        result.update(phase="start", build={"ok": False, "error": None, "seconds": None}, interface=None,
                      patched={}, cases=[], probes={}, aliased=[], ops=None, timing=None, profile=None,
                      threads=[], flags_loosened={})

    def load(self, name: str):
        return torch.load(self.public / name, weights_only=True)

    def fresh(self, inputs: list) -> list:
        return harness.to_device(inputs, self.dev)

    def call(self, model, args, label: str) -> tuple[list, bool]:
        with torch.no_grad():
            out = model(*args)
            synchronize(self.dev)
        outs, is_tuple = _outputs(out)
        inputs = {a.untyped_storage().data_ptr() for a in args if isinstance(a, torch.Tensor)}
        for j, o in enumerate(outs):
            ptr = o.untyped_storage().data_ptr() if o.untyped_storage().nbytes() else None
            if ptr in inputs:
                continue  # a view of this call's own input (an identity-like model): not a replay
            for prev_label, prev in self.kept:
                if ptr is not None and any(ptr == p.untyped_storage().data_ptr() for p in prev):
                    self.result["aliased"].append(f"{label} output {j} shares memory with {prev_label}'s output")
        self.kept.append((label, outs))
        return outs, is_tuple

    def save(self, name: str, outs: list, is_tuple: bool, model=None) -> None:
        data = {"outputs": [_plain_cpu(o) for o in outs], "is_tuple": is_tuple, "buffers": {}}
        if model is not None:
            params = {n for n, _ in model.named_parameters()}
            data["buffers"] = {n: _plain_cpu(t) for n, t in model.state_dict().items() if n not in params}
        torch.save(data, self.out / f"{name}.pt")

    # ---- 2. build
    def build(self):
        start = time.perf_counter()
        try:
            module = harness._import(Path(self.job["candidate"]), "candidate", CandidateFailed)
        except CandidateFailed as exc:
            traceback.print_exception(exc, limit=-3)
            self.result["build"].update(error=str(exc), seconds=round(time.perf_counter() - start, 3))
            return None
        self.result["patched"]["import"] = GUARD.changed()
        cls = getattr(module, "ModelNew", None)
        if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
            self.result["build"].update(ok=True, seconds=round(time.perf_counter() - start, 3))
            raise InterfaceError("the candidate file defines no class ModelNew(nn.Module)")
        n_inputs = len(self.pub["cases"][0]["input_shapes"])
        error = _bind_error(cls.__init__, "ModelNew.__init__", len(self.init)) or \
            _bind_error(cls.forward, "ModelNew.forward", n_inputs)
        if error:
            self.result["build"].update(ok=True, seconds=round(time.perf_counter() - start, 3))
            raise InterfaceError(error)
        torch.manual_seed(0)
        try:
            model = cls(*self.init)
        except Exception as exc:
            traceback.print_exception(exc)
            self.result["build"].update(error=f"ModelNew(*get_init_inputs()) raised {harness.one_line(exc)}",
                                        seconds=round(time.perf_counter() - start, 3))
            return None
        self.result["build"].update(ok=True, seconds=round(time.perf_counter() - start, 3))
        return cls, model

    # ---- 3. cases
    def prepare(self, cls, model, seed: int):
        if model is None:
            torch.manual_seed(seed)
            model = harness.guard(CandidateFailed, "ModelNew(*get_init_inputs())", lambda: cls(*self.init))
        try:
            model.load_state_dict(self.load(f"state_{seed}.pt"), strict=True)
        except Exception as exc:
            raise InterfaceError(f"ModelNew.load_state_dict(Model's) raised {harness.one_line(exc)}") from exc
        return harness.guard(CandidateFailed, "ModelNew.to(device)", lambda: model.to(self.dev))

    def run_case(self, i: int, meta: dict, cls, model) -> tuple:
        record = {"index": i, "ok": False, "skipped": meta["skipped"], "error": None}
        self.result["cases"].append(record)
        if meta["skipped"]:
            return None
        self.io.event("case", index=i)
        model = self.prepare(cls, model, meta["seed"])
        inputs = self.load(f"inputs_{i}.pt")
        args = self.fresh(inputs)
        before = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        guards.poison(self.dev, float("nan"), meta["output_bytes"])
        outs, is_tuple = self.call(model, args, f"case {i}")
        record["output_types"] = [f"{type(o).__module__}.{type(o).__qualname__}" for o in outs]
        record["mutated_inputs"] = [j for j, (a, b) in enumerate(zip(args, before)) if not _same(a, b)]
        self.save(f"case_{i}", outs, is_tuple, model)
        record["ok"] = True
        return model, inputs, outs

    # ---- 4. probes
    def probe(self, name: str, model, args, poison_value) -> None:
        self.io.event("probe", name=name)
        try:
            if poison_value is not None:
                guards.poison(self.dev, poison_value, self.pub["cases"][0]["output_bytes"])
            outs, is_tuple = self.call(model, args, f"probe {name}")
            self.save(f"probe_{name}", outs, is_tuple)
            self.result["probes"][name] = {"ok": True, "error": None}
        except Exception as exc:
            traceback.print_exception(exc)
            self.result["probes"][name] = {"ok": False, "error": harness.one_line(exc)}

    def probes(self, model, inputs0, inputs1) -> None:
        self.probe("stale_sentinel", model, self.fresh(inputs0), SENTINEL)
        self.probe("stale_repeat", model, self.fresh(inputs0), None)
        if inputs1 is not None:
            self.probe("fresh_new_buffer", model, self.fresh(inputs1), float("nan"))
            buffers = self.fresh(inputs0)
            self.probe("same_buffer_before", model, buffers, float("nan"))
            for b, x in zip(buffers, inputs1):
                if isinstance(b, torch.Tensor):
                    b.copy_(x)
            self.probe("fresh_same_buffer", model, buffers, float("nan"))
        recorder = guards.OpRecorder()
        try:
            with recorder:
                self.call(model, self.fresh(inputs0), "op recording")
            self.result["ops"] = {"classes": recorder.classes(), "dtypes": sorted(recorder.dtypes)}
        except Exception as exc:
            self.result["ops"] = {"error": harness.one_line(exc)}

    # ---- 5. timing
    def timing(self, model) -> None:
        self.io.event("timing")
        size, trials = self.pub["pool_size"], self.job["trials"]
        pool = [self.load(f"pool_{k}.pt") for k in range(size)]
        positions = self.load("positions.pt")
        timer = Timer.create(self.dev)
        for w in range(max(1, self.job["warmup"])):
            self.call(model, self.fresh(pool[w % size]), "warm-up")
            self.kept.clear()
        ms, wall, prints = [], [], []
        for t in range(trials):
            args = self.fresh(pool[t % size])
            with torch.no_grad():
                timed = timer.call(lambda args=args: model(*args))
            outs, _ = _outputs(timed.out)
            ms.append(timed.ms)
            wall.append(timed.wall_ms)
            prints.append([_plain_cpu(o.reshape(-1)[p.to(o.device)]) for o, p in zip(outs, positions)])
            del timed, outs, args
        torch.save({"fingerprints": prints, "pool_index": [t % size for t in range(trials)]},
                   self.out / "timed.pt")
        self.result["timing"] = {"ms": ms, "wall_ms": wall, "l2_left": timer.l2_left, "timer": timer.name,
                                 "l2_control": timer.l2 is not None}

    # ---- 7. plant
    def plant(self, model, inputs0) -> None:
        self.io.event("plant_ready")
        path, deadline = self.io.dir / "plant.pt", time.monotonic() + PLANT_WAIT_S
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        if not path.exists():
            return
        planted = torch.load(path, weights_only=True)  # the parent renames a complete file into place
        self.kept.clear()
        args = self.fresh(inputs0)
        guards.poison(self.dev, planted, [t.numel() * t.element_size() for t in planted], copies=16)
        del planted
        self.probe("plant", model, args, None)


def _recorded(result: dict, key: str, fn) -> None:
    """Run a stage; an exception is recorded as result[key] = {"error": ...}, not raised."""
    try:
        fn()
    except InterfaceError:
        raise
    except Exception as exc:
        traceback.print_exception(exc)
        result[key] = {"error": harness.one_line(exc), "cuda_error": "CUDA" in str(exc)}


def run(job: dict, io, result: dict) -> None:
    run = CandidateRun(job, io, result)
    dev = run.dev
    harness.check_device(dev)
    if dev.type == "cuda":
        torch.zeros(1, device=dev)  # the context exists before the candidate is imported
    threads = guards.ThreadWatch()
    threads.start()
    io.event("building")
    try:
        built = run.build()
    except InterfaceError as exc:
        result["interface"] = str(exc)
        return
    if built is None:
        return
    io.event("built")
    result["phase"] = "cases"
    cls, model0 = built
    first = None
    try:
        for i, meta in enumerate(run.pub["cases"]):
            try:
                done = run.run_case(i, meta, cls, model0 if i == 0 else None)
            except InterfaceError:
                raise
            except Exception as exc:
                traceback.print_exception(exc)
                result["cases"][-1].update(error=harness.one_line(exc), cuda_error="CUDA" in str(exc))
                if "CUDA" in str(exc) or i == 0:
                    break
                continue
            first = first or done
        result["patched"]["cases"] = GUARD.changed()
        ok = [c["ok"] for c in result["cases"] if not c["skipped"]]
        if first is not None and all(ok[:2]):
            result["phase"] = "probes"
            model, inputs0, _ = first
            run.probes(model, inputs0, run.load("inputs_1.pt") if len(ok) > 1 else None)
            if job["trials"]:
                result["phase"] = "timing"
                _recorded(result, "timing", lambda: run.timing(model))
            if dev.type == "cuda":
                from fuseforge.check import gpu
                def profiled():
                    with torch.no_grad():
                        return model(*run.fresh(inputs0))
                _recorded(result, "profile", lambda: result.__setitem__(
                    "profile", gpu.profile_call(profiled, dev, job["kernel_names"])))
            result["patched"]["timing"] = GUARD.changed()
    except InterfaceError as exc:
        result["interface"] = str(exc)
    finally:
        result["patched"]["end"] = GUARD.changed()
        result["threads"] = threads.new_threads()
        result["flags_loosened"] = FLAGS.loosened()
    if first is not None and result["phase"] in ("probes", "timing"):
        result["phase"] = "plant"
        run.plant(first[0], first[1])
    result["phase"] = "done"
