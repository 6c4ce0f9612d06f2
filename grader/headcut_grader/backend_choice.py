"""`--backend auto`: the backend that grades fastest on this CPU, by measurement, never by a rule of thumb.

The export times every graph it writes in turns and records the ranking with the CPU it ran on. On the same
CPU model and matmul flags that ranking is used as is; on another CPU the graphs are timed once more here and
the answer is cached (per grader and CPU), so a fleet of servers pays for the measurement once per machine kind.
"""
from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from headcut_grader.backends import INSTALL, graphs, open_backend
from headcut_grader.errors import UserError
from headcut_grader.files import cache_home, write_text
from headcut_grader.machine import cpu_key
from headcut_grader.optional import NOT_INSTALLED, broken_said, reinstall, why_unusable
from headcut_grader.timing import round_robin
from headcut_grader.validation import read_small_text

TIMING_SHAPE = (32, 64)  # batch x sequence every speed choice is made at, here and in the export
ENV_CACHE = "HEADCUT_GRADER_CACHE"


@dataclass(frozen=True)
class Choice:
    backend: str
    reason: str  # one line: why this backend
    broken: dict = field(default_factory=dict)  # runtime -> why_unusable, of graphs skipped as their runtime fails here


def cache_file() -> Path:
    return cache_home(ENV_CACHE, "headcut-grader") / "backend-choice.json"


def _grader_key(record: dict) -> str:
    files = [spec.get("sha256", "") for g in graphs(record).values() for spec in g.get("files", {}).values()
             if isinstance(spec, dict)]
    return "-".join(files) + ":" + cpu_key()


def choose_backend(folder: Path, record: dict, *, threads: int, vocab_size: int) -> Choice:
    """Which of the folder's graphs to grade with on this CPU (see the module docstring)."""
    unusable = {name: why for name in graphs(record) if (why := why_unusable(name))}
    usable = [name for name in graphs(record) if name not in unusable]
    if not usable:  # was: min() of nothing, a ValueError traceback
        raise UserError(_no_runtime(folder, unusable))
    if len(usable) == 1:
        broken = {n: why for n, why in unusable.items() if why != NOT_INSTALLED}
        return Choice(usable[0], _only_graph(unusable, broken), broken)
    preferred = record.get("backend")
    if preferred in usable and preferred != "auto":
        return Choice(preferred, f"exported with --backend {preferred}")
    speed = record.get("speed") if isinstance(record.get("speed"), dict) else {}
    seconds = {k: v for k, v in (speed.get("seconds") or {}).items() if k in usable and isinstance(v, (int, float))}
    if (speed.get("cpu") or {}).get("key") == cpu_key() and len(seconds) == len(usable):
        best = min(seconds, key=seconds.get)
        return Choice(best, "fastest when exported, on this CPU model")
    key = _grader_key(record)
    cached = _read_cache().get(key)
    if cached in usable:
        return Choice(cached, "fastest when timed before on this CPU model (cached)")
    measured = time_backends(folder, record, usable, threads=threads, vocab_size=vocab_size)
    best = min(measured, key=measured.get)
    _write_cache(key, best)
    return Choice(best, "fastest when timed now on this CPU model: " +
                  ", ".join(f"{n} {1000 * s:.0f} ms" for n, s in measured.items()))


def _no_runtime(folder: Path, unusable: dict[str, str]) -> str:
    """The sentence for a folder none of whose graphs' runtimes imports here (`unusable`: runtime -> why_unusable)."""
    names = list(unusable)
    if all(why == NOT_INSTALLED for why in unusable.values()):
        return (f"{folder} holds only {' and '.join(names)} graphs, and "
                f"{'neither runtime is' if len(names) > 1 else 'its runtime is not'} installed here; run: "
                f"{' or '.join(INSTALL[n] for n in names)}.")
    fixes = [INSTALL[n] if why == NOT_INSTALLED else reinstall(n) for n, why in unusable.items()]
    return (f"{folder} holds only {' and '.join(names)} graphs, and "
            f"{' and '.join(f'{n} {why}' for n, why in unusable.items())}; run: {' or '.join(fixes)}.")


def _only_graph(unusable: dict[str, str], broken: dict[str, str]) -> str:
    """Choice.reason for the one graph whose runtime imports here: the others' runtimes, and why not (`broken`: those
    installed that fail to import)."""
    if not unusable:
        return "the only graph"
    if not broken:
        return "the only graph whose runtime is installed"
    return ("the only graph whose runtime imports here: " +
            "; ".join(broken_said(n, why) for n, why in broken.items()))


def timing_batch(vocab_size: int) -> dict:
    """The random TIMING_SHAPE batch every backend and precision choice is timed on (export and here)."""
    rng = np.random.default_rng(0)
    return {"input_ids": rng.integers(1, max(2, vocab_size), TIMING_SHAPE, dtype=np.int64),
            "attention_mask": np.ones(TIMING_SHAPE, dtype=np.int64),
            "token_type_ids": np.zeros(TIMING_SHAPE, dtype=np.int64)}


def time_backends(folder: Path, record: dict, names: list[str], *, threads: int, vocab_size: int) -> dict[str, float]:
    """Median seconds per batch of TIMING_SHAPE for each backend, measured in turns."""
    runs = [open_backend(n, folder, record, threads=threads).run for n in names]
    times = round_robin(runs, timing_batch(vocab_size), warmup=1, repeats=5)
    return {n: statistics.median(t) for n, t in zip(names, times)}


def _read_cache() -> dict:
    try:
        found = json.loads(read_small_text(cache_file(), what="cache file"))
    except (OSError, ValueError, UserError):  # a damaged cache is measured again
        return {}
    return found if isinstance(found, dict) else {}


def _write_cache(key: str, backend: str) -> None:
    """Best effort: a read-only home only means measuring again next time."""
    try:
        write_text(cache_file(), json.dumps({**_read_cache(), key: backend}, indent=1))
    except UserError:  # write_text's sentence for a folder it cannot write in
        pass
