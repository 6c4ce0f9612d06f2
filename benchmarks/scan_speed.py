"""Naive vs fast exact ablation scan on the real MiniLM: same scores, less time.

    .venv/bin/python benchmarks/scan_speed.py [--model runs/teacher] [--pairs 256]

Prints the max |score difference| (must be <= 1e-6) and the time ratio fast/naive (target <= 0.5).
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

from headcut.batching import encode
from headcut.cli.common import quiet_transformers
from headcut.data import read_pairs
from headcut.evaluate.ablation import ablation_logits, naive_ablation_logits
from headcut.evaluate.importance import ablation_scores
from headcut.models import load_model

ROOT = Path(__file__).resolve().parents[1]
DEV = ROOT.parent / "shared" / "data" / "homedepot" / "dev.tsv"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    teacher = ROOT / "runs" / "teacher"
    parser.add_argument("--model", default=str(teacher) if (teacher / "headcut.json").exists() else "minilm-l6")
    parser.add_argument("--data", default=str(DEV))
    parser.add_argument("--pairs", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-rows", type=int, default=768, help="stacked rows per forward in the fast scan")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    quiet_transformers()
    loaded = load_model(args.model)
    pairs = read_pairs(args.data, preset="homedepot").sample(args.pairs, seed=0)
    encoded = encode(loaded.tokenizer, pairs, max_length=loaded.max_length, model=loaded.model)
    labels = pairs.label_array()
    ablation_logits(loaded.model, encode(loaded.tokenizer, pairs.subset(range(16)), model=loaded.model))  # warm-up

    start = time.perf_counter()
    base_n, naive = naive_ablation_logits(loaded.model, encoded, batch_size=args.batch_size)
    naive_s = time.perf_counter() - start
    start = time.perf_counter()
    base_f, fast = ablation_logits(loaded.model, encoded, batch_size=args.batch_size, max_rows=args.max_rows)
    fast_s = time.perf_counter() - start

    diffs = {}
    for method in ("ablation", "kl"):
        a = ablation_scores(loaded.model, labels, base_n, naive, method=method)
        b = ablation_scores(loaded.model, labels, base_f, fast, method=method)
        diffs[method] = float((a - b).abs().max())
    print(f"model {args.model}  pairs {len(pairs)}  heads {int(np.isfinite(naive[..., 0, 0]).sum())}  "
          f"threads {torch.get_num_threads()}")
    print(f"max |logit difference|      {np.nanmax(np.abs(naive - fast)):.3g}")
    for method, d in diffs.items():
        print(f"max |{method} score difference| {d:.3g}")
    print(f"naive {naive_s:.1f} s   fast {fast_s:.1f} s   ratio fast/naive {fast_s / naive_s:.2f}")
    if max(diffs.values()) > 1e-6:
        raise SystemExit("FAIL: fast scan scores differ from the naive scan by more than 1e-6")


if __name__ == "__main__":
    main()
