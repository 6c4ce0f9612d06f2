"""The end of a run: report.md and a self-contained report.html (figures as data URIs) in the run folder.

One table of every grader (size, FLOPs, measured speed on each runtime it was exported for, quality with paired
CIs against the teacher), the runtime and precision each ships on with the timings that chose them, the Pareto
figure of speed-up against quality, the study's experiments from the scan, and the grader to deploy: the fastest
whose point estimates stay within the recipe's quality floor.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from headcut_grader.files import atomic_file, write_json, write_text
from headcut_grader.validation import read_small_text
from headcut.evaluate.tasks import missing, shown, shown_ci, unmeasured, unmeasured_words, within_limits
from headcut.pipeline.recipe import ExportSection, FloorSection, PipelineRecipe

FIGURE = "pareto.png"
MARKDOWN, HTML, SUMMARY = "report.md", "report.html", "report.json"
WRITTEN = (MARKDOWN, HTML, SUMMARY, FIGURE)  # the files the report writes at the top of the run folder
HEADER = ["grader", "precision", "size MiB", "GFLOP/pair", "p50 ms", "pairs/s", "speed-up", "accuracy",
          "Δ accuracy pt [95% CI]", "macro-F1", "Δ macro-F1 [95% CI]", "Spearman", "Δ Spearman [95% CI]",
          "agreement [95% CI]"]


def _delta(d: dict, scale: float = 1.0, digits: int = 4) -> str:
    return shown_ci(d, f"+.{digits}f", scale=scale)


YARDSTICK_HEADER = ["grader", "Δ accuracy pt [95% CI]", "Δ macro-F1 [95% CI]", "Δ Spearman [95% CI]",
                    "agreement [95% CI]"]


def _compared(d: dict) -> list[str]:
    """Accuracy, macro-F1 and Spearman differences and the agreement of one paired comparison."""
    a = d["agreement"]
    return [_delta(d["accuracy"], 100, 2), _delta(d["macro_f1"]), _delta(d["spearman"]),
            _share(a)]


def table_rows(rows: list[dict]) -> list[list[str]]:
    out = []
    for r in rows:
        m, (acc, f1, sp, agree) = r["metrics"], _compared(r["vs_teacher"])
        out.append([r["name"], r["precision"], f"{r['size_mb']:.1f}", f"{r['flops_per_pair'] / 1e9:.3g}",
                    f"{r['p50_ms']:.1f}", f"{r['pairs_per_s']:.0f}", f"{r['speedup']:.2f}x", f"{m['accuracy']:.4f}",
                    acc, f"{m['macro_f1']:.4f}", f1, shown(m['spearman']), sp, agree])
    return out


# A one-score run (a reranker: bench.json "task": "score") reports ranking metrics where a grades run reports grades.
SCORE_HEADER = ["grader", "precision", "size MiB", "GFLOP/pair", "p50 ms", "pairs/s", "speed-up", "Spearman",
                "Δ Spearman [95% CI]", "Pearson", "NDCG@10", "Δ NDCG@10 [95% CI]", "MRR", "Δ MRR [95% CI]",
                "pair order vs teacher [95% CI]", "top-1 kept [95% CI]"]
SCORE_YARDSTICK_HEADER = ["grader", "Δ Spearman [95% CI]", "Δ NDCG@10 [95% CI]", "Δ MRR [95% CI]",
                          "pair order [95% CI]", "top-1 kept [95% CI]"]


def _share(d: dict) -> str:
    return shown_ci(d, ".2%")


def _score_compared(d: dict) -> list[str]:
    """Spearman, NDCG@10 and MRR differences, and the within-query order and top-1 agreement."""
    return [_delta(d["spearman"]), _delta(d["ndcg@10"]), _delta(d["mrr"]), _share(d["pair_order"]), _share(d["top1"])]


def score_table_rows(rows: list[dict]) -> list[list[str]]:
    out = []
    for r in rows:
        m, (sp, ndcg, mrr, order, top1) = r["metrics"], _score_compared(r["vs_teacher"])
        out.append([r["name"], r["precision"], f"{r['size_mb']:.1f}", f"{r['flops_per_pair'] / 1e9:.3g}",
                    f"{r['p50_ms']:.1f}", f"{r['pairs_per_s']:.0f}", f"{r['speedup']:.2f}x", shown(m['spearman']), sp,
                    shown(m['pearson']), shown(m['ndcg@10']), ndcg, shown(m['mrr']), mrr, order, top1])
    return out


def _scores(bench: dict) -> bool:
    return bench.get("task") == "score"


def _yardstick_blocks(bench: dict, floor: FloorSection) -> list[tuple]:
    y = bench.get("yardstick")
    if not y:
        return []
    m = y["metrics"]
    compared, header = (_score_compared, SCORE_YARDSTICK_HEADER) if _scores(bench) else (_compared, YARDSTICK_HEADER)
    rows = [["teacher (PyTorch fp32)", *compared(y["teacher_vs"])]]
    rows += [[r["name"], *compared(r["vs_yardstick"])] for r in bench["rows"]]
    passing = [r["name"] for r in bench["rows"] if within_floor(r, floor, against="vs_yardstick")]
    if _scores(bench):
        who = "reranker"
        measured = f"Spearman {shown(m['spearman'])}, NDCG@10 {shown(m['ndcg@10'])}, MRR {shown(m['mrr'])}"
        cis, within = "95% CIs over queries", "Within the floor of the yardstick"
    else:
        who, measured = "grader", (f"accuracy {m['accuracy']:.4f}, macro-F1 {m['macro_f1']:.4f}, "
                                   f"Spearman {shown(m['spearman'])}")
        cis, within = "95% CIs", (f"Within {floor.accuracy_points:g} accuracy points and {floor.spearman:g} "
                                   "Spearman of the yardstick")
    return [("h2", "Against the yardstick"),
            ("p", f"The same test pairs, every {who} against {y['path']} (PyTorch fp32: {measured}), paired bootstrap "
                  f"{cis}. {within} (point estimates): {', '.join(passing) if passing else 'none'}."),
            ("table", header, rows)]


def _apart(bench: dict) -> str:
    left_out = bench["data"].get("left_out_queries")
    return (f"; the {left_out} queries whose pairs chose checkpoints (and INT8 recipes) left out" if left_out
            else "")


def floor_figures(row: dict, floor: FloorSection, *, against: str = "vs_teacher") -> dict:
    """The floor's figures of `row`, name -> (change, least it may be): points of accuracy (a reranker: of
    within-query pair accuracy against the gold) and Spearman, point estimates; a change is n/a (None) where the
    test pairs cannot measure it."""
    d = row[against]
    accuracy = "accuracy" if "accuracy" in d else "pair_accuracy"
    points = d[accuracy]["delta"]
    return {accuracy: (None if missing(points) else 100 * points, -floor.accuracy_points),
            "spearman": (d["spearman"]["delta"], -floor.spearman)}


def within_floor(row: dict, floor: FloorSection, *, against: str = "vs_teacher") -> bool:
    """Within the floor on the figures the test pairs measure (evaluate.tasks.within_limits)."""
    return within_limits(floor_figures(row, floor, against=against))


def not_measured(rows: list[dict], floor: FloorSection) -> list[str]:
    """The floor's figures that the test pairs could not measure for some grader."""
    return list(dict.fromkeys(name for r in rows for name in unmeasured(floor_figures(r, floor))))


def _not_measured_blocks(rows: list[dict], floor: FloorSection) -> list[tuple]:
    names = not_measured(rows, floor)
    if not names:
        return []
    left = [name for name in floor_figures(rows[0], floor) if name not in names]
    judged = " and ".join(left) if left else "nothing, so no grader is within the floor"
    return [("p", unmeasured_words(names, judged=judged))]


def _floor_text(floor: FloorSection, scores: bool) -> str:
    accuracy = "points of within-query pair accuracy" if scores else "accuracy points"
    return f"within {floor.accuracy_points:g} {accuracy} and {floor.spearman:g} Spearman of the teacher"


def choose(rows: list[dict], floor: FloorSection) -> dict | None:
    """The fastest grader within the floor (point estimates), or None when none is."""
    passing = [r for r in rows if within_floor(r, floor)]
    return max(passing, key=lambda r: r["pairs_per_s"]) if passing else None


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both speed-up and quality (higher is better)."""
    return [i for i, (x, y) in enumerate(points)
            if not any(x2 >= x and y2 >= y and (x2, y2) != (x, y) for x2, y2 in points)]


def _plotted(value: float | None) -> float:
    """A figure as matplotlib takes it: NaN (no point drawn) where the test pairs could not measure it."""
    return float("nan") if missing(value) else value


def pareto_figure(rows: list[dict], floor: FloorSection, chosen: dict | None, path: Path, *,
                  scores: bool = False) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from headcut.evaluate.figures import literal

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    panels = [("pair_accuracy", 100, "within-query pair accuracy - teacher (points)", -floor.accuracy_points)
              if scores else ("accuracy", 100, "accuracy - teacher (points)", -floor.accuracy_points),
              ("spearman", 1, "Spearman - teacher", -floor.spearman)]
    for ax, (metric, scale, label, line) in zip(axes, panels):
        xs = [r["speedup"] for r in rows]
        ys = [scale * _plotted(r["vs_teacher"][metric]["delta"]) for r in rows]
        errs = np.array([[y - scale * _plotted(r["vs_teacher"][metric]["ci"][0]),
                          scale * _plotted(r["vs_teacher"][metric]["ci"][1]) - y] for y, r in zip(ys, rows)]).T
        ax.errorbar(xs, ys, yerr=errs, fmt="o", color="#4c72b0", ecolor="#9db4d6", capsize=3, zorder=2)
        shown_at = [i for i, y in enumerate(ys) if not missing(y)]
        front = sorted((shown_at[i] for i in pareto_front([(xs[i], ys[i]) for i in shown_at])), key=lambda i: xs[i])
        ax.plot([xs[i] for i in front], [ys[i] for i in front], "-", color="#dd8452", lw=1.5, zorder=1,
                label="Pareto front")
        ax.scatter([xs[i] for i in front], [ys[i] for i in front], s=90, facecolors="none", edgecolors="#dd8452",
                   zorder=3)
        for x, y, r in zip(xs, ys, rows):
            ax.annotate(literal(r["name"]), (x, y), fontsize=8, xytext=(5, 4), textcoords="offset points")
        if chosen is not None:
            ax.scatter([chosen["speedup"]], [scale * _plotted(chosen["vs_teacher"][metric]["delta"])], marker="*",
                       s=220, color="#55a868", zorder=4, label="deploy")
        ax.axhline(line, color="#c44e52", ls="--", lw=1, label="quality floor")
        ax.axhline(0, color="#888", lw=0.6)
        ax.set_xlabel("speed-up vs the teacher's grader (pairs/s, ONNX Runtime)")
        ax.set_ylabel(label + " [95% paired CI]")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower left")
    fig.suptitle("Speed against quality: every grader of the run", fontsize=10)
    fig.tight_layout()
    try:
        with atomic_file(path) as f:  # the old figure or the whole new one, never a cut one
            fig.savefig(f, dpi=110, format="png")
    finally:
        plt.close(fig)


def report_blocks(out: Path, recipe: PipelineRecipe, records: dict) -> tuple[list[tuple], dict]:
    """The report as blocks (see evaluate.scan_report.render_markdown) and its summary for report.json."""
    bench = records["bench"]
    rows, floor = bench["rows"], recipe.floor
    chosen = choose(rows, floor)
    scores = _scores(bench)
    pareto_figure(rows, floor, chosen, out / FIGURE, scores=scores)
    s = bench["settings"]
    floor_text = _floor_text(floor, scores)
    b: list[tuple] = [("h", "headcut run")]
    b.append(("p", f"Recipe {recipe.source}. Test pairs: {bench['data']['rows']} from {bench['data']['source']} "
                   f"(mean length {bench['seq_len_mean']} tokens; FLOPs counted there)" + _apart(bench) + "."))
    b.append(("h2", "The grader to deploy"))
    if chosen is not None and scores:
        d = chosen["vs_teacher"]
        b.append(("p", f"{chosen['name']}: {out / chosen['grader']} - the fastest reranker {floor_text} (point "
                       f"estimates): {chosen['speedup']:.2f}x the teacher's grader, Spearman "
                       f"{shown(d['spearman']['delta'], '+.4f')}, NDCG@10 {shown(d['ndcg@10']['delta'], '+.4f')}, "
                       f"{shown(d['pair_order']['value'], '.2%')} of within-query title pairs ordered as the teacher "
                       "orders them."))
    elif chosen is not None:
        b.append(("p", f"{chosen['name']}: {out / chosen['grader']} - the fastest grader {floor_text} "
                       f"(point estimates): {chosen['speedup']:.2f}x the teacher's grader, accuracy "
                       f"{100 * chosen['vs_teacher']['accuracy']['delta']:+.2f} pt, Spearman "
                       f"{shown(chosen['vs_teacher']['spearman']['delta'], '+.4f')}."))
    else:
        b.append(("p", f"No grader of this run is {floor_text}; keep the teacher (PyTorch fp32) or relax the floor."))
    b += _not_measured_blocks(rows, floor)
    b.append(("h2", "Every grader"))
    speed = (f"Speed: {_runtimes(rows)}, {s['threads']} threads, batch {s['batch_sizes'][0]} x sequence "
             f"{s['seq_lens'][0]}, {s['repeats']} timed runs after {s['warmup']} warm-up, variants taking turns; "
             "speed-up against the teacher's grader.")
    t = bench["teacher"]
    if scores:
        b.append(("p", f"{speed} Quality: one-score rerankers judged on ranking against the teacher as trained "
                       f"(PyTorch fp32: Spearman {shown(t['spearman'])} and Pearson {shown(t['pearson'])} against the "
                       f"gold score, NDCG@10 {shown(t['ndcg@10'])}, MRR {shown(t['mrr'])}), differences with paired "
                       "bootstrap 95% CIs over queries; pair order: the share of within-query title pairs ordered as "
                       "the teacher orders them; top-1 kept: the share of queries whose first title stays first."))
        b.append(("table", SCORE_HEADER, score_table_rows(rows)))
    else:
        b.append(("p", f"{speed} Quality: against the teacher as trained (PyTorch fp32: accuracy {t['accuracy']:.4f}, "
                       f"macro-F1 {t['macro_f1']:.4f}, Spearman {shown(t['spearman'])}), differences with paired "
                       "bootstrap 95% CIs."))
        b.append(("table", HEADER, table_rows(rows)))
    notes = [f"{r['name']}: {r['note']}" for r in rows if r.get("note")]
    if notes:
        b.append(("p", "Notes: " + " ".join(notes)))
    b += [("p", f"Note: {skipped}.") for skipped in bench.get("skipped", [])]  # not timed: why, and the fix
    b += _runtime_blocks(records, recipe.export)
    b.append(("img", FIGURE, "Speed-up against quality change; the Pareto front is outlined, the dashed line is the "
                             "quality floor, the star the grader to deploy."))
    b += _yardstick_blocks(bench, floor)
    scan = records.get("scan")
    if scan:
        b += _scan_blocks(out, out / scan["folder"])
    summary = {"deploy": None if chosen is None else {k: chosen[k] for k in ("name", "grader", "speedup")},
               "floor": {"accuracy_points": floor.accuracy_points, "spearman": floor.spearman,
                         "not_measured": not_measured(rows, floor)}, "rows": rows}
    return b, summary


RUNTIME_NAMES = {"onnxruntime": "ONNX Runtime", "openvino": "OpenVINO"}
RUNTIME_HEADER = ["grader", "grades with", "precision", "why", "ONNX Runtime graphs timed", "OpenVINO graphs timed"]


def _runtimes(rows: list[dict]) -> str:
    """The runtimes the bench timed, as its rows name them ([openvino]: the OpenVINO graph of a grader)."""
    names = dict.fromkeys(RUNTIME_NAMES[r.get("backend", "onnxruntime")] for r in rows)
    return " and ".join(names) + (" (rows marked [openvino])" if len(names) > 1 else "")


def _runtime_blocks(records: dict, export: ExportSection) -> list[tuple]:
    """Each grader's runtime and precision, and the timings that chose them (the export stage's "runtime"), said as
    the recipe's export.backend and export.precision chose them: measured under auto, else pinned."""
    exports = {name.partition(".")[2]: r["runtime"] for name, r in records.items()
               if name.startswith("export.") and r.get("runtime")}
    if not exports:
        return []
    timed = [r["speed"] for r in exports.values() if r["speed"]]
    shape = (f"batch {timed[0]['shape'][0]} x sequence {timed[0]['shape'][1]}, {timed[0]['threads']} threads"
             if timed else "")
    rows = [[name, RUNTIME_NAMES[r["backend"]], r["precision"], _why(r)]
            + [_candidates(r["graphs"].get(backend)) for backend in RUNTIME_NAMES] for name, r in exports.items()]
    times = f"Milliseconds per batch ({shape}), candidates timed in turns" if shape else "Milliseconds per batch"
    return [("h2", "The runtime each grader ships on"),
            ("p", f"{_chosen_how(export)}. {times}; ✓ passed the gate, ✗ did not; * shipped."),
            ("table", RUNTIME_HEADER, rows)]


def _chosen_how(export: ExportSection) -> str:
    """How the export stage chose each grader's graphs and runtime: by measurement on this CPU where export.precision
    and export.backend are auto, as the recipe pinned them where not. Was: 'Chosen at export on this CPU, by
    measurement' whatever they were (the demo pins onnxruntime and int8)."""
    if export.precision == "auto":
        graphs = ("each runtime's graph is the fastest of its INT8 and bf16 candidates that passes the gate (quality "
                  "and speed against its fp32 graph, the first figure), fp32 where none does")
    elif export.precision == "fp32":
        graphs = "every graph is fp32, as export.precision=fp32 pins it"
    else:
        graphs = (f"every graph is {export.precision}, as export.precision={export.precision} pins it, where it "
                  "passes the gate (quality against its fp32 graph, the first figure), fp32 where it does not")
    if export.backend == "onnxruntime":
        runtime = "a grader grades with ONNX Runtime, as export.backend=onnxruntime pins it"
    else:
        runtime = "a grader grades with the runtime whose graph was timed fastest on this CPU"
        if export.backend == "openvino":
            runtime = "export.backend=openvino pins an OpenVINO graph beside an fp32 ONNX one, and " + runtime
    measured = export.precision == "auto" or export.backend != "onnxruntime"
    lead = "Chosen at export on this CPU, by measurement" if measured else "Pinned by the recipe"
    if measured and (export.precision != "auto" or export.backend != "auto"):
        lead = "Chosen at export on this CPU, by measurement where the recipe pins nothing"
    return f"{lead}: {graphs}, and {runtime}"


def _why(runtime: dict) -> str:
    speed = runtime["speed"]
    if not speed:
        return runtime["reason"]
    return runtime["reason"] + ": " + ", ".join(f"{RUNTIME_NAMES[n]} {ms:.1f} ms" for n, ms in speed["ms"].items())


def _candidates(graph: dict | None) -> str:
    """One runtime's candidates, 'fp32 20.1 ms ✓, bf16 8.3 ms ✓*' (* shipped), and what was skipped."""
    if graph is None:
        return "–"
    marks = {True: " ✓", False: " ✗", None: ""}  # None: the fp32 yardstick
    shown = [f"{c['graph']} {c['ms']:.1f} ms{marks[c['passes']]}{'*' * (c['graph'] == graph['chosen'])}"
             for c in graph["candidates"]]
    shown += [f"skipped {s}" for s in graph["skipped"]]
    return ", ".join(shown) if shown else f"{graph['precision']} (no other candidate recorded)"


def _scan_blocks(out: Path, folder: Path) -> list[tuple]:
    from headcut.evaluate.scan_report import report_blocks as scan_report_blocks

    data = json.loads(read_small_text(folder / "importance.json", what="score file"))
    relative = folder.relative_to(out)
    images = {k: str(relative / p.name) for k, p in ((k, folder / f"{k}.png") for k in
                                                      ("importance", "heads", "random", "halves", "layers", "term",
                                                       "probes", "attention")) if p.exists()}
    blocks = scan_report_blocks(data["extra"], model_info=data["model"], data_info=data["data"], images=images)
    return [("h2", "The study's experiments (scan of the teacher)")] + [x for x in blocks if x[0] != "h"]


def write_report(out: Path, recipe: PipelineRecipe, records: dict) -> dict:
    from headcut.evaluate.scan_report import render_html, render_markdown

    blocks, summary = report_blocks(out, recipe, records)
    write_text(out / MARKDOWN, render_markdown(blocks))
    write_text(out / HTML, render_html(blocks, out, title="headcut run"))
    write_json(out / SUMMARY, summary)
    return summary
