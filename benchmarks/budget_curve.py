"""Budgeted pruning without retraining: quality and measured speed against the FLOPs kept.

    .venv/bin/python benchmarks/budget_curve.py --model runs/teacher [--out runs/budget_curve]

Units are scored (Fisher, the teacher's own grade distribution as targets: no labels) on --score-rows
Home Depot TRAIN pairs and mask tuning calibrates on --calibrate other train pairs; every figure is
measured on --report-rows DEV pairs (split by query from train, so never seen by scoring or tuning).
For each FLOPs budget (share of the teacher's FLOPs per pair at its max_length) it compares:
  heads only      today's `--keep-ratio` pruner (fisher head scan with grades), as many heads as the budget
                  allows; n/a below the FFN's share of the FLOPs
  heads+FFN       the joint plan, masks only (`headcut prune --flops F --no-tune`)
  tune: scales    the joint plan tuned with per-unit scales and bias shifts only (`--tune-fit scales`)
  heads+FFN+tune  the joint plan with mask tuning and the head refit (`headcut prune --flops F`, --tune-fit best)
  iterative       the same, reached in --steps steps, re-scored and re-tuned after each
                  (`headcut prune --flops F --iterative STEPS`)
  one-shot xN     one shot given the iterative variant's time instead: STEPS times the scoring and
                  calibration pairs (the comparison at equal total time)
  random          random heads and neurons in the same per-layer numbers as the joint plan, untuned
  drop layers     `headcut prune --flops F --drop-layers` on the same scores and calibration pairs: whole layers
                  dropped where that brings the plan closer to the teacher (kept only if, tuned, still closer)
  bottom-k        the teacher's lowest k layers, k the nearest layer count (no training)
  prune+distill   a model pruned to the budget and then trained, given with --trained BUDGET=PATH (e.g. the
                  distilled stage of `headcut run homedepot_quarter`); the report pairs then leave out every
                  query whose pairs chose its checkpoint (and the teacher's), as `headcut run` does
Quality: accuracy, Spearman and loss minus the teacher's with paired bootstrap 95% CIs, and agreement
with the teacher's grade. Speed: PyTorch fp32 at batch 32 x 64 tokens, every variant and the teacher
taking turns in blocks in one run (headcut.timing.round_robin). Writes table.md, curve.png, results.json.
"""
from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import describe, machine  # noqa: E402
from bench_flags import out_dir, real, several, whole  # noqa: E402
from headcut_grader.ranges import REPEATS, declared_range  # noqa: E402
from headcut.evaluate_arguments import argument_range  # noqa: E402
from headcut.prune_arguments import argument_range as prune_range  # noqa: E402

from headcut.arch import flops_per_pair, keep_heads, keep_layers, keep_neurons, unit_flops  # noqa: E402
from headcut.batching import encode  # noqa: E402
from headcut_grader.data import read_pairs  # noqa: E402
from headcut.evaluate.fisher import unit_fisher  # noqa: E402
from headcut.evaluate.criteria import head_importance  # noqa: E402
from headcut.evaluate.metrics import paired_bootstrap, summarize  # noqa: E402
from headcut.evaluate.predict import predict_logits  # noqa: E402
from headcut.finetune import recorded_recipe, selection_pairs  # noqa: E402
from headcut_grader.files import atomic_file, write_json, write_text  # noqa: E402
from headcut.models import load_model  # noqa: E402
from headcut.pipeline.pairs import queries_that_chose  # noqa: E402
from headcut.prune import plan_heads  # noqa: E402
from headcut.prune.budget import UnitPlan, check_budget, plan_budget  # noqa: E402
from headcut.prune.measure import dummy_batch  # noqa: E402
from headcut.prune.pipeline import prune_to_budget  # noqa: E402
from headcut.prune.result import PruneSettings  # noqa: E402
from headcut.prune.refit import refit_head  # noqa: E402
from headcut.prune.tune import DEFAULT_MODE, tune_scales  # noqa: E402
from headcut.timing import round_robin  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "homedepot"
VARIANTS = ("heads only", "heads+FFN", "tune: scales", "heads+FFN+tune", "iterative", "one-shot xN", "drop layers",
            "random", "bottom-k", "prune+distill")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=str(ROOT / "runs" / "teacher"))
    p.add_argument("--train", default=str(DATA / "train.tsv"))
    p.add_argument("--dev", default=str(DATA / "dev.tsv"))
    p.add_argument("--out", default=str(ROOT / "runs" / "budget_curve"))
    p.add_argument("--budgets", type=several(real(prune_range("flops"))), default="0.65,0.5,0.35,0.25,0.15")
    p.add_argument("--steps", type=whole(), default=5, help="steps of the iterative variant")
    p.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated subset of: " + ", ".join(VARIANTS))
    p.add_argument("--score-rows", type=whole(declared_range(PruneSettings, "score_rows")), default=1000)
    p.add_argument("--calibrate", type=whole(declared_range(PruneSettings, "calibrate_rows")), default=512)
    p.add_argument("--report-rows", type=whole(), default=2000)
    p.add_argument("--targets", default="teacher", choices=["teacher", "grades"])
    p.add_argument("--layer-prior", type=real(prune_range("layer_prior")), default=0.0)
    p.add_argument("--bootstrap", type=whole(argument_range("bootstrap")), default=1000)
    p.add_argument("--repeats", type=whole(REPEATS), default=10, help="timed calls per variant (batch 32 x 64)")
    p.add_argument("--seed", type=whole(argument_range("seed")), default=0)
    p.add_argument("--trained", type=trained_path, action="append", default=[], metavar="BUDGET=PATH",
                   help="a model pruned to BUDGET and trained since (repeatable): the prune+distill row at that budget")
    args = p.parse_args()
    out_dir(p, args.out, inputs=[args.model])
    args.trained_at = dict(args.trained)
    return args


def trained_path(item: str) -> tuple[float, str]:
    """An argparse `type`: --trained BUDGET=PATH, BUDGET a FLOPs share as --budgets takes, PATH a folder headcut
    wrote."""
    budget, sep, path = item.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"{item!r} is not BUDGET=PATH; pass e.g. 0.5=runs/pruned-0.5.")
    try:
        share = real(prune_range("flops"))(budget)
    except argparse.ArgumentTypeError as error:
        raise argparse.ArgumentTypeError(f"{item}: BUDGET {error}") from None
    if not Path(path, "headcut.json").is_file():
        raise argparse.ArgumentTypeError(f"{item}: {path!r} holds no headcut.json; "
                                         "PATH must be a folder headcut wrote.")
    return share, path


def report_pairs(args, metas: list[dict]):
    """--report-rows seeded dev pairs, none of whose queries chose a checkpoint of the teacher or a trained row."""
    dev = read_pairs(args.dev, preset="homedepot")
    recipes = [r for r in (recorded_recipe(meta) for meta in metas) if r is not None]
    chosen = queries_that_chose(args.dev, [(r.dev_data, lambda r=r: selection_pairs(r)) for r in recipes])
    if chosen:
        dev = dev.subset([i for i, q in enumerate(dev.queries) if q not in chosen])
        log(f"report pairs: {len(dev)} dev pairs whose {len(set(dev.queries))} queries chose no checkpoint "
            f"({len(chosen)} queries left out)")
    return dev.sample(args.report_rows, seed=args.seed)


def heads_only(teacher, head_scores, budget, costs):
    """Today's pruner with as many heads as fit the budget (None when even 0 heads do not)."""
    full_heads = int(np.isfinite(head_scores.numpy()).sum())
    over = flops_per_pair(teacher, costs["seq"]) - budget
    drop = max(0, int(np.ceil(over / costs["units"].per_head[0])))
    if drop >= full_heads:  # a model with no heads at all is not a grader
        return None
    plan = plan_heads(head_scores, (full_heads - drop) / full_heads)
    model = copy.deepcopy(teacher)
    keep_heads(model, [list(k) for k in plan.keep])
    return model


def random_same_shape(teacher, plan: UnitPlan, num_heads: int, num_neurons: int, seed: int):
    g = np.random.default_rng(seed)
    model = copy.deepcopy(teacher)
    keep_heads(model, [sorted(g.choice(num_heads, n, replace=False).tolist()) for n in plan.heads_per_layer])
    keep_neurons(model, [sorted(g.choice(num_neurons, n, replace=False).tolist()) for n in plan.neurons_per_layer])
    return model


def bottom_k(teacher, share: float, seq: int):
    layers = teacher.config.num_hidden_layers
    full = flops_per_pair(teacher, seq)
    shares = {}
    for k in range(1, layers + 1):
        model = copy.deepcopy(teacher)
        keep_layers(model, list(range(k)))
        shares[k] = (flops_per_pair(model, seq) / full, model)
    k = min(shares, key=lambda k: abs(shares[k][0] - share))
    return k, shares[k][1]


def prune_tuned(teacher, tok, seq, score_pairs, calib_pairs, share: float, steps: int):
    """`headcut prune --flops share --iterative steps` on these pairs: Fisher scores (the model's own expected
    Fisher), the plan at each step's share, mask tuning and the head refit after each step."""
    from headcut.prune.iterative import budget_shares
    from headcut.prune.pipeline import Budget, Tuning, prune_in_steps

    score_enc = encode(tok, score_pairs, max_length=seq, model=teacher)
    calib_enc = encode(tok, calib_pairs, max_length=seq, model=teacher)
    units, full = unit_flops(teacher, seq), flops_per_pair(teacher, seq)
    budget = Budget(share, None, seq, units, full, check_budget(share, units, full))

    def retune(model):
        return Tuning(None, tune_scales(teacher, model, calib_enc, mode=DEFAULT_MODE),
                      refit_head(teacher, model, calib_enc))

    model, *_ = prune_in_steps(teacher, budget, budget_shares(share, steps), unit_fisher(teacher, score_enc),
                               lambda m, step: unit_fisher(m, score_enc), retune, lambda b, s: b.plan(s, 0.0))
    return model


def iterative(teacher, tok, seq, score_pairs, calib_pairs, share, args):
    return prune_tuned(teacher, tok, seq, score_pairs, calib_pairs, share, args.steps)


def one_shot(teacher, tok, seq, score_pairs, calib_pairs, share, args):
    return prune_tuned(teacher, tok, seq, score_pairs, calib_pairs, share, 1)


def with_layer_drops(teacher_loaded, scores, calib_pairs, share, args):
    """`headcut prune --flops share --drop-layers` with these unit scores and calibration pairs."""
    settings = PruneSettings(score_rows=args.score_rows, calibrate_rows=args.calibrate, timing=False, seed=args.seed)
    result = prune_to_budget(teacher_loaded, flops=share, data=calib_pairs, unit_scores=scores, drop_layers=True,
                             settings=settings)
    search = result.budget.get("layer_search", {})
    log(f"  drop layers: proposed {search.get('proposed') or search.get('dropped') or 'none'}, "
        f"kept dropped {search.get('dropped') or 'none'}")
    return result.pruned.model


def timed_variant(seconds: dict, name: str, make, *args):
    """`make(*args)`, its wall time recorded in `seconds[name]`."""
    start = time.perf_counter()
    model = make(*args)
    seconds[name] = time.perf_counter() - start
    log(f"  {name}: {seconds[name]:.0f} s")
    return model


def main():
    args = parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(args.seed)
    info = machine()
    log(f"machine: {describe(info)}")
    teacher_loaded = load_model(args.model)
    teacher, tok, seq = teacher_loaded.model, teacher_loaded.tokenizer, teacher_loaded.max_length
    wanted = set(args.variants.split(","))
    if not wanted <= set(VARIANTS):
        raise SystemExit(f"--variants: unknown {sorted(wanted - set(VARIANTS))}; choose from {', '.join(VARIANTS)}")
    more = args.steps if "one-shot xN" in wanted else 1  # the equal-time one shot scores and tunes on more pairs
    base = args.score_rows + args.calibrate
    train = read_pairs(args.train, preset="homedepot").sample(base + (more * base if more > 1 else 0), seed=args.seed)
    score_pairs = train.subset(range(args.score_rows))
    calib_pairs = train.subset(range(args.score_rows, args.score_rows + args.calibrate))
    big_score = train.subset(range(base, base + more * args.score_rows)) if more > 1 else score_pairs
    big_calib = train.subset(range(base + more * args.score_rows, len(train))) if more > 1 else calib_pairs
    trained = {share: load_model(path) for share, path in args.trained_at.items()}
    report = report_pairs(args, [teacher_loaded.meta] + [t.meta for t in trained.values()])
    labels = report.label_array()
    enc = encode(tok, report, max_length=seq, model=teacher)

    def logits(model):
        return predict_logits(model, None, None, encoded=enc)

    reference = logits(teacher)
    teacher_metrics = summarize(reference, labels, report.grades)
    log(f"teacher on {len(report)} dev pairs: accuracy {teacher_metrics['accuracy']:.4f} "
        f"Spearman {teacher_metrics['spearman']:.4f}")

    start = time.perf_counter()
    score_enc = encode(tok, score_pairs, max_length=seq, model=teacher)
    targets = score_pairs.label_array() if args.targets == "grades" else None
    scores = unit_fisher(teacher, score_enc, labels=targets)
    score_seconds = time.perf_counter() - start
    log(f"joint Fisher scores of {len(score_pairs)} train pairs ({args.targets} targets): {score_seconds:.0f} s")
    head_scores = head_importance(teacher, tok, score_pairs, method="fisher", max_length=seq)
    calib_enc = encode(tok, calib_pairs, max_length=seq, model=teacher)

    units = unit_flops(teacher, seq)
    full = flops_per_pair(teacher, seq)
    costs = {"seq": seq, "units": units}
    rows, timed = [], [("teacher", teacher)]
    for share in args.budgets:
        budget = check_budget(share, units, full)
        t0 = time.perf_counter()
        plan = plan_budget(scores, units, budget, layer_prior=args.layer_prior)
        joint = copy.deepcopy(teacher)
        keep_heads(joint, [list(h) for h in plan.heads])
        keep_neurons(joint, [list(n) for n in plan.neurons])
        tuned = copy.deepcopy(joint)
        fits = tune_scales(teacher, tuned, calib_enc, mode=DEFAULT_MODE)
        head_fits = refit_head(teacher, tuned, calib_enc)  # as `headcut prune --flops` does after tuning
        prune_seconds = time.perf_counter() - t0
        scales_only = None
        if "tune: scales" in wanted:  # the default before --tune-fit: per-unit scales and bias shifts
            scales_only = copy.deepcopy(joint)
            tune_scales(teacher, scales_only, calib_enc, mode="scales")
            refit_head(teacher, scales_only, calib_enc)
        k, truncated = bottom_k(teacher, share, seq)
        models = {"heads only": lambda: heads_only(teacher, head_scores, budget, costs), "heads+FFN": lambda: joint,
                  "tune: scales": lambda: scales_only, "heads+FFN+tune": lambda: tuned,
                  "iterative": lambda: timed_variant(seconds, "iterative", iterative, teacher, tok, seq, score_pairs,
                                                     calib_pairs, share, args),
                  "one-shot xN": lambda: timed_variant(seconds, "one-shot xN", one_shot, teacher, tok, seq, big_score,
                                                       big_calib, share, args),
                  "random": lambda: random_same_shape(teacher, plan, scores.heads.shape[1], scores.neurons.shape[1],
                                                      args.seed),
                  "drop layers": lambda: timed_variant(seconds, "drop layers", with_layer_drops, teacher_loaded,
                                                       scores, calib_pairs, share, args),
                  "bottom-k": lambda: truncated,
                  "prune+distill": lambda: trained[share].model if share in trained else None}
        seconds = {"heads+FFN+tune": score_seconds + prune_seconds}
        log(f"budget {share}: heads {plan.heads_per_layer} neurons {plan.neurons_per_layer}; plan+surgery+tuning "
            f"{prune_seconds:.0f} s; tuning kept {sum(f.accepted for f in fits)}/{len(fits)} sublayers")
        models = {name: make() for name, make in models.items() if name in wanted}
        for name, model in models.items():
            if model is None:
                if name != "prune+distill":
                    rows.append({"budget": share, "variant": name})
                continue
            got = logits(model)
            paired = paired_bootstrap(got, reference, labels, report.grades, iters=args.bootstrap, seed=args.seed)
            row = {"budget": share, "variant": name, "flops": flops_per_pair(model, seq) / full,
                   "metrics": summarize(got, labels, report.grades), "paired": paired}
            if name == "bottom-k":
                row["layers"] = k
            if name in seconds:
                row["wall_s"] = seconds[name]
            if name == "heads+FFN+tune":
                row.update(plan=plan.to_dict(), fits=[f.to_dict() for f in fits],
                           head_fits=[f.to_dict() for f in head_fits],
                           seconds={"scores": score_seconds, "plan_surgery_tuning": prune_seconds})
            rows.append(row)
            log(f"  {name:15s} FLOPs {row['flops']:.3f}  agreement {paired['agreement']['value']:.4f}  "
                f"accuracy {paired['accuracy']['delta']:+.4f}  Spearman {paired['spearman']['delta']:+.4f}")
            if name in ("heads only", "heads+FFN+tune", "iterative", "drop layers", "bottom-k", "prune+distill"):
                timed.append((f"{name} @{share}", model))

    log(f"timing {len(timed)} PyTorch fp32 variants at batch 32 x 64 in blocks ({args.repeats} calls each)")
    batch = dummy_batch(teacher, 32, 64)
    with torch.inference_mode():
        times = round_robin([lambda b, m=m: m.eval()(**b) for _, m in timed], batch, repeats=args.repeats)
    ms = {name: float(np.median(t)) * 1000 for (name, _), t in zip(timed, times)}
    for row in rows:
        key = f"{row['variant']} @{row['budget']}"
        if key in ms:
            row["ms"] = ms[key]
            row["speedup"] = ms["teacher"] / ms[key]
    result = {"machine": info, "args": vars(args), "teacher": {"metrics": teacher_metrics, "ms": ms["teacher"],
              "flops": full}, "rows": rows}
    write_json(out / "results.json", result)
    write_text(out / "table.md", table(result))
    figure(result, out / "curve.png")
    print(table(result))
    log(f"wrote {out}/table.md, curve.png, results.json")


def _ci(d: dict, scale: float = 1.0, digits: int = 4) -> str:
    return f"{d['delta'] * scale:+.{digits}f} [{d['ci'][0] * scale:+.{digits}f}, {d['ci'][1] * scale:+.{digits}f}]"


def table(result: dict) -> str:
    r = result["teacher"]
    lines = [f"Teacher: accuracy {r['metrics']['accuracy']:.4f}, Spearman {r['metrics']['spearman']:.4f}, "
             f"{r['ms']:.1f} ms per batch of 32 x 64 (PyTorch fp32). Machine: {describe(result['machine'])}.", "",
             "| budget | variant | FLOPs | agreement [95% CI] | accuracy - teacher (pt) | Spearman - teacher | "
             "loss - teacher | speed-up | prune time |", "|---|---|---|---|---|---|---|---|---|"]
    for row in result["rows"]:
        name = row["variant"] + (f" (k={row['layers']})" if "layers" in row else "")
        if "paired" not in row:
            lines.append(f"| {row['budget']} | {name} | n/a | | | | | | |")
            continue
        p = row["paired"]
        agree = p["agreement"]
        speed = f"{row['speedup']:.2f}x" if "speedup" in row else ""
        wall = f"{row['wall_s']:.0f} s" if "wall_s" in row else ""
        lines.append(f"| {row['budget']} | {name} | {row['flops']:.3f} | {agree['value']:.2%} "
                     f"[{agree['ci'][0]:.2%}, {agree['ci'][1]:.2%}] | {_ci(p['accuracy'], 100, 2)} | "
                     f"{_ci(p['spearman'])} | {_ci(p['loss'])} | {speed} | {wall} |")
    return "\n".join(lines) + "\n"


def figure(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6), dpi=110)
    styles = {"heads only": ("#999999", "s"), "heads+FFN": ("#8fb8de", "o"), "tune: scales": ("#6a8fb0", "o"),
              "heads+FFN+tune": ("#1f5f99", "o"),
              "iterative": ("#e07b00", "D"), "one-shot xN": ("#b59b00", "v"),
              "drop layers": ("#7a4fa0", "P"), "random": ("#d98c8c", "x"), "bottom-k": ("#6aa06a", "^"),
              "prune+distill": ("#c2185b", "*")}
    for name, (color, marker) in styles.items():
        rows = [r for r in result["rows"] if r["variant"] == name and "paired" in r]
        if not rows:
            continue
        x = [r["flops"] for r in rows]
        axes[0].plot(x, [100 * r["paired"]["agreement"]["value"] for r in rows], marker=marker, color=color, label=name)
        axes[1].errorbar(x, [r["paired"]["spearman"]["delta"] for r in rows], marker=marker, color=color, label=name,
                         yerr=np.array([[r["paired"]["spearman"]["delta"] - r["paired"]["spearman"]["ci"][0],
                                         r["paired"]["spearman"]["ci"][1] - r["paired"]["spearman"]["delta"]]
                                        for r in rows]).T, capsize=2)
        timed = [r for r in rows if "speedup" in r]
        if timed:
            axes[2].plot([r["flops"] for r in timed], [r["speedup"] for r in timed], marker=marker, color=color,
                         label=name)
    grid = np.linspace(0.12, 1.0, 50)
    axes[2].plot(grid, 1 / grid, ls=":", color="0.5", label="ideal (1 / FLOPs)")
    axes[0].set_ylabel("agreement with teacher (%)")
    axes[1].set_ylabel("Spearman - teacher (95% CI)")
    axes[1].axhline(0, color="0.7", lw=0.8)
    axes[2].set_ylabel("measured speed-up (b32 x 64)")
    for ax in axes:
        ax.set_xlabel("FLOPs kept (share of teacher)")
        ax.invert_xaxis()
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, frameon=False)
    axes[2].legend(fontsize=7, frameon=False)
    trained = any(r["variant"] == "prune+distill" for r in result["rows"])
    fig.suptitle("Budgeted pruning" + (": no retraining, and prune+distill" if trained else ", no retraining")
                 + " (Home Depot dev pairs never used to score, tune or choose a checkpoint)", fontsize=9)
    fig.tight_layout()
    with atomic_file(path) as f:
        fig.savefig(f, format=Path(path).suffix[1:])
    plt.close(fig)


if __name__ == "__main__":
    main()
