"""What a finished stage made: the size and sha256 of every file in its folder, recorded in its stage.json,
so a rerun skips the stage only while its folder still holds exactly those files.

Cost: every file's size is compared (a stat); files up to HASHED_ALWAYS are hashed again on every check
(configs, tokenizers, records: small, and the ones a hand edit of the same size would touch); larger ones
(weights, graphs) only when their size or mtime changed, as git and make decide what to read again.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from headcut_grader.files import file_hash

HASHED_ALWAYS = 16 << 20  # bytes


def files_of(folder: Path, *, record_file: str) -> dict[str, dict]:
    """{path relative to `folder`: {"bytes", "mtime_ns", "sha256"}} of every file in it but `record_file`."""
    out = {}
    for path in _files(folder, record_file):
        stat = path.stat()
        out[path.relative_to(folder).as_posix()] = {"bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns,
                                                    "sha256": file_hash(path, length=64)}
    return out


def outputs_problem(folder: Path, record: dict, *, record_file: str) -> str | None:
    """Why `folder` no longer holds what its stage recorded ('prune/model/config.json changed since it was
    written'), or None when it does. `record` is the stage's parsed record file, sealed by `seal`."""
    name = folder.name
    if "outputs" not in record:
        return f"{name}/{record_file} lists no checksums of its files (an older headcut wrote it)"
    if record.get("seal") != seal(record):
        return f"{name}/{record_file} changed since it was written"
    for relative, entry in sorted(record["outputs"].items()):
        path = folder / relative
        if not path.is_file():
            return f"{name}/{relative} is missing"
        if _changed(path, entry):
            return f"{name}/{relative} changed since it was written"
    extra = sorted(p.relative_to(folder).as_posix() for p in _files(folder, record_file)
                   if p.relative_to(folder).as_posix() not in record["outputs"])
    return f"{name}/{extra[0]} appeared since it was written" if extra else None


def seal(record: dict) -> str:
    """A hash of what a later run trusts in a stage record: a hand-edited result (a model path pointing
    elsewhere) or file list no longer matches it."""
    trusted = {key: record.get(key) for key in ("fingerprint", "made", "result", "outputs")}
    return hashlib.sha256(json.dumps(trusted, sort_keys=True).encode()).hexdigest()


def _changed(path: Path, entry: dict) -> bool:
    stat = path.stat()
    if stat.st_size != entry.get("bytes"):
        return True
    if stat.st_size > HASHED_ALWAYS and stat.st_mtime_ns == entry.get("mtime_ns"):
        return False
    return file_hash(path, length=64) != entry.get("sha256")


def _files(folder: Path, record_file: str):
    return (p for p in sorted(folder.rglob("*")) if p.is_file() and p != folder / record_file)
