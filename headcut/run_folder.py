"""The run folder of finetune and distill: `out`.partial holds the checkpoint and the best artifact so far
until the run ends, then the best artifact is published to `out`.

Under `accelerate launch` every process opens the same folder and takes part in every call; only the
main process writes and publishes, the others wait for it, so no two processes move or delete the same
files. (Each process still writes its own RNG state into checkpoints: see training._checkpoint.)
"""
from __future__ import annotations

import json
import shutil
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from headcut_grader.errors import UserError, led, named, setting
from headcut.evaluate.ablation import process_state
from headcut_grader.files import (as_typed, cache_home, check_cache_writable, check_out_dir, clean_stale, file_hash,
                                  overwrite_said, path_mark, refuse_inputs, temp_sibling, write_text)
from headcut_grader.validation import read_small_text


def headcut_cache() -> Path:
    """Where headcut keeps what it can recompute (layer cost tables, teacher logits): $HEADCUT_CACHE, else
    $XDG_CACHE_HOME/headcut, else ~/.cache/headcut. Deleting it costs only time."""
    return cache_home("HEADCUT_CACHE", "headcut")


def check_headcut_cache() -> None:
    """Before a write into headcut_cache() (a miss): one sentence naming the variable where it is not writable."""
    check_cache_writable("HEADCUT_CACHE", "headcut")


def out_flag(names: str, out=None) -> str:
    """What a run's messages call its output folder for whoever called it (headcut_grader.errors.named): `out` for a
    Python call ("arguments"), --out for a command ("flags"); the `flag` the checks below take, carrying `out` as
    typed (files.as_typed: --out x.json/, where its Path shows x.json). A path that keeps no text (a default --out,
    a Python caller's Path) is said as written too, where a check resolved it (headcut run's)."""
    given = out if out is None or isinstance(out, str) or getattr(out, "typed", None) is not None else str(out)
    return as_typed(named("out", names, section=""), given)


def partial_folder(out: str | Path) -> Path:
    """Where the run that publishes to `out` keeps its checkpoint and best artifact until it ends."""
    out = Path(out)
    return out.with_name(out.name + ".partial")


@dataclass(frozen=True)
class RunFolder:
    out: Path  # where the finished artifact is published
    path: Path  # out.partial

    @property
    def best(self) -> Path:
        return self.path / "best"

    @property
    def is_main(self) -> bool:
        return process_state().is_main_process

    @classmethod
    def open(cls, out: str | Path, run_hash: str, stamp: dict, *, overwrite: bool, flag: str = "out") -> "RunFolder":
        """`out`.partial for the run identified by `run_hash`: reused to resume the same run, refused (or,
        with `overwrite`, cleared) when it holds another run. `flag`: how the caller named `out` (out, --out), so
        that a refusal names it and its overwrite (overwrite=True, --overwrite) as the caller wrote them."""
        out = Path(out)
        folder = cls(out, partial_folder(out))
        stranger = not_a_folder(folder.path, overwrite=overwrite, flag=flag)
        stamp_file = folder.path / STAMP
        # every process reads the stamp before the main process rewrites it, so all decide alike
        other = not stranger and folder.path.exists() and stamp_file.exists() and _stamp_hash(stamp_file) != run_hash
        other = other or (not stranger and not_a_run_folder(folder.path, overwrite=overwrite, flag=flag))
        published = not stranger and half_published(out)
        if published and other and not overwrite:  # `out` is another run's artifact: check_out_dir's refusal
            check_out_dir(out, overwrite=False, flag=flag)
        if other and not overwrite:
            raise UserError(f"{folder.path} holds an unfinished run of another recipe, or of data or weights that have "
                            f"changed since (or a damaged {stamp_file.name}); pass {overwrite_said(flag)} to start "
                            "afresh.")
        state = process_state()
        state.wait_for_everyone()
        busy = (folder._take(stranger=stranger, other=other, published=published, flag=flag) if state.is_main_process
                else None)
        if _from_main(busy):  # every process stops, not only the main one
            raise UserError(busy)
        if state.is_main_process:
            # atomic: a kill leaves the old stamp or none
            write_text(stamp_file, json.dumps({"hash": run_hash, **stamp}))
        state.wait_for_everyone()
        return folder

    def _take(self, *, stranger: bool, other: bool, published: bool, flag: str) -> str | None:
        """Make and lock the folder (main process); the sentence refusing it while another live run holds it.
        Cleared only once locked, so a second run never deletes from under a live one. This run's artifact that a
        kill left published beside its folder (half_published) goes back in as best/, for publish to finish."""
        if stranger:
            self.path.unlink()  # the link or file itself, never what a link points at
        self.path.mkdir(parents=True, exist_ok=True)
        busy = _hold(self.path, flag)
        if busy is None and other:
            _clear(self.path)
        elif busy is None and published:
            self.out.rename(self.best)
        clean_stale(self.path)  # what a run killed while removing its published folder left
        return busy

    def remember(self, name: str, compute: Callable[[], dict]) -> dict:
        """`compute()` once per run, kept in the folder across resumes (the main process writes it)."""
        path = self.path / name
        if not path.exists():
            value = compute()
            if self.is_main:
                write_text(path, json.dumps(value))
        process_state().wait_for_everyone()
        return json.loads(read_small_text(path))

    def publish(self, extra_meta: dict) -> dict:
        """Move the best artifact to `out` (adding `extra_meta` to its headcut.json), then remove the run
        folder. Returns the published headcut.json contents, on every process."""
        state = process_state()
        state.wait_for_everyone()
        if state.is_main_process:
            meta_path = self.best / "headcut.json"
            from headcut.version import __version__

            meta = {**json.loads(read_small_text(meta_path)), **extra_meta, "headcut_version": __version__}
            write_text(meta_path, json.dumps(meta, indent=2))
            # what `out` is once published: a kill before the folder is moved away below leaves both, and a rerun
            # tells by this that `out` is this run's artifact (half_published), not another's to refuse
            write_text(self.path / PUBLISHED, json.dumps({"headcut.json": file_hash(meta_path, length=64)}))
            if self.out.is_symlink() or self.out.is_file():
                self.out.unlink()  # --overwrite replaces a link at `out`, not the folder it points at
            elif self.out.exists():
                shutil.rmtree(self.out)
            self.best.rename(self.out)
            # out of the way at once: removing a checkpoint takes a while, and a kill meanwhile must not leave a
            # run folder whose rerun finds no best/ to publish (clean_stale removes the leftover)
            leftover = temp_sibling(self.path)
            self.path.rename(leftover)
            _release(self.path)
            shutil.rmtree(leftover)
        state.wait_for_everyone()
        return json.loads(read_small_text(self.out / "headcut.json"))


PUBLISHED = "published.json"
STAMP = "recipe.json"  # the run hash (and recipe) of the run a folder holds


def stamp_mark(out: str | Path) -> tuple | None:
    """Which stamp `out`.partial carries now (None: none). RunFolder.open writes a new stamp file each time, so a
    caller that compares the marks before and after a call knows whether the call opened the folder for its run."""
    return path_mark(partial_folder(out) / STAMP)


def half_published(out: str | Path) -> bool:
    """Whether `out` is the artifact that the run in `out`.partial published, left beside that folder by a kill
    between publish's two renames: the folder has no best/, and its record of what it published matches `out`."""
    out = Path(out)
    folder = partial_folder(out)
    record, meta = folder / PUBLISHED, out / "headcut.json"
    if folder.is_symlink() or (folder / "best").exists() or out.is_symlink() or not record.is_file() \
            or not meta.is_file():
        return False
    try:
        published = json.loads(read_small_text(record))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError, UserError):
        return False
    return isinstance(published, dict) and published.get("headcut.json") == file_hash(meta, length=64)


def check_run_out(out: str | Path, *, overwrite: bool, inputs=(), flag: str = "out") -> Path:
    """check_out_dir for the `out` of finetune or distill, before any work: an `out` that its own run folder
    published (half_published) is not refused yet; RunFolder.open, once the run is known, finishes publishing it
    for the same run, and refuses it to another. Its run folder (`out`.partial) holds no input either: the run
    writes into it and deletes it when done; a link, file or foreign folder there is refused here too (RunFolder.open
    checks again), so before any work. `flag`: as RunFolder.open's."""
    out = check_out_dir(out, overwrite=overwrite or half_published(out), inputs=inputs, flag=flag,
                        holds="the trained model's files")
    partial = partial_folder(out)
    try:
        refuse_inputs(partial, inputs, flag="")  # says the run folder's path alone: led by what named `out`
    except UserError as e:
        raise led(e, f"{setting(flag, out)}: its run folder ") from None
    if not not_a_folder(partial, overwrite=overwrite, flag=flag):
        not_a_run_folder(partial, overwrite=overwrite, flag=flag)
    return out


def not_a_folder(path: Path, *, overwrite: bool, flag: str = "out") -> bool:
    """Whether `path` (out.partial, or a stage folder of `headcut run`) is a link or a file rather than a folder:
    a run writes into and deletes from its folder, so it must never follow a link elsewhere. Refused, or with
    `overwrite` to be replaced (the caller unlinks it). `flag`: how the caller named its output (out, --out), so
    that the refusal names its overwrite as the caller wrote it (overwrite=True, --overwrite)."""
    if not path.is_symlink() and (not path.exists() or path.is_dir()):
        return False
    if not overwrite:
        kind = "a link" if path.is_symlink() else "a file"
        raise UserError(f"{path} is {kind}, not a run folder headcut made; move it away, or pass "
                        f"{overwrite_said(flag)} to replace it (what a link points at is left alone).")
    return True


def not_a_run_folder(path: Path, *, overwrite: bool, flag: str = "out") -> bool:
    """Whether the folder `path` (out.partial) holds what no run made: anything but the lock and the stamp's
    temporary, which a run killed before it wrote its stamp leaves. A run would write into it and delete it once
    published, so it is refused, or with `overwrite` to be cleared. `flag`: as not_a_folder's."""
    try:
        names = {p.name for p in path.iterdir()}
    except (FileNotFoundError, NotADirectoryError):
        return False
    if STAMP in names or all(n == LOCK_FILE or n.startswith(f".{STAMP}.tmp-") for n in names):
        return False
    if not overwrite:
        raise UserError(f"{path} is a folder that no headcut run made (it holds no {STAMP}), and a run keeps its "
                        f"checkpoints there and deletes it when done; move it away, or pass {overwrite_said(flag)} to "
                        "empty it.")
    return True


LOCK_FILE = ".lock"


_HELD: dict[str, object] = {}  # run folders this process holds the lock of, until it publishes them (or exits)


@contextmanager
def locked(folder: Path, flag: str = "out"):
    """Hold `folder`/.lock while a run writes into `folder`; a second run on it is refused at once, naming what
    the caller named its output by, `flag` (out, --out). The kernel drops a flock when its process ends, however it
    ends, so a crash leaves the file but no stale lock."""
    handle = _lock(folder, flag)
    try:
        yield
    finally:
        handle.close()


def _lock(folder: Path, flag: str):
    import fcntl

    handle = open(folder / LOCK_FILE, "a")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise UserError(f"another run is using {folder}; wait for it to finish or choose another {flag}.") from None
    return handle


def _hold(folder: Path, flag: str) -> str | None:
    """Lock a run folder for this process until `_release`; the sentence refusing it when another run holds it."""
    key = str(folder.resolve())
    if key in _HELD:  # this process's own earlier call on the folder (interrupted in Python, then resumed)
        _HELD.pop(key).close()
    try:
        _HELD[key] = _lock(folder, flag)
    except UserError as e:
        return str(e)
    return None


def _release(folder: Path) -> None:
    handle = _HELD.pop(str(folder.resolve()), None)
    if handle is not None:
        handle.close()


def _clear(folder: Path) -> None:
    """Remove what another run left in `folder`, but not the lock this run holds on it."""
    for path in folder.iterdir():
        if path.name == LOCK_FILE:
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


def _from_main(value):
    """The main process's `value`, on every process of `accelerate launch`."""
    state = process_state()
    if state.num_processes == 1:
        return value
    from accelerate.utils import broadcast_object_list

    return broadcast_object_list([value])[0]


def _stamp_hash(stamp_file: Path) -> str | None:
    """The run hash a run folder was stamped with; None when a kill mid-write left the stamp unreadable."""
    try:
        stamp = json.loads(read_small_text(stamp_file))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError, UserError):
        return None
    return stamp.get("hash") if isinstance(stamp, dict) else None
