"""benchmarks/held_apart.py: the held-apart split that settings are chosen on keeps whole queries apart."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "held_apart.py"


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True)


def test_whole_queries_are_held_apart_and_every_row_lands_once_unchanged(tmp_path):
    lines = [f"q{i % 37}\ttitle {i}\t{1 + i % 5}\t{1 + (i % 3)}" for i in range(400)]
    train = tmp_path / "train.tsv"
    train.write_text("query\ttitle\tgrade\tscore\n" + "\n".join(lines) + "\n")
    done = run(train, "--out", tmp_path / "split", "--pairs", 50)
    assert done.returncode == 0, done.stderr
    held = (tmp_path / "split" / "select.tsv").read_text().splitlines()
    rest = (tmp_path / "split" / "pool.tsv").read_text().splitlines()
    assert held[0] == rest[0] == "query\ttitle\tgrade\tscore"
    assert sorted(held[1:] + rest[1:]) == sorted(lines)  # nothing lost, nothing changed, nothing twice
    assert not {r.split("\t")[0] for r in held[1:]} & {r.split("\t")[0] for r in rest[1:]}
    assert 50 <= len(held) - 1 < 50 + 11  # stops at the first query that reaches --pairs (queries hold 10-11)
    again = run(train, "--out", tmp_path / "split", "--pairs", 50)
    assert again.returncode == 2 and "--overwrite" in again.stderr
