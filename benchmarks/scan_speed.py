"""Time of `headcut scan`'s exact single-head ablation against the naive loop (one masked forward per head), and
whether their scores agree, on the real MiniLM and Home Depot dev pairs.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/scan_speed.py [--model runs/teacher] [--pairs 256] [--rounds 3]
        [--batch-size 64] [--max-rows 768] [--threads 0]

The model is runs/teacher where it exists, else the untuned MiniLM. The two scans take turns, one whole scan per
block, for --rounds rounds (headcut.timing; who goes first rotates), so load from other jobs on a shared machine
falls on both alike. Prints the largest logit and score differences (ablation and KL scores), wall and CPU time of
each scan per round with their median and spread (min-max), the ratio fast/naive per round and of the medians, and
the machine (CPU model, SIMD flags, runtime versions, threads). Exits with FAIL when a score differs by more than
1e-6. docs/benchmarks.md ("Scan speed") gives the figures it measured.
"""
from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import numpy as np
import torch
from bench_flags import file_to_read, whole
from machine import describe

from headcut.batching import encode
from headcut.cli.common import quiet_transformers
from headcut_grader.data import read_pairs
from headcut.evaluate.ablation import ablation_logits, naive_ablation_logits
from headcut.evaluate.criteria import ablation_scores
from headcut.evaluate_arguments import DEFAULTS
from headcut.models import load_model
from headcut.timing import round_robin_clocks
from headcut_grader.ranges import BATCH, REPEATS, THREADS, Range

ROOT = Path(__file__).resolve().parents[1]
DEV = ROOT.parent / "shared" / "data" / "homedepot" / "dev.tsv"


def spread(values: list[float]) -> str:
    return f"median {statistics.median(values):7.1f} s  (min {min(values):.1f}, max {max(values):.1f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    teacher = ROOT / "runs" / "teacher"
    parser.add_argument("--model", default=str(teacher) if (teacher / "headcut.json").exists() else "minilm-l6")
    parser.add_argument("--data", type=file_to_read(), default=str(DEV))
    parser.add_argument("--pairs", type=whole(), default=256)
    parser.add_argument("--rounds", type=whole(REPEATS), default=3, help="timed scans of each kind, in turns")
    parser.add_argument("--batch-size", type=whole(BATCH), default=DEFAULTS["batch_size"])
    parser.add_argument("--max-rows", type=whole(), default=768, help="stacked rows per forward in the fast scan")
    parser.add_argument("--threads", type=whole(Range(0, THREADS.high)), default=0,
                        help="torch threads (0: torch's default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    quiet_transformers()
    loaded = load_model(args.model)
    model = loaded.model
    pairs = read_pairs(args.data, preset="homedepot").sample(args.pairs, seed=0)
    encoded = encode(loaded.tokenizer, pairs, max_length=loaded.max_length, model=model)
    labels = pairs.label_array()
    warm = encode(loaded.tokenizer, pairs.subset(range(16)), max_length=loaded.max_length, model=model)
    naive_ablation_logits(model, warm, batch_size=args.batch_size)  # first calls allocate and pick kernels
    ablation_logits(model, warm, batch_size=args.batch_size, max_rows=args.max_rows)

    results = {}

    def naive(_):
        results["naive"] = naive_ablation_logits(model, encoded, batch_size=args.batch_size)

    def fast(_):
        results["fast"] = ablation_logits(model, encoded, batch_size=args.batch_size, max_rows=args.max_rows)

    # one scan per block, no untimed wake-up call: a scan takes seconds, its threads are awake after the first ms
    times = round_robin_clocks([naive, fast], None, warmup=0, repeats=args.rounds, block=1, wake=False)

    (base_n, masked_n), (base_f, masked_f) = results["naive"], results["fast"]
    diffs = {}
    for method in ("ablation", "kl"):
        a = ablation_scores(model, labels, base_n, masked_n, method=method)
        b = ablation_scores(model, labels, base_f, masked_f, method=method)
        diffs[method] = float((a - b).abs().max())
    print(f"model {args.model}  pairs {len(pairs)}  heads {int(np.isfinite(masked_n[..., 0, 0]).sum())}  "
          f"batch {args.batch_size}  max rows {args.max_rows}  rounds {args.rounds}")
    print(f"machine: {describe()}")
    print(f"max |logit difference|      {np.nanmax(np.abs(masked_n - masked_f)):.3g}")
    for method, d in diffs.items():
        print(f"max |{method} score difference| {d:.3g}")
    for clock in ("wall", "cpu"):
        n = [getattr(c, clock) for c in times[0]]
        f = [getattr(c, clock) for c in times[1]]
        ratios = [b / a for a, b in zip(n, f)]
        print(f"{clock:<4} naive {spread(n)}   per round {' '.join(f'{t:.1f}' for t in n)}")
        print(f"{clock:<4} fast  {spread(f)}   per round {' '.join(f'{t:.1f}' for t in f)}")
        print(f"{clock:<4} ratio fast/naive {statistics.median(f) / statistics.median(n):.2f} of the medians   "
              f"per round {' '.join(f'{r:.2f}' for r in ratios)}")
    if max(diffs.values()) > 1e-6:
        raise SystemExit("FAIL: fast scan scores differ from the naive scan by more than 1e-6")


if __name__ == "__main__":
    main()
