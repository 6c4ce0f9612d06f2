"""`training.train` under `accelerate launch --num_processes 2`: each batch is split between the processes,
and the run follows the one-process trajectory (same steps, same learning-rate schedule, same weights),
extra modules included. CPU-only machines join the processes over gloo (--multi_gpu, as for scan)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).with_name("two_process_train.py")
LAUNCHER = Path(sys.executable).parent / "accelerate"


@pytest.mark.skipif(not LAUNCHER.exists() and shutil.which("accelerate") is None,
                    reason="the accelerate launcher is not installed next to this python")
@pytest.mark.skipif(torch.cuda.is_available(), reason="the two-process check is written for a CPU-only machine (gloo)")
def test_two_processes_split_each_batch_and_end_where_one_does(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    p = subprocess.run([sys.executable, str(SCRIPT), str(one)], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    p = subprocess.run([str(LAUNCHER), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
                        "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "0",
                        str(SCRIPT), str(two)], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    a, b = torch.load(one / "final.pt"), torch.load(two / "final.pt")
    assert a["steps"] == b["steps"] == 18 and a["examples"] == b["examples"] == 122
    for part in ("model", "projection"):
        for name, value in a[part].items():
            assert torch.allclose(value, b[part][name], atol=2e-5, rtol=1e-4), (part, name)
    assert (a["projection"]["weight"] - a["projection_start"]["weight"]).abs().max() > 1e-3  # gradients reached it
