"""Atomic outputs: a folder appears whole or not at all, and a non-empty one is never overwritten by accident."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

from headcut.errors import UserError


def check_out_dir(out: str | Path, *, overwrite: bool, flag: str = "--out") -> Path:
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UserError(f"{flag} {out} is a file; name a folder.")
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise UserError(f"{flag} {out} is not empty; choose a new folder or pass --overwrite.")
    return out


@contextmanager
def atomic_dir(out: str | Path, *, overwrite: bool = False, flag: str = "--out"):
    """Yield a temporary sibling folder; on success it replaces `out` in one rename, on error it vanishes."""
    out = check_out_dir(out, overwrite=overwrite, flag=flag)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = None
    if out.exists():
        old = out.parent / f".{out.name}.old-{os.getpid()}"
        out.rename(old)
    tmp.rename(out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def write_json(path: str | Path, data) -> None:
    """Write JSON atomically (temp file + rename)."""
    write_text(path, json.dumps(data, indent=2, sort_keys=False, default=_jsonable) + "\n")


def write_text(path: str | Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def _jsonable(obj):
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def file_hash(path: str | Path, *, length: int = 16) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:length]
