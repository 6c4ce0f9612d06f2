"""Teacher logits computed once, stored on disk, reused by every epoch, resumed run and tuning trial.

Caching turns each training step's teacher forward pass into an array lookup, which is what keeps
distillation as fast as plain fine-tuning of the student. Hidden-state and attention targets are too
large to cache, so recipes using those losses run the teacher online.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Callable

import numpy as np

from headcut.batching import Encoded
from headcut_grader.data import Pairs
from headcut_grader.files import atomic_file, clean_stale_folder
from headcut_grader.ranges import check_callbacks
from headcut.evaluate.predict import predict_logits
from headcut.models import LoadedModel
from headcut.model_arguments import check_loaded


def cache_key(teacher: LoadedModel, pairs: Pairs, max_length: int) -> str:
    """Same teacher weights + same pairs + same truncation = same logits."""
    text = f"{teacher.weights_hash}|{pairs.fingerprint}|{len(pairs)}|{max_length}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def teacher_logits(teacher: LoadedModel, pairs: Pairs, *, encoded: Encoded, max_length: int,
                   cache_dir: str | Path | None, batch_size: int = 64, progress=None,
                   before_write: Callable[[], None] | None = None) -> tuple[np.ndarray, bool]:
    """Logits (len(pairs), num_labels) of `teacher` on `pairs`, read from `cache_dir` when present there.

    Returns (logits, hit). `cache_dir=None` computes without storing. An entry that does not read as those logits
    (damaged on disk, cut short, copied in from elsewhere) is a miss, and is replaced whole. `before_write` runs on a
    miss, before the teacher grades what will be written (the default cache's check that it is writable).
    """
    check_callbacks("teacher_logits", progress=progress)
    check_loaded(teacher, "teacher_logits teacher")
    path = None
    if cache_dir is not None:
        path = Path(cache_dir) / f"teacher-logits-{cache_key(teacher, pairs, max_length)}.npy"
        cached = _read_entry(path, (len(pairs), teacher.model.config.num_labels))
        if cached is not None:
            return cached, True
        if before_write:
            before_write()
    logits = predict_logits(teacher.model, teacher.tokenizer, pairs, encoded=encoded, batch_size=batch_size,
                            progress=progress)
    if path is not None:
        # a run killed mid-write leaves its temporary (as large as the logits), under a key it may never write again
        clean_stale_folder(path.parent)
        with atomic_file(path) as f:  # never a half-written entry: the old one or a whole new one
            np.save(f, logits)
    return logits, False


def _read_entry(path: Path, shape: tuple[int, int]) -> np.ndarray | None:
    """The cached logits at `path` where they read whole as `shape` finite numbers, else None. Was: a damaged entry
    was a traceback (EOFError, ValueError), one of another shape an IndexError mid-epoch, and NaNs 'training
    diverged'. Mapped first, so a header that claims a huge array costs nothing before its shape is refused."""
    try:
        mapped = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, EOFError):  # absent, unreadable, not an .npy, cut short, pickled objects
        return None
    if mapped.shape != shape or not np.issubdtype(mapped.dtype, np.floating):
        return None
    logits = np.array(mapped)
    return logits if np.isfinite(logits).all() else None
