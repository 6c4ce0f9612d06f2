"""`headcut grade` at any size: chunks, several workers, a killed run resumed to the same bytes, flat memory."""
from __future__ import annotations

import csv
import importlib.abc
import json
import os
import signal
import subprocess
import sys
import time
import tomllib
from contextlib import nullcontext

import pytest
from typer.testing import CliRunner

from conftest import ROOT, process_alive, spawned_children, wait_until
from headcut.cli.main import app
from headcut.synthetic import synthetic_pairs
from headcut_grader.grade_file import GradeSettings, partial_paths
from test_export import make_tiny_grader


@pytest.fixture(scope="module")
def tiny_grader(tmp_path_factory):
    return make_tiny_grader(tmp_path_factory.mktemp("grader"))[0]


def write_pairs(path, n: int, *, seed: int = 0):
    pairs = synthetic_pairs(n, seed=seed)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f, delimiter="\t")
        writer.writerow(["query", "title", "grade"])
        writer.writerows([q, t, pairs.grades[y]] for q, t, y in zip(pairs.queries, pairs.titles, pairs.labels))
    return path


def grade(*args):
    return CliRunner().invoke(app, ["grade", *map(str, args)])


def command(*args) -> list[str]:
    return [sys.executable, "-m", "headcut_grader", "grade", *map(str, args)]


def test_chunks_and_workers_write_what_one_pass_writes(tiny_grader, tmp_path):
    source = write_pairs(tmp_path / "pairs.tsv", 1300)
    whole = grade(tiny_grader, source, "--out", tmp_path / "whole.tsv", "--chunk-rows", "100000", "--threads", "1")
    assert whole.exit_code == 0, whole.output
    for name, flags in (("chunks.tsv", ["--chunk-rows", "250"]),
                        ("workers.tsv", ["--chunk-rows", "250", "--workers", "2"])):
        result = grade(tiny_grader, source, "--out", tmp_path / name, "--threads", "1", *flags)
        assert result.exit_code == 0, result.output
        assert "graded 1,300 pairs" in result.output
        assert (tmp_path / name).read_bytes() == (tmp_path / "whole.tsv").read_bytes()
        assert not any(p.exists() for p in partial_paths(tmp_path / name))


def test_with_workers_the_command_holds_no_session_of_its_own_while_they_grade(tiny_grader, tmp_path, monkeypatch):
    """The command opens the grader once to check it, then each worker grades with its own. Was: the command's
    session stayed open, idle, while the workers graded (a MiniLM grader, 87 MiB of graph: the command held 200 MB
    resident beside its two workers' 238 MB each, about 90 MB of it that session)."""
    import weakref

    import onnxruntime as ort

    import headcut_grader.grade_file as grade_file

    sessions, open_while_graded = [], []

    class Tracked(ort.InferenceSession):  # the command's own sessions (spawned workers import onnxruntime afresh)
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            sessions.append(weakref.ref(self))

    def finished(item, *args):  # a worker's chunk, taken back by the command
        open_while_graded.append(sum(ref() is not None for ref in sessions))
        return real_finished(item, *args)

    real_finished = grade_file._finished
    monkeypatch.setattr(ort, "InferenceSession", Tracked)
    monkeypatch.setattr(grade_file, "_finished", finished)
    flags = ["--threads", "1", "--chunk-rows", "100", "--workers", "2"]
    result = grade(tiny_grader, write_pairs(tmp_path / "pairs.tsv", 300), "--out", tmp_path / "o.tsv", *flags)
    assert result.exit_code == 0, result.output
    assert "graded 300 pairs" in result.output and "onnxruntime" in result.output
    assert len(sessions) == 1 and open_while_graded == [0, 0, 0]


def test_killed_run_resumes_to_the_same_bytes(tiny_grader, tmp_path):
    source = write_pairs(tmp_path / "pairs.tsv", 30_000, seed=1)
    flags = ["--chunk-rows", "300", "--threads", "1"]
    assert grade(tiny_grader, source, "--out", tmp_path / "whole.tsv", *flags).exit_code == 0
    out = tmp_path / "killed.tsv"
    data, state = partial_paths(out)
    run = subprocess.Popen(command(tiny_grader, source, "--out", out, *flags), stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and run.poll() is None:
        if state.exists() and json.loads(state.read_text())["rows"] >= 900:
            run.send_signal(signal.SIGKILL)
            break
        time.sleep(0.005)
    assert run.wait(timeout=60) == -signal.SIGKILL, "the run finished before it could be killed"
    assert data.exists() and not out.exists()  # nothing half-written at OUT
    with open(data, "ab") as f:  # as if killed after writing a chunk and before recording it: resume drops it
        f.write(b"a chunk\tthe state does not count\n")
    again = grade(tiny_grader, source, "--out", out, *flags)
    assert again.exit_code == 2 and "pass --resume to continue it" in again.output
    other = grade(tiny_grader, source, "--out", out, "--chunk-rows", "200", "--threads", "1", "--resume")
    assert other.exit_code == 2 and "--chunk-rows is 200 but the interrupted run used 300" in other.output
    resumed = grade(tiny_grader, source, "--out", out, *flags, "--resume")
    assert resumed.exit_code == 0, resumed.output
    assert "graded 30,000 pairs" in resumed.output and "by the interrupted run" in resumed.output
    assert out.read_bytes() == (tmp_path / "whole.tsv").read_bytes()
    assert not data.exists() and not state.exists()



def _stopped_after(tiny_grader, source, out, settings, rows: int) -> dict:
    """Grade `source` into `out` and stop it (as Ctrl-C does) once `rows` are graded: the state it leaves."""
    from headcut_grader.grade_file import grade_file

    graded = []

    def stop(n):
        graded.append(n)
        if sum(graded) >= rows:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        grade_file(tiny_grader, source, out, settings=settings, progress=stop)
    return json.loads(partial_paths(out)[1].read_text())


def test_a_partial_file_cut_short_resumes_from_its_last_whole_chunk(tiny_grader, tmp_path):
    """--resume of a partial file slightly cut short (a copy, a disk that lost its tail) refused ('is shorter than
    its state says; run again with --overwrite'), throwing away every finished row. The state keeps the last chunk
    ends, so it resumes from the last one the file holds whole, to the bytes of an uninterrupted run; a state that
    keeps none (written before they were kept) says so."""
    from headcut_grader.errors import UserError
    from headcut_grader.grade_file import _checked, grade_file

    source = write_pairs(tmp_path / "pairs.tsv", 3000, seed=1)
    settings = GradeSettings(chunk_rows=200, threads=1)
    grade_file(tiny_grader, source, tmp_path / "whole.tsv", settings=settings)
    out = tmp_path / "cut.tsv"
    data, state_path = partial_paths(out)
    state = _stopped_after(tiny_grader, source, out, settings, 1500)
    assert state["rows"] >= 1000 and [end["rows"] for end in state["earlier"]] == list(range(200, state["rows"], 200))
    os.truncate(data, data.stat().st_size - 37)
    resumed = grade(tiny_grader, source, "--out", out, "--chunk-rows", "200", "--threads", "1", "--resume")
    assert resumed.exit_code == 0, resumed.output
    # thousands grouped: was 'graded 3000 pairs, 1200 of them by the interrupted run'
    assert f"graded 3,000 pairs, {state['rows'] - 200:,} of them by the interrupted run" in resumed.output, \
        resumed.output
    assert out.read_bytes() == (tmp_path / "whole.tsv").read_bytes()
    assert not data.exists() and not state_path.exists()

    out.unlink()
    state = _stopped_after(tiny_grader, source, out, settings, 700)
    state_path.write_text(json.dumps(_checked({k: v for k, v in state.items() if k not in ("earlier", "check")})))
    os.truncate(data, data.stat().st_size - 37)
    with pytest.raises(UserError) as err:
        grade_file(tiny_grader, source, out, settings=settings, resume=True)
    assert str(err.value) == (f"{data} is shorter than its state says ({data.stat().st_size:,} bytes of "
                              f"{state['bytes']:,}), and its state records no earlier chunk end; run again without "
                              "resume=True and with overwrite=True.")


@pytest.mark.parametrize("chunks_done", [2, 0])
def test_ctrl_c_says_what_was_kept_and_exits_130(tiny_grader, tmp_path, monkeypatch, chunks_done):
    """Was: Ctrl-C in `headcut grade` exited 130 with nothing said; now one line says OUT was not written and how
    many graded rows a rerun with --resume continues after (or that none were kept), and that rerun works."""
    from headcut_grader.grader import Grader

    source = write_pairs(tmp_path / "pairs.tsv", 1000, seed=4)
    flags = ["--chunk-rows", "200", "--threads", "1"]
    assert grade(tiny_grader, source, "--out", tmp_path / "whole.tsv", *flags).exit_code == 0
    real, calls = Grader.logits, []

    def interrupted(self, pairs, **kwargs):
        calls.append(len(pairs))
        if len(calls) > chunks_done:
            raise KeyboardInterrupt
        return real(self, pairs, **kwargs)

    monkeypatch.setattr(Grader, "logits", interrupted)
    out = tmp_path / "out.tsv"
    result = grade(tiny_grader, source, "--out", out, *flags)
    kept = (f"interrupted: {out} was not written; .out.tsv.partial keeps 400 graded rows; rerun the same command with "
            "--resume to continue after them.")
    none = f"interrupted: {out} was not written and no graded rows were kept; rerun the same command to start again."
    assert result.exit_code == 130 and (kept if chunks_done else none) in result.output.splitlines(), result.output
    assert not out.exists() and "Traceback" not in result.output
    monkeypatch.undo()
    again = grade(tiny_grader, source, "--out", out, *flags, *(["--resume"] if chunks_done else []))
    assert again.exit_code == 0 and out.read_bytes() == (tmp_path / "whole.tsv").read_bytes(), again.output


def test_ctrl_c_before_the_first_chunk_of_an_overwrite_leaves_nothing(tiny_grader, tmp_path, monkeypatch):
    """Was: `grade --overwrite` over an interrupted run's partial files, stopped before its first chunk, kept the
    old state beside its own empty partial file, so the line said 400 rows were kept and --resume refused them.
    Now neither file is left and the line says no rows were kept."""
    from headcut_grader.grader import Grader

    source = write_pairs(tmp_path / "pairs.tsv", 1000, seed=4)
    out = tmp_path / "out.tsv"
    flags = ["--out", out, "--chunk-rows", "200", "--threads", "1"]
    real, calls = Grader.logits, []

    def interrupted(self, pairs, **kwargs):
        calls.append(len(pairs))
        if len(calls) in (3, 4):  # the first run after two chunks, the second before any
            raise KeyboardInterrupt
        return real(self, pairs, **kwargs)

    monkeypatch.setattr(Grader, "logits", interrupted)
    assert "keeps 400 graded rows" in grade(tiny_grader, source, *flags).output
    result = grade(tiny_grader, source, *flags, "--overwrite")
    assert result.exit_code == 130 and result.output.strip() == (
        f"interrupted: {out} was not written and no graded rows were kept; rerun the same command to start again.")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pairs.tsv"]


@pytest.mark.parametrize("module, name", [("os", "link"), ("headcut_grader.grade_file", "publish_file")])
def test_ctrl_c_once_out_is_published_says_so_and_leaves_no_state(tiny_grader, tmp_path, monkeypatch, module, name):
    """A Ctrl-C right after OUT was published: between publish_file's link and its removal of the partial file, or
    between publish_file and the removal of the state. Was: the line said OUT was not written (and that the
    partial file kept its rows for --resume), and the state (and partial file) stayed beside the whole OUT. Now the
    line says OUT was written, and nothing is left beside it."""
    source, out = write_pairs(tmp_path / "pairs.tsv", 300, seed=9), tmp_path / "out.tsv"
    flags = ["--chunk-rows", "100", "--threads", "1"]
    assert grade(tiny_grader, source, "--out", tmp_path / "whole.tsv", *flags).exit_code == 0
    real = getattr(importlib.import_module(module), name)

    def then_ctrl_c(*args, **kwargs):
        real(*args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(f"{module}.{name}", then_ctrl_c)  # the step after it never runs
    result = grade(tiny_grader, source, "--out", out, *flags)
    assert result.exit_code == 130 and result.output.splitlines() == [
        f"interrupted: {out} was written whole; nothing needs rerunning."], result.output
    assert out.read_bytes() == (tmp_path / "whole.tsv").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.tsv", "pairs.tsv", "whole.tsv"]


# Sweep defect 5: the workers of a SIGKILLed `grade --workers 2` were still alive 60 s later.
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds the workers in /proc")
def test_workers_exit_when_their_parent_is_killed(tiny_grader, tmp_path):
    source = write_pairs(tmp_path / "pairs.tsv", 30_000, seed=5)
    flags = ["--out", tmp_path / "o.tsv", "--workers", "2", "--threads", "1", "--chunk-rows", "200"]
    run = subprocess.Popen(command(tiny_grader, source, *flags), stderr=subprocess.DEVNULL)
    workers = set()

    def two_workers():
        workers.update(spawned_children(run.pid))
        return len(workers) == 2

    try:
        wait_until(two_workers, 60, "two grading workers have not started")
        run.send_signal(signal.SIGKILL)
        assert run.wait(timeout=10) == -signal.SIGKILL, "the run finished before it could be killed"
        wait_until(lambda: not any(map(process_alive, workers)), 5, f"workers {sorted(workers)} are still alive")
    finally:
        for pid in filter(process_alive, [run.pid, *workers]):
            os.kill(pid, signal.SIGKILL)


def take_ctrl_c():
    """In the child before it runs: SIGINT as a terminal's foreground job has it, whatever this test's parent set (a
    job started in the background, e.g. by nohup or `cmd &`, ignores it, and the child would inherit that)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


# Put first on a run's PYTHONPATH: each worker that spawn starts says it is there, then waits before it loads
# anything, so "the workers are starting" is a state the test waits for, not a moment it hopes a sleep hits.
HOLD_WORKERS = """import os, time
if b"--multiprocessing-fork" in open("/proc/self/cmdline", "rb").read():
    open(os.path.join(os.environ["HEADCUT_TEST_HELD"], str(os.getpid())), "w").close()
    while True:
        time.sleep(1)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds the workers in /proc")
@pytest.mark.parametrize("when", ["workers starting", "rows kept"])
def test_ctrl_c_with_workers_says_one_line_exits_130_and_resumes(tiny_grader, tmp_path, when):
    """A terminal's Ctrl-C reaches the workers of `grade --workers 2` too. Was: each worker printed a
    KeyboardInterrupt traceback (or, when they died first, the run ended in a BrokenProcessPool traceback, exit 1),
    and a Ctrl-C while the workers started left an empty partial file that --resume refused. Now: exit 130, the one
    `interrupted:` line, no traceback, workers gone at once, and --resume continues (nothing is left when no rows
    were kept)."""
    source = write_pairs(tmp_path / "pairs.tsv", 30_000, seed=6)
    flags = ["--workers", "2", "--threads", "1", "--chunk-rows", "200"]
    whole = grade(tiny_grader, source, "--out", tmp_path / "whole.tsv", "--chunk-rows", "200", "--threads", "1")
    assert whole.exit_code == 0, whole.output
    out = tmp_path / "o.tsv"
    state = partial_paths(out)[1]
    env = dict(os.environ)
    if when == "workers starting":
        (tmp_path / "hold" / "held").mkdir(parents=True)
        (tmp_path / "hold" / "sitecustomize.py").write_text(HOLD_WORKERS)
        env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "hold"), env.get("PYTHONPATH", "")])
        env["HEADCUT_TEST_HELD"] = str(tmp_path / "hold" / "held")
    run = subprocess.Popen(command(tiny_grader, source, "--out", out, *flags), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True,
                           start_new_session=True,  # its own group, as a shell's job
                           preexec_fn=take_ctrl_c, env=env)
    workers = set()

    def ready():
        workers.update(spawned_children(run.pid))
        if when == "workers starting":
            return len(workers) == 2 and {int(p.name) for p in (tmp_path / "hold" / "held").iterdir()} == workers
        return state.exists() and json.loads(state.read_text())["rows"] >= 600

    try:
        wait_until(ready, 120, f"grade never reached: {when}")
        os.killpg(run.pid, signal.SIGINT)  # what Ctrl-C does: the whole foreground group
        output = run.communicate(timeout=60)[0]
        wait_until(lambda: not any(map(process_alive, workers)), 5, f"workers {sorted(workers)} are still alive")
    finally:
        for pid in filter(process_alive, [run.pid, *workers]):
            os.kill(pid, signal.SIGKILL)
    said = [line for line in output.splitlines() if line.strip()]
    assert (run.returncode == 130 and len(said) == 1
            and said[0].startswith(f"interrupted: {out} was not written")), output
    assert not out.exists()
    if when == "workers starting":
        assert said[0].endswith("no graded rows were kept; rerun the same command to start again."), output
        assert not any(p.exists() for p in partial_paths(out)), "a partial file --resume cannot use was left"
    resumed = grade(tiny_grader, source, "--out", out, *flags, *(["--resume"] if when == "rows kept" else []))
    assert resumed.exit_code == 0, resumed.output
    assert out.read_bytes() == (tmp_path / "whole.tsv").read_bytes()


# Put first on a run's PYTHONPATH: a Ctrl-C lands while Python imports the module HEADCUT_TEST_STOP names.
STOP_IMPORT = """import os, sys
class Stop:
    def find_spec(self, name, path=None, target=None):
        if name == os.environ["HEADCUT_TEST_STOP"]:
            sys.meta_path.remove(self)  # once, as a Ctrl-C
            raise KeyboardInterrupt
sys.meta_path.insert(0, Stop())
"""


@pytest.mark.parametrize("module", ["numpy", "typer", "headcut_grader.grade_file"])
def test_ctrl_c_while_the_command_loads_says_one_line(tiny_grader, tmp_path, module):
    """Was: a Ctrl-C in the first 0.4 s of `python -m headcut_grader grade` (numpy, typer, the runtime loading)
    printed a KeyboardInterrupt traceback. Now: exit 130 and one `interrupted:` line, nothing written."""
    source = write_pairs(tmp_path / "pairs.tsv", 100, seed=8)
    (tmp_path / "stop" / "sitecustomize.py").parent.mkdir()
    (tmp_path / "stop" / "sitecustomize.py").write_text(STOP_IMPORT)
    env = {**os.environ, "HEADCUT_TEST_STOP": module,
           "PYTHONPATH": os.pathsep.join([str(tmp_path / "stop"), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run(command(tiny_grader, source, "--out", tmp_path / "o.tsv", "--workers", "2"), env=env,
                         capture_output=True, text=True, timeout=120)
    said = [line for line in (run.stdout + run.stderr).splitlines() if line.strip()]
    assert run.returncode == 130 and len(said) == 1 and said[0].startswith("interrupted: "), run.stdout + run.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pairs.tsv", "stop"]


def entry_points() -> dict[str, list[str]]:
    """Every way a user starts a command: `python -m` of each package and of its cli.main (was: a traceback for a
    Ctrl-C while that loaded), and each console script as the wrapper pip writes for it calls its target."""
    starts = {f"python -m {m}": [sys.executable, "-m", m] for m in ("headcut", "headcut_grader", "headcut.cli.main",
                                                                     "headcut_grader.cli.main")}
    for toml in (ROOT / "pyproject.toml", ROOT / "grader" / "pyproject.toml"):
        for name, target in tomllib.loads(toml.read_text())["project"]["scripts"].items():
            module, _, function = target.partition(":")
            starts[name] = [sys.executable, "-c",
                            f"import sys; from {module} import {function}; sys.exit({function}())"]
    return starts


@pytest.mark.parametrize("module", ["headcut_grader.errors", "numpy", "typer"])
@pytest.mark.parametrize("start", sorted(entry_points()))
def test_ctrl_c_while_any_entry_point_loads_says_one_line(tiny_grader, tmp_path, start, module):
    """Was: a Ctrl-C while `python -m headcut` imported the package (headcut/__init__ loaded numpy), while the
    `headcut` script imported its commands, or in the first 0.05 s of `python -m headcut_grader` (its package
    imported errors) printed a KeyboardInterrupt traceback. Now each start takes a Ctrl-C as its first code runs:
    exit 130 and one `interrupted:` line, nothing written."""
    source = write_pairs(tmp_path / "pairs.tsv", 20, seed=8)
    (tmp_path / "stop").mkdir()
    (tmp_path / "stop" / "sitecustomize.py").write_text(STOP_IMPORT)
    env = {**os.environ, "HEADCUT_TEST_STOP": module,
           "PYTHONPATH": os.pathsep.join([str(tmp_path / "stop"), os.environ.get("PYTHONPATH", "")])}
    args = ["grade", tiny_grader, source, "--out", tmp_path / "o.tsv"]
    run = subprocess.run([*entry_points()[start], *map(str, args)], env=env, capture_output=True, text=True,
                         timeout=120)
    said = [line for line in (run.stdout + run.stderr).splitlines() if line.strip()]
    assert run.returncode == 130 and said == ["interrupted: stopped while starting, before anything was written; "
                                              "rerun the same command."], run.stdout + run.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pairs.tsv", "stop"]


def test_ctrl_c_after_the_command_finished_says_out_was_written(tiny_grader, tmp_path, monkeypatch):
    """A Ctrl-C after grade's body returned (while click closes its context) was 130 without a word; had it said
    anything, it would have been "nothing was written". Now the line says the outputs were written."""
    from headcut_grader.cli.common import click

    source, out = write_pairs(tmp_path / "pairs.tsv", 20, seed=3), tmp_path / "o.tsv"
    real, calls = click.Context._close_with_exception_info, []

    def ctrl_c_once(self, *args):
        calls.append(args)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return real(self, *args)

    monkeypatch.setattr(click.Context, "_close_with_exception_info", ctrl_c_once)
    result = grade(tiny_grader, source, "--out", out, "--threads", "1")
    assert result.exit_code == 130 and result.stderr.splitlines() == [
        "interrupted: stopped after the command had finished: its outputs were written whole; nothing needs "
        "rerunning."], result.output
    assert out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["o.tsv", "pairs.tsv"]


class CtrlCWhileStarting(importlib.abc.MetaPathFinder):
    """Imports `name` as a Ctrl-C landing while its compiled extension starts reaches Python: pybind11 turns the
    KeyboardInterrupt into ImportError("initialization failed") caused by it."""

    def __init__(self, name: str):
        self.name = name

    def find_spec(self, fullname, path=None, target=None):
        if fullname == self.name:
            try:
                raise KeyboardInterrupt
            except KeyboardInterrupt as e:
                raise ImportError("initialization failed") from e


def test_ctrl_c_while_the_backend_is_chosen_says_one_line(tiny_grader, tmp_path, monkeypatch):
    """Was: a Ctrl-C about 0.5 s into `grade --workers 2` (while ONNX Runtime was imported to choose the backend)
    made the runtime count as not installed, and the run ended in a ValueError traceback, exit 1. Now: exit 130, the
    one `interrupted:` line, nothing left beside OUT; the same command then grades the file."""
    source = write_pairs(tmp_path / "pairs.tsv", 300, seed=7)
    out = tmp_path / "o.tsv"
    flags = ["--out", out, "--workers", "2", "--threads", "1", "--chunk-rows", "100"]
    monkeypatch.delitem(sys.modules, "onnxruntime")  # imported afresh, as the first time in a process
    monkeypatch.setattr(sys, "meta_path", [CtrlCWhileStarting("onnxruntime"), *sys.meta_path])
    result = grade(tiny_grader, source, *flags)
    said = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 130 and said == [f"interrupted: {out} was not written and no graded rows were kept; "
                                                "rerun the same command to start again."], result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pairs.tsv"]
    monkeypatch.undo()
    assert grade(tiny_grader, source, *flags).exit_code == 0 and out.exists()


def test_a_bad_row_stops_with_its_line_and_the_fixed_file_resumes(tiny_grader, tmp_path):
    source = write_pairs(tmp_path / "pairs.tsv", 1000, seed=2)
    flags = ["--chunk-rows", "200", "--threads", "1", "--out"]
    assert grade(tiny_grader, source, *flags, tmp_path / "whole.tsv").exit_code == 0
    lines = source.read_text().splitlines(keepends=True)
    good = lines[700]
    lines[700] = "\t" + good.split("\t", 1)[1]  # line 701: an empty query
    source.write_text("".join(lines))
    bad = grade(tiny_grader, source, *flags, tmp_path / "out.tsv")
    assert bad.exit_code == 2
    assert bad.output.strip().splitlines() == [f"error: {source}, line 701, column 'query': empty text; remove the row "
                                               "or fill it in."]
    lines[700] = good
    source.write_text("".join(lines))
    resumed = grade(tiny_grader, source, *flags, tmp_path / "out.tsv", "--resume")
    assert resumed.exit_code == 0 and "600 of them by the interrupted run" in resumed.output
    assert (tmp_path / "out.tsv").read_bytes() == (tmp_path / "whole.tsv").read_bytes()


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_text_the_tokenizer_keeps_nothing_of_is_an_empty_text_named_by_line_and_column(tiny_grader, tmp_path,
                                                                                         workers):
    """Was: combining marks alone, or U+FFFD, passed the text checks and were graded as the empty text [CLS] [SEP]
    [SEP], exit 0; now said as an empty cell is, with the column as the file names it (--title-col)."""
    source = tmp_path / "pairs.tsv"
    source.write_text("q\tname\nq1\tsaw\nq2\t\u0301\u0301\nq3\t\ufffd\n")
    out = tmp_path / "o.tsv"
    bad = grade(tiny_grader, source, "--out", out, "--query-col", "q", "--title-col", "name", "--threads", "1",
                "--chunk-rows", "1", "--workers", workers)
    assert bad.exit_code == 2
    assert bad.output.strip().splitlines() == [
        f"error: {source}, line 3, column 'name': empty text (the grader's tokenizer keeps none of its characters, "
        "such as U+0301); remove the row or fill it in."], bad.output
    assert not out.exists()
    first = tmp_path / "first.tsv"  # in the first chunk: no rows kept, so the folders made for --out go too
    first.write_text("query\ttitle\nq\t\u0301\n")
    bad = grade(tiny_grader, first, "--out", tmp_path / "new" / "folders" / "o.tsv", "--workers", workers)
    assert bad.exit_code == 2 and "line 2, column 'title': empty text" in bad.output, bad.output
    assert not (tmp_path / "new").exists()


def test_resume_refuses_a_changed_input(tiny_grader, tmp_path):
    source = write_pairs(tmp_path / "pairs.tsv", 600, seed=3)
    lines = source.read_text().splitlines(keepends=True)
    source.write_text("".join(lines[:500] + ["x\t\t3\n"] + lines[500:]))  # line 501: an empty title stops the run
    assert grade(tiny_grader, source, "--out", tmp_path / "o.tsv", "--chunk-rows", "100").exit_code == 2
    source.write_text("".join(lines[:1] + ["changed\tquery\t3\n"] + lines[2:]))  # line 2, already graded, changed
    result = grade(tiny_grader, source, "--out", tmp_path / "o.tsv", "--chunk-rows", "100", "--resume")
    assert result.exit_code == 2 and "has changed since the interrupted run read it" in result.output
    assert "(run without --resume and with --overwrite)" in result.output


def test_resume_of_a_changed_input_from_python_names_the_arguments(tiny_grader, tmp_path):
    """Was: `grade it from the start (run without --resume, with --overwrite)` for a Python caller of grade_file,
    who has no such flags: the seek into the changed file says what grade_file's caller writes."""
    from headcut_grader.errors import UserError
    from headcut_grader.grade_file import GradeSettings, grade_file

    source = write_pairs(tmp_path / "pairs.tsv", 600, seed=3)
    lines = source.read_text().splitlines(keepends=True)
    source.write_text("".join(lines[:500] + ["x\t\t3\n"] + lines[500:]))
    settings = GradeSettings(chunk_rows=100)
    with pytest.raises(UserError):
        grade_file(tiny_grader, source, tmp_path / "o.tsv", settings=settings)
    source.write_text("".join(lines[:1] + ["changed\tquery\t3\n"] + lines[2:]))
    with pytest.raises(UserError) as caught:
        grade_file(tiny_grader, source, tmp_path / "o.tsv", settings=settings, resume=True)
    assert str(caught.value).endswith("grade it from the start (run without resume=True and with overwrite=True)."), \
        str(caught.value)


def edit(**changes):
    """Damage that keeps the state valid JSON of the right shape: changed values, `position` keys merged in."""
    def damage(text):
        state = json.loads(text)
        position = {**state["position"], **changes.pop("position", {})}
        return json.dumps({**state, **changes, "position": position})
    return damage


def reshape(change):
    """Damage that keeps the state valid JSON but not of the right shape."""
    return lambda text: json.dumps(change(json.loads(text)))


STATE_DAMAGE = [  # (what happens to the state file's text, words of the reason)
    (lambda text: text[: len(text) // 2], "it is not complete JSON"),
    (lambda text: "", "it is empty"),
    (lambda text: b"\xff\xfe\x00 garbage", "it is not UTF-8 text"),
    (lambda text: "\x00" * len(text), "it is not complete JSON"),
    (edit(rows="100"), "'rows' is missing or not a whole number"),
    (edit(settings={}), "'settings' does not name"),
    (edit(settings={"batch_size": "x"}), "'settings' does not name"),
    (edit(position={"sha256": "zz"}), "'position' is not an offset, a line and a sha256"),
    (edit(position={"offset": 7}), "its contents do not match its checksum"),
    (edit(bytes=10), "its contents do not match its checksum"),
    (reshape(lambda st: {**st, "settings": ["batch_size", 32]}), "'settings' is missing or not a dict"),
    (reshape(lambda st: {k: v for k, v in st.items() if k != "grader_sha256"}), "'grader_sha256' is missing"),
    (reshape(lambda st: {**st, "counts": {}}), "'counts' is not one count per grade"),
    (reshape(lambda st: {**st, "rows": -5}), "'rows' is missing or not a whole number"),
    (reshape(lambda st: {**st, "position": {"offset": "x"}}), "'position' is not"),
    (reshape(lambda st: [st]), "not a state this version"),
]


@pytest.mark.parametrize("damage,words", STATE_DAMAGE)
def test_every_kind_of_state_damage_says_the_state_file_is_damaged(tiny_grader, tmp_path, damage, words):
    """Was: a changed offset or sha256 said the input had changed, a changed 'settings' blamed a flag, a smaller
    'bytes' resumed into a broken file, and an empty or truncated file was 'not a state this version writes'."""
    source = write_pairs(tmp_path / "pairs.tsv", 300, seed=4)
    lines = source.read_text().splitlines(keepends=True)
    source.write_text("".join(lines[:200] + ["x\t\t3\n"] + lines[200:]))  # line 201 stops the run after 100 rows
    out = tmp_path / "o.tsv"
    assert grade(tiny_grader, source, "--out", out, "--chunk-rows", "100").exit_code == 2
    data, state_path = partial_paths(out)
    damaged = damage(state_path.read_text())
    (state_path.write_bytes if isinstance(damaged, bytes) else state_path.write_text)(damaged)
    partial = data.read_bytes()
    source.write_text("".join(lines))  # the bad row fixed: only the state can stop the resume
    result = grade(tiny_grader, source, "--out", out, "--chunk-rows", "100", "--resume")
    assert result.exit_code == 2, result.output
    assert f"the state file {state_path} is damaged ({words}" in result.output, result.output
    assert "--overwrite" in result.output and f"delete {state_path.name}" in result.output
    assert len(result.output.strip().splitlines()) == 1 and data.read_bytes() == partial and not out.exists()


def test_the_runtime_command_says_the_same_of_a_damaged_state(tiny_grader, tmp_path):
    from headcut_grader.cli.main import app as runtime_app

    source = write_pairs(tmp_path / "pairs.tsv", 300, seed=4)
    out = tmp_path / "o.tsv"
    data, state_path = partial_paths(out)
    data.write_text("query\ttitle\n")
    state_path.write_text('{"format": 2, "rows": 1')
    result = CliRunner().invoke(runtime_app, ["grade", str(tiny_grader), str(source), "--out", str(out), "--resume"])
    assert result.exit_code == 2 and f"the state file {state_path} is damaged (it is not complete JSON" in result.output


@pytest.mark.parametrize("flag,value", [("--workers", "0"), ("--chunk-rows", "0"), ("--chunk-rows", "1e9"),
                                        ("--threads", "0")])
def test_new_flags_are_range_checked_before_any_work(tmp_path, flag, value):
    result = grade(tmp_path / "missing", tmp_path / "missing.tsv", "--out", tmp_path / "o.tsv", flag, value)
    assert result.exit_code == 2 and result.output.startswith(f"error: {flag} ")


def test_the_workers_and_chunk_rows_ranges_are_declared_once():
    """GradeSettings' workers and chunk_rows, grade's --workers and --chunk-rows and serve's --workers read one
    declaration each (headcut_grader.ranges WORKERS, CHUNK_ROWS; was: Range(1, MAX_WORKERS) written four times)."""
    import dataclasses
    import inspect

    from headcut_grader.cli.grade import grade as grade_command
    from headcut_grader.cli.serve import serve
    from headcut_grader.ranges import CHUNK_ROWS, WORKERS

    fields = {f.name: f.metadata["range"] for f in dataclasses.fields(GradeSettings) if "range" in f.metadata}
    flags = {(command.__name__, name): p.default.parser.valid for command in (grade_command, serve)
             for name, p in inspect.signature(command).parameters.items() if name in ("workers", "chunk_rows")}
    assert fields["workers"] is WORKERS and fields["chunk_rows"] is CHUNK_ROWS
    expected = {("grade", "workers"): WORKERS, ("grade", "chunk_rows"): CHUNK_ROWS, ("serve", "workers"): WORKERS}
    assert flags.keys() == expected.keys() and all(flags[key] is valid for key, valid in expected.items()), flags


# VmHWM, not ru_maxrss: Linux keeps ru_maxrss across exec, so a child of pytest would report pytest's peak
MEMORY_SCRIPT = """
import sys
from headcut_grader.cli.main import app
try:
    app(sys.argv[1:])
except SystemExit as e:
    assert not e.code, e.code
print(next(line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM:")))
"""


def write_long_titles(path, rows: int, chars: int):
    """`rows` pairs whose titles are ordinary words repeated to `chars` characters."""
    words = synthetic_pairs(50, seed=7).titles
    title = " ".join(words[i % len(words)] for i in range(chars // 20))[:chars].strip()
    with open(path, "w", encoding="utf-8") as f:
        f.write("query\ttitle\n")
        for i in range(rows):
            f.write(f"cordless drill {i}\t{title}\n")
    return path


def peak_rss_mib(*args) -> float:
    done = subprocess.run([sys.executable, "-c", MEMORY_SCRIPT, *map(str, args)], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "TQDM_DISABLE": "1"})
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[-1]) / 1024  # VmHWM is in KiB


@pytest.mark.slow
def test_peak_memory_does_not_grow_with_rows(tiny_grader, tmp_path):
    """2k and 20k rows in chunks of 500. The reader that held the whole file (before chunks) peaked at 92 MiB and
    157 MiB: +65 MiB for the 18k more rows; in chunks the two peaks are within a few MiB."""
    peaks = {}
    for n in (2_000, 20_000):
        source = write_pairs(tmp_path / f"pairs{n}.tsv", n, seed=4)
        peaks[n] = peak_rss_mib("grade", tiny_grader, source, "--out", tmp_path / f"out{n}.jsonl", "--chunk-rows",
                                "500", "--threads", "1")
    print(f"\npeak RSS: {peaks[2_000]:.0f} MiB at 2k rows, {peaks[20_000]:.0f} MiB at 20k rows")
    assert peaks[20_000] - peaks[2_000] < 8, peaks


def test_peak_memory_does_not_grow_with_text_length(tiny_grader, tmp_path):
    """50 rows of 1M-character titles (a 50 MB file, 7 chunks of characters) at the default --chunk-rows, against
    50 short rows. When the tokenizer read whole texts (offsets and overflowing tokens of each) and a chunk of
    10,000 rows held the whole file, 20 such rows already peaked at 1,049 MiB against 84 MiB (~48 MiB a row); a
    text is now tokenised as far as max_length needs and a chunk also ends at data.CHUNK_CHARS characters
    (measured: 135 vs 84 MiB)."""
    peaks = {}
    for chars in (100, 1_000_000):
        source = write_long_titles(tmp_path / f"titles{chars}.tsv", 50, chars)
        peaks[chars] = peak_rss_mib("grade", tiny_grader, source, "--out", tmp_path / f"out{chars}.tsv",
                                    "--threads", "1")
        (tmp_path / f"out{chars}.tsv").unlink()
    print(f"\npeak RSS: {peaks[100]:.0f} MiB with 100-character titles, {peaks[1_000_000]:.0f} MiB with 1M")
    assert peaks[1_000_000] - peaks[100] < 100, peaks



@pytest.fixture(scope="module")
def tiny_reranker(tmp_path_factory):
    """A tiny one-score grader (task score: its grader.json names no grades)."""
    from conftest import tiny_model
    from test_export import tiny_tokenizer

    from headcut.data_spec import as_scores
    from headcut.export.build import build_grader
    from headcut.models import LoadedModel

    root = tmp_path_factory.mktemp("reranker")
    tokenizer = tiny_tokenizer(root / "tok")
    model = tiny_model("bert", num_labels=1, vocab_size=len(tokenizer), max_position_embeddings=128)
    loaded = LoadedModel(model, tokenizer, {"task": "score", "activation": "identity", "max_length": 64}, "tiny",
                         "0" * 16)
    build_grader(loaded, root / "grader", pairs=as_scores(synthetic_pairs(60)))
    return root / "grader"


def stopped_at_row_100(grader, tmp_path, *flags):
    """A run (with `flags`) stopped by a bad line 101 after grading 100 rows, its partial kept; the fixed source."""
    source = write_pairs(tmp_path / "pairs.tsv", 300, seed=6)
    lines = source.read_text().splitlines(keepends=True)
    source.write_text("".join(lines[:101] + ["x\t\t3\n"] + lines[101:]))
    stopped = grade(grader, source, "--out", tmp_path / "o.tsv", "--chunk-rows", "100", *flags)
    assert stopped.exit_code == 2 and "line 102" in stopped.output, stopped.output
    source.write_text("".join(lines))
    return source


def test_a_json_array_stopped_by_a_bad_item_resumes_once_it_is_fixed(tiny_grader, tmp_path):
    """A JSON array is read item by item and a resume continues after the last graded item, checking the bytes
    before it, as for lines (was: read whole, so fixing a later item counted as a changed file)."""
    pairs = synthetic_pairs(300, seed=8)
    items = [json.dumps({"query": q, "title": t, "grade": pairs.grades[y]})
             for q, t, y in zip(pairs.queries, pairs.titles, pairs.labels)]
    source = tmp_path / "pairs.json"
    flags = ["--chunk-rows", "100", "--threads", "1", "--out"]
    source.write_text("[" + ",\n".join(items[:150] + ['{"query": "x", "title": "", "grade": 3}'] + items[150:]) + "]")
    bad = grade(tiny_grader, source, *flags, tmp_path / "o.jsonl")
    assert bad.exit_code == 2 and "line 151, column 'title': empty text" in bad.output, bad.output
    source.write_text("[" + ",\n".join(items) + "]")
    resumed = grade(tiny_grader, source, *flags, tmp_path / "o.jsonl", "--resume")
    assert resumed.exit_code == 0 and "100 of them by the interrupted run" in resumed.output, resumed.output
    assert grade(tiny_grader, source, *flags, tmp_path / "whole.jsonl").exit_code == 0
    assert (tmp_path / "o.jsonl").read_bytes() == (tmp_path / "whole.jsonl").read_bytes()


def test_a_reranker_run_resumes_to_the_same_bytes(tiny_reranker, tmp_path):
    """Was: a score grader's resume crashed with KeyError 'grades' (its grader.json names none)."""
    source = stopped_at_row_100(tiny_reranker, tmp_path)
    resumed = grade(tiny_reranker, source, "--out", tmp_path / "o.tsv", "--chunk-rows", "100", "--resume")
    assert resumed.exit_code == 0, resumed.output
    whole = grade(tiny_reranker, source, "--out", tmp_path / "whole.tsv", "--chunk-rows", "100")
    assert whole.exit_code == 0 and (tmp_path / "o.tsv").read_bytes() == (tmp_path / "whole.tsv").read_bytes()


@pytest.mark.parametrize("first", ["grader", "reranker"])
def test_a_resume_with_another_grader_says_so(tiny_grader, tiny_reranker, tmp_path, first):
    """Was: a reranker resuming a grader's run crashed; a grader resuming a reranker's said the state was damaged."""
    graders = {"grader": tiny_grader, "reranker": tiny_reranker}
    other = graders["reranker" if first == "grader" else "grader"]
    source = stopped_at_row_100(graders[first], tmp_path)
    result = grade(other, source, "--out", tmp_path / "o.tsv", "--chunk-rows", "100", "--resume")
    assert result.exit_code == 2 and "the interrupted run used another grader" in result.output, result.output


def test_resume_without_a_state_does_not_start_over_silently(tiny_grader, tmp_path):
    """Was: a partial whose state file was gone was overwritten from row 1 under --resume, without a word."""
    source = stopped_at_row_100(tiny_grader, tmp_path)
    data, state = partial_paths(tmp_path / "o.tsv")
    state.unlink()
    kept = data.read_bytes()
    result = grade(tiny_grader, source, "--out", tmp_path / "o.tsv", "--chunk-rows", "100", "--resume")
    assert result.exit_code == 2 and "--resume has nothing to continue" in result.output, result.output
    assert data.read_bytes() == kept


def test_a_second_grade_on_the_out_of_a_live_one_is_refused_and_leaves_its_rows_alone(tiny_grader, tmp_path):
    """Was: a second grade with --overwrite (or --resume) on the OUT of a live one truncated its partial file
    under it, and the first, exit 0, renamed a file with megabytes of NUL bytes to OUT."""
    from test_run_folder import held_lock

    source = stopped_at_row_100(tiny_grader, tmp_path)
    data, state = partial_paths(tmp_path / "o.tsv")
    kept = data.read_bytes()
    with held_lock(data):  # the live grade's
        for flag in ("--overwrite", "--resume"):
            result = grade(tiny_grader, source, "--out", tmp_path / "o.tsv", "--chunk-rows", "100", flag)
            assert result.exit_code == 2 and result.output.strip() == (
                f"error: {tmp_path / 'o.tsv'}: another grade is writing it; wait for it to finish, or choose another "
                "--out."), result.output
            assert data.read_bytes() == kept
    resumed = grade(tiny_grader, source, "--out", tmp_path / "o.tsv", "--chunk-rows", "100", "--resume")
    assert resumed.exit_code == 0 and "graded 300 pairs" in resumed.output, resumed.output


def test_a_python_caller_is_told_its_own_arguments_not_the_commands_flags(tiny_grader, tmp_path):
    """Was: grade_file called from Python named `headcut grade`'s flags (--out ... is inside the input, pass --resume
    to continue it, --chunk-rows is 200, choose another --out); now it names the call's own arguments, and the
    command, which passes names="flags", keeps its flags (test_killed_run_resumes_to_the_same_bytes and others)."""
    from headcut_grader.errors import UserError
    from headcut_grader.grade_file import GradeSettings, grade_file
    from test_run_folder import held_lock

    inside = tiny_grader / "o.tsv"
    with pytest.raises(UserError, match=rf"^out={inside} is inside the input {tiny_grader},"):
        grade_file(tiny_grader, write_pairs(tmp_path / "p.tsv", 5), inside)
    source = stopped_at_row_100(tiny_grader, tmp_path)
    out = tmp_path / "o.tsv"
    said = {}
    for case, kwargs in {"left": {}, "changed": {"resume": True}, "locked": {"overwrite": True}}.items():
        settings = GradeSettings(chunk_rows=200 if case == "changed" else 100)
        with held_lock(partial_paths(out)[0]) if case == "locked" else nullcontext(), pytest.raises(UserError) as e:
            grade_file(tiny_grader, source, out, settings=settings, **kwargs)
        said[case] = str(e.value)
    assert "pass resume=True to continue it, or overwrite=True to start again." in said["left"]
    assert "chunk_rows is 200 but the interrupted run used 100; resume with the same settings, or run without " \
           "resume=True and with overwrite=True." in said["changed"]
    assert said["locked"].endswith("or choose another out.")
    assert not any("--" in text for text in said.values()), said


@pytest.mark.parametrize("name", ["grades.json", "grades.JSON"])
def test_an_output_named_json_is_refused_as_grades_are_json_lines(tiny_grader, tmp_path, name):
    """Was: JSON lines written under a .json name, which json.load and other tools read as one broken document."""
    source = write_pairs(tmp_path / "pairs.tsv", 5)
    result = grade(tiny_grader, source, "--out", tmp_path / name)
    said = " ".join(result.output.split())
    assert result.exit_code == 2, result.output
    assert f"--out {tmp_path / name}: grades are written as JSON lines, not one JSON document; name the file " \
           ".jsonl (such as grades.jsonl)." in said
    assert list(tmp_path.iterdir()) == [source]  # nothing written, no partial files
    assert grade(tiny_grader, source, "--out", tmp_path / "grades.jsonl").exit_code == 0


@pytest.mark.parametrize("out", ["/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"])
def test_an_output_in_the_system_s_device_folders_is_refused_as_standard_output_is(tiny_grader, tmp_path, out):
    """Was: --out /dev/stdout with standard output sent to a file said '--out /dev/stdout exists; ... pass
    --overwrite', and with --overwrite root's rename replaced /dev/stdout, the system's link, with the grades."""
    from headcut_grader.errors import UserError
    from headcut_grader.files import check_place

    source = write_pairs(tmp_path / "pairs.tsv", 5)
    result = grade(tiny_grader, source, "--out", out)
    folder = "/dev" if out == "/dev/stdout" else "/proc"
    assert result.exit_code == 2 and " ".join(result.output.split()) == (
        f"error: --out {out} would write into {folder}, where the system keeps devices and streams (standard output "
        "too), not files: headcut writes its outputs to files (atomically); name a file or folder, e.g. --out "
        "results."), result.output
    with pytest.raises(UserError, match=r"^out=/dev/stderr would write into /dev, "):
        check_place("/dev/stderr")
    if os.access("/dev/shm", os.W_OK):  # a folder of files inside /dev, where there is one
        check_place("/dev/shm/grades.tsv")


@pytest.mark.parametrize("suffix", ["tsv", "csv"])
def test_a_text_holding_a_carriage_return_is_written_quoted_and_reads_back(tiny_grader, tmp_path, suffix):
    """Was: a query or title holding a bare CR (from JSON lines) was written unquoted, csv quoting only the
    characters of its line terminator (LF), so the grades file was refused by grade itself ('a carriage return (CR)
    without a line feed (LF) outside quotes') and split into two rows by other readers."""
    from headcut_grader.data import read_pairs

    source = tmp_path / "pairs.jsonl"
    texts = [("a\rb", "c\r\nd"), ("x", "y, \"z\"\te"), ("p\nq", "r")]
    source.write_text("".join(json.dumps({"query": q, "title": t}) + "\n" for q, t in texts))
    out = tmp_path / f"grades.{suffix}"
    result = grade(tiny_grader, source, "--out", out, "--threads", "1")
    assert result.exit_code == 0, result.output
    back = read_pairs(out, require_labels=False)
    assert list(zip(back.queries, back.titles)) == texts
    assert b"\r\n" not in out.read_bytes().replace(b"c\r\nd", b"")  # every row still ends in LF


def test_an_output_whose_suffix_names_another_format_is_refused(tiny_grader, tmp_path):
    """Was: `--out grades.md` said 'grades.md: cannot tell the format from the suffix', naming no flag and offering
    .json, itself refused; GradeSettings(out_format='tsv') wrote TSV into grades.jsonl in silence."""
    from headcut_grader.errors import UserError
    from headcut_grader.grade_file import grade_file

    source = write_pairs(tmp_path / "pairs.tsv", 5)
    result = grade(tiny_grader, source, "--out", tmp_path / "grades.md")
    assert result.exit_code == 2, result.output
    assert f"--out {tmp_path / 'grades.md'}: grades are written as TSV, CSV or JSON lines, as the suffix says; name " \
           "the file .tsv, .csv, .jsonl or .txt (such as grades.tsv)." in " ".join(result.output.split())
    compressed = grade(tiny_grader, source, "--out", tmp_path / "grades.csv.gz")  # was: 'such as grades.csv.tsv'
    assert compressed.exit_code == 2 and "or .txt (such as grades.csv)." in " ".join(compressed.output.split())
    with pytest.raises(UserError, match=r"grades.jsonl: settings.out_format is 'tsv', so grades are written as TSV; "
                                        r"name the file .tsv or .txt \(such as grades.tsv\)."):
        grade_file(tiny_grader, source, tmp_path / "grades.jsonl", settings=GradeSettings(out_format="tsv"))
    assert list(tmp_path.iterdir()) == [source]
    grade_file(tiny_grader, source, tmp_path / "grades", settings=GradeSettings(out_format="csv"))
    assert (tmp_path / "grades").read_text().startswith("query,title")


@pytest.mark.parametrize("settings, words", [
    ({"threads": 2}, "settings is {'threads': 2}; pass a headcut_grader.grade_file.GradeSettings(...)."),
    (None, "settings is None; pass a headcut_grader.grade_file.GradeSettings(...)."),
    (GradeSettings(chunk_rows=0), "settings.chunk_rows is 0; it must be a whole number in [1, 10000000]."),
    (GradeSettings(chunk_rows=float("nan")),
     "settings.chunk_rows is nan; it must be a whole number in [1, 10000000]."),
    (GradeSettings(workers=0), "settings.workers is 0; it must be a whole number in [1, 256]."),
    (GradeSettings(workers=10**12), "settings.workers is 1000000000000; it must be a whole number in [1, 256]."),
    (GradeSettings(threads="2"), "settings.threads is '2'; it must be a whole number in [1, 256]."),
    (GradeSettings(out_format="xml"),
     "settings.out_format is 'xml'; use one of: tsv, csv, jsonl (or None: from out's suffix)."),
])
def test_grade_file_from_python_checks_its_settings_before_any_work(tiny_grader, tmp_path, settings, words):
    """Was: settings={'threads': 2} an AttributeError, workers=0 a ValueError and workers=10**12 an OverflowError
    from the process pool, chunk_rows=0 graded anyway, and out_format='xml' wrote CSV into out."""
    from headcut_grader.errors import UserError
    from headcut_grader.grade_file import grade_file

    source = write_pairs(tmp_path / "pairs.tsv", 5)
    with pytest.raises(UserError) as e:
        grade_file(tiny_grader, source, tmp_path / "o.tsv", settings=settings)
    assert str(e.value) == words
    assert list(tmp_path.iterdir()) == [source]


@pytest.mark.parametrize("settings, words", [
    (GradeSettings(backend="gpu"), "settings.backend is 'gpu'; use one of: auto, onnxruntime, openvino."),
    (GradeSettings(backend=None), "settings.backend is None; use one of: auto, onnxruntime, openvino."),
    (GradeSettings(preset="x"), "settings.preset='x' is unknown; choose one of: homedepot, qbqtc."),
    (GradeSettings(preset=["homedepot"]), "settings.preset=['homedepot'] is unknown; choose one of: homedepot, qbqtc."),
    (GradeSettings(query_col=0), "settings.query_col is 0; pass a column's name as text, or None."),
    (GradeSettings(label_col=b"grade"), "settings.label_col is b'grade'; pass a column's name as text, or None."),
])
def test_grade_file_names_every_setting_as_settings_dot_field_before_reading(tiny_grader, tmp_path, monkeypatch,
                                                                            settings, words):
    """Was: "Grader backend is 'gpu'", "preset='x' is unknown", "iter_pairs query_col is 0", naming what the
    caller never wrote, and the backend only after the first chunk was read (preset=['homedepot']: a TypeError)."""
    import headcut_grader.grade_file as module
    from headcut_grader.errors import UserError

    source = write_pairs(tmp_path / "pairs.tsv", 5)
    monkeypatch.setattr(module, "iter_pairs", lambda *a, **k: pytest.fail("the file was read"))
    with pytest.raises(UserError) as e:
        module.grade_file(tiny_grader, source, tmp_path / "o.tsv", settings=settings)
    assert str(e.value) == words


def test_grade_file_names_a_missing_column_s_setting_as_settings_dot_field(tiny_grader, tmp_path):
    from headcut_grader.errors import UserError
    from headcut_grader.grade_file import grade_file

    source = write_pairs(tmp_path / "pairs.tsv", 5)
    with pytest.raises(UserError, match=r"no label column 'gold' .*; name it with settings\.label_col=NAME\.$"):
        grade_file(tiny_grader, source, tmp_path / "o.tsv", settings=GradeSettings(label_col="gold"))


@pytest.mark.parametrize("name, text, args, sentence", [
    ("gold.tsv", "query\ttitle\tlabel\nq\tt\tfoo\n", ("--label-col", "label"),
     "label 'foo' is not a number; write a grade such as 3, or drop the row."),
    ("gold.tsv", "query\ttitle\tlabel\nq\tt\t2.5\n", ("--label-col", "label"),
     "label 2.5 is not a whole grade; fix the row or drop it."),
    ("gold.jsonl", '{"query": "q", "title": "t", "label": "7"}\n', ("--preset", "qbqtc"),
     "label '7' is not in the label map ['0', '1', '2']; fix the row or drop it."),
])
def test_a_gold_label_grade_cannot_read_is_the_row_s_to_fix_not_a_label_map_s(tiny_grader, tmp_path, name, text,
                                                                              args, sentence):
    """grade takes no label map. Was: 'pass --label-map to map it to a grade', 'pass --label-map round to round
    scores' and 'extend --label-map' (label_map from grade_file), flags and arguments it does not have."""
    from headcut_grader.errors import UserError
    from headcut_grader.grade_file import grade_file

    source = tmp_path / name
    source.write_text(text)
    result = grade(tiny_grader, source, "--out", tmp_path / "o.tsv", *args)
    line = 2 if name.endswith(".tsv") else 1
    assert result.exit_code == 2 and " ".join(result.output.split()) == (
        f"error: {source}, line {line}, column 'label': {sentence}"), result.output
    settings = GradeSettings(label_col="label") if "--label-col" in args else GradeSettings(preset="qbqtc")
    with pytest.raises(UserError) as e:
        grade_file(tiny_grader, source, tmp_path / "o.tsv", settings=settings)
    assert str(e.value).endswith(sentence)


def test_gold_grades_are_read_against_the_grader_s_own_grades(tiny_grader, tmp_path):
    """Was: grade read the gold column against 1..5 whatever the grader's grades, so a 0..4 grader's gold 0 was
    refused ('grade 0 is not one of the grades [1, 2, 3, 4, 5]') and a gold 5, which it lacks, kept as true_grade."""
    import shutil

    folder = tmp_path / "zero-based"
    shutil.copytree(tiny_grader, folder)
    record = json.loads((folder / "grader.json").read_text())
    record["grades"], record["label_map"] = [0, 1, 2, 3, 4], {str(i): i for i in range(5)}
    (folder / "grader.json").write_text(json.dumps(record))
    good, bad = tmp_path / "good.tsv", tmp_path / "bad.tsv"
    good.write_text("query\ttitle\tgrade\ndrill\tcordless drill\t0\nsaw\thand saw\t4\n")
    bad.write_text("query\ttitle\tgrade\ndrill\tcordless drill\t5\n")
    result = grade(folder, good, "--out", tmp_path / "o.tsv")
    assert result.exit_code == 0, result.output
    with open(tmp_path / "o.tsv", newline="") as f:
        assert [row["true_grade"] for row in csv.DictReader(f, delimiter="\t")] == ["0", "4"]
    result = grade(folder, bad, "--out", tmp_path / "o2.tsv")
    assert result.exit_code == 2 and " ".join(result.output.split()) == (
        f"error: {bad}, line 2, column 'grade': grade 5 is not one of the grades [0, 1, 2, 3, 4]; fix the row or "
        "drop it."), result.output


def test_a_ctrl_c_line_looks_at_out_once_as_the_command_begins_and_once_as_it_stops(tiny_grader, tmp_path,
                                                                                   monkeypatch):
    """Was: user_errors and the grade command each marked --out as the command began (two stats of it); the
    command's written_whole(out) now reuses user_errors' mark."""
    import headcut_grader.cli.common as common
    import headcut_grader.grade_file as grade_file

    source, out = write_pairs(tmp_path / "pairs.tsv", 30, seed=9), tmp_path / "out.tsv"
    marks = []
    real = common.path_mark
    monkeypatch.setattr(common, "path_mark", lambda path: marks.append(path) or real(path))
    monkeypatch.setattr(grade_file, "grade_file", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt))
    result = grade(tiny_grader, source, "--out", out)
    assert result.exit_code == 130 and result.output.splitlines() == [
        f"interrupted: {out} was not written and no graded rows were kept; rerun the same command to start again."]
    assert marks == [out, out]


def test_a_start_marks_the_starting_stage_once(monkeypatch, capsys):
    """Was: entry.run and the app's OneLineErrors.main each set the stage to STARTING as a command began; the app's
    (which every invocation passes, CliRunner's and `python -m headcut.cli.main`'s too) now does it alone."""
    from headcut_grader import entry

    stages = []
    monkeypatch.setattr(entry, "reached", stages.append)
    monkeypatch.setattr(sys, "argv", ["headcut-grader", "--version"])
    with pytest.raises(SystemExit) as done:
        entry.run("headcut_grader.cli.main")
    assert done.value.code == 0 and capsys.readouterr().out.startswith("headcut-grader ")
    assert stages == [entry.STARTING]
