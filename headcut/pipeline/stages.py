"""What each pipeline stage does: library calls only (finetune, scan, prune, distill, export, bench).

A stage function takes a `Context` and returns a JSON-ready record of what it made; `run.py` decides
whether it runs at all. Outputs go under `ctx.folder`, each written atomically by the library called.
"""
from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from headcut_grader.errors import UserError, concerning
from headcut.pipeline.checks import named_in, section_keys
from headcut.pipeline.pairs import choice_pairs, read, selection_queries
from headcut.pipeline.recipe import (PipelineRecipe, key_names, planned_subs, scan_gold_of, scan_settings,
                                     sub_recipes, worded_in_run)


@dataclass
class Context:
    recipe: PipelineRecipe
    folder: Path  # this stage's folder under the run directory
    upstream: dict[str, dict]  # records of the stages run before, by stage name
    progress: Callable[[int, int | None, str], None]  # (done, total, what)
    run_dir: Path
    export_choice: object = None  # the run's checks' ExportChoice (check_export), built by the export stage

    def model_of(self, stage: str) -> str:
        return str(self.path(self.upstream[stage]["model"]))

    def load(self, stage: str, path: Path | None = None):
        """`stage`'s model (its stage record's, or at `path`), loaded. A teacher the run did not train is named by
        the recipe key that named it as the user gave it (given_as: teacher.path, or --set teacher.path), a refusal
        led by the file that holds that key, as the run's checks lead it (named_in); one this run made by its path
        in the run folder alone (RUN/prune/model), not load_model's own argument."""
        from headcut.models import load_model

        given = stage == "teacher" and self.recipe.teacher.path is not None
        with named_in(self.recipe, "teacher", "path") if given else nullcontext("") as name:
            return load_model(self.model_of(stage) if path is None else path, flag=name)

    def path(self, recorded: str) -> Path:
        """A path a stage recorded: relative to the run folder (so a copied or moved run still works)."""
        return self.run_dir / recorded

    def rel(self, path: Path) -> str:
        return str(path.relative_to(self.run_dir))


def teacher_meta(ctx: Context) -> dict:
    from headcut.models import META_FILE, read_json_file

    meta = Path(ctx.model_of("teacher")) / META_FILE
    return read_json_file(meta) if meta.exists() else {}


def chosen_queries(ctx: Context) -> set[str]:
    """The test file's queries that chose a checkpoint in this run: kept out of the report (pairs.py)."""
    return selection_queries(ctx.recipe, teacher_meta(ctx))


def _training_progress(ctx: Context):
    """training.train's events -> (done, total, what): preparatory stages count pairs, training steps."""
    def progress(event):
        if "eval" in event:
            return
        ctx.progress(event["step"], event["total"], event.get("stage", "steps"))

    return progress


def teacher(ctx: Context) -> dict:
    from headcut.finetune import finetune
    from headcut.models import resolve_source

    if ctx.recipe.teacher.path is not None:
        with named_in(ctx.recipe, "teacher", "path") as name:  # led by the file that holds it, if one does
            model = resolve_source(ctx.recipe.teacher.path, flag=name)
        return {"model": str(model.resolve()), "trained": False}
    recipe = planned_subs(ctx.recipe)["teacher"]  # the finetune recipe the checks read: it names no upstream model
    with worded_in_run(ctx.recipe, ("teacher",)):  # a refusal names the run's keys (data.dev), as its checks do
        result = finetune(recipe, ctx.folder / "model", overwrite=True, progress=_training_progress(ctx))
    return {"model": ctx.rel(ctx.folder / "model"), "trained": True, "dev_metrics": result["dev_metrics"]}


def scan(ctx: Context) -> dict:
    from headcut.evaluate.scan import scan_model
    from headcut.evaluate.scan_report import write_scan
    from headcut_grader.files import atomic_dir

    s, data = ctx.recipe.scan, ctx.recipe.data
    spec = s.data or data.dev or data.test
    loaded = ctx.load("teacher")
    settings = scan_settings(ctx.recipe)
    pairs = read(spec, data=data, rows=s.rows, seed=data.seed, task=loaded.task, grades=loaded.grades,
                 **scan_gold_of(settings))
    done: dict[str, int] = {}

    def progress(stage, n):
        done[stage] = done.get(stage, 0) + n
        ctx.progress(done[stage], len(pairs), stage)

    result = scan_model(loaded, pairs, settings, seed=data.seed, limit=s.rows, progress=progress,
                        names=key_names(ctx.recipe, "scan"))
    with atomic_dir(ctx.folder / "scan", overwrite=True) as tmp:
        images = write_scan(tmp, result.findings, model_info=result.model, data_info=result.data)
    return {"folder": ctx.rel(ctx.folder / "scan"), "figures": images, "baseline": result.findings.get("baseline"),
            "ranking": result.findings["ranking"]}


def prune(ctx: Context) -> dict:
    from headcut.prune import PruneSettings, write_artifact

    p, data = ctx.recipe.prune, ctx.recipe.data
    loaded = ctx.load("teacher")
    done: dict[str, int] = {}

    def progress(stage, n, total):
        done[stage] = done.get(stage, 0) + n
        ctx.progress(done[stage], total, stage)

    # the library samples score_rows (seed) and calibrate rows (seed + 1) of the pool itself
    settings = PruneSettings(score_rows=p.score_rows, calibrate_rows=p.calibrate, timing=False, seed=data.seed)
    elsewhere = {"model": ("teacher", "path"), "data": ("data", "train")}
    names = key_names(ctx.recipe, "prune", **elsewhere)  # as the user gave them
    # led by the file that holds the key a refusal is about (UserError.about), if one does
    with named_in(ctx.recipe, "prune", "flops" if p.keep_ratio is None else "keep_ratio",
                  keys=section_keys("prune", **elsewhere)):
        result = _pruned(ctx, loaded, settings, progress, names)
    write_artifact(result, ctx.folder / "model", overwrite=True)
    return {"model": ctx.rel(ctx.folder / "model"), "kept_heads": result.plan["kept"],
            "total_heads": result.plan["total"]}


def _pruned(ctx: Context, loaded, settings, progress, names):
    from headcut.prune import prune as prune_heads
    from headcut.prune.inputs import pool_gold
    from headcut.prune.pipeline import prune_to_budget

    p, data = ctx.recipe.prune, ctx.recipe.data
    if p.keep_ratio is not None:
        importance = ctx.path(ctx.upstream["scan"]["folder"]) / "importance.json"
        result = prune_heads(loaded, keep_ratio=p.keep_ratio, layer_prior=p.layer_prior, scores=importance,
                             method=p.method, settings=settings, progress=progress, names=names)
    else:
        with concerning("spec"):  # the reader's sentence is led by the file it reads, as the run's checks' is
            pool = read(data.train, data=data, rows=None, seed=data.seed, task=loaded.task, grades=loaded.grades,
                        **pool_gold(None, method=p.method))
        result = prune_to_budget(loaded, flops=p.flops, data=pool, method=p.method, layer_prior=p.layer_prior,
                                 tune=p.tune, tune_fit=p.tune_fit, iterative=p.iterative, drop_layers=p.drop_layers,
                                 settings=settings, progress=progress, names=names)
    return result


def distill(name: str) -> Callable[[Context], dict]:
    def run(ctx: Context) -> dict:
        from headcut.distill import distill as train_student

        pruned = ctx.model_of("prune") if "prune" in ctx.upstream else None
        recipe = sub_recipes(ctx.recipe, teacher_dir=ctx.model_of("teacher"), pruned_dir=pruned)[f"distill.{name}"]
        with worded_in_run(ctx.recipe, ("distill", name)):  # a refusal names the run's keys (data.dev)
            result = train_student(recipe, ctx.folder / "model", overwrite=True, progress=_training_progress(ctx))
        if not result.finished:
            raise UserError(f"distill.{name} stopped before its last step; rerun to resume from {result.work_dir}.")
        return {"model": ctx.rel(ctx.folder / "model"), "steps": result.training["steps"],
                "best_step": result.training["best_step"]}

    return run


def export(source: str) -> Callable[[Context], dict]:
    """Export the model of stage `source` (teacher, prune or distill.NAME) to a grader: export.backend's graphs at
    export.precision (auto: each runtime's fastest that passes the gate), and the runtime it grades with here."""
    def run(ctx: Context) -> dict:
        from headcut.export import Int8Gate

        e = ctx.recipe.export
        loaded = ctx.load(source)
        pairs = choice_pairs(ctx.recipe, chosen_queries(ctx), e.rows, task=loaded.task,
                             grades=loaded.grades)  # never the report's queries
        gate = Int8Gate(min_agreement=e.min_agreement, max_spearman_drift=e.max_spearman_drift, max_drop=e.max_drop)
        steps = iter(range(1, 1000))

        def say(message):
            ctx.progress(next(steps), None, message)

        # a refusal led by the file that holds the key it is about (UserError.about), if one does
        with named_in(ctx.recipe, "export", "precision", keys=section_keys("export")):
            record, note = _built(ctx, loaded, pairs, gate, say)
        return {"grader": ctx.rel(ctx.folder / "grader"), "model": ctx.upstream[source]["model"],
                "precision": record["precision"], "bytes": record["model_file"]["bytes"], "note": note,
                "runtime": _runtime(ctx, record, vocab_size=loaded.model.config.vocab_size)}

    return run


def _runtime(ctx: Context, record: dict, *, vocab_size: int) -> dict:
    """The runtime the grader grades with on this CPU, as the runtime itself chooses it, and the timings behind it."""
    from headcut.export.card import runtime_record
    from headcut_grader.backend_choice import choose_backend

    choice = choose_backend(ctx.folder / "grader", record, threads=ctx.recipe.export.threads, vocab_size=vocab_size)
    alone = record.get("backend_alone")  # the export's own reason (grader.json), not decided again
    return runtime_record(record, choice.backend, f"{choice.reason} ({alone})" if alone else choice.reason)


def _built(ctx: Context, loaded, pairs, gate, say) -> tuple[dict, str | None]:
    """The export stage's grader record, and a note where no INT8 or bf16 graph passed the gate (fp32 shipped)."""
    from headcut.export import GateError, build_grader

    e, names, note = ctx.recipe.export, key_names(ctx.recipe, "export"), None  # names: as the user gave them
    try:
        record = build_grader(loaded, ctx.folder / "grader", pairs=pairs, backend=e.backend, precision=e.precision,
                              gate=gate, threads=e.threads, overwrite=True, progress=say, names=names,
                              choice=ctx.export_choice)
    except GateError as error:
        if e.precision not in ("int8", "bf16"):
            raise
        note = f"no {e.precision} graph passed the gate, exported fp32 ({error})"
        record = build_grader(loaded, ctx.folder / "grader", pairs=pairs, backend=e.backend, precision="fp32",
                              gate=gate, threads=e.threads, overwrite=True, progress=say, names=names)
    return record, note
