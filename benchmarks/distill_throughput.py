"""Distillation vs plain fine-tuning of the same student: training examples per second, side by side.

    .venv/bin/python benchmarks/distill_throughput.py [--teacher runs/teacher] [--steps 60] [--rounds 3]

Three variants train the bottom-3 student of the teacher on the same Home Depot pairs for `--steps` steps
each, taking turns round by round (so load from other jobs hits them alike):
  plain   gold grades only (kd_weight 0): plain fine-tuning of the student;
  cached  the recipe's KD loss with teacher logits cached on disk (computed once, before the rounds);
  online  the same KD loss with the teacher run on every batch (cache_teacher false).
Prints examples/s of each (median over rounds) and the ratios to plain. Target: cached within 20% of plain.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from bench_flags import whole
from headcut_grader.ranges import REPEATS

ROOT = Path(__file__).resolve().parents[1]
TRAIN = ROOT.parent / "shared" / "data" / "homedepot" / "train.tsv"
DEV = ROOT.parent / "shared" / "data" / "homedepot" / "dev.tsv"
VARIANTS = {
    "plain": {"kd_weight": 0.0, "ce_weight": 1.0},
    "cached": {},
    "online": {"cache_teacher": False},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--teacher", default=str(ROOT / "runs" / "teacher"))
    parser.add_argument("--recipe", default="minilm_bottom3_cpu")
    parser.add_argument("--rows", type=whole(), default=4000,
                        help="train pairs (the teacher logits are cached for these)")
    parser.add_argument("--steps", type=whole(), default=60, help="optimizer steps per variant and round")
    parser.add_argument("--rounds", type=whole(REPEATS), default=3)
    args = parser.parse_args()

    import dataclasses

    from headcut.cli.common import quiet_transformers
    from headcut.distill import DistillRecipe, distill
    from headcut.recipes import load_recipe

    quiet_transformers()
    base = load_recipe(DistillRecipe, args.recipe, kind="distill", flag="--recipe", overrides=[
        f"teacher={args.teacher}", f"train_data={TRAIN}", f"dev_data={DEV}", f"train_rows={args.rows}",
        "dev_rows=200", "eval_every=100000", f"checkpoint_every={args.steps}",  # timing is booked at checkpoints
        "measure_speed=false", "epochs=100"])
    rates = {name: [] for name in VARIANTS}
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "teacher"
        for r in range(args.rounds):
            for name, changes in VARIANTS.items():
                recipe = dataclasses.replace(base, **changes)
                result = distill(recipe, Path(tmp) / f"{name}-{r}", stop_after_steps=args.steps, cache_dir=cache)
                t = result.training
                rates[name].append(t["examples_per_second"])
                print(f"round {r + 1} {name:<7} {t['examples_per_second']:7.1f} examples/s "
                      f"(teacher logits: {t['teacher_cache']})", flush=True)
    median = {name: statistics.median(v) for name, v in rates.items()}
    print(f"\nbottom-3 student, batch {base.batch_size}, {args.steps} steps x {args.rounds} rounds, median examples/s:")
    for name, value in median.items():
        print(f"  {name:<7} {value:7.1f}   {value / median['plain']:.3f}x plain")
    ratio = median["cached"] / median["plain"]
    print(f"cached KD trains at {ratio:.3f}x the speed of plain fine-tuning ({ratio - 1:+.1%}; "
          "target: at most 20% slower)")


if __name__ == "__main__":
    main()
