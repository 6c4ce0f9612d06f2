"""Which parts of mask tuning pay: one budget plan, tuned each way, graded on a dev SELECTION slice kept apart
from budget_curve.py's report rows (so choosing a default here does not tune it to the rows reported).

    .venv/bin/python benchmarks/tune_variants.py --model runs/teacher [--budgets 0.65,0.5]
        [--variants none,scale,bias,bias+cls,refit,bias+refit,scale+cls+refit,bias+cls+refit,weights+cls+refit]
        [--score-rows 1000] [--calibrate 512] [--selection 1500]

A variant names its parts with '+': at most one layer fit, scale (scales only), bias (scales and bias shifts),
weights (a ridge refit of each sublayer's whole output projection and bias) or best (per sublayer, whichever of
bias and weights has the lower held-out error); cls (the last layer fitted on [CLS] only), refit (the closed-form
head refit, prune/refit.py); none is the plan with masks only. Scores on --score-rows train pairs, calibration
on --calibrate others; the selection slice is --selection dev rows drawn (seed 1) from those budget_curve.py
does not report on (its 2,000 report rows are random.Random(0).sample of dev). Prints agreement with the
teacher and accuracy, Spearman and loss differences (paired bootstrap) per variant, the tuning seconds, and how
many sublayer fits were kept (of them, projection refits). The scoring and calibration rows are one sample of
--score-rows + --calibrate train pairs, so changing --calibrate also changes the scores, hence the plan: compare
variants within one run.
"""
from __future__ import annotations

import argparse
import copy
import random
import time
from pathlib import Path

from bench_flags import real, several, whole
from headcut_grader.ranges import declared_range
from headcut.evaluate_arguments import argument_range
from headcut.prune.result import PruneSettings
from headcut.prune_arguments import argument_range as prune_range

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "homedepot"
FITS = {"scale": "scales", "bias": "scales", "weights": "weights", "best": "best"}  # part -> tune_scales mode
PARTS = {"none", "cls", "refit", *FITS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(ROOT / "runs" / "teacher"))
    parser.add_argument("--budgets", type=several(real(prune_range("flops"))), default="0.65,0.5")
    parser.add_argument("--variants",
                        default="none,scale,bias,bias+cls,refit,bias+refit,scale+cls+refit,bias+cls+refit")
    parser.add_argument("--score-rows", type=whole(declared_range(PruneSettings, "score_rows")), default=1000)
    parser.add_argument("--calibrate", type=whole(declared_range(PruneSettings, "calibrate_rows")), default=512)
    parser.add_argument("--selection", type=whole(), default=1500)
    parser.add_argument("--report-rows", type=whole(), default=2000, help="budget_curve.py's report rows, left out")
    parser.add_argument("--bootstrap", type=whole(argument_range("bootstrap")), default=200)
    args = parser.parse_args()
    variants = [v.split("+") for v in args.variants.split(",")]
    for parts in variants:
        if not set(parts) <= PARTS or len(set(parts) & set(FITS)) > 1:
            parser.error(f"--variants: '{'+'.join(parts)}' is not made of {sorted(PARTS)} "
                         f"(at most one of {', '.join(FITS)})")

    from headcut.arch import flops_per_pair, keep_heads, keep_neurons, unit_flops
    from headcut.batching import encode
    from headcut_grader.data import read_pairs
    from headcut.evaluate.fisher import unit_fisher
    from headcut.evaluate.metrics import paired_bootstrap
    from headcut.evaluate.predict import predict_logits
    from headcut.models import load_model
    from headcut.prune.budget import check_budget, plan_budget
    from headcut.prune.refit import refit_head
    from headcut.prune.tune import tune_scales

    loaded = load_model(args.model)
    teacher, tok, seq = loaded.model, loaded.tokenizer, loaded.max_length
    train = read_pairs(DATA / "train.tsv", preset="homedepot").sample(args.score_rows + args.calibrate, seed=0)
    dev = read_pairs(DATA / "dev.tsv", preset="homedepot")
    reported = set(random.Random(0).sample(range(len(dev)), args.report_rows))
    rest = [i for i in range(len(dev)) if i not in reported]
    selection = dev.subset(sorted(random.Random(1).sample(rest, args.selection)))
    encoded = encode(tok, selection, max_length=seq, model=teacher)
    reference = predict_logits(teacher, None, None, encoded=encoded)
    scoring = train.subset(range(args.score_rows))
    scores = unit_fisher(teacher, encode(tok, scoring, max_length=seq, model=teacher))
    calibration = encode(tok, train.subset(range(args.score_rows, len(train))), max_length=seq, model=teacher)
    units, full = unit_flops(teacher, seq), flops_per_pair(teacher, seq)
    print(f"{args.model}; selection: {len(selection)} dev pairs outside the {args.report_rows} report rows; "
          f"scores on {args.score_rows}, calibration on {args.calibrate} train pairs", flush=True)
    for share in args.budgets:
        plan = plan_budget(scores, units, check_budget(share, units, full))
        base = copy.deepcopy(teacher)
        keep_heads(base, [list(h) for h in plan.heads])
        keep_neurons(base, [list(n) for n in plan.neurons])
        print(f"FLOPs {share}: heads {plan.heads_per_layer}, neurons {plan.neurons_per_layer}", flush=True)
        for parts in variants:
            model, started, kept = copy.deepcopy(base), time.perf_counter(), ""
            fit = next((p for p in parts if p in FITS), None)
            if fit:
                fits = tune_scales(teacher, model, calibration, bias=fit != "scale", last_layer_cls="cls" in parts,
                                   mode=FITS[fit])
                kept = (f", kept {sum(f.accepted for f in fits)}/{len(fits)}"
                        f" ({sum(f.accepted and f.mode == 'weights' for f in fits)} projections)")
            if "refit" in parts:
                refit_head(teacher, model, calibration)
            seconds = time.perf_counter() - started
            got = paired_bootstrap(predict_logits(model, None, None, encoded=encoded), reference,
                                   selection.label_array(), selection.grades, iters=args.bootstrap, seed=0)
            print(f"  {'+'.join(parts):17s} agreement {got['agreement']['value']:.2%}  "
                  f"accuracy {100 * got['accuracy']['delta']:+.2f} pt  Spearman {got['spearman']['delta']:+.4f}  "
                  f"loss {got['loss']['delta']:+.4f}  ({seconds:.0f} s{kept})", flush=True)


if __name__ == "__main__":
    main()
