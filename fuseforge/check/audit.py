"""An audit hook (PEP 578) in the candidate's process, installed before the candidate is imported: it
cannot be removed, and it sees what the candidate's code does while it runs, however the names were
spelled.

While candidate code runs (`with audit.candidate():` around its import, construction and calls):
- files: any open, listing, rename, removal or link of a path inside the grader's folders (the job
  folder and the folder above it, whatever symlink leads there), /proc/PARENT_PID/ (the grading process)
  or /proc/self/mem -> `files` (check grader_files);
- memory: a frame reached from the candidate's own code (sys._getframe, sys._current_frames, a
  traceback's or generator's frame), gc.get_objects/get_referrers/get_referents, raw memory reads
  (ctypes.string_at, from_address), code compiled under a library's file name -> `memory` (check
  grader_memory);
- hooks: sys.setprofile, sys.settrace, sys.addaudithook, sys.monitoring from the candidate's code, even if
  removed again -> `hooks` (check interpreter_hooks);
- processes: a process started from the candidate's code once it is built -> `processes` (new_processes).

"From the candidate's code": the nearest frame that is not a helper the candidate could call on its behalf
(inspect, traceback's walk functions, subprocess/os/pty/multiprocessing for processes, code without a
file) belongs to the candidate's file, a file next to it, or a file written since the worker started. Torch, the standard library acting for itself
(logging, warnings) and the grader are never blamed.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import threading
import time
from contextlib import contextmanager
from pathlib import Path

_FILE_EVENTS = {"open": 1, "os.listdir": 1, "os.scandir": 1, "glob.glob": 1, "os.chdir": 1, "os.rename": 2,
                "os.remove": 1, "os.rmdir": 1, "os.link": 2, "os.symlink": 2, "shutil.copyfile": 2,
                "shutil.copytree": 2, "shutil.move": 2, "shutil.rmtree": 1, "os.truncate": 1, "os.utime": 1,
                "os.chmod": 1, "os.mkdir": 1}
_MEMORY_EVENTS = {"gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._getframe", "sys._current_frames",
                  "ctypes.string_at", "ctypes.wstring_at", "ctypes.cdata", "sys._current_exceptions"}
_HOOK_EVENTS = {"sys.setprofile", "sys.settrace", "sys.addaudithook", "sys.monitoring.register_callback",
                "sys.monitoring.use_tool_id", "threading.setprofile", "threading.settrace"}
_FRAME_ATTRIBUTES = {"tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back"}
_PROCESS_EVENTS = {"subprocess.Popen", "os.system", "os.fork", "os.forkpty", "os.posix_spawn", "os.exec",
                   "os.spawn", "pty.spawn", "os.startfile"}
_TRANSPARENT_FOR_PROCESSES = ("subprocess", "os", "pty", "multiprocessing", "concurrent", "asyncio", "popen_")
_WALK_FUNCTIONS = {"walk_stack", "walk_tb", "extract_stack", "format_stack", "print_stack", "stack", "trace",
                   "currentframe", "getouterframes", "getinnerframes", "_getframe"}
_STDLIB = str(Path(sysconfig.get_paths()["stdlib"]).resolve())
_FUSEFORGE = str(Path(__file__).resolve().parents[1])
_LIMIT = 20


class Audit:
    def __init__(self, jobdir: Path, candidate: Path, parent_pid: int | None = None):
        jobdir = Path(jobdir).resolve()
        here = Path(candidate).resolve().parent
        # the job folder and the grading's work folder above it -- unless the candidate's own folder is there
        # (a --workdir next to the candidate's sources): then the job folder only
        self.roots = [str(jobdir)] + ([] if here == jobdir.parent or jobdir.parent in here.parents
                                      else [str(jobdir.parent)])
        parent = os.getppid() if parent_pid is None else parent_pid
        self.proc = [f"/proc/{parent}/", "/proc/self/mem", f"/proc/{os.getpid()}/mem", "/proc/thread-self/mem"]
        self.candidate_path = str(Path(candidate).resolve())
        self.candidate_dir = str(Path(candidate).resolve().parent) + os.sep
        self.files: list[str] = []
        self.memory: list[str] = []
        self.hooks: list[str] = []
        self.processes: list[str] = []
        self.phase = "build"
        self.active = 0
        self._local = threading.local()
        self._realpath = os.path.realpath
        self._getframe = sys._getframe
        self._fresh: dict[str, bool] = {}
        self.started = time.time() - 1.0

    # ---- switching on and off
    def install(self) -> None:
        sys.addaudithook(self._hook)

    @contextmanager
    def candidate(self):
        self.active += 1
        try:
            yield
        finally:
            self.active -= 1

    def findings(self) -> dict:
        return {"files": self.files, "memory": self.memory, "hooks": self.hooks, "processes": self.processes}

    # ---- classification
    def forbidden(self, path) -> bool:
        if isinstance(path, int) or path is None:
            return False
        try:
            text = os.fsdecode(os.fspath(path))
        except TypeError:
            return False
        real = self._realpath(text)
        if any(real == root or real.startswith(root + os.sep) for root in self.roots):
            return True
        return any((p + "/").startswith(q) or p == q.rstrip("/") for p in (text, real) for q in self.proc)

    def is_candidate_file(self, filename: str) -> bool:
        """The candidate's file, a file next to it, or any file written since this process started (code
        the candidate wrote somewhere else, a library's folder included, to run it from there)."""
        if filename == self.candidate_path:
            return True
        if filename.startswith(self.candidate_dir) and not filename.startswith(_FUSEFORGE) and \
                "site-packages" not in filename and not filename.startswith(_STDLIB):
            return True
        if filename not in self._fresh:
            try:
                self._fresh[filename] = os.stat(filename).st_mtime >= self.started
            except (OSError, ValueError):
                self._fresh[filename] = False
        return self._fresh[filename]

    def from_candidate(self, depth: int, processes: bool = False) -> bool:
        """Whether the code that raised the event (`depth` frames above this function) is the candidate's."""
        frame = self._getframe(depth)
        while frame is not None:
            name = frame.f_code.co_filename
            if self.is_candidate_file(name):
                return True
            base = os.path.basename(name)
            transparent = name.startswith("<") or base == "inspect.py" or \
                (base == "traceback.py" and frame.f_code.co_name in _WALK_FUNCTIONS) or \
                (processes and name.startswith(_STDLIB) and base.startswith(_TRANSPARENT_FOR_PROCESSES)) or \
                (processes and os.sep + "multiprocessing" + os.sep in name)
            if not transparent:
                return False
            frame = frame.f_back
        return False

    def _note(self, where: list, text: str) -> None:
        if len(where) < _LIMIT and text not in where:
            where.append(text)

    # ---- the hook
    def _hook(self, event: str, args: tuple) -> None:
        if not self.active or getattr(self._local, "busy", False):
            return
        self._local.busy = True
        try:
            self._event(event, args)
        except Exception:
            pass
        finally:
            self._local.busy = False

    def _event(self, event: str, args: tuple) -> None:
        if event in _FILE_EVENTS:
            for path in args[:_FILE_EVENTS[event]]:
                if self.forbidden(path):
                    self._note(self.files, f"{event}({os.fsdecode(os.fspath(path))!r})")
            return
        if event in _MEMORY_EVENTS and self.from_candidate(3):
            self._note(self.memory, event)
        elif event == "object.__getattr__" and len(args) > 1 and args[1] in _FRAME_ATTRIBUTES and \
                self.from_candidate(3):
            self._note(self.memory, f"reads .{args[1]}")
        elif event in _HOOK_EVENTS and self.from_candidate(3):
            self._note(self.hooks, event)
        elif event in _PROCESS_EVENTS and self.phase == "run" and self.from_candidate(3, processes=True):
            self._note(self.processes, f"{event}{_short(args)}")
        elif event in ("compile", "exec") and self.is_candidate_file(self._getframe(2).f_code.co_filename):
            # called directly from the candidate's code (torch.compile runs library code through exec: not this)
            code = args[0] if event == "exec" and args else None
            name = code.co_filename if hasattr(code, "co_filename") else \
                os.fsdecode(args[1]) if event == "compile" and len(args) > 1 and isinstance(args[1], (str, bytes)) \
                else "<string>"
            if not (name.startswith("<") or self.is_candidate_file(name)):
                self._note(self.memory, f"{'compiles' if event == 'compile' else 'runs'} code under the file name "
                                        f"{name!r}")


def _short(args: tuple) -> str:
    text = repr(args[:2])
    return text if len(text) <= 160 else text[:157] + "..."
