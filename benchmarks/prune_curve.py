"""Head pruning without retraining: quality vs keep ratio for several ways of choosing heads.

    .venv/bin/python benchmarks/prune_curve.py [--model runs/teacher] [--out runs/prune_curve]

Home Depot dev is split by query into a scoring part (heads are scored there) and a larger report
part (everything below is measured there, never on pairs that chose the heads). The report part is
split again into a curve sample and a disjoint headline sample. Methods: random (mean of --draws),
gradient, fisher, ablation (loss increase), kl (output change), those + lower-layer prior at
--priors (for --prior-methods), and iterative (re-scan with --iterative-method after every 0.1 of heads removed).
For each keep ratio: accuracy, Spearman, loss and agreement with the unpruned teacher, with paired
bootstrap CIs. Writes curves.png, table.md and results.json; caches logits in OUT/cache, so a rerun
with more methods reuses what is done. The headline: keep 0.8 and 0.5 with the best method on the
headline sample (paired CIs, 1000 resamples) and measured CPU latency next to the ideal speedup.
Defaults take about half an hour on 2 busy cores; shrink --curve-rows/--score-rows to go faster.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path

import numpy as np
import torch

from headcut.batching import encode
from headcut_grader.data import read_pairs
from headcut.splits import split_by_query
from headcut.evaluate.ablation import ablation_logits
from headcut.evaluate.criteria import ablation_scores, gradient_scores, head_importance
from headcut.evaluate.fisher import mask_gradients
from headcut.evaluate.metrics import paired_bootstrap, summarize
from headcut.evaluate.predict import predict_logits
from headcut.evaluate_arguments import DEFAULTS, argument_range
from headcut_grader.files import atomic_file, write_json, write_text
from headcut.models import LoadedModel, load_model
from headcut.prune import HeadPlan, iterative_plan, plan_heads, pruned_copy, speed_summary
from headcut.prune.result import PruneSettings
from headcut_grader.ranges import BATCH, Range, declared_range
from bench_flags import file_to_read, out_dir, real, several, whole
from headcut.prune_arguments import argument_range as prune_range

ROOT = Path(__file__).resolve().parents[1]
DEV = ROOT.parent / "shared" / "data" / "homedepot" / "dev.tsv"
METRICS = ("accuracy", "spearman", "loss", "agreement")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    teacher = ROOT / "runs" / "teacher"
    p.add_argument("--model", default=str(teacher) if (teacher / "headcut.json").exists() else None,
                   help="teacher folder (default: runs/teacher)")
    p.add_argument("--data", type=file_to_read(), default=str(DEV))
    p.add_argument("--out", default=str(ROOT / "runs" / "prune_curve"))
    p.add_argument("--score-fraction", type=real(Range(0.0, 1.0, low_open=True, high_open=True)), default=0.3,
                   help="share of dev queries in the scoring part")
    p.add_argument("--score-rows", type=whole(declared_range(PruneSettings, "score_rows")), default=256,
                   help="pairs that score heads")
    p.add_argument("--curve-rows", type=whole(), default=800, help="report pairs for every curve point")
    p.add_argument("--headline-rows", type=whole(), default=3000, help="other report pairs for keep 0.8/0.5")
    p.add_argument("--ratios", type=several(real(prune_range("keep_ratio"))), default="0.9,0.8,0.7,0.6,0.5,0.4,0.3")
    p.add_argument("--methods", default="random,gradient,fisher,ablation,kl,prior,iterative")
    p.add_argument("--priors", type=several(real(prune_range("layer_prior"))), default="0.5,1,2",
                   help="layer-prior strengths tried with --prior-methods scores")
    p.add_argument("--prior-methods", default="fisher,kl", help="scores the lower-layer prior is tried on")
    p.add_argument("--draws", type=whole(argument_range("draws")), default=5, help="random plans per ratio")
    p.add_argument("--iterative-method", default="kl", choices=["ablation", "kl", "fisher", "gradient"])
    p.add_argument("--iterative-rows", type=whole(), default=None,
                   help="scoring pairs per iterative re-scan (default: all)")
    p.add_argument("--bootstrap", type=whole(argument_range("bootstrap")), default=300,
                   help="paired resamples per curve point")
    p.add_argument("--latency-seconds", type=real(declared_range(PruneSettings, "latency_seconds")), default=2.0,
                   help="timed seconds per model and batch size")
    p.add_argument("--batch-size", type=whole(BATCH), default=DEFAULTS["batch_size"])
    p.add_argument("--seed", type=whole(argument_range("seed")), default=0)
    p.add_argument("--replot", action="store_true", help="only redraw OUT/curves.png from OUT/results.json")
    args = p.parse_args()
    if args.model is None:
        p.error("no runs/teacher yet; pass --model FOLDER (a fine-tuned grader)")
    out_dir(p, args.out, inputs=[args.model])
    return args


class Evaluator:
    """Logits of pruned copies on fixed pairs, cached on disk by plan (equal plans are computed once)."""

    def __init__(self, loaded: LoadedModel, pairs, cache: Path, *, batch_size: int):
        self.loaded, self.pairs, self.cache, self.batch_size = loaded, pairs, cache, batch_size
        self.encoded = encode(loaded.tokenizer, pairs, max_length=loaded.max_length, model=loaded.model)
        self.labels = pairs.label_array()
        cache.mkdir(parents=True, exist_ok=True)
        self.teacher = self.logits(None)

    def key(self, plan: HeadPlan | None) -> str:
        text = json.dumps([self.loaded.weights_hash, self.pairs.fingerprint, plan.to_dict() if plan else None])
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def logits(self, plan: HeadPlan | None, model=None) -> np.ndarray:
        path = self.cache / f"{self.key(plan)}.npy"
        if path.exists():
            return np.load(path)
        if model is None:
            model = self.loaded.model if plan is None else pruned_copy(self.loaded, plan).model
        out = predict_logits(model, None, None, batch_size=self.batch_size, encoded=self.encoded)
        with atomic_file(path) as f:  # a run beside it reads a whole entry or none
            np.save(f, out)
        return out

    def metrics(self, logits: np.ndarray, *, iters: int, seed: int) -> dict:
        point = summarize(logits, self.labels, self.pairs.grades)
        point["agreement"] = float(np.mean(logits.argmax(1) == self.teacher.argmax(1)))
        out = {"point": point}
        if iters:
            out["paired"] = paired_bootstrap(logits, self.teacher, self.labels, self.pairs.grades, iters=iters,
                                             seed=seed)
        return out


def score_heads(loaded, pairs, methods, *, batch_size, cache: Path) -> dict[str, torch.Tensor]:
    """Scores of every scan method from one ablation scan and one gradient pass (cached on disk)."""
    path = cache / f"scores-{loaded.weights_hash}-{pairs.fingerprint}.pt"
    scores = torch.load(path) if path.exists() else {}
    wanted = {"ablation", "kl"} if {"ablation", "kl", "prior"} & set(methods) else set()
    wanted |= {"gradient", "fisher"} if {"gradient", "fisher", "prior"} & set(methods) else set()
    if wanted <= set(scores):
        return scores
    encoded = encode(loaded.tokenizer, pairs, max_length=loaded.max_length, model=loaded.model)
    labels = pairs.label_array()
    if {"ablation", "kl", "prior"} & set(methods):
        t = time.time()
        base, masked = ablation_logits(loaded.model, encoded, batch_size=batch_size)
        scores["ablation"] = ablation_scores(loaded.model, labels, base, masked, method="ablation")
        scores["kl"] = ablation_scores(loaded.model, labels, base, masked, method="kl")
        log(f"ablation scan of {len(pairs)} pairs: {time.time() - t:.0f}s")
    if {"gradient", "fisher", "prior"} & set(methods):
        t = time.time()
        grads = mask_gradients(loaded.model, encoded, labels, batch_size=batch_size)
        scores["gradient"] = gradient_scores(loaded.model, grads, method="gradient")
        scores["fisher"] = gradient_scores(loaded.model, grads, method="fisher")
        log(f"gradient pass of {len(pairs)} pairs: {time.time() - t:.0f}s")
    cache.mkdir(parents=True, exist_ok=True)
    with atomic_file(path) as f:
        torch.save(scores, f)
    return scores


def curve_plans(loaded, score_pairs, scores, args, ratios) -> dict[str, dict[float, list[HeadPlan]]]:
    """{method: {ratio: [plans]}} (random has several draws; the others one plan)."""
    methods = args.methods.split(",")
    shape = tuple(next(iter(scores.values())).shape) if scores else (6, 12)
    plans: dict[str, dict[float, list[HeadPlan]]] = {}
    for name in ("gradient", "fisher", "ablation", "kl"):
        if name in methods:
            plans[name] = {r: [plan_heads(scores[name], r, layer_prior=0.0)] for r in ratios}
    if "prior" in methods:
        for base in args.prior_methods.split(","):
            for prior in args.priors:
                plans[f"{base}+prior{prior:g}"] = {r: [plan_heads(scores[base], r, layer_prior=prior)] for r in ratios}
    if "random" in methods:  # last: its many draws are the cheapest to cut when time is short
        g = torch.Generator().manual_seed(args.seed)
        draws = [torch.rand(shape, generator=g) for _ in range(args.draws)]
        plans["random"] = {r: [plan_heads(d, r, layer_prior=0.0) for d in draws] for r in ratios}
    if "iterative" in methods:
        t = time.time()
        steps = int(round((1 - min(ratios)) / 0.1))
        found: dict[float, list[HeadPlan]] = {}
        rescan_pairs = score_pairs.sample(args.iterative_rows, seed=args.seed)

        def score_fn(model):
            return head_importance(model, loaded.tokenizer, rescan_pairs, method=args.iterative_method,
                                   batch_size=args.batch_size, max_length=loaded.max_length)

        def keep(step, plan):
            found[round(plan.keep_ratio, 2)] = [plan]
            log(f"iterative step {step}/{steps}: {plan.num_kept} heads")

        iterative_plan(loaded.model, score_fn, min(ratios), steps=steps, layer_prior=0.0, progress=keep)
        plans[f"iterative-{args.iterative_method}"] = {r: found[min(found, key=lambda k: abs(k - r))] for r in ratios}
        log(f"iterative: {time.time() - t:.0f}s")
    return plans


def summarise_points(evaluator, plans, ratios, args) -> dict:
    results = {}
    for name, by_ratio in plans.items():
        results[name] = {}
        for r in ratios:
            runs = []
            for plan in by_ratio[r]:
                logits = evaluator.logits(plan)
                iters = 0 if name == "random" else args.bootstrap
                runs.append(evaluator.metrics(logits, iters=iters, seed=args.seed)
                            | {"heads_per_layer": plan.heads_per_layer})
            entry = {"heads_per_layer": runs[0]["heads_per_layer"] if len(runs) == 1 else None}
            for m in METRICS:
                values = [run["point"][m] for run in runs]
                entry[m] = float(np.mean(values))
                if len(runs) > 1:
                    entry[f"{m}_band"] = [float(min(values)), float(max(values))]
                else:
                    entry[f"{m}_band"] = band(runs[0], m, evaluator)
            results[name][f"{r:g}"] = entry
            log(f"{name:>22} keep {r:g}: agreement {entry['agreement']:.4f}  accuracy {entry['accuracy']:.4f}  "
                f"spearman {entry['spearman']:.4f}  loss {entry['loss']:.4f}")
    return results


def band(run, metric, evaluator):
    """A metric's 95% band from the paired bootstrap: teacher value + CI of the difference."""
    paired = run.get("paired")
    if not paired:
        return None
    if metric == "agreement":
        return paired["agreement"]["ci"]
    ref = summarize(evaluator.teacher, evaluator.labels, evaluator.pairs.grades)[metric]
    return [ref + paired[metric]["ci"][0], ref + paired[metric]["ci"][1]]


def draw_curves(results, teacher_point, ratios, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(10, 7.5), dpi=110)
    colors = plt.get_cmap("tab20").colors  # more than 10 methods: the default cycle would repeat colours
    for ax, metric in zip(axes.flat, METRICS):
        for i, (name, by_ratio) in enumerate(results.items()):
            xs = [r for r in ratios if f"{r:g}" in by_ratio]
            ys = [by_ratio[f"{r:g}"][metric] for r in xs]
            style = dict(ls="--", color="k") if name == "random" else dict(color=colors[(2 * i) % 20 + (2 * i) // 20])
            (line,) = ax.plot(xs, ys, marker="o", ms=3, label=name, **style)
            bands = [by_ratio[f"{r:g}"][f"{metric}_band"] for r in xs]
            if all(b is not None for b in bands):
                ax.fill_between(xs, [b[0] for b in bands], [b[1] for b in bands], color=line.get_color(), alpha=0.12)
        if metric != "agreement":
            ax.axhline(teacher_point[metric], color="k", lw=0.8, ls=":", label="teacher")
        ax.set_title(metric)
        ax.set_xlabel("keep ratio")
        ax.invert_xaxis()
        ax.grid(alpha=0.3)
    axes.flat[2].legend(fontsize=7, ncol=2)
    fig.tight_layout()
    with atomic_file(path) as f:
        fig.savefig(f, format=Path(path).suffix[1:])
    plt.close(fig)


def table(results, teacher_point, ratios) -> str:
    lines = []
    for metric, fmt in (("agreement", "{:.1%}"), ("accuracy", "{:+.2f}"), ("spearman", "{:+.3f}"), ("loss", "{:+.3f}")):
        title = "agreement with the teacher" if metric == "agreement" else f"{metric} change vs teacher" + (
            " (points)" if metric == "accuracy" else "")
        lines += [f"### {title}", "", "| method | " + " | ".join(f"{r:g}" for r in ratios) + " |",
                  "|---|" + "---|" * len(ratios)]
        for name, by_ratio in results.items():
            cells = []
            for r in ratios:
                v = by_ratio[f"{r:g}"][metric]
                if metric != "agreement":
                    v = (v - teacher_point[metric]) * (100 if metric == "accuracy" else 1)
                cells.append(fmt.format(v))
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def headline(loaded, headline_pairs, plans, results, args, cache) -> dict:
    """Keep 0.8 and 0.5 with the method of best curve agreement: paired CIs on other pairs, latency."""
    evaluator = Evaluator(loaded, headline_pairs, cache, batch_size=args.batch_size)
    out = {"rows": len(headline_pairs),
           "teacher": summarize(evaluator.teacher, evaluator.labels, headline_pairs.grades)}
    for ratio in (0.8, 0.5):
        key = f"{ratio:g}"
        candidates = {n: r[key]["agreement"] for n, r in results.items() if n != "random" and key in r}
        if not candidates:
            continue
        best = max(candidates, key=candidates.get)
        plan = plans[best][ratio][0]
        pruned = pruned_copy(loaded, plan)
        logits = evaluator.logits(plan, pruned.model)
        paired = paired_bootstrap(logits, evaluator.teacher, evaluator.labels, headline_pairs.grades, iters=1000,
                                  seed=args.seed)
        speed = speed_summary(loaded.model, pruned.model, seq_len=int(round(evaluator.encoded.lengths().mean())),
                              min_seconds=args.latency_seconds)
        out[key] = {"method": best, "heads_per_layer": plan.heads_per_layer, "paired": paired, "speed": speed}
        log(f"headline keep {key} ({best}, {len(headline_pairs)} pairs): "
            f"accuracy {paired['accuracy']['delta'] * 100:+.2f} pt "
            f"{np.round(np.array(paired['accuracy']['ci']) * 100, 2).tolist()}, "
            f"Spearman {paired['spearman']['delta']:+.4f} "
            f"{np.round(paired['spearman']['ci'], 4).tolist()}, agreement {paired['agreement']['value']:.2%} "
            f"{np.round(np.array(paired['agreement']['ci']) * 100, 2).tolist()}")
        for row in speed["latency"]:
            log(f"   batch {row['batch_size']:>2}: {row['ms_before']:.1f} -> {row['ms_after']:.1f} ms, "
                f"speedup {row['speedup']:.2f}x of ideal {speed['ideal_speedup']:.2f}x ({row['ratio_to_ideal']:.0%})")
    return out


def main() -> None:
    args = parse_args()
    out = Path(args.out)
    ratios = args.ratios
    if args.replot:
        saved = json.loads((out / "results.json").read_text())
        draw_curves(saved["results"], saved["teacher"], ratios, out / "curves.png")
        log(f"redrew {out}/curves.png")
        return
    loaded = load_model(args.model)
    dev = read_pairs(args.data, preset="homedepot")
    scoring, report = split_by_query(dev, args.score_fraction, seed=args.seed)
    score_pairs = scoring.sample(args.score_rows, seed=args.seed)
    curve_part, headline_part = split_by_query(report, min(0.99, args.curve_rows / len(report)), seed=args.seed + 1)
    curve_pairs = curve_part.sample(args.curve_rows, seed=args.seed)
    headline_pairs = headline_part.sample(args.headline_rows, seed=args.seed)
    log(f"model {args.model} ({loaded.weights_hash}); dev split by query: scoring {len(scoring)} "
        f"(using {len(score_pairs)}), curve {len(curve_pairs)}, headline {len(headline_pairs)} pairs")

    evaluator = Evaluator(loaded, curve_pairs, out / "cache", batch_size=args.batch_size)
    teacher_point = evaluator.metrics(evaluator.teacher, iters=0, seed=args.seed)["point"]
    log(f"teacher on curve pairs: accuracy {teacher_point['accuracy']:.4f}  spearman {teacher_point['spearman']:.4f}"
        f"  loss {teacher_point['loss']:.4f}")
    methods = args.methods.split(",")
    scores = score_heads(loaded, score_pairs, methods, batch_size=args.batch_size, cache=out / "cache")
    plans = curve_plans(loaded, score_pairs, scores, args, ratios)
    results = summarise_points(evaluator, plans, ratios, args)

    best_vs_random = {}
    for r in ratios:
        key = f"{r:g}"
        others = {n: v[key]["agreement"] for n, v in results.items() if n != "random"}
        if others and "random" in results:
            best = max(others, key=others.get)
            best_vs_random[key] = {"best": best, "agreement": others[best],
                                   "random": results["random"][key]["agreement"],
                                   "random_max": results["random"][key]["agreement_band"][1]}
    top = headline(loaded, headline_pairs, plans, results, args, out / "cache")

    draw_curves(results, teacher_point, ratios, out / "curves.png")
    md = ["# Head pruning without retraining", "",
          f"Model `{args.model}`; scored on {len(score_pairs)} pairs, curves on {len(curve_pairs)} other pairs "
          f"(teacher accuracy {teacher_point['accuracy']:.4f}, Spearman {teacher_point['spearman']:.4f}).", "",
          "![curves](curves.png)", "", table(results, teacher_point, ratios)]
    write_text(out / "table.md", "\n".join(md))
    write_json(out / "results.json", {
        "args": vars(args), "scores": {k: v.tolist() for k, v in scores.items()}, "teacher": teacher_point,
        "results": results, "best_vs_random": best_vs_random, "headline": top,
        "data": {"score": score_pairs.fingerprint, "curve": curve_pairs.fingerprint,
                 "headline": headline_pairs.fingerprint}})
    print(table(results, teacher_point, ratios))
    for key, row in best_vs_random.items():
        print(f"keep {key}: best {row['best']} agreement {row['agreement']:.4f} vs random mean {row['random']:.4f} "
              f"(best draw {row['random_max']:.4f})")
    log(f"wrote {out}/curves.png, table.md, results.json")


if __name__ == "__main__":
    main()
