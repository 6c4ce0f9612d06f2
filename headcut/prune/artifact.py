"""Writing a pruned grader: weights + config with per-layer heads + tokenizer (via `save_model`), the
prune record in headcut.json, report.md and the heads-per-layer figure, all in one atomic folder."""
from __future__ import annotations

from pathlib import Path

from headcut_grader.files import as_path, atomic_dir, write_text
from headcut.models import LoadedModel, save_model
from headcut.model_arguments import check_loaded
from headcut.prune.report import format_report, shape_figure
from headcut.prune.result import PruneResult

# Keys of the source's headcut.json that describe the source, not the pruned model.
SOURCE_ONLY = ("dev_metrics", "training", "kind", "prune")
FIGURE = "kept_per_layer.png"


def prune_meta(source: LoadedModel, summary: dict) -> dict:
    """headcut.json for the pruned model: the source's grades/max_length/data records, plus `prune`."""
    check_loaded(source, "prune_meta source")
    meta = {k: v for k, v in source.meta.items() if k not in SOURCE_ONLY}
    meta["kind"] = "prune"
    # resolved: a pruned student's distillation finds its teacher by this path from any working directory
    meta["source"] = {"path": str(Path(source.path).resolve()), "weights_hash": source.weights_hash,
                      "kind": source.meta.get("kind")}
    meta["prune"] = {k: v for k, v in summary.items() if k != "source"}
    return meta


def write_artifact(result: PruneResult, out: str | Path, *, overwrite: bool = False, flag: str = "out") -> Path:
    """Write `out` atomically; an interrupted write leaves no folder, and `out` is neither the source model's folder
    nor inside it (refused naming `out`: a command checks its --out before). `flag`: what named `out`, for messages
    (a command's --out)."""
    out, pruned, source, summary = as_path(out, "write_artifact out"), result.pruned, result.source, result.record()
    saveable = LoadedModel(pruned.model, pruned.tokenizer, {}, pruned.path, pruned.weights_hash)
    # never the source, nor inside it
    with atomic_dir(out, overwrite=overwrite, inputs=[source.path], flag=flag) as tmp:
        save_model(saveable, tmp, meta=prune_meta(source, summary), overwrite=True)
        shape_figure(summary["plan"], tmp / FIGURE)
        write_text(tmp / "report.md", format_report(summary, figure=FIGURE, names=result.names))
    return out
