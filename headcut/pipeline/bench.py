"""The bench stage: every grader of the run on each runtime it was exported for (ONNX Runtime, OpenVINO), timed side
by side, and graded on the test pairs against the teacher with paired bootstrap CIs.

Quality is measured against the teacher as trained (PyTorch fp32 logits), so a grader's INT8 drift counts
against it too; speed-up is against the first graph timed, the teacher's own grader on ONNX Runtime at its
precision, at the same threads and shapes, for every row (an [openvino] row and an INT8 one included).
"""
from __future__ import annotations

import numpy as np

from headcut.pipeline.pairs import report_pairs
from headcut.pipeline.checks import named_in
from headcut.pipeline.stages import Context, chosen_queries


def judges(teacher, pairs, *, iters: int, seed: int):
    """(summarize(logits), compared(logits, against)) of the teacher's task: grades metrics (accuracy, macro-F1,
    Spearman of the expected grade), or ranking metrics for a one-score model (Spearman / Pearson against the
    gold score, NDCG@10, MRR, within-query pair accuracy; agreement = within-query pairs ordered alike)."""
    if teacher.task == "score":
        from headcut.evaluate.tasks import paired, summary

        def summarize_scores(logits):
            return summary(logits, pairs, task="score", activation=teacher.activation)

        def compared_scores(logits, against):
            return paired(logits, against, pairs, task="score", activation=teacher.activation, iters=iters, seed=seed)

        return summarize_scores, compared_scores
    from headcut.evaluate.metrics import paired_bootstrap, summarize

    labels, grades = pairs.label_array(), pairs.grades
    return (lambda logits: summarize(logits, labels, grades),
            lambda logits, against: paired_bootstrap(logits, against, labels, grades, iters=iters, seed=seed))


def bench(ctx: Context) -> dict:
    from dataclasses import replace

    from headcut.arch import count_parameters, flops_per_pair
    from headcut.evaluate.predict import predict_logits
    from headcut.export.bench import BenchSettings, benchmark, grader_backends, grader_variant, skipped_note
    from headcut_grader.files import write_json
    from headcut.models import load_model

    b, data = ctx.recipe.bench, ctx.recipe.data
    teacher = ctx.load("teacher")
    chosen = chosen_queries(ctx)  # read once: the report leaves their pairs out, and says how many
    pairs = report_pairs(ctx.recipe, chosen, data.test_rows, task=teacher.task, grades=teacher.grades)
    summarize, compared = judges(teacher, pairs, iters=b.bootstrap, seed=data.seed)
    exports = {name.partition(".")[2]: record for name, record in ctx.upstream.items() if name.startswith("export.")}
    ctx.progress(0, len(exports) + 1, "teacher logits")
    reference = predict_logits(teacher.model, teacher.tokenizer, pairs, max_length=teacher.max_length)
    yardstick = None
    if b.yardstick:
        with named_in(ctx.recipe, "bench", "yardstick") as name:  # led by the file that holds it, if one does
            other = load_model(b.yardstick, flag=name)
        ctx.progress(0, len(exports) + 1, "yardstick logits")
        yardstick = predict_logits(other.model, other.tokenizer, pairs, max_length=other.max_length)

    lengths = [len(ids) for ids in teacher.tokenizer(pairs.queries, pairs.titles, truncation=True,
                                                     max_length=teacher.max_length)["input_ids"]]
    seq = int(round(float(np.mean(lengths))))
    rows, variants = [], []
    graphs, skipped = [], []  # skipped: a graph whose runtime is not installed or fails to import here, said
    for name, record in exports.items():
        usable, unusable = grader_backends(ctx.path(record["grader"]))
        graphs += [(name, record, backend) for backend in usable]
        skipped += [skipped_note(name, runtime, why) for runtime, why in unusable.items()]
    for i, (name, record, backend) in enumerate(graphs):
        ctx.progress(i + 1, len(graphs) + 1, f"grading {name} on {backend}")
        variant = grader_variant(name, ctx.path(record["grader"]), threads=b.threads, backend=backend)
        logits = variant.logits(pairs)
        variants.append(replace(variant, logits=lambda _pairs, cached=logits: cached))  # graded once, here
        model = ctx.load(name, ctx.path(record["model"])).model
        rows.append({
            "name": name if backend == "onnxruntime" else f"{name} [openvino]", "backend": backend,
            "grader": record["grader"], "model": record["model"], "precision": variant.info["precision"],
            "note": record.get("note"), "size_mb": variant.size_bytes / 2**20, "parameters": count_parameters(model),
            "flops_per_pair": flops_per_pair(model, seq), "metrics": summarize(logits),
            "vs_teacher": compared(logits, reference),
            "vs_yardstick": None if yardstick is None else compared(logits, yardstick),
        })
    ctx.progress(len(graphs) + 1, len(graphs) + 1, f"timing batch {b.batch} x {b.seq_len}")
    settings = BenchSettings((b.batch,), (b.seq_len,), b.threads, repeats=b.repeats)
    timed = benchmark(variants, teacher.tokenizer, pairs, settings)
    for row, measured in zip(rows, timed.variants):
        cell = measured["cells"][0]
        row.update(p50_ms=cell["p50_ms"], p95_ms=cell["p95_ms"], pairs_per_s=cell["pairs_per_s"],
                   speedup=cell["speedup"])
    result = {"rows": rows, "teacher": summarize(reference), "seq_len_mean": seq,
              "data": {**pairs.provenance(),
                       "left_out_queries": len(chosen)},
              "settings": timed.to_dict()["settings"],
              "yardstick": None if yardstick is None else {
                  "path": b.yardstick, "metrics": summarize(yardstick),
                  "teacher_vs": compared(reference, yardstick)}}
    if teacher.task == "score":  # a grades run's bench.json stays as it was
        result["task"] = "score"
    if skipped:  # as is a bench.json that skipped nothing
        result["skipped"] = skipped
    write_json(ctx.folder / "bench.json", result)
    return result
