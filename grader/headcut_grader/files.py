"""Atomic outputs: a file or folder appears whole or not at all, an existing one is never overwritten by
accident, and an input is never an output."""
from __future__ import annotations

import errno
import glob
import hashlib
import json
import os
import re
import shutil
import socket
import stat
import tempfile
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

from headcut_grader.errors import Typed, UserError, caller, named, setting, typed_value
from headcut_grader.lines import RESUME_SPELLED
from headcut_grader.ranges import argument, checked_bool
from headcut_grader.validation import (LINK_LOOP, NAME_MAX_BYTES, check_name_lengths, is_link_loop, on_the_way,
                                       unexpanded_home)


def as_path(value, name: str, *, what: str = "a folder's path") -> Path:
    """`value` (text, a pathlib.Path or another os.PathLike) as a Path; anything else (None, a number, a list) is
    refused naming argument `name`, where Path() would raise Python's TypeError that names neither; so is blank text,
    which Path() would read as the current folder."""
    if isinstance(value, str) and not value.strip():
        raise UserError(f"{name} is {value!r}, no path; pass {what} (text or a pathlib.Path).")
    if isinstance(value, (str, os.PathLike)):
        return Path(value)
    raise UserError(f"{name} is {argument(value)[:60]}; pass {what} (text or a pathlib.Path).")


PAIRS_FILE = "a pairs file's path"  # what a reader of pairs asks for (as_path's `what`), and a folder is to hold
# what headcut's find_recipe and its commands' RECIPE ask for: here, so a command names it without importing recipes
RECIPE_FILE = "a recipe file's path or a built-in name"


def as_file_to_read(value, name: str, *, what: str) -> Path:
    """`as_path` for a file to read: text that names a folder (p.tsv/, p.tsv/.) is refused naming `name`, where
    Path() would drop the / and read the file p.tsv (folder_spelled)."""
    path = as_path(value, name, what=what)
    if problem := folder_spelled(value, name, reading=True, what=what):
        raise UserError(problem)
    return path


def overwrite_said(flag: str) -> str:
    """What lets an output replace what is there, for whoever named it by `flag` (errors.caller): a command's flag
    (--out) has --overwrite beside it, a Python call's argument (out) or a recipe's key overwrite=True."""
    return named("overwrite", caller(flag), section="", spelled=dict.fromkeys(("arguments", "keys"), RESUME_SPELLED))


def as_typed(flag: str, out) -> str:
    """`flag` carrying output `out` as its caller typed it (text, or a path that keeps its text: typed_path), so each
    sentence setting() words shows it so (--out x.json/, where Path('x.json/') shows x.json); a flag that carries its
    text already, or a path without one, as it is."""
    text = out if isinstance(out, str) else getattr(out, "typed", None)
    return Typed(flag, text) if flag and text is not None and getattr(flag, "typed", None) is None else flag


def cache_home(env: str, name: str) -> Path:
    """Where a tool keeps what it can recompute: $`env`, else $XDG_CACHE_HOME/`name`, else ~/.cache/`name`; a
    UserError naming the variable that set it where a file or a symbolic link to nothing stands on that path (was
    a traceback from the first write into it, after the work whose result it was to keep). Nothing is written
    here: a read-only cache that holds what is asked for is read; check_cache_writable says, before a write, where
    it cannot be written."""
    root, said = _cache_root(env, name)
    if why := on_the_way(root / "entry"):  # what stands in the way of a file in the cache
        fact = why.split("; ")[0]  # on_the_way says what stands there; the fix here is the variable
        raise UserError(f"the cache folder {said}: {fact}; set ${env} to a folder you can write in.")
    return root


def check_cache_writable(env: str, name: str) -> None:
    """Before writing into cache_home(`env`, `name`) (a miss, before the work whose result it keeps): the folder
    that will hold it is writable, else one sentence naming the variable that set it."""
    root, said = _cache_root(env, name)
    place = next(p for p in (root, *root.parents) if os.path.lexists(p))
    if not can_make_files(place, name):
        raise UserError(f"the cache folder {said}: the folder {place} is not writable; set ${env} to a folder you "
                        "can write in.")


def _cache_root(env: str, name: str) -> tuple[Path, str]:
    """cache_home's folder, and how a sentence names it: by the variable that set it, and its path."""
    if os.environ.get(env):
        return Path(os.environ[env]), f"${env} {os.environ[env]}"
    if os.environ.get("XDG_CACHE_HOME"):
        root = Path(os.environ["XDG_CACHE_HOME"]) / name
        return root, f"$XDG_CACHE_HOME/{name} {root}"
    root = Path.home() / ".cache" / name
    return root, f"~/.cache/{name} {root}"


def refuse_inputs(out: str | Path, inputs, *, flag: str = "out") -> None:
    """An output that is, or holds, one of `inputs` (paths; None and missing ones are skipped) would replace it;
    one inside an input folder would change that folder (a model folder gains a subfolder, its checksum changes)."""
    flag, out = as_typed(flag, out), Path(out)
    check_out_name(out, flag)
    target = resolved_out(out, flag)
    for item in inputs:
        if item is not None:
            check_name_lengths(item)
        if item is None or not Path(item).exists():
            continue
        source = Path(item).resolve()
        if source == target or target in source.parents or _same_file(out, source):
            raise UserError(f"{path_is(flag, out, f'would replace the input {item}')}; write the output somewhere "
                            "else.")
        if source in target.parents:
            raise UserError(f"{path_is(flag, out, f'is inside the input {item}, which must stay as it is')}; write "
                            "the output somewhere else.")


def resolved_out(out: Path, flag: str = "out") -> Path:
    """Output path `out` with its links followed (Path.resolve); a loop of links on it, one sentence naming `flag`
    (Path.resolve raised RuntimeError('Symlink loop ...')), as is a folder on the way that cannot hold it
    (validation.on_the_way: resolved, a link to nothing would be followed, and its target made)."""
    if is_link_loop(out):
        raise UserError(f"{path_is(flag, out)}: {LINK_LOOP}.")
    if why := on_the_way(out):
        raise UserError(f"{path_is(flag, out)}: {why}.")
    return out.resolve()


def _same_file(a: Path, b: Path) -> bool:
    """Whether `a` and `b` are one file (a hard link, a link); False where either is gone, even meanwhile."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def check_place(out: str | Path, flag: str = "out") -> None:
    """What will hold `out` (its nearest existing folder above; missing folders below it are made) is a folder
    this process can make a file in (can_make_files), and not the folder the process runs in or one above it (an
    output replaces its path whole): checked before any work, so a long run does not fail at its last step. (Its
    name's length is refuse_inputs' check, which every caller runs first: resolving a too-long name fails.)"""
    flag, out = as_typed(flag, out), Path(out)
    if str(out) == "-":
        dash = path_is(flag, "-", "would be a file named '-'")
        raise UserError(f"{dash}: headcut writes its outputs to files (atomically), not to standard output; name a "
                        f"file or folder, e.g. {path_value(flag, 'results')}.")
    if system := _system_folder(out):
        raise UserError(f"{path_is(flag, out)} would write into {system}, where the system keeps devices and streams "
                        "(standard output too), not files: headcut writes its outputs to files (atomically); name a "
                        f"file or folder, e.g. {path_value(flag, 'results')}.")
    if why := unexpanded_home(out):  # was: a folder named ~ made here, the output in it
        raise UserError(f"{path_is(flag, out)}: {why}.")
    here, target = Path.cwd().resolve(), resolved_out(out, flag)
    if target == here or target in here.parents:
        where = "the folder you are in" if target == here else "a folder that holds the one you are in"
        raise UserError(f"{path_is(flag, out, f'is {where}')}; name a new folder or file inside it, e.g. "
                        f"{path_value(flag, 'results')}.")
    place = out.absolute().parent
    while not place.exists() and place != place.parent:  # a file above it was refused by resolved_out
        place = place.parent
    if not can_make_files(place, out.name):
        raise UserError(f"{path_is(flag, out)}: the folder {place} is not writable; choose a folder you can write in.")


def _system_folder(out: Path) -> Path | None:
    """/dev, /proc or /sys where `out`'s folder is one of them (inside /proc or /sys): /dev/stdout, /dev/fd/1. Root
    may make files in /dev (a tmpfs), so an output's rename there replaced /dev/stdout, the system's link, for all;
    /dev/shm and other folders inside /dev are folders of files. The folder is resolved, not `out` itself (a link)."""
    folder = Path(os.path.realpath(out.absolute().parent))
    if folder == Path("/dev"):
        return folder
    return next((top for top in (Path("/proc"), Path("/sys")) if folder == top or top in folder.parents), None)


def can_make_files(folder: Path, name: str) -> bool:
    """Whether this process can make a file in `folder`, found by making one (`name`'s temporary) and removing it:
    os.access says yes to root anywhere, also in /proc, /sys or a read-only mount, where the first real write, after
    the work, failed."""
    if not os.access(folder, os.W_OK | os.X_OK):
        return False
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=_temp_prefix(name)):  # removed as it closes
            return True
    except OSError:
        return False


# What the names written beside an output add to its own: the temporary sibling of its partial state,
# `.NAME.partial.json.tmp-PID@HOST-0123456789`: 14 bytes for `..partial.json`, 10 for the random tail, 2 spare.
_SIBLING_EXTRA = 14 + 10 + 2


def check_out_name(out: Path, flag: str = "out") -> None:
    """An output's path is one the file system takes, with room left in its name for the names made beside it
    (a partial, its state, temporaries), so that no write fails after the work."""
    room = NAME_MAX_BYTES - len(os.fsencode(_temp_prefix(""))) - _SIBLING_EXTRA
    check_name_lengths(out, flag, last_name_max=room)


# Suffixes of the files a user means by an output's name: a folder output named so was meant as a file
FILE_SUFFIXES = (".json", ".tsv", ".csv", ".jsonl", ".md", ".html", ".png", ".onnx", ".txt", ".yaml", ".yml")


def check_folder_name(out: Path, flag: str = "out", holds: str = "") -> None:
    """A folder output's name does not end in a file's suffix (FILE_SUFFIXES): `--out importance.json` to a command
    that writes a folder (`holds`: what goes in it) was meant as a file. Was: a folder named importance.json."""
    suffix = out.suffix.lower()
    if suffix not in FILE_SUFFIXES:
        return
    what = f"a folder (of {holds})" if holds else "a folder of files"
    such = Path(typed_value(flag, out)).with_suffix("")  # from the path as typed, not as resolved (headcut run's)
    raise UserError(f"{path_is(flag, out)}: this writes {what}, not one {suffix} file; name the folder without "
                    f"{out.suffix}, such as {path_value(flag, such)}.")


def check_out_dir(out: str | Path, *, overwrite: bool, flag: str = "out", inputs=(), holds: str = "") -> Path:
    """An output folder: its name no file's (check_folder_name: `holds`, what goes in it), never an input nor inside
    one, in a place this process can write, and new or empty unless `overwrite`."""
    overwrite = checked_bool(overwrite, "overwrite")
    flag, out = as_typed(flag, out), Path(out)  # a trailing / (out/) names the folder it is; said as typed
    refuse_inputs(out, inputs, flag=flag)
    check_place(out, flag)
    # each look is one system call, and a vanished `out` counts as absent: another run with --overwrite may be
    # moving it aside and back meanwhile
    if _is_file(out):
        raise UserError(f"{path_is(flag, out, 'is a file')}; name a folder.")
    check_folder_name(out, flag, holds)  # after where it goes: a folder that cannot be made there is told so first
    if not overwrite and _holds_anything(out):
        raise UserError(f"{path_is(flag, out, 'is not empty')}; choose a new folder or pass {overwrite_said(flag)}.")
    return out


def _is_file(path: Path) -> bool:
    """Whether `path` is there and not a folder (a link is followed, as Path.exists and Path.is_dir do)."""
    try:
        return not stat.S_ISDIR(path.stat().st_mode)
    except OSError:  # absent, or no path at all (a file above it, a loop of links): as Path.exists says
        return False


def _holds_anything(folder: Path) -> bool:
    try:
        with os.scandir(folder) as entries:
            return next(entries, None) is not None
    except (FileNotFoundError, NotADirectoryError):
        return False


def check_out_file(out: str | Path, *, overwrite: bool, flag: str = "out", inputs=(), example: str = "out.json",
                   suffixes: tuple[str, ...] = (), written: str = "") -> Path:
    """The folder rule for files: an existing file is replaced only with --overwrite, an input never; and where
    `suffixes` are given, the suffix says what is written (check_suffix)."""
    overwrite = checked_bool(overwrite, "overwrite")
    if problem := folder_spelled(out, flag, example=example):
        raise UserError(problem)
    flag, out = as_typed(flag, out), Path(out)
    refuse_inputs(out, inputs, flag=flag)
    check_place(out, flag)
    if suffixes:
        check_suffix(out, suffixes, flag=flag, written=written)
    if out.is_dir():
        raise UserError(f"{path_is(flag, out, 'is a folder')}; name a file inside it, such as {out / example}.")
    if out.exists() and not out.is_file():
        raise UserError(f"{path_is(flag, out, 'is not a regular file (a pipe or device)')}; name a file such as "
                        f"{example}.")
    if out.exists() and not overwrite:
        raise UserError(f"{path_is(flag, out, 'exists')}; choose a new file name or pass {overwrite_said(flag)}.")
    return out


def path_is(flag: str, path, fact: str = "") -> str:
    """A path setting and what is wrong with it (`fact`: "is a folder", "exists"), the setting named as its caller
    wrote it: a Python call's argument as the library's messages say one, by its value as typed ("write_scores path is
    '/tmp', which is a folder"), a flag or key with its value ("--out /tmp is a folder", "out=/tmp is a folder").
    Without `fact`, the setting alone, to lead a sentence that goes on after a colon ("write_scores path is '/tmp/x':
    ...", "--out /tmp/x: ..."). Every path sentence of this module names its setting through it (was: the older ones
    said "write_scores path=/tmp/x: ...", the way a recipe's key is said)."""
    if caller(flag) != "arguments":
        return f"{setting(flag, path)} {fact}".rstrip()
    said = f"{flag} is {path_value(flag, path)}"
    return f"{said}, which {fact}" if fact else said


def path_value(flag: str, path) -> str:
    """A path for setting `flag` as a sentence suggests one: an argument's value alone, quoted ('results'), a flag or
    key with its name (--out results, out=results); as typed where `flag` carries its text (errors.typed_value)."""
    if caller(flag) == "arguments":
        return repr(str(typed_value(flag, path)))
    return setting(flag, path)


def folder_spelled(out, flag: str, *, reading: bool = False, positional: bool = False,
                   what: str = "a file's path", example: str = "") -> str | None:
    """The sentence for a file's path given as text that names a folder (o.tsv/, o.tsv/., o.tsv/..: a separator or
    a . or .. last), or None; `reading`: a file to read (p.tsv/ for the pairs); `flag` named as errors.caller reads
    it (a Python call's argument said as the library's other messages say one: read_pairs path is 'p.tsv/'), or a
    command's positional argument (PAIRS_FILE) where `positional`, shown by its value alone (no `flag`: the value
    alone too). Was: Path() (and typer, for a flag) drops the separator and a last ., and the file o.tsv was written
    (p.tsv read). A folder that is there (data/) is said to be one, with a file of the kind `what` asks for (as
    as_path words it: a pairs file's path) to name inside it (was: "drop the /", which only led to an "is a folder"
    refusal; then "a file" whatever was wanted); a file to write, such as `example` in that folder (grades.tsv: runs/
    is 'name a file inside that folder, such as runs/grades.tsv', as check_out_file's 'is a folder' names it)."""
    if not isinstance(out, str) or out in ("", ".", ".."):  # the folder you are in, or above it: said later
        return None
    separators = tuple(filter(None, (os.sep, os.altsep)))
    last = re.split("|".join(map(re.escape, separators)), out)[-1]
    if last not in ("", ".", ".."):
        return None
    ending, wanted = out[-1] if last == "" else out[-len(last) - 1:], what.partition("'s path")[0]
    fact, verb = f"ends in {ending}, so it names a folder", "read" if reading else "write"
    if os.path.isdir(out):  # data/ where data is a folder: without its / it still names that folder
        fact, fix = f"names the folder {os.path.normpath(out)}", f"name {wanted} inside that folder"
    elif reading:  # o.tsv/.. is the folder that holds o.tsv
        fix = f"drop the {ending} at its end" if last != ".." else "name the file itself"
    else:
        fix = f"{f'drop the {ending}, or ' if last != '..' else ''}name {wanted} inside that folder"
    if example and not reading:
        fix += f", such as {os.path.normpath(os.path.join(out, example))}"  # x/.. names grades.tsv, not ./grades.tsv
    if caller(flag) == "arguments":
        return f"{path_is(flag, out, fact)}, not a file to {verb}; {fix}."
    if not flag:
        return f"{out} {fact}, not a file to {verb}; {fix}."
    return f"{out if positional else setting(flag, out)} {fact}, but {flag} is a file to {verb}; {fix}."


def check_suffix(out: Path, suffixes: tuple[str, ...], *, flag: str, written: str) -> None:
    """An output file's suffix says what is written in it: one of `suffixes` (lower case, the first the one to
    suggest; "" allows none), else one sentence naming `flag`, `written` (what is written there) and the suffix to
    use. Was: metrics JSON written into metrics.tsv in silence."""
    if out.suffix.lower() in suffixes:
        return
    named_ones = [s for s in suffixes if s]
    listing = ", ".join(named_ones[:-1]) + f" or {named_ones[-1]}" if len(named_ones) > 1 else named_ones[0]
    # grades.tsv.gz: the name before the refused suffix may end in an allowed one (was: 'such as grades.tsv.tsv')
    such = out.stem if Path(out.stem).suffix.lower() in named_ones else out.with_suffix(named_ones[0]).name
    raise UserError(f"{path_is(flag, out)}: {written}; name the file {listing} (such as {such}).")


# A full disk, a quota, a file too large or a read-only disk is the user's to fix, not a bug to show as a traceback;
# permission denied too, where what was refused lies in the folder being written (a read of an input is no write).
_WRITE_FAULTS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS}
_REFUSED = {errno.EACCES, errno.EPERM}
# The errnos a library's '(os error N)' is a failed write by (safetensors; EIO: the disk itself failed).
_WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO}
# How torch's writer (and sqlite) say a write failed without an errno ('unexpected pos 576 vs 534', 'iostream
# error', 'PytorchStreamWriter failed writing file', 'database or disk is full'): taken for a full disk only under
# FULL_BELOW free bytes.
_FAILED_WRITE = re.compile(r"unexpected pos|iostream|PytorchStreamWriter|disk is full|No space left|os error 28")
FULL_BELOW = 1 << 20  # bytes


def write_fault(error: BaseException, place: Path) -> str | None:
    """Why a write under `place` failed, where the user can fix it (a full disk, a quota, a read-only folder): an
    OSError's own words (permission denied only for a path under `place`); a library's error that carries a write's
    errno (safetensors: '... (os error 28)'); or, for torch's or sqlite's words for a failed write while `place`'s
    disk is all but full, the system's words for a full disk. None: not a write fault (a KeyError, a read refused),
    to re-raise as it is. Call it before removing what the write left, which frees the space it took. Was: any
    error while under 1 MiB was free said 'No space left on device', and '(os error 13)' of a read 'writing failed'."""
    if isinstance(error, OSError):
        refused = error.errno in _REFUSED and _under(error.filename, place)
        return error.strerror if error.errno in _WRITE_FAULTS or refused else None
    if isinstance(error, UserError):  # already said
        return None
    if code := re.search(r"\(os error (\d+)\)", str(error)):
        return os.strerror(int(code[1])) if int(code[1]) in _WRITE_ERRNOS else None
    if not _FAILED_WRITE.search(str(error)):
        return None
    try:
        full = shutil.disk_usage(place).free < FULL_BELOW
    except OSError:
        return None
    return os.strerror(errno.ENOSPC) if full else None


def _under(name, place: Path) -> bool:
    """Whether the path `name` (an OSError's filename, maybe None or bytes) is `place` or lies inside it."""
    if not isinstance(name, (str, bytes, os.PathLike)):
        return False
    path = os.path.abspath(os.fsdecode(name))
    return os.path.commonpath([path, os.path.abspath(place)]) == os.path.abspath(place)


def _temp_prefix(name: str) -> str:
    """Temporary siblings carry their writer's pid and host, so a later run can tell a dead writer's leftovers."""
    return f".{name}.tmp-{os.getpid()}@{socket.gethostname()}-"


def temp_sibling(out: Path) -> Path:
    """A fresh name beside `out`. Made with os.mkdir / os.open (modes 0o777 / 0o666, less the umask) rather than
    tempfile's, whose 0o700 / 0o600 would survive the rename: a grader another account serves must be readable."""
    return out.parent / f"{_temp_prefix(out.name)}{uuid.uuid4().hex[:10]}"


def clean_stale(out: Path) -> list[Path]:
    """Remove temporaries of `out` whose writer (on this host) is gone: a run killed mid-write leaves them. Also
    `.OUT.old-PID`, the old copy that headcut before temporaries named their host moved aside to replace `out`, and
    `.OUT.PID`, the temporary it wrote (_dead_old_writer; e.g. the backend choice cache's, which was never swept)."""
    prefix = f".{out.name}."

    def stale(path: Path) -> bool:  # one listing of the folder, each name by the test of its kind
        rest = path.name[len(prefix):]
        if rest.startswith("tmp-"):
            return _dead_writer(path)
        if rest.startswith("old-"):
            return _dead_old_copy_writer(path)
        return rest[:1] != "" and rest[:1] in "0123456789" and _dead_old_writer(path)

    return _sweep(out.parent, glob.escape(prefix) + "*", stale)


def clean_stale_folder(folder: Path) -> list[Path]:
    """Remove the temporaries in `folder` of every name whose writer (on this host) is gone: a cache's, whose
    entries a killed run may never write again. Also those of the older naming, without a host (_dead_old_writer)."""
    folder = Path(folder)
    return _sweep(folder, ".*.tmp-*", _dead_writer) + _sweep(folder, ".*.tmp", _dead_old_writer)


# .NAME.tmp-PID@HOST-TAIL (temp_sibling): the writer's pid and host
_TEMP_NAME = re.compile(r"\..+\.tmp-(\d+)@(.+)-[0-9a-f]+")
# .NAME.PID.tmp, .NAME.PID: what headcut wrote before its temporaries named their host (teacher logits; every
# other file, e.g. the backend choice cache)
_OLD_TEMP_NAME = re.compile(r"\..+\.(\d+)(?:\.tmp)?")
# .NAME.old-PID: an old copy moved aside to be deleted, which headcut wrote before it used temporary names for them
_OLD_COPY_NAME = re.compile(r"\..+\.old-(\d+)")
OLD_TEMP_AGE_S = 24 * 3600


def _sweep(folder: Path, pattern: str, stale) -> list[Path]:
    """Remove the entries of `folder` matching `pattern` that `stale(path)` says no live writer owns."""
    removed = []
    for leftover in folder.glob(pattern) if folder.is_dir() else ():
        if stale(leftover):
            _remove(leftover)
            removed.append(leftover)
    return removed


def _remove(path: Path) -> None:
    """Remove a file, a link (never what it points at) or a folder with what it holds."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _dead_writer(path: Path) -> bool:
    """A temporary whose writer was a process of this host that is gone; a live writer's, or another host's (whose
    pids this one cannot check), is not."""
    found = _TEMP_NAME.fullmatch(path.name)
    return found is not None and found[2] == socket.gethostname() and not _alive(int(found[1]))


def _dead_old_writer(path: Path) -> bool:
    """An old-style temporary (no host in its name) whose pid is no live process here and that nothing has written
    for a day. Its host cannot be told, so a free pid here may be a live writer's on another machine sharing the
    folder (a cache in an NFS home); the age settles it: a writer streams into its temporary (np.save), which keeps
    its mtime fresh, and no write of an entry takes a day."""
    found = _OLD_TEMP_NAME.fullmatch(path.name)
    if found is None or _alive(int(found[1])):
        return False
    try:
        return time.time() - path.lstat().st_mtime > OLD_TEMP_AGE_S
    except OSError:  # removed meanwhile by another run's sweep
        return False


def _dead_old_copy_writer(path: Path) -> bool:
    """An old copy moved aside (no host in its name) whose pid is no live process here. Nothing else is needed: its
    writer only ever deleted it, so removing one a writer on another host is still deleting costs nothing."""
    found = _OLD_COPY_NAME.fullmatch(path.name)
    return found is not None and not _alive(int(found[1]))


def _alive(pid: int) -> bool:
    """Whether `pid` is a live process here; a number no pid can be is taken as alive: a name that merely looks
    like a temporary's is left alone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):  # another user's live process; no pid at all
        return True
    return True


# an output another run published while this one worked (the rename or link that publishes it refused to replace it)
BY_ANOTHER_RUN = "was written by another run while this one worked, and is left as it is"


@contextmanager
def atomic_dir(out: str | Path, *, overwrite: bool = False, flag: str = "out", inputs=()):
    """Yield a temporary sibling folder; on success it replaces `out` in one rename, on error it vanishes."""
    out = check_out_dir(out, overwrite=overwrite, flag=flag, inputs=inputs)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        clean_stale(out)
        tmp = temp_sibling(out)
        tmp.mkdir()
    except OSError as e:
        raise _unwritable(out, path_is(flag, out), e) from None
    try:
        yield tmp
    except BaseException as e:
        why = write_fault(e, tmp) if isinstance(e, Exception) else None  # before the rmtree frees the space
        shutil.rmtree(tmp, ignore_errors=True)
        if why is not None:
            raise UserError(f"{path_is(flag, out)}: writing failed ({why}); check free space and permissions, "
                            "then rerun.") from None
        raise
    _plain_modes(tmp)
    if overwrite:
        _replace_dir(tmp, out)
    else:
        _publish_new(tmp, out, flag)


# what a rename of a folder onto a name that holds something (a folder with files, a link, a file) fails with
_TAKEN = (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR)


def _replace_dir(tmp: Path, out: Path) -> None:
    """Rename `tmp` to `out`, moving what holds `out` aside first (a rename cannot replace a folder with files),
    then removing it. Writers of `out` at once (two `scan --overwrite`) each retry until their own rename lands:
    the last one's whole folder wins, and a name another moved meanwhile is no error. What is moved aside takes
    this writer's temporary name, so a kill before it is removed leaves what a later write's clean_stale removes."""
    aside = []
    while True:
        try:
            tmp.rename(out)
            break
        except OSError as e:
            if e.errno not in _TAKEN:
                raise
        old = temp_sibling(out)
        try:
            out.rename(old)  # a link at `out` is moved itself, never followed
        except FileNotFoundError:
            continue  # another writer moved it first
        aside.append(old)
    for old in aside:
        _remove(old)


def _publish_new(tmp: Path, out: Path, flag: str) -> None:
    """Rename `tmp` to `out`, still absent or an empty folder (check_out_dir): the rename itself refuses to replace
    what another run wrote there while this one worked. A link there (to an empty folder) is replaced, not followed."""
    try:
        if out.is_symlink():
            out.unlink()
        tmp.rename(out)
    except OSError as e:
        if e.errno not in _TAKEN:
            raise
        shutil.rmtree(tmp, ignore_errors=True)
        raise UserError(f"{path_is(flag, out, BY_ANOTHER_RUN)}; choose a new folder, or pass {overwrite_said(flag)}."
                        ) from None


def _plain_modes(folder: Path) -> None:
    """Give what is under `folder` the modes a plain write gets (0o666 / 0o777 less the umask): a library that
    writes atomically itself (safetensors) leaves 0o600 files. `folder` came from mkdir(0o777), so its own
    mode is 0o777 less the umask, read here without changing the process's umask under other threads."""
    allowed = folder.stat().st_mode & 0o777
    for path in folder.rglob("*"):
        if not path.is_symlink():
            path.chmod(allowed if path.is_dir() else allowed & 0o666)


def _unwritable(out: Path, said: str, error: OSError) -> UserError:
    """The sentence for output `out` (`said`: its path, or its flag and path) where no temporary could be made beside
    it: a folder on the way that is a link to nothing is named (the system says only 'File exists'), else `error`."""
    why = on_the_way(out) or f"cannot write there ({error.strerror}); check the folder's permissions"
    return UserError(f"{said}: {why}.")


def write_json(path: str | Path, data, *, overwrite: bool = True, flag: str = "path") -> None:
    """Write JSON atomically (temp file + rename); NaN (a figure that means nothing there) as null, since JSON
    has no NaN and strict readers refuse Python's. `overwrite`, `flag`: as atomic_file's."""
    write_text(path, json.dumps(_strict(data), indent=2, sort_keys=False, default=_jsonable) + "\n",
               overwrite=overwrite, flag=flag)


def write_text(path: str | Path, text: str, *, overwrite: bool = True, flag: str = "path") -> None:
    with atomic_file(path, binary=False, overwrite=overwrite, flag=flag) as f:
        f.write(text)


@contextmanager
def atomic_file(path: str | Path, *, binary: bool = True, overwrite: bool = True, flag: str = "path"):
    """Yield a file open on a fresh temporary beside `path` (its writer's own name: two writers never share one),
    which becomes `path` in one step once the block ends: `path` is the old file or a whole new one. On any error
    or Ctrl-C the temporary is removed; a killed writer's is removed by a later write. `overwrite`: the last writer's
    file wins; else a file another run wrote at `path` meanwhile is kept, and this write refused (publish_file)."""
    overwrite = checked_bool(overwrite, "overwrite")
    if problem := folder_spelled(path, flag):  # a caller that did not run check_out_file (write_json, write_text)
        raise UserError(problem)
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        clean_stale(path)
        tmp = temp_sibling(path)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError as e:
        raise _unwritable(path, str(path), e) from None
    try:
        with os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8") as f:
            yield f
        publish_file(tmp, path, overwrite=overwrite, flag=flag)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise UserError(f"{path}: writing failed ({e.strerror}); check free space and permissions.") from None
        raise


def path_mark(path) -> tuple | None:
    """Which file or folder `path` names now (None: nothing). Every output is published by a rename or a link (a new
    file there), so a caller that compares the marks before and after a call knows whether the call published it."""
    try:
        found = os.stat(path)
    except (OSError, ValueError):
        return None
    return found.st_dev, found.st_ino, found.st_mtime_ns


def published(tmp: Path, out: Path) -> bool:
    """Whether publish_file(tmp, out) has made `out` whole: `tmp` renamed there, or linked there and not yet
    removed (a Ctrl-C between its two steps)."""
    return out.exists() and (not tmp.exists() or _same_file(tmp, out))


def publish_file(tmp: Path, out: Path, *, overwrite: bool, flag: str = "out") -> None:
    """Rename `tmp` to `out`. Without `overwrite`, `out` was absent when the command began (check_out_file), so a file
    there now is another run's, written while this one worked: it is left as it is and this one refused (a hard
    link, unlike a rename, refuses an existing name; `tmp` is the caller's to remove)."""
    if overwrite:
        os.replace(tmp, out)
        return
    if out.is_symlink() and not out.exists():
        out.unlink()  # a link to nothing was no output when the command began either: replaced, as a rename would
    taken = UserError(f"{path_is(flag, out, BY_ANOTHER_RUN)}; choose a new file name, or pass "
                      f"{overwrite_said(flag)}.")
    try:
        os.link(tmp, out)
    except FileExistsError:
        raise taken from None
    except OSError:  # a file system without hard links: checked, then renamed (two steps there)
        if out.exists():
            raise taken from None
        os.replace(tmp, out)
        return
    tmp.unlink()


def _strict(obj):
    if isinstance(obj, float):
        return None if obj != obj else obj
    if isinstance(obj, dict):
        return {k: _strict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_strict(v) for v in obj]
    if hasattr(obj, "tolist"):  # numpy arrays and scalars
        return _strict(obj.tolist())
    return obj


def _jsonable(obj):
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def file_record(path: Path, folder: Path) -> dict:
    """How grader.json records a file of grader `folder` (name, hash, size), for the runtime to check that the
    file it opens is the one exported (backends.graph_file)."""
    return {"name": str(path.relative_to(folder)), "sha256": file_hash(path), "bytes": path.stat().st_size}


def file_hash(path: str | Path, *, length: int = 16) -> str:
    return hash_and_find(path)[0][:length]


def hash_and_find(path: str | Path, markers: tuple[bytes, ...] = ()) -> tuple[str, bool]:
    """The sha256 of `path` (64 hex digits) and whether its bytes hold any of `markers`, in one read: a grader's
    graph is hashed to check it and searched for quantized ops to check its precision (two reads took 1.45 s
    more per 400 MB). Each chunk is searched with the end of the one before, so a marker across two is found."""
    h, keep, tail, found = hashlib.sha256(), max(map(len, markers), default=1) - 1, b"", False
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
            if markers and not found:
                block = tail + chunk
                found = any(marker in block for marker in markers)
                tail = block[len(block) - keep:]
    return h.hexdigest(), found
