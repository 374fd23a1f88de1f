"""The reference worker: runs only the model file, in a process that never sees the candidate.

It runs the plan (below) on one Model instance in fp32 ("eager") and a float64 copy ("truth") that
follow the same steps, and writes everything into `private/`, which the parent reads or opens (orchestrate.py)
and deletes before the candidate's process starts (so does it with the reference's job folder, which
holds the secret): `feed/NAME.pt`, the items the candidate's process is handed one at a time just before
it needs them (feed.py), each written as soon as it is drawn; `outputs/NAME.pt`, what the grader compares
against, one file per call, written as the call returns: whole, or at sampled positions beyond the check's
budget for them (stored_outputs.py); `meta.json`, the plan, the reference's ops and dtypes, timings, FLOPs,
ceilings, and on CUDA the profile of one call (its kernels and their streams, as the candidate's is profiled).

Secrets. Every input, every state_dict and every fingerprint position is drawn from job["secret"] (drawn
by the parent per reference run), so none can be derived from fuseforge's source and the model file:
inputs of item NAME are get_inputs() under a seed from the secret and NAME; the state_dicts are Model's
initialisation under a secret seed, with constant tensors (ones, zeros) scattered and the rest jittered,
running statistics included, so that they differ from the seeded initialisation a candidate builds.

The plan (public: names and shapes, no values), in the order the candidate's worker follows it:
- init: the instance as constructed under seed 0 (no state_dict loaded) called once;
- cases: each loads its state_dict, then one call: seeds 0..N-1 x distributions ("file", "signed");
  seed 0 at large (x 2^20), tiny (x 2^-20) and shifted (+16 RMS) magnitudes unless the model's own fp32
  math is not finite there; seed 0 at other batch sizes (b // 2 + 1 or --extra-batch, 2b, 1) unless the
  model fails at that size;
- redraws (after the magnitudes, before the batch sizes): a case of the file's or signed inputs or of a magnitude
  whose eager error is carried by few elements (numerics.CARRIERS_MIN, over its outputs and buffers) gets
  numerics.REDRAWS more cases of its kind (same seed, so the same state_dict; other inputs; role "redraw", "of" its
  index), within REDRAW_BUDGET_S of reference time and REDRAW_BUDGET_BYTES of inputs in all: the judge decides a
  few-carrier failure of that case by the majority of its draws (judge.py), also one where the candidate's error
  has the few carriers (an output computed from the few-carrier one); a case without redraws is decided by its draw;
- sequence: load, three calls, load another state_dict, two calls (outputs and buffers after each);
- a call whose outputs are kept at sampled positions (plan["sampled"]) is followed by its positions
  (sample_NAME), handed over after the candidate's call returned;
- timing: load, warm-up calls on case 0's inputs, then one call per pool item, every pool input a fresh
  draw (no content repeats, so memoising by content never pays); for each timed call, 16384 positions
  drawn from the secret (the whole output when small) and eager's and the truth's values there -- the
  grading process picks the 4096 it hands over per candidate, once the candidate is built (orchestrate.py)
  -- and the buffers after the last call.
"""

from __future__ import annotations

import copy
import hashlib
import inspect
import time

import torch

from fuseforge.check import gpu
from fuseforge.check.feed import to_bytes
from fuseforge.check.guards import OpRecorder
from fuseforge.check.stored_outputs import SAMPLE_PREFIX, OutputWriter, draw_positions, take
from fuseforge.check.timing import Timer, pinned_for_timing, stats, synchronize
from fuseforge.evaluate import harness
from fuseforge.evaluate.harness import MAGNITUDES, ReferenceFailed, batch_sizes
from fuseforge.evaluate.numerics import CARRIERS_MIN, REDRAW_BUDGET_S, REDRAWS, carriers
from fuseforge.evaluate.random_draws import FORWARD_SEED
from fuseforge.evaluate.scales import tracked_truth

FINGERPRINT_SIZE = 4096  # positions compared per output of a timed call ...
CANDIDATE_POSITIONS = 4 * FINGERPRINT_SIZE  # ... picked by the grading process among these, per candidate
WHOLE_OUTPUT = 16384  # outputs up to this many elements are compared whole on every timed call
MAX_AUTOTUNE_OFF = "off (no --max-autotune)"
SEQUENCE = (("state_seq_a", ("seq_0", "seq_1", "seq_2")), ("state_seq_b", ("seq_3", "seq_4")))
TIMING_STATE = "state_time"
REDRAW_BUDGET_BYTES = 2 * 2**30  # and the bytes of their inputs (each input set is a feed file on disk)


def secret_seed(secret: int, name: str) -> int:
    """A 40-bit seed for item `name`: unknowable without the secret."""
    return int.from_bytes(hashlib.blake2b(f"{secret}/{name}".encode(), digest_size=5).digest(), "little")


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
    """Copies on the CPU (a CPU tensor's .cpu() is the tensor itself, which later calls may change)."""
    return [t.detach().to("cpu", copy=True) if isinstance(t, torch.Tensor) else t for t in tensors]


def random_state(progs, secret: int, name: str) -> dict:
    """Model's initialisation under a secret seed; parameters and running statistics then moved away from
    any seeded initialisation: constant ones (ones, zeros) scattered, the others jittered."""
    torch.manual_seed(secret_seed(secret, name))
    model = harness.guard(ReferenceFailed, "Model(*get_init_inputs())", lambda: progs.model_cls(*progs.init_args))
    params = {n for n, _ in model.named_parameters()}
    gen = torch.Generator().manual_seed(secret_seed(secret, name + "/noise"))
    state = {}
    for key, t in model.state_dict().items():
        t = t.detach().clone()
        if t.is_floating_point() and t.numel() and (key in params or key.endswith(("running_mean", "running_var"))):
            noise = torch.randn(t.shape, generator=gen).to(t.dtype)
            first = t.reshape(-1)[0]
            if bool((t == first).all()):
                t = t * torch.exp(0.25 * noise) if first.item() != 0 else 0.1 * noise
            else:
                t = t + 0.05 * harness.rms(t) * noise
        elif key.endswith("num_batches_tracked") and not t.is_floating_point():
            t = torch.full_like(t, int(torch.randint(1, 100, (), generator=gen)))
        state[key] = t
    return state


def _storages(tensors) -> set[int]:
    return {t.untyped_storage().data_ptr() for t in tensors if isinstance(t, torch.Tensor)
            and t.untyped_storage().nbytes()}


class Program:
    """Model in fp32 (eager) and a float64 copy (truth), built under seed 0, following the plan's steps."""

    def __init__(self, progs, dev: torch.device):
        torch.manual_seed(0)
        base = harness.guard(ReferenceFailed, "Model(*get_init_inputs())", lambda: progs.model_cls(*progs.init_args))
        self.truth = harness.as_float64(copy.deepcopy(base).to(dev))
        self.eager = base.to(dev)
        self.dev = dev
        self.params = {n for n, _ in self.eager.named_parameters()}
        self.mutable: set[str] | None = None  # state entries compared by value after every call

    def load(self, state: dict) -> None:
        self.eager.load_state_dict(state, strict=True)
        self.truth.load_state_dict(state, strict=True)

    def call(self, inputs: list, recorder: OpRecorder | None = None) -> dict:
        before = {k: v.detach().clone() for k, v in self.eager.state_dict().items()}
        with torch.no_grad():
            # random ops: the truth, eager and every candidate call start from one generator state, and the
            # truth draws what float32 draws (fuseforge/evaluate/random_draws.py)
            # one copy to the device; the float64 inputs and the copy the mutation check compares with are made
            # there (the same values, without two more transfers of every input per call)
            eager_inputs = harness.to_device(inputs, self.dev)
            pristine = harness.to_device(eager_inputs, self.dev)
            truth, scales, buffer_scales = tracked_truth(self.truth, eager_inputs, self.dev)
            torch.manual_seed(FORWARD_SEED)
            if recorder is not None:
                with recorder:
                    eager, is_tuple = harness.forward(self.eager, eager_inputs, self.dev, "Model", ReferenceFailed)
            else:
                eager, is_tuple = harness.forward(self.eager, eager_inputs, self.dev, "Model", ReferenceFailed)
        state = self.eager.state_dict()
        changed = [k for k, v in state.items() if not _same(v, before[k])]
        mutated = [i for i, (a, b) in enumerate(zip(pristine, eager_inputs))
                   if isinstance(a, torch.Tensor) and not torch.equal(a, b)]
        inputs_at, state_at = _storages(eager_inputs), _storages(state.values())
        aliases = ["input" if o.untyped_storage().data_ptr() in inputs_at else
                   "state" if o.untyped_storage().data_ptr() in state_at else None for o in eager]
        return {"eager": eager, "truth": truth, "is_tuple": is_tuple, "changed": changed, "mutated": mutated,
                "aliases": aliases, "scales": scales, "buffer_scales": buffer_scales}

    def values(self, names) -> dict:
        """Eager's and the truth's values of state entries, on the CPU."""
        eager, truth = self.eager.state_dict(), self.truth.state_dict()
        return {n: [eager[n].detach().to("cpu", copy=True), truth[n].detach().to("cpu", copy=True)] for n in names}

    def note_changes(self, changed: list[str]) -> None:
        buffers = {k for k in self.eager.state_dict() if k not in self.params}
        self.mutable = (self.mutable or buffers) | set(changed)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point():
        return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())
    return torch.equal(a, b)


class Reference:
    def __init__(self, progs, job: dict, dev: torch.device, io_dir):
        self.progs, self.job, self.dev = progs, job, dev
        self.secret = int(job["secret"])
        self.folder = io_dir / "private"
        self.feed: dict[str, object] = {}  # the items read again here: states, case 0's inputs, the pool
        self.order: list[str] = []
        self.outputs = OutputWriter(self.folder / "outputs", int(job["whole_budget_bytes"]),
                                    torch.Generator().manual_seed(secret_seed(self.secret, "samples")))
        self.case0: dict | None = None  # case 0's output facts (tuple-ness, bytes)
        self.recorder: OpRecorder | None = None
        self.few_carriers: dict[int, tuple] = {}  # case index -> (its call's seconds, its inputs' bytes), where
        #                                           eager's error has few carriers

    def give(self, name: str, obj) -> None:
        """An item of the feed, in the plan's order, written now (an input set is not held in memory after)."""
        (self.folder / "feed" / f"{name}.pt").write_bytes(to_bytes(obj))
        if not name.startswith(("inputs_", "seq_")) or name == "inputs_0":
            self.feed[name] = obj
        self.order.append(name)

    def keep(self, name: str, entry: dict) -> None:
        """A call's outputs to compare against; its positions to the feed when they are kept sampled."""
        positions = self.outputs.put(name, entry)
        if positions is not None:
            self.give(SAMPLE_PREFIX + name, positions)

    def draw(self, name: str, dist: str = "file", batch: int | None = None) -> list:
        """The inputs of item `name`, on the CPU (what the feed hands over): drawn and scaled on the check's device
        (harness.draw_inputs: the GPU's generator, where the file's get_inputs runs there), then copied over; on
        an H100 machine the CPU took 1.0-2.3 s to draw one 268 MB input set."""
        return _cpu(harness.draw_inputs(self.progs, secret_seed(self.secret, name), dist, batch, self.dev))

    def state(self, name: str) -> dict:
        if name not in self.feed:
            self.give(name, random_state(self.progs, self.secret, name))
        return self.feed[name]

    def step(self, program: Program, inputs: list, record_ops: bool = False) -> tuple[dict, dict]:
        """One call: (what the grader compares, on the device, public facts of the call)."""
        recorder = OpRecorder() if record_ops else None
        result = program.call(inputs, recorder)
        if recorder is not None:
            self.recorder = recorder
        program.note_changes(result["changed"])
        names = sorted(program.mutable)
        outputs = {"eager": result["eager"], "truth": result["truth"], "is_tuple": result["is_tuple"],
                   "buffers": program.values(names), "changed": result["changed"], "scales": result["scales"],
                   "buffer_scales": {n: result["buffer_scales"].get(n) for n in names}}
        facts = {"output_bytes": [t.numel() * t.element_size() for t in result["eager"]],
                 "mutated_inputs": result["mutated"], "output_aliases": result["aliases"],
                 "input_shapes": [list(x.shape) if isinstance(x, torch.Tensor) else None for x in inputs]}
        return outputs, facts

    # ---- the plan
    def run(self, io) -> dict:
        progs, job = self.progs, self.job
        io.event("cases")
        program = Program(progs, self.dev)
        self.give("init", list(progs.init_args))
        init_inputs = self.draw("inputs_init")
        batched = next((x for x in init_inputs if isinstance(x, torch.Tensor) and x.dim()), None)
        outputs, facts = self.step(program, init_inputs)
        self.give("inputs_init", init_inputs)
        self.keep("init", outputs)
        del outputs
        plan = {"init": facts, "cases": [], "sequence": [], "timing": None}
        cases = [(s, d, None, "main") for s in range(job["seeds"]) for d in harness.DISTRIBUTIONS]
        cases += [(0, d, None, "magnitude") for d in MAGNITUDES]
        for seed, dist, batch, role in cases:
            self._case(program, len(plan["cases"]), seed, dist, batch, role, plan)
        self._redraws(program, plan)  # before the batch cases: the calls right before the probes stay those
        if batched is not None:
            for b in batch_sizes(batched.shape[0], job.get("extra_batch")):
                self._case(program, len(plan["cases"]), 0, "file", b, "batch", plan)
        io.event("sequence")
        plan["sequence"] = self._sequence(program)
        io.event("timed calls")
        plan["timing"] = self._timed(program, plan)
        plan["mutable"] = sorted(program.mutable or ())
        plan["sampled"] = list(self.outputs.sampled)
        plan["order"] = list(self.order)
        return plan

    def _redraws(self, program: Program, plan: dict) -> None:
        """REDRAWS more cases of each few-carrier case that `redrawn` picks."""
        for i in redrawn(self.few_carriers):
            case = plan["cases"][i]
            for _ in range(REDRAWS):
                self._case(program, len(plan["cases"]), case["seed"], case["distribution"], case["batch"], "redraw",
                           plan, of=i)

    def _case(self, program: Program, i: int, seed: int, dist: str, batch: int | None, role: str, plan,
              of: int | None = None) -> None:
        meta = {"index": i, "seed": seed, "distribution": dist, "batch": batch, "role": role, "skipped": False,
                "reason": None, "state": f"state_{seed}"} | ({"of": of} if of is not None else {})
        name = f"inputs_{i}"
        try:
            inputs = self.draw(name, dist, batch)
            state = self.state(meta["state"])
            program.load(state)
            start = time.perf_counter()
            outputs, facts = self.step(program, inputs, record_ops=i == 0)
            seconds = time.perf_counter() - start
        except ReferenceFailed as exc:
            if role == "main":
                raise
            where = f"at batch {batch}" if batch else f"at {dist} magnitudes"
            plan["cases"].append(meta | {"skipped": True, "reason": f"Model itself fails {where}: {exc}"})
            return
        if role == "magnitude" and not harness.finite(outputs["eager"] + outputs["truth"]):
            plan["cases"].append(meta | {"skipped": True, "reason": f"the model's fp32 math is not finite at "
                                                                    f"{dist} magnitudes ({MAGNITUDES[dist]})"})
            return
        self.give(name, inputs)
        if i == 0:
            self.case0 = {"is_tuple": outputs["is_tuple"], "bytes": _nbytes(outputs["eager"])}
        if role in ("main", "magnitude"):
            pairs = list(zip(outputs["eager"], outputs["truth"])) + list(outputs["buffers"].values())
            counts = [c for c in (carriers(e, t) for e, t in pairs) if c is not None]
            if counts and min(counts) < CARRIERS_MIN:
                self.few_carriers[i] = (seconds, _nbytes(inputs))
        self.keep(f"case_{i}", outputs)
        plan["cases"].append(meta | facts)

    def _sequence(self, program: Program) -> list[dict]:
        steps = []
        for state_name, calls in SEQUENCE:
            program.load(self.state(state_name))
            for k, name in enumerate(calls):
                inputs = self.draw(name)
                outputs, facts = self.step(program, inputs)
                self.give(name, inputs)
                self.keep(name, outputs)
                del outputs
                steps.append({"name": name, "state": state_name, "after_load": k == 0} | facts)
        return steps

    def _timed(self, program: Program, plan: dict) -> dict | None:
        job = self.job
        if not job["trials"]:
            return None
        set_bytes = max(1, _nbytes(self.feed["inputs_0"]))
        size = int(min(job["trials"], max(2, job["pool_budget_bytes"] // set_bytes)))
        warmup = max(1, job["warmup"])
        program.load(self.state(TIMING_STATE))
        inputs0 = self.feed["inputs_0"]
        for _ in range(warmup):
            self.step(program, inputs0)
        gen = torch.Generator().manual_seed(secret_seed(self.secret, "positions"))
        buffer_scales = {}  # the buffers' after the last timed call
        for t in range(size):
            name = f"pool_{t}"
            inputs = self.draw(name)
            result = program.call(inputs)
            positions = [None if e.numel() <= WHOLE_OUTPUT else draw_positions(e.numel(), CANDIDATE_POSITIONS, gen)
                         for e in result["eager"]]
            self.outputs.write(name, {"eager": [take(e, p) for e, p in zip(result["eager"], positions)],
                                      "truth": [take(x, p) for x, p in zip(result["truth"], positions)],
                                      "scales": result["scales"]})
            buffer_scales = result["buffer_scales"]
            del result
            self.give(name, inputs)
            self.give(f"positions_{t}", positions)
        names = sorted(program.mutable or ())
        self.outputs.write("timed_state", {"buffers": program.values(names),
                                           "buffer_scales": {n: buffer_scales.get(n) for n in names}})
        return {"state": TIMING_STATE, "warmup": warmup, "pool_size": size}


def redrawn(few: dict[int, tuple], seconds: float = REDRAW_BUDGET_S, nbytes: int = REDRAW_BUDGET_BYTES) -> list[int]:
    """The few-carrier cases (index -> (seconds of its call, bytes of its inputs)) that get their REDRAWS, the
    quickest first, while both budgets last."""
    chosen = []
    for i, (took, size) in sorted(few.items(), key=lambda item: item[1]):
        if took * REDRAWS <= seconds and size * REDRAWS <= nbytes:
            chosen.append(i)
            seconds, nbytes = seconds - took * REDRAWS, nbytes - size * REDRAWS
    return sorted(chosen)


def _time_variant(model, feed: dict, job: dict, timer: Timer, dev) -> dict:
    """Time `model` as the candidate is timed: warm-up calls on case 0's inputs, then one call per pool item, on
    the CPUs kept for timed calls (job["timing_cpus"]: its suite's, where it runs in one)."""
    with torch.no_grad():
        for _ in range(job["warmup"]):
            args = harness.to_device(feed["inputs_0"], dev)
            timer.call(lambda args=args: model(*args))
        synchronize(dev)
        samples = []
        with pinned_for_timing(job):
            for t in range(job["pool_size"]):
                args = harness.to_device(feed[f"pool_{t}"], dev)
                samples.append(timer.call(lambda args=args: model(*args)))
    return stats([s.ms for s in samples]) | {"status": "ok", "reason": None}


def _timings(progs, job, dev, feed: dict, timing: dict) -> dict:
    timer = Timer.create(dev)
    torch.manual_seed(0)
    model = progs.model_cls(*progs.init_args).to(dev)
    model.load_state_dict(feed[timing["state"]])
    job = job | {"pool_size": timing["pool_size"], "warmup": timing["warmup"]}
    result = {"eager": _time_variant(model, feed, job, timer, dev), "timer": timer.name,
              "l2_flush_bytes": timer.flush_bytes, "pool_size": job["pool_size"]}
    result["compile"] = _compiled_variant(model, feed, timer, job, dev, job["compile"], "--no-compile")
    result["compile_max_autotune"] = _compiled_variant(model, feed, timer, job, dev, job.get("max_autotune", False),
                                                       MAX_AUTOTUNE_OFF, mode="max-autotune")
    return result


def _compiled_variant(model, feed: dict, timer, job, dev, wanted: bool, off_reason: str, **options) -> dict:
    """torch.compile(its own deepcopy of model, **options), timed as eager is; skipped when not wanted or
    not on CUDA, {"status": "error", "reason"} when compiling or running it fails."""
    if not wanted or dev.type != "cuda":
        return {"status": "skipped", "reason": off_reason if not wanted else "not on cuda"}
    try:
        compiled = torch.compile(copy.deepcopy(model), **options)
        return _time_variant(compiled, feed, job, timer, dev)
    except Exception as exc:
        return {"status": "error", "reason": harness.one_line(exc)}


def _profile(model, inputs: list, dev) -> dict:
    """One call of the model (after a warm-up call) profiled as the candidate's call is (candidate_role.py,
    gpu.profile_call): which kernels torch and its vendor libraries run on side streams of their own for this
    model, which the grader then excuses in a candidate (evidence.side_stream_split). {"available": False,
    "reason"} where the profiler fails: nothing is excused then."""
    def call():
        torch.manual_seed(FORWARD_SEED)
        with torch.no_grad():
            return model(*harness.to_device(inputs, dev))

    try:
        call()
        synchronize(dev)
        return gpu.profile_call(call, dev, [])
    except Exception as exc:
        return {"available": False, "reason": harness.one_line(exc)}


def run(job: dict, io, result: dict) -> None:
    dev = torch.device(job["device"])
    harness.check_device(dev)
    progs = harness.load_reference(job["model"])
    private_dir = io.dir / "private"
    (private_dir / "feed").mkdir(parents=True, exist_ok=True)
    if dev.type == "cuda":
        torch.zeros(1, device=dev)  # the context, before the run phase (which a gate may hold back)
    io.event("loaded")
    io.event("built")  # imports done: what follows runs, and times, on the device ...
    io.wait_go()  # ... once the parent holds the GPU's gate
    ref = Reference(progs, job, dev, io.dir)
    plan = ref.run(io)
    torch.manual_seed(0)
    model = progs.model_cls(*progs.init_args)
    first = ref.feed["inputs_0"]
    case0 = ref.case0
    meta = {"init_signature": signature(progs.model_cls.__init__), "forward_signature": signature(model.forward),
            "state_shapes": {k: list(v.shape) for k, v in model.state_dict().items()},
            "ops": ref.recorder.classes(), "dtypes": sorted(ref.recorder.dtypes), "plan": plan,
            "cases": plan["cases"], "is_tuple": case0["is_tuple"],
            "pool_size": (plan["timing"] or {}).get("pool_size", 0),
            "min_bytes": _nbytes(first) + case0["bytes"] + _nbytes(model.state_dict().values()),
            "io_bytes": _nbytes(first) + case0["bytes"],
            "timing": None, "flops": None, "ceilings": None, "profile": None,
            "environment": harness.environment(dev)}
    if plan["timing"]:
        io.event("baselines")
        meta["timing"] = _timings(progs, job, dev, ref.feed, plan["timing"])
    if dev.type == "cuda":
        io.event("flops and ceilings")
        model.load_state_dict(ref.feed["state_0"])
        meta["flops"] = gpu.count_flops(model.to(dev), harness.to_device(first, dev))
        meta["ceilings"] = job.get("ceilings") or gpu.measure_ceilings(dev)
        meta["profile"] = _profile(model, first, dev)
    io.event("untimed")  # writing the results is not timed (a grading waiting for the GPU may start)
    io.write_json(private_dir / "meta.json", meta)
    result["ok"] = True
