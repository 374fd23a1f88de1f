"""`python -m fuseforge.check.worker ROLE JOBDIR`: one worker process of `fuseforge check`.

ROLE is "reference" (reference_role.py: only the model file) or "candidate" (candidate_role.py: only the
candidate). JOBDIR/job.json holds the settings. The worker appends progress events to JOBDIR/ROLE.events
(one JSON object a line: {"event", "t", ...}; the parent switches from the build to the run time limit at
"built", writes JOBDIR/ROLE.go once the worker may run on the GPU, and answers "plant_ready") and always
ends by writing JOBDIR/ROLE.json (the facts; "fatal" if the role raised), unless it is killed or crashes (the
parent then reads the exit status instead).
The process ends with os._exit, so that threads a candidate left running cannot keep it alive, and (on Linux)
is killed when the grading process dies: it runs in its own session, which a suite stopping the check does
not reach, and would go on using the GPU and the job's folder.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path

from fuseforge.records import json_safe


def die_with_parent() -> None:
    """SIGKILL to this process when its parent dies (Linux's PR_SET_PDEATHSIG; nothing elsewhere), and exit now
    if it already has (adopted by init)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:
        os._exit(1)


def write_json(path: Path, data: dict) -> None:
    """Write atomically (a reader never sees half a file)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(json_safe(data), indent=1, default=str))
    os.replace(tmp, path)


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())


class WorkerIO:
    def __init__(self, jobdir: Path, role: str):
        self.dir, self.role = jobdir, role
        self._events = open(jobdir / f"{role}.events", "a", buffering=1)

    def event(self, event: str, /, **data) -> None:
        self._events.write(json.dumps({"event": event, "t": time.time(), **json_safe(data)}) + "\n")
        self._events.flush()

    def wait_go(self, poll_s: float = 0.002) -> None:
        """Wait until the parent holds the GPU's gate for this worker (it writes ROLE.go once it does; at once
        without a gate), or is gone."""
        parent = os.getppid()
        while not (self.dir / f"{self.role}.go").exists() and os.getppid() == parent:
            time.sleep(poll_s)

    def write_json(self, path: Path, data: dict) -> None:
        write_json(path, data)


def main(argv: list[str]) -> int:
    die_with_parent()
    role, jobdir = argv[1], Path(argv[2])
    if role not in ("reference", "candidate"):
        print(f"unknown role {role!r}", file=sys.stderr)
        return 2
    io = WorkerIO(jobdir, role)
    job = json.loads((jobdir / "job.json").read_text())
    if job.get("device") == "cpu":
        import torch  # one thread: two workers share a small CPU without OpenMP spinning (tiny ops take ms)

        torch.set_num_threads(1)
    # Import the role first: the candidate role takes its references to the guarded functions here.
    if role == "reference":
        from fuseforge.check import reference_role as module
    else:
        from fuseforge.check import candidate_role as module
    result: dict = {"fatal": None}
    try:
        module.run(job, io, result)
    except BaseException as exc:  # SystemExit from candidate code included
        traceback.print_exception(exc)
        from fuseforge.evaluate.harness import EvalError, one_line
        result["fatal"] = str(exc) if isinstance(exc, EvalError) else one_line(exc)
    io.write_json(jobdir / f"{role}.json", result)
    io.event("done")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
