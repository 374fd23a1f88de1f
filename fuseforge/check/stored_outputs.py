"""The reference's outputs, one file per call: whole while they fit a budget, beyond it at sampled positions.

A call's outputs (eager's fp32 and the fp64 truth) are written as soon as the call returns, and the grader
reads one call's at a time when it compares, so neither process holds more than a call's outputs in memory
(a model with 2 GB outputs has 6 GB of them per call, and a check makes about 17 such calls).

Which calls are whole: case 0 always (the probes compare the candidate's outputs against it element by
element); every other call while the bytes kept whole so far, with case 0's reserved, fit the budget. The
outputs of a call beyond the budget are kept at SAMPLED_POSITIONS positions per output, drawn from the grader's
secret; the candidate's worker is handed them only after its call returned and its outputs were copied (the
feed item `sample_NAME`), as for the timed calls. The error rule (RMS of the error vs RMS of eager's error) is
estimated on a million positions to well within its factor of two, and an output wrong on more than about one
element in 10^5 is found with probability 1 - e^-10.
"""

from __future__ import annotations

import io
import math
import os
import threading
from collections.abc import Mapping
from pathlib import Path

import torch

SAMPLED_POSITIONS = 1 << 20  # positions compared per output of a call beyond the budget (whole when smaller)
SAMPLE_PREFIX = "sample_"  # the feed item of call NAME's positions: sample_NAME
ALWAYS_WHOLE = "case_0"  # the call kept whole whatever the budget, which the probes compare with element by element


def entry_bytes(eager: list) -> int:
    """What a call's outputs take when kept whole: eager's values and the float64 truth's."""
    return sum(t.numel() * (t.element_size() + 8) for t in eager if isinstance(t, torch.Tensor))


def draw_positions(numel: int, count: int, gen: torch.Generator) -> torch.Tensor | None:
    """`count` distinct positions of a flat output of `numel` elements, in random order, or None where the output
    is that small (compared whole). Drawn with replacement and deduplicated where the output is large: a
    permutation of a billion positions would take seconds and gigabytes."""
    if numel <= count:
        return None
    if numel <= 4 * count:
        return torch.randperm(numel, generator=gen)[:count]
    drawn = torch.randint(numel, (count + count // 2,), generator=gen).unique()
    while drawn.numel() < count:  # about 1.2 count distinct ones are expected: rare
        drawn = torch.cat([drawn, torch.randint(numel, (count,), generator=gen)]).unique()
    return drawn[torch.randperm(drawn.numel(), generator=gen)[:count]]


def take(t: torch.Tensor, positions: torch.Tensor | None) -> torch.Tensor:
    flat = t.reshape(-1)
    return flat if positions is None else flat[positions.to(flat.device)]


class OutputWriter:
    """The reference's side: `put(name, entry)` writes the call's entry ({"eager", "truth", ...} with tensors
    anywhere) to FOLDER/NAME.pt, whole or sampled, and returns the positions when sampled (else None)."""

    def __init__(self, folder: Path, budget: int, gen: torch.Generator, always_whole: str = ALWAYS_WHOLE,
                 count: int = SAMPLED_POSITIONS):
        self.folder, self.budget, self.gen, self.always_whole, self.count = folder, budget, gen, always_whole, count
        self.folder.mkdir(parents=True, exist_ok=True)
        self.spent = 0
        self.always_whole_kept = False
        self.reserved: int | None = None  # the first call's size, held for `always_whole` until it is kept
        self.sampled: list[str] = []

    def put(self, name: str, entry: dict) -> list | None:
        size = entry_bytes(entry["eager"])
        if self.reserved is None:
            self.reserved = size
        held = 0 if name == self.always_whole or self.always_whole_kept else self.reserved
        if name == self.always_whole or self.spent + size + held <= self.budget:
            self.spent += size
            if name == self.always_whole:
                self.always_whole_kept = True
            self.write(name, entry)
            return None
        positions = [draw_positions(t.numel(), self.count, self.gen) for t in entry["eager"]]
        if all(p is None for p in positions):  # outputs no larger than a sample: whole
            self.write(name, entry)
            return None
        self.write(name, dict(entry, eager=[take(t, p) for t, p in zip(entry["eager"], positions)],
                              truth=[take(t, p) for t, p in zip(entry["truth"], positions)],
                              shapes=[list(t.shape) for t in entry["eager"]], positions=positions))
        self.sampled.append(name)
        return positions

    def write(self, name: str, entry: dict) -> None:
        """An entry as it is (the timed calls' values at their own positions, the buffers after them)."""
        torch.save(_on_cpu(entry), self.folder / f"{name}.pt")


def _on_cpu(obj):
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: _on_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_on_cpu(v) for v in obj)
    return obj


def read_all(handle, size: int) -> bytes:
    """The first `size` bytes of an open file, by pread (no shared file offset: threads may read one file at once;
    one read returns at most about 2 GB)."""
    chunks, at, fd = [], 0, handle.fileno()
    while at < size:
        chunk = os.pread(fd, min(size - at, 1 << 30), at)
        if not chunk:
            break
        chunks.append(chunk)
        at += len(chunk)
    return b"".join(chunks)


def load_open(handle) -> dict:
    """torch.load of an open file, mapped rather than read where the OS names open files (/proc/self/fd): the
    tensors page in from the file as they are used, without two copies of gigabytes in this process first."""
    path = Path(f"/proc/self/fd/{handle.fileno()}")
    if path.exists():
        return torch.load(path, mmap=True, weights_only=True)
    return torch.load(io.BytesIO(read_all(handle, os.fstat(handle.fileno()).st_size)), weights_only=True)


class StoredOutputs(Mapping):
    """The grader's side: the entries of FOLDER, each read when it is looked up (the last one read kept, and those
    named in `held` kept once read: case 0's whole outputs are looked up by several checks in turn). The files are
    opened here, so the folder can be deleted: the entries stay readable until this is dropped."""

    def __init__(self, folder: Path, held: tuple[str, ...] = (ALWAYS_WHOLE,)):
        self.files = {p.stem: open(p, "rb") for p in sorted(Path(folder).glob("*.pt"))}
        self.last: tuple[str, dict] | None = None
        self.held_names, self.held = set(held), {}
        self.lock = threading.Lock()  # gradings of several candidates may share one reference (its cache)

    def __getitem__(self, name: str) -> dict:
        with self.lock:
            if name in self.held:
                return self.held[name]
            if self.last is not None and self.last[0] == name:
                return self.last[1]
            entry = load_open(self.files[name])
            if name in self.held_names:
                self.held[name] = entry
            self.last = (name, entry)
            return entry

    def __contains__(self, name) -> bool:
        return name in self.files

    def __iter__(self):
        return iter(self.files)

    def __len__(self) -> int:
        return len(self.files)


def on_positions(outs: list, ref: dict) -> list:
    """The candidate's whole outputs at the positions of a sampled reference entry (unchanged where the entry is
    whole, or an output's size is not the model's: the structure check reports that)."""
    positions, shapes = ref.get("positions"), ref.get("shapes")
    if positions is None:
        return outs
    return [take(o, p) if j < len(positions) and o.numel() == math.prod(shapes[j]) else o
            for j, (o, p) in enumerate(zip(outs, positions + [None] * len(outs)))]
