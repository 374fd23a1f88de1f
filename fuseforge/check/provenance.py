"""Where an output's values come from: the candidate's own kernels, or its torch ops alone.

A kernel's writes are invisible to torch's dispatcher; torch ops are not. `Provenance` is a dispatch mode
(it also records op classes and dtypes, as OpRecorder does) that tracks every storage an op touches:
- before the call, a checksum of every live tensor's storage (`snapshot`: inputs, parameters, caches);
- a storage whose bytes changed since torch last wrote it (or since the snapshot) was written by something
  torch did not see -- a kernel: its data is "kernel-made"; so is a storage torch never saw;
- an op's outputs are kernel-made when any of its tensor arguments is (data flows through), torch-made
  otherwise; fresh allocations (empty, empty_like ...) are filled with a sentinel byte pattern first, so
  that a kernel writing into them changes their bytes even where stale memory held the same values;
- torch-made tensors of an output's shape are kept (`torch_only`): if one of them is already right, the
  kernels only touched up what torch computed;
- with `flags` (guards.PrecisionFlags), the precision flags are read at every matrix product and
  convolution: a flag loosened only while the call runs shows here (`loose_flags`).

At the end (`finish`), an output is the kernels' when its storage is kernel-made. The grader calls a
candidate that defines kernels a torch fallback when no output is the kernels' or each output is matched by
a torch-made tensor that passes the correctness rule by itself (judge: check kernel_dataflow).
"""

from __future__ import annotations

import gc
import warnings

import torch

from fuseforge.check.guards import OpRecorder, op_class

ALLOCATIONS = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "empty_permuted"}
SENTINEL = 0xA5
MAX_KEPT_BYTES = 512 * 2**20


def _key(t: torch.Tensor):
    storage = t.untyped_storage()
    return (t.device.type, storage.data_ptr()) if storage.nbytes() else None


def _bytes_of(t: torch.Tensor) -> torch.Tensor:
    storage = t.untyped_storage()
    return torch.empty(0, dtype=torch.uint8, device=t.device).set_(storage, 0, (storage.nbytes(),), (1,))


def checksum(t: torch.Tensor) -> tuple:
    """A fingerprint of the bytes of `t`'s whole storage (exact integer sums, same on any device)."""
    raw = _bytes_of(t)
    n = raw.numel()
    words = raw[: n - n % 4].view(torch.int32)
    tail = raw[n - n % 4:].to(torch.int64)
    sums = [n, int(words.sum(dtype=torch.int64)) + int(tail.sum())]
    for step, offset in ((3, 1), (7, 2), (13, 5)):
        sums.append(int(words[offset::step].sum(dtype=torch.int64)))
    return tuple(sums)


def _tensors(obj) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for o in obj for t in _tensors(o)]
    if isinstance(obj, dict):
        return [t for o in obj.values() for t in _tensors(o)]
    return []


class Provenance(OpRecorder):
    def __init__(self, output_shapes: list, flags=None):
        super().__init__()
        self.flags = flags  # guards.PrecisionFlags: read at every matrix product and convolution
        self.loose_flags: list[str] = []
        self.known: dict = {}  # storage key -> [checksum, kernel_made]
        self.shapes = {tuple(s) for s in output_shapes}
        self.torch_only: dict[tuple, list[torch.Tensor]] = {}
        self.kept_bytes = 0
        self.kernel_writes = 0

    def snapshot(self) -> None:
        """Checksums of every live tensor's storage (call right before the call, outside the mode)."""
        objects = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for o in gc.get_objects():
                try:
                    if isinstance(o, torch.Tensor):
                        objects.append(o)
                except Exception:  # a dead weak proxy, a lazy module that fails on attribute access
                    continue
        for obj in objects:
            if True:
                try:
                    key = _key(obj)
                    if key is not None and key not in self.known:
                        self.known[key] = [checksum(obj), False]
                except Exception:
                    continue

    def _seen(self, t: torch.Tensor) -> bool:
        """Whether `t`'s data is kernel-made (a storage torch did not write last, or never saw; and, to stay on
        the honest side, any tensor whose storage cannot be read: sparse, nested, meta)."""
        try:
            key = _key(t)
            if key is None:
                return False
            now = checksum(t)
        except Exception:
            return True
        entry = self.known.get(key)
        if entry is None:
            self.known[key] = [now, True]
            return True
        if entry[0] != now:
            entry[0], entry[1] = now, True
            self.kernel_writes += 1
        return entry[1]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func._schema.name.split("::")[-1]
        made = any([self._seen(t) for t in _tensors(args) + _tensors(kwargs)])
        out = super().__torch_dispatch__(func, types, args, kwargs)
        if self.flags is not None and op_class(str(func._schema.name)) in ("gemm", "conv"):
            loose = self.flags.loosened()
            if loose and len(self.loose_flags) < 10:
                self.loose_flags.append(f"{name}: " + ", ".join(f"{k} {a} -> {b}" for k, (a, b) in loose.items()))
        fresh = name in ALLOCATIONS
        for t in _tensors(out):
            try:
                key = _key(t)
                if key is None:
                    continue
                if fresh:
                    _bytes_of(t).fill_(SENTINEL)
                self.known[key] = [checksum(t), made and not fresh]
            except Exception:
                continue
            if not made and not fresh and tuple(t.shape) in self.shapes and t.is_floating_point() and \
                    self.kept_bytes + t.numel() * t.element_size() <= MAX_KEPT_BYTES:
                self.torch_only.setdefault(tuple(t.shape), []).append(t.detach().clone())
                self.kept_bytes += t.numel() * t.element_size()
        return out

    def finish(self, outputs: list[torch.Tensor]) -> dict:
        """Per output: whether its data is the kernels', and the torch-made tensors of its shape."""
        made = [self._seen(o) for o in outputs]
        return {"kernel_made": made, "kernel_writes": self.kernel_writes,
                "torch_only": [[t.cpu() for t in self.torch_only.get(tuple(o.shape), [])] for o in outputs]}
