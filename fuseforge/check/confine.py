"""What the candidate's process gives up before the candidate is imported (Linux; best effort elsewhere).

The grading process holds the reference's data in its memory and marks itself non-dumpable
(orchestrate.make_non_dumpable); that stops another process of the same user from reading it through
/proc/PID/mem, process_vm_readv or ptrace -- unless that process has CAP_SYS_PTRACE, which a root user in a
container often has. `drop_ptrace()` removes CAP_SYS_PTRACE from this process's effective, permitted,
inheritable and bounding sets and sets no_new_privs, so that neither the candidate's code (C++ included,
which no audit hook sees) nor anything it starts can get it back.
"""

from __future__ import annotations

import ctypes

CAP_SYS_PTRACE = 19
_PR_CAPBSET_DROP, _PR_SET_NO_NEW_PRIVS = 24, 38
_CAP_VERSION_3 = 0x20080522


class _Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _Data(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_ptrace() -> bool:
    """True when CAP_SYS_PTRACE is gone for good from this process (or it never had it)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        header, data = _Header(_CAP_VERSION_3, 0), (_Data * 2)()
        if libc.capget(ctypes.byref(header), data) != 0:
            return False
        bit = 1 << CAP_SYS_PTRACE
        data[0].effective &= ~bit
        data[0].permitted &= ~bit
        data[0].inheritable &= ~bit
        if libc.capset(ctypes.byref(header), data) != 0:
            return False
        libc.prctl(_PR_CAPBSET_DROP, CAP_SYS_PTRACE, 0, 0, 0)  # fails without CAP_SETPCAP: then it was not held
        libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        libc.capget(ctypes.byref(header), data)
        return not data[0].effective & bit
    except (OSError, AttributeError):
        return False
