"""The process group of `accelerate launch` (gloo on CPU), closed before the interpreter exits.

A process that leaves with its group still open may abort at exit: gloo's threads are torn down by the C++
runtime ("terminate called without an active exception", SIGABRT), so a run that refused a diverged loss with one
sentence and exit 2 could end in a core-dump exit on one process instead.
"""
from __future__ import annotations

import atexit


def close_at_exit() -> None:
    """Close the default process group, if one is open, when the interpreter exits (registered once)."""
    if not getattr(close_at_exit, "registered", False):
        atexit.register(_close)
        close_at_exit.registered = True


def _close() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
