"""The run folder of finetune and distill (OUT.partial): one live run at a time, and publishing that a kill
cannot leave half done."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from contextlib import contextmanager

import pytest

from headcut.run_folder import LOCK_FILE, RunFolder
from headcut_grader.errors import UserError

HOLD = ("import fcntl, sys, time; f = open(sys.argv[1], 'a'); fcntl.flock(f, fcntl.LOCK_EX); "
        "print('held', flush=True); sys.stdin.read()")  # held until killed


@contextmanager
def held_lock(path):
    """`path` flock-ed by another process (a live run) inside the block."""
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        yield
    finally:
        holder.kill()
        holder.wait()


def test_a_second_run_on_a_live_run_folder_is_refused_and_leaves_it_alone(tmp_path):
    """Was: two finetunes on one --out trained into the same OUT.partial, and a second one with --overwrite and
    another seed deleted the live run's checkpoint and best model from under it; both said 'wrote OUT'."""
    out, partial = tmp_path / "run", tmp_path / "run.partial"
    (partial / "checkpoint").mkdir(parents=True)  # the first run's, in the process below
    (partial / "recipe.json").write_text(json.dumps({"hash": "first"}))
    with held_lock(partial / LOCK_FILE):
        for run_hash in ("first", "second"):
            with pytest.raises(UserError, match=f"another run is using {partial}; wait for it"):
                RunFolder.open(out, run_hash, {}, overwrite=True)
        assert ((partial / "checkpoint").is_dir()
                and json.loads((partial / "recipe.json").read_text())["hash"] == "first")
    assert RunFolder.open(out, "second", {}, overwrite=True).path == partial  # a dead run holds nothing
    assert sorted(p.name for p in partial.iterdir()) == [LOCK_FILE, "recipe.json"]



def test_a_kill_while_the_published_run_folder_is_removed_leaves_no_run_folder_behind(tmp_path, monkeypatch):
    """Was: publishing moved best/ to OUT, then removed OUT.partial in place; a kill meanwhile (a checkpoint takes
    a while to delete) left OUT.partial without best/, forever, and a rerun with --overwrite resumed it as finished
    and crashed (FileNotFoundError: OUT.partial/best/headcut.json)."""
    import headcut.run_folder as run_folder

    out = tmp_path / "run"
    folder = RunFolder.open(out, "abc", {}, overwrite=False)
    folder.best.mkdir()
    (folder.best / "headcut.json").write_text("{}")
    (folder.path / "checkpoint").mkdir()

    def killed(path, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(run_folder.shutil, "rmtree", killed)
    with pytest.raises(KeyboardInterrupt):
        folder.publish({"training": {}})
    monkeypatch.undo()
    assert json.loads((out / "headcut.json").read_text())["training"] == {} and not folder.path.exists()
    [leftover] = tmp_path.glob(".run.partial.tmp-*")
    assert (leftover / "checkpoint").is_dir()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    leftover.rename(leftover.with_name(leftover.name.replace(f"-{os.getpid()}@", f"-{gone.stdout.strip()}@")))
    assert not (RunFolder.open(out, "abc", {}, overwrite=True).path / "checkpoint").exists()
    assert not list(tmp_path.glob(".run.partial.tmp-*"))  # a dead run's leftover goes with the next run on OUT


def test_a_folder_at_the_run_folder_that_no_run_made_is_refused_and_kept(tmp_path):
    """Was: a folder at OUT.partial without a recipe.json (a user's own, a copied model) was taken as this run's: the
    run wrote into it and deleted it, whole, once it published OUT. Now refused; --overwrite empties it."""
    out, partial = tmp_path / "run", tmp_path / "run.partial"
    (partial / "best").mkdir(parents=True)
    (partial / "best" / "keep.txt").write_text("mine")
    with pytest.raises(UserError, match=r"run.partial is a folder that no headcut run made \(it holds no recipe.json\)"
                                        r".*; move it away, or pass overwrite=True to empty it\."):
        RunFolder.open(out, "abc", {}, overwrite=False)  # from Python: its argument (a command passes --out)
    assert sorted(p.name for p in partial.rglob("*")) == ["best", "keep.txt"]
    assert sorted(p.name for p in RunFolder.open(out, "abc", {}, overwrite=True).path.iterdir()) == [LOCK_FILE,
                                                                                                     "recipe.json"]


def test_a_run_folder_a_kill_left_before_its_stamp_is_resumed(tmp_path):
    """A run killed between making OUT.partial and stamping it leaves the lock (and the stamp's temporary): the
    folder is still taken as a run folder, not refused as another's."""
    partial = tmp_path / "run.partial"
    partial.mkdir()
    (partial / LOCK_FILE).write_text("")
    (partial / ".recipe.json.tmp-1@host-abc").write_text('{"ha')
    assert RunFolder.open(tmp_path / "run", "abc", {}, overwrite=False).path == partial


@pytest.mark.parametrize("where", ["run.partial", "run.partial/best"])
def test_an_input_at_the_run_folder_is_refused_even_with_overwrite(tmp_path, where):
    """Was: a teacher (or base model, or data file) at OUT.partial, e.g. distill --set teacher=runs/t.partial --out
    runs/t, was trained into and deleted once the student was published. Now refused before any work."""
    from headcut.run_folder import check_run_out

    teacher = tmp_path / where
    teacher.mkdir(parents=True)
    (teacher / "config.json").write_text("{}")
    for overwrite in (False, True):
        with pytest.raises(UserError, match=rf"^out={tmp_path / 'run'}: its run folder {tmp_path / 'run.partial'} "
                                            rf"would replace the input {teacher}; write the output somewhere else\.$"):
            check_run_out(tmp_path / "run", overwrite=overwrite, inputs=[None, str(teacher)])
    assert (teacher / "config.json").read_text() == "{}"


def test_a_foreign_run_folder_is_refused_before_any_work(tmp_path):
    from headcut.run_folder import check_run_out

    (tmp_path / "run.partial" / "x").mkdir(parents=True)
    with pytest.raises(UserError, match="is a folder that no headcut run made"):
        check_run_out(tmp_path / "run", overwrite=False)
    check_run_out(tmp_path / "run", overwrite=True)
    assert (tmp_path / "run.partial" / "x").is_dir()  # emptied only once the run opens it


def _entry_points():
    """finetune, distill, distill's search and the pipeline, each as a Python call on `out` and as its command."""
    from headcut.distill import DistillRecipe, distill
    from headcut.distill.tune import tune
    from headcut.finetune import FinetuneRecipe, finetune
    from headcut.pipeline import load_pipeline, run_pipeline
    from headcut.recipes import load_recipe

    student = ["distill/minilm_bottom3_cpu", "--set", "train_data=synthetic", "--set", "teacher=minilm-l6"]
    distilled = lambda: load_recipe(DistillRecipe, student[0], overrides=student[2::2])  # noqa: E731
    return {
        "finetune": (lambda out: finetune(load_recipe(FinetuneRecipe, "finetune/minilm_synthetic_cpu"), out),
                     ["finetune", "finetune/minilm_synthetic_cpu"]),
        "distill": (lambda out: distill(distilled(), out), ["distill", *student]),
        "tune": (lambda out: tune(distilled(), out, trials=1), ["distill", *student, "--tune", "1"]),
        "run": (lambda out: run_pipeline(load_pipeline("quickstart"), out), ["run", "quickstart"]),
    }


@pytest.mark.parametrize("entry", ["finetune", "distill", "tune", "run"])
def test_a_python_caller_is_told_out_and_overwrite_a_command_its_flags(tmp_path, entry):
    """Was: finetune(recipe, out), distill, tune and run_pipeline called from Python refused a non-empty `out` as
    '--out OUT is not empty; ... pass --overwrite', flags that call never had; now 'out=OUT ... pass overwrite=True',
    and each command, which passes names="flags", still says --out and --overwrite."""
    from typer.testing import CliRunner

    from headcut.cli.main import app

    out = tmp_path / "mine"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    call, command = _entry_points()[entry]
    with pytest.raises(UserError) as e:
        call(out)
    said = CliRunner().invoke(app, [*command, "--out", str(out)])
    assert str(e.value).startswith(f"out={out} is not empty") and "pass overwrite=True" in str(e.value), e.value
    assert "--" not in str(e.value), e.value
    assert said.exit_code == 2 and f"--out {out} is not empty" in said.output, said.output
    assert "pass --overwrite" in " ".join(said.output.split()), said.output
    assert (out / "keep.txt").read_text() == "mine"
