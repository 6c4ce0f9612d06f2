"""Worker processes (grade --workers, serve --workers) end when the process that started them dies, even by
SIGKILL, which runs none of its cleanup: an orphaned grading worker would wait on its task queue forever, and an
orphaned server worker would keep serving on its port.

Two guards, both ending the worker with SIGTERM (a grading worker dies of it; a server worker drains what it
took, as on any SIGTERM): on Linux the kernel's parent-death signal (prctl PR_SET_PDEATHSIG), which needs no
running Python; everywhere, a thread that waits on multiprocessing's pipe from the parent, which closes when the
parent dies (Linux's signal alone would fire early if the parent thread that started the worker ended first).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import multiprocessing
import os
import signal
import sys
import threading

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def exit_with_parent() -> None:
    """In a process started by multiprocessing: SIGTERM this process when its parent dies. Elsewhere a no-op."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return
    if sys.platform.startswith("linux"):
        _parent_death_signal(signal.SIGTERM)
    threading.Thread(target=_end_after, args=(parent,), name="headcut-parent-watch", daemon=True).start()


def _parent_death_signal(signum: int) -> None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0)
    except (OSError, AttributeError):  # no usable libc: the watching thread still guards
        pass


def _end_after(parent) -> None:
    parent.join()  # returns when the parent's end of the pipe closes: the parent is gone (or died before we looked)
    os.kill(os.getpid(), signal.SIGTERM)
