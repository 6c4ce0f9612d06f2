"""`headcut scan` under `accelerate launch --num_processes 2`: the ablation forwards are split between the
processes and gathered, and the scores equal a single-process scan's; only the main process writes.

On a CPU-only machine accelerate 1.x starts N processes only with --multi_gpu (`--cpu` alone runs one
process unless mpirun is given a hostfile); headcut then joins them over gloo."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from conftest import need_minilm, tiny_model
from headcut.cli.main import app
from headcut.evaluate.ablation import ablation_logits, merge_shares
from headcut.evaluate.importance import read_scores

SCAN = ["--data", "synthetic", "--limit", "24", "--method", "ablation,kl", "--experiments", "none", "--no-probes",
        "--batch-size", "8"]


def test_shares_merge_to_the_single_process_logits():
    """Three processes' shares cover every head exactly once, so the merge is the one-process result bit for bit."""
    from test_scan_importance import toy_encoded

    model = tiny_model("bert")
    encoded = toy_encoded("bert", n=10)
    base, full = ablation_logits(model, encoded, batch_size=4, max_rows=8)
    parts = [ablation_logits(model, encoded, batch_size=4, max_rows=8, share=(r, 3))[1] for r in range(3)]
    assert all(np.isnan(p).any() for p in parts)  # each did only its share
    assert np.array_equal(merge_shares(parts), full)


@pytest.mark.skipif(shutil.which("accelerate", path=str(Path(sys.executable).parent)) is None,
                    reason="the accelerate launcher is not installed next to this python")
@pytest.mark.skipif(torch.cuda.is_available(), reason="the two-process check is written for a CPU-only machine (gloo)")
def test_accelerate_launch_two_processes_equals_one(tmp_path):
    need_minilm()
    from transformers import AutoTokenizer

    from headcut.models import LoadedModel, resolve_source, save_model

    tok = AutoTokenizer.from_pretrained(resolve_source("minilm-l6"))
    grader = tmp_path / "tiny"
    save_model(LoadedModel(tiny_model("bert", vocab_size=tok.vocab_size), tok, {"max_length": 32}), grader)
    one = tmp_path / "one"
    r = CliRunner().invoke(app, ["scan", "--model", str(grader), "--out", str(one), *SCAN])
    assert r.exit_code == 0, r.output
    two = tmp_path / "two"
    launcher = str(Path(sys.executable).parent / "accelerate")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    p = subprocess.run([launcher, "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
                        "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "0",
                        "-m", "headcut", "scan", "--model", str(grader), "--out", str(two), *SCAN],
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("wrote ") == 1  # the main process alone reports and writes
    assert (two / "importance.json").is_file()
    for method in ("ablation", "kl"):
        single, _ = read_scores(one / "importance.json", method=method)
        double, meta = read_scores(two / "importance.json", method=method)
        assert meta["samples"] == 24
        assert torch.isfinite(double).all() and double.abs().max() > 0
        assert torch.allclose(single, double, atol=1e-6, rtol=0), method
        # the tiny model's scores are ~1e-5, so also relative: a head lost in the gather would show as 0
        assert torch.allclose(single, double, atol=1e-12, rtol=1e-4), method
