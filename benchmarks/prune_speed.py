"""PyTorch fp32 speed of a pruned model against its source, taken in turns (headcut.timing blocks).

    .venv/bin/python benchmarks/prune_speed.py --model runs/teacher --pruned runs/flops50 [--batch 32]
        [--seq-len 64] [--rounds 3] [--seconds 8]

Each round times both models in alternating blocks for at least --seconds each and prints both medians and
their ratio; the spread over rounds shows how much other jobs moved it. The machine (CPU model, threads)
is printed first: ratios move between machines.
"""
from __future__ import annotations

import argparse
import statistics

import torch

from headcut.arch import flops_per_pair
from headcut.models import load_model
from headcut.prune.measure import measure_latency
from headcut.prune_arguments import LATENCY_BATCH, argument_range as prune_range
from headcut.prune.result import PruneSettings
from headcut.timing import cpu_info
from headcut_grader.ranges import REPEATS, THREADS, declared_range
from bench_flags import real, whole


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="the source (unpruned) model folder")
    parser.add_argument("--pruned", required=True, help="a `headcut prune` output folder")
    parser.add_argument("--batch", type=whole(prune_range("latency_batch")), default=LATENCY_BATCH)
    parser.add_argument("--seq-len", type=whole(prune_range("seq_len")), default=64)
    parser.add_argument("--rounds", type=whole(REPEATS), default=3)
    parser.add_argument("--seconds", type=real(declared_range(PruneSettings, "latency_seconds")), default=8.0,
                        help="timed seconds per model per round")
    parser.add_argument("--threads", type=whole(THREADS), default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    source, pruned = load_model(args.model).model, load_model(args.pruned).model
    cpu = cpu_info()
    print(f"{cpu.model}; flags: {', '.join(sorted(f for f in cpu.flags if f.startswith(('avx', 'amx'))))}; "
          f"torch {torch.__version__}, {args.threads} threads; batch {args.batch} x {args.seq_len}")
    print("FLOPs per pair: pruned / source = "
          f"{flops_per_pair(pruned, args.seq_len) / flops_per_pair(source, args.seq_len):.3f}")
    ratios = []
    for r in range(args.rounds):
        a, b = measure_latency([source, pruned], seq_len=args.seq_len, batch_sizes=(args.batch,),
                               min_seconds=args.seconds)
        ratios.append(a[0]["ms"] / b[0]["ms"])
        print(f"round {r}: source {a[0]['ms']:.0f} ms, pruned {b[0]['ms']:.0f} ms, speed-up {ratios[-1]:.2f}x",
              flush=True)
    print(f"speed-up: median {statistics.median(ratios):.2f}x, range {min(ratios):.2f}-{max(ratios):.2f}x")


if __name__ == "__main__":
    main()
