"""Just-in-time hand-over of the grader's data to the candidate's process.

Nothing the candidate's process could read ahead decides its verdict: the reference's results never
leave the grading process, and what the candidate is handed (init args, state_dicts, the inputs of each
call, the fingerprint positions of a timed call) is written into JOBDIR/feed/ only when the worker asks
for it, one item at a time, right before it is needed (a timed call's positions right after it returned),
and deleted by the worker as soon as it is loaded.

The worker asks by appending {"event": "need", "names": [...]} to its events file; the parent (FeedServer,
in the grading process) answers each name by writing JOBDIR/feed/NAME.pt. Items are served at most once
each and in the order of the plan (`order`): a name asked for twice, out of order or not in the plan is
refused (None is written) and recorded as an anomaly. The worker's own requests follow the plan, so an
anomaly means that something else in its process (the candidate) forged a request.
"""

from __future__ import annotations

import io
import os
import time
from pathlib import Path

import torch

FEED = "feed"
WAIT_S = 3600.0
_exists = os.path.exists
_sleep = time.sleep
_monotonic = time.monotonic
_unlink = os.unlink
_getppid = os.getppid
_load = torch.load


def to_bytes(obj) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


class FeedServer:
    """The parent's side: `items` maps a name to its serialised bytes (or to a function making them when the
    item is handed over, or to an object whose `write_to(path)` writes them), `order` is the plan's order. With
    `release`, an item is removed from `items` once handed over (it is never served again)."""

    def __init__(self, jobdir: Path, items: dict[str, bytes], order: list[str], release: bool = False):
        self.dir = jobdir / FEED
        self.dir.mkdir(exist_ok=True)
        self.release = release
        self.items, self.index = items, {name: i for i, name in enumerate(order)}
        self.served: list[str] = []
        self.last = -1
        self.anomalies: list[str] = []

    def on_need(self, names: list) -> None:
        for name in names:
            self._serve(str(name))

    def _serve(self, name: str) -> None:
        index = self.index.get(name)
        if name in self.served:
            why = "asked for a second time"
        elif index is None or name not in self.items:
            why = "not an item of the plan"
        elif index <= self.last:
            why = f"asked for after {self.served[-1]!r} (out of the plan's order)"
        else:
            why = None
        if why is not None:
            self.anomalies.append(f"{name!r}: {why}")
            data = to_bytes(None)
        else:
            self.served.append(name)
            self.last = index
            data = self.items.pop(name) if self.release else self.items[name]
        tmp = self.dir / f".{name}.tmp"
        if hasattr(data, "write_to"):  # an item in a file (orchestrate.LazyItem): copied file to file
            data.write_to(tmp)
        else:
            tmp.write_bytes(data() if callable(data) else data)
        if self.release and hasattr(data, "close"):  # its file: closed now, not when collected
            data.close()
        os.replace(tmp, self.dir / f"{name}.pt")


class FeedRefused(RuntimeError):
    pass


class FeedClient:
    """The worker's side: `get(*names)` asks for the items and waits for them (then deletes the files)."""

    def __init__(self, jobdir: Path, io_):
        self.dir, self.io = Path(jobdir) / FEED, io_

    def get(self, *names: str) -> list:
        self.io.event("need", names=list(names))
        out = []
        parent = _getppid()
        for name in names:
            path = str(self.dir / f"{name}.pt")
            deadline = _monotonic() + WAIT_S
            while not _exists(path):
                if _monotonic() > deadline or _getppid() != parent:  # the grader is gone
                    raise FeedRefused(f"the grader did not hand over {name!r}")
                _sleep(0.0005)
            data = _load(path, weights_only=True)
            _unlink(path)
            if data is None:
                raise FeedRefused(f"the grader refused {name!r} (asked for twice or out of order)")
            out.append(data)
        return out

    def one(self, name: str):
        return self.get(name)[0]
