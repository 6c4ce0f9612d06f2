"""Training under `accelerate launch --num_processes 2`: `training.train` splits each batch between the
processes and follows the one-process trajectory (same steps, same learning-rate schedule, same weights),
extra modules included; the whole finetune and distill commands publish once, print once, and resume
exactly. CPU-only machines join the processes over gloo (--multi_gpu, as for scan)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).with_name("two_process_train.py")
COMMANDS = Path(__file__).with_name("two_process_commands.py")
LAUNCHER = Path(sys.executable).parent / "accelerate"
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}

needs_launcher = pytest.mark.skipif(not LAUNCHER.exists() and shutil.which("accelerate") is None,
                                    reason="the accelerate launcher is not installed next to this python")
cpu_only = pytest.mark.skipif(torch.cuda.is_available(),
                              reason="the two-process check is written for a CPU-only machine (gloo)")


def launch(script: Path, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    p = subprocess.run([str(LAUNCHER), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
                        "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "0",
                        str(script), *args], capture_output=True, text=True, env=ENV, timeout=timeout)
    assert p.returncode == 0, p.stdout + p.stderr
    return p


@needs_launcher
@cpu_only
def test_two_processes_split_each_batch_and_end_where_one_does(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    p = subprocess.run([sys.executable, str(SCRIPT), str(one)], capture_output=True, text=True, env=ENV, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    launch(SCRIPT, str(two))
    a, b = torch.load(one / "final.pt"), torch.load(two / "final.pt")
    assert a["steps"] == b["steps"] == 18 and a["examples"] == b["examples"] == 122
    for part in ("model", "projection"):
        for name, value in a[part].items():
            assert torch.allclose(value, b[part][name], atol=2e-5, rtol=1e-4), (part, name)
    assert (a["projection"]["weight"] - a["projection_start"]["weight"]).abs().max() > 1e-3  # gradients reached it


@needs_launcher
@cpu_only
def test_a_nan_loss_on_one_process_stops_every_process(tmp_path):
    """Was: the loss check ran per process, so a NaN on the second process alone stopped it while the first
    waited in the gradient all-reduce (for gloo's 30-minute timeout). The launch's 300 s (the other launches'
    bound) leaves room for a loaded machine and still fails long before that hang would end."""
    launch(SCRIPT, str(tmp_path), "nan", timeout=300)
    stopped = [(tmp_path / f"stopped-{rank}.txt").read_text() for rank in (0, 1)]
    assert [text.split()[0] for text in stopped] == ["3", "3"], stopped  # both at the third batch
    assert all("training diverged: a batch's loss is nan" in text for text in stopped), stopped


@needs_launcher
@cpu_only
def test_two_process_commands_publish_once_print_once_and_resume_exactly(tmp_path):
    """finetune and distill, straight and interrupted-then-resumed, on a tiny model with dropout on: every
    process must resume with its own random numbers for the resumed run to end where the straight one does."""
    import yaml

    from headcut.models import LoadedModel, load_model, save_model
    from test_distill import GRADES, recipe_for, tiny_tokenizer
    from conftest import tiny_model

    tok = tiny_tokenizer()
    save_model(LoadedModel(tiny_model("bert", attn="sdpa", vocab_size=len(tok)), tok), tmp_path / "base")
    teacher = tiny_model("bert", attn="sdpa", vocab_size=len(tok), num_hidden_layers=4, initializer_range=0.5)
    save_model(LoadedModel(teacher, tok, {"grades": GRADES, "max_length": 32}), tmp_path / "teacher")
    finetune = dict(model=str(tmp_path / "base"), train_data="synthetic", train_rows=160, dev_rows=40,
                    max_length=24, epochs=1, batch_size=16, learning_rate=1e-3, eval_every=4, checkpoint_every=3)
    (tmp_path / "finetune.yaml").write_text(yaml.safe_dump(finetune))
    distill = recipe_for(tmp_path / "teacher", train_rows=160, dev_rows=40, epochs=1, eval_every=4, checkpoint_every=3)
    (tmp_path / "distill.yaml").write_text(yaml.safe_dump(
        {k: list(v) if isinstance(v, tuple) else v for k, v in distill.__dict__.items()}))

    p = launch(COMMANDS, str(tmp_path), timeout=600)
    for name in ("straight", "resumed", "student"):
        assert p.stdout.count(f"wrote {tmp_path / name}") == 1, p.stdout  # the main process alone prints
        assert (tmp_path / name / "headcut.json").exists() and not (tmp_path / f"{name}.partial").exists()
    straight, resumed = load_model(tmp_path / "straight").model, load_model(tmp_path / "resumed").model
    assert straight.config.hidden_dropout_prob > 0
    for (name, a), b in zip(straight.state_dict().items(), resumed.state_dict().values()):
        assert torch.allclose(a, b, atol=1e-6), name
    student = json.loads((tmp_path / "student" / "headcut.json").read_text())
    assert (student["kind"] == "distill"
            and set(student["metrics"]) == {"teacher", "before", "after", "after_minus_teacher"})


def test_the_process_group_is_closed_at_exit(tmp_path):
    """A process that left its gloo group open aborted once at exit in CI ('terminate called without an active
    exception', SIGABRT) after refusing a NaN loss; every process that opens the group now closes it at exit."""
    import subprocess
    import sys

    script = ("import atexit, torch.distributed as dist\n"
              "from headcut.process_group import close_at_exit\n"
              f"dist.init_process_group('gloo', init_method='file://{tmp_path / 'store'}', rank=0, world_size=1)\n"
              # atexit runs last in, first out: this check runs after the close registered below
              "atexit.register(lambda: print('open' if dist.is_initialized() else 'closed'))\n"
              "close_at_exit(); close_at_exit()\n")  # registered once, however often called
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["closed"], out.stdout + out.stderr
