"""`headcut prune`: physically remove the least important heads (--keep-ratio), or heads and FFN neurons
to a FLOPs budget (--flops), and write a smaller grader."""
from __future__ import annotations

import copy
import functools
import sys
from pathlib import Path

import typer

from headcut.cli.common import (ALLOW_PICKLE, BATCH_SIZE, LABEL_COL, LABEL_MAP, OVERWRITE, PRESET, QUERY_COL, SEED,
                                TITLE_COL, Opt, argument_option, file_to_read, flags_set, folder_option, number_in,
                                path, progress_bar, quiet_transformers, read_data, user_errors)
from headcut.evaluate_arguments import SCORES_FILE
from headcut.prune_arguments import LATENCY_BATCH, argument_range
from headcut_grader.errors import UserError, quoted


RUNTIMES = ("torch-fp32", "onnx-int8", "onnx-fp32")

# One set of column flags per command, as every command and a run recipe's [data] section have (its preset and
# columns read train, dev and test alike): pairs laid out otherwise are rewritten in one layout, not given a flag each.
EVERY_FILE = (" Read for each pairs file of this prune alike: --data (else the model's recorded dev data, over the "
              "columns it records) and --eval-data.")


def every_file(option):
    """A shared column flag, each of its settings kept, whose --help says which of the prune's pairs files it reads."""
    told = copy.copy(option)
    told.help = option.help + EVERY_FILE
    return told


def latency_runtime(name: str):
    """The runtime --latency times its layer cost tables on (None: the library's PyTorch default)."""
    if name == "torch-fp32":
        return None
    import torch

    from headcut.export.layer_timer import onnx_runtime

    return onnx_runtime(int8=name == "onnx-int8", threads=torch.get_num_threads())


@user_errors
def prune(
    ctx: typer.Context,
    model: str = typer.Option(..., "--model", "-m", help="Model folder (a fine-tuned grader) or built-in name."),
    out: path = folder_option(..., "--out", "-o", help="Folder for the pruned grader, report.md and the figure."),
    keep_ratio: Opt[float] = number_in(argument_range("keep_ratio"), None, "--keep-ratio", help="Heads only: share "
                                       "of heads to keep; keeps round(ratio x all heads). Saves little compute: the "
                                       "FFN stays", kind=float),
    flops: Opt[float] = number_in(argument_range("flops"), None, "--flops", help="Heads AND FFN neurons: share of "
                                  "the model's FLOPs per pair to keep, e.g. 0.5 for ~2x less compute. No gradient "
                                  "training", kind=float),
    latency: Opt[float] = number_in(argument_range("latency"), None, "--latency", help="Heads AND FFN neurons: share "
                                    "of the model's measured latency per batch (--batch x --seq-len, on --runtime) to "
                                    "keep, e.g. 0.5. Times this machine's layer cost tables once (cached in "
                                    "$HEADCUT_CACHE, default ~/.cache/headcut)", kind=float),
    batch: int = number_in(argument_range("latency_batch"), LATENCY_BATCH, "--batch",
                           help="--latency: batch size the latency is measured at"),
    runtime: str = typer.Option("torch-fp32", "--runtime", help="--latency: what the layer cost tables are timed on: "
                                "torch-fp32, or onnx-int8 / onnx-fp32 (ONNX Runtime, as the exported grader will "
                                "serve; `headcut export --int8` for onnx-int8)"),
    scores: Opt[path] = typer.Option(None, "--scores", parser=file_to_read("--scores", path, what=SCORES_FILE),
                                     help="--keep-ratio: importance.json from `headcut scan` of this model."),
    data: Opt[str] = typer.Option(None, "--data", "-d", parser=file_to_read("--data"),
                                  help="Pairs to score units on, and to calibrate --flops "
                                  "mask tuning on (default: the model's recorded dev data, read with its recorded "
                                  "columns, each column flag given replacing its own and --preset all of them). Grades "
                                  "are optional "
                                  "with --eval-data (else quality is reported on these pairs)."),
    method: Opt[str] = typer.Option(None, "--method", help="Criterion that ranks units (evaluate/criteria.py): "
                                     "ablation, kl, gradient, fisher or entropy; default fisher, the only built-in one "
                                     "that also scores FFN neurons, which --flops/--latency need. With --scores, "
                                     "which method of the file to use (default: fisher when the file has it, else its "
                                     "first)."),
    targets: str = typer.Option("teacher", "--targets", help="--flops/--latency: Fisher targets. teacher = the model's "
                                "own grade distribution (no labels needed, keeps its judgement); grades = the data's "
                                "grades."),
    tune: bool = typer.Option(True, "--tune/--no-tune", help="--flops/--latency: re-fit one scale per kept head and "
                              "neuron and a bias shift per layer by least squares so each layer matches the unpruned "
                              "one, then the classification head (each fit kept only if better on held-out pairs)."),
    drop_layers: bool = typer.Option(False, "--drop-layers/--no-drop-layers", help="--flops: also try removing whole "
                                     "encoder layers, greedily, keeping a drop only when the re-planned model (masked, "
                                     "untuned) is closer to the unpruned one on the --calibrate pairs, and, tuned, "
                                     "closer than the tuned plan over all layers; the freed FLOPs go to the other "
                                     "layers' best units"),
    tune_fit: Opt[str] = typer.Option(None, "--tune-fit", help="--flops/--latency: what mask tuning re-fits in "
                                 "each sublayer: scales (one per kept head and neuron, and bias shifts), weights (the "
                                 "whole output projection, by ridge), or best (both, keeping per sublayer the one with "
                                 "the lower held-out error; the default, measured best below half the FLOPs)"),
    calibrate: int = number_in(argument_range("calibrate_rows"), 512, "--calibrate", help="--flops/--latency: pairs "
                               "of --data (labels unused) for mask tuning; every fifth is held out to check the fit"),
    seq_len: Opt[int] = number_in(argument_range("seq_len"), None, "--seq-len", help="--flops/--latency: sequence "
                                  "length the cost is counted at (default: the model's max_length)", kind=int),
    layer_prior: float = number_in(
        argument_range("layer_prior"), 0.0, "--layer-prior",
        help="Keep more units in lower layers: a unit's score (its rank percentile with --keep-ratio) is multiplied "
             "by 1 + prior x (L-1-l)/(L-1) for layer l of L (0 = bottom). 0 = pure global ranking (default: on the "
             "Home Depot MiniLM teacher any prior > 0 hurt below keep 0.7, see benchmarks/prune_curve.py); "
             "1 = a bottom-layer unit counts double against a top-layer unit of the same score"),
    min_heads: int = number_in(argument_range("min_heads"), 0, "--min-heads",
                               help="--keep-ratio: keep at least this many heads in every layer"),
    iterative: int = number_in(argument_range("iterative"), 0, "--iterative",
                               help="Prune in this many steps, re-scoring between them (0 or 1 = one shot). "
                               "--flops/--latency: the shares shrink geometrically (0.25 in 5 steps: 0.76, 0.57, "
                               "0.44, 0.33, 0.25) and the model is re-tuned after each step; slower, by the steps"),
    eval_data: Opt[str] = typer.Option(None, "--eval-data", parser=file_to_read("--eval-data"),
                                       help="Pairs to report quality on (default: the scoring "
                                       "data); read with the column flags --data is read with (none: the default "
                                       "columns), so lay both files out alike."),
    score_rows: Opt[int] = number_in(argument_range("score_rows"), 512, "--score-rows",
                                     help="Score units on a seeded sample of this many pairs"),
    eval_rows: Opt[int] = number_in(argument_range("eval_rows"), None, "--eval-rows",
                                    help="Report quality on a seeded sample of this many pairs", kind=int),
    preset: Opt[str] = every_file(PRESET), query_col: Opt[str] = every_file(QUERY_COL),
    title_col: Opt[str] = every_file(TITLE_COL), label_col: Opt[str] = every_file(LABEL_COL),
    label_map: Opt[str] = every_file(LABEL_MAP),
    batch_size: int = BATCH_SIZE,
    bootstrap: int = argument_option("bootstrap", "--bootstrap", help="Bootstrap resamples for the paired 95% CIs"),
    timing: bool = typer.Option(True, "--timing/--no-timing",
                                help="Measure CPU latency before/after at batch 1, 8, 32."),
    latency_seconds: float = number_in(argument_range("latency_seconds"), 1.0, "--latency-seconds",
                                       help="Timed seconds per model and batch size"),
    seed: int = SEED,
    allow_pickle: bool = ALLOW_PICKLE,
    overwrite: bool = OVERWRITE,
):
    """Remove the least important parts of MODEL for good and write a smaller grader to OUT.

    --keep-ratio R removes attention heads only, ranked by a scan (--scores file, or a scan of --data here,
    else of the dev data recorded by `headcut finetune`). --flops F removes heads and FFN neurons together
    until the model costs F of its FLOPs (--latency S: S of its latency measured on this machine): Fisher
    scores of every unit, the best plan under the budget, then mask tuning (no gradient training; a few
    minutes on 2 CPU cores). OUT reloads with headcut.load_model
    and every headcut command (distill it as a `pruned` student, export it to ONNX). The report shows what
    each layer kept, parameters and FLOPs, quality before/after with paired CIs, and measured latency.

    Examples: headcut prune --model runs/teacher --keep-ratio 0.8 --out runs/pruned80
              headcut prune --model runs/teacher --flops 0.5 --data train.tsv --eval-data dev.tsv --out runs/flops50
              headcut prune --model runs/teacher --latency 0.4 --runtime onnx-int8 --out runs/fast
    Below 0.35 of the FLOPs, distil the pruned model for an epoch (recipes/run/homedepot_quarter.yaml).
    """
    quiet_transformers()
    from headcut_grader.files import check_out_dir, refuse_inputs
    from headcut.models import load_model
    from headcut.prune import PruneSettings, default_data
    from headcut.prune.inputs import pool_gold

    target = check_options(keep_ratio, flops, latency, runtime=runtime)
    check_flags_fit(ctx, target)
    check_pairs_flags(ctx, reads_pool=scores is None, eval_data=eval_data)
    check_out_dir(out, overwrite=overwrite, inputs=[model, scores, data, eval_data], flag="--out",
                  holds="the pruned grader, report.md and the figure")
    loaded = load_model(model, allow_pickle=allow_pickle, flag="--model")
    if data is None and scores is None:  # the dev data recorded with the model is read: an input too
        refuse_inputs(out, [(loaded.meta.get("dev_data") or {}).get("path")], flag="--out")
    check_sequence(loaded, seq_len=seq_len, batch=batch if latency is not None else None)
    columns = dict(preset=preset, query_col=query_col, title_col=title_col, label_col=label_col, label_map=label_map)
    model_gold = dict(task=loaded.task, grades=loaded.grades)
    gold = pool_gold(eval_data, method=method, targets=targets if target != "keep_ratio" else None)
    pool = None
    if scores is None:  # --data, else the recorded dev data with the column flags laid over its recorded columns
        path, read_as = (data, columns) if data else default_data(loaded, "flags", columns=columns)
        pool = read_data(path, **gold, **read_as, **model_gold)
    held_out = read_data(eval_data, **columns, **model_gold, flag="--eval-data") if eval_data else None
    settings = PruneSettings(score_rows=score_rows, calibrate_rows=calibrate, eval_rows=eval_rows,
                             batch_size=batch_size, bootstrap=bootstrap, timing=timing,
                             latency_seconds=latency_seconds, seed=seed)
    if target != "keep_ratio":
        call = budget_call(flops=flops, latency=latency, method=method, targets=targets, tune=tune, seq_len=seq_len,
                           batch=batch, runtime=runtime, iterative=iterative, drop_layers=drop_layers,
                           tune_fit=tune_fit)
    else:
        call = keep_ratio_call(keep_ratio=keep_ratio, min_heads=min_heads, scores=scores, method=method,
                               iterative=iterative)
    result = run_with_bars(call, loaded, layer_prior=layer_prior, data=pool, eval_data=held_out, settings=settings)
    write_and_print(result, out, overwrite=overwrite)


COLUMN_FLAGS = ("preset", "query_col", "title_col", "label_col", "label_map")


def check_pairs_flags(ctx: typer.Context, *, reads_pool: bool, eval_data) -> None:
    """Refuse a flag for pairs this prune does not read: a column flag when it reads none (--scores gives the scores,
    and no --eval-data), --eval-rows without --eval-data (quality is then measured on the scoring sample)."""
    columns = flags_set(ctx, COLUMN_FLAGS)
    if columns and not reads_pool and eval_data is None:
        raise UserError(f"{columns[0]} says how pairs files are read, and this prune reads none (--scores gives the "
                        f"scores, and no --eval-data is given), so it would be ignored; pass --eval-data FILE or drop "
                        f"{columns[0]}.")
    if flags_set(ctx, ["eval_rows"]) and eval_data is None:
        raise UserError("--eval-rows samples --eval-data, which is not given, so it would be ignored (quality is "
                        "measured on the --score-rows sample); pass --eval-data FILE or drop --eval-rows.")


def check_sequence(loaded, *, seq_len: int | None, batch: int | None) -> None:
    """--seq-len within the model's positions; with --latency, a timed batch that fits in memory."""
    from headcut.batching import check_max_length, max_length_of
    from headcut_grader.ranges import check_timed_batch

    if seq_len is not None:
        check_max_length(loaded.model, seq_len, flag="--seq-len")
    if batch is not None:
        check_timed_batch(batch, max_length_of(loaded.model, seq_len), flags="--batch, --seq-len")


def check_options(keep_ratio, flops, latency, *, runtime: str) -> str:
    """Refuse a missing or second target and an unknown runtime, before any work; the target given: keep_ratio,
    flops or latency."""
    from headcut.prune.targets import one_target_problem

    target = one_target_problem({"keep_ratio": keep_ratio, "flops": flops, "latency": latency}, flags=True)
    if target:
        raise UserError(f"pass {target}.")
    if runtime not in RUNTIMES:
        raise UserError(f"--runtime {quoted(runtime)} is unknown; choose one of {', '.join(RUNTIMES)}.")
    return "keep_ratio" if keep_ratio is not None else "flops" if flops is not None else "latency"


def check_flags_fit(ctx: typer.Context, target: str) -> None:
    """Refuse a flag the chosen prune would ignore (`prune.targets.READ_BY`, `SCORING` with --scores), and one
    whose switches are off (`SWITCHED`: --tune-fit with --no-tune, --calibrate with --no-tune and no --drop-layers,
    --latency-seconds with --no-timing)."""
    from headcut.prune.targets import READ_BY, SCORING, SWITCHED, ignored_settings, switched_off_problem, target_flags

    typed = {name for name in (*READ_BY, *SCORING) if flags_set(ctx, [name])}
    from_scores = "scores" in typed and target == "keep_ratio"
    for name, readers in ignored_settings(target, sorted(typed), from_scores=from_scores):
        flag = flags_set(ctx, [name])[0]
        if readers is None:
            raise UserError(f"{flag} is read only when the prune scores heads itself, and --scores gives the "
                            f"scores; drop {flag} or --scores.")
        raise UserError(f"{flag} works with {target_flags(readers)}, not with "
                        f"{target_flags((target,))}, and would be ignored; drop {flag}.")
    for name, (switches, _, _) in SWITCHED.items():
        if flags_set(ctx, [name]) and all(ctx.params.get(switch) is False for switch in switches):
            raise UserError(switched_off_problem(name, name=flags_set(ctx, [name])[0], off=f"--no-{switches[0]}"))


def budget_call(*, flops, latency, method, targets: str, tune: bool, seq_len, batch: int, runtime: str,
                iterative: int = 0, drop_layers: bool = False, tune_fit: str | None = None):
    """prune_to_budget with the budget's own arguments (heads and FFN neurons to a FLOPs or latency share)."""
    from headcut.prune import prune_to_budget
    from headcut.prune.scores import DEFAULT_METHOD

    return functools.partial(prune_to_budget, flops=flops, latency=latency, method=method or DEFAULT_METHOD,
                             targets=targets, tune=tune, iterative=iterative, drop_layers=drop_layers,
                             **({"tune_fit": tune_fit} if tune_fit else {}),
                             seq_len=seq_len, latency_batch=batch, latency_runtime=latency_runtime(runtime),
                             notice=_say, names="flags")


def keep_ratio_call(*, keep_ratio: float, min_heads: int, scores, method, iterative: int):
    """The heads-only prune with its own arguments (a share of heads, ranked by a scan)."""
    import headcut.prune as library

    return functools.partial(library.prune, keep_ratio=keep_ratio, min_heads=min_heads, scores=scores, method=method,
                             iterative=iterative, names="flags")


def run_with_bars(call, loaded, **common):
    """Run the library call with one progress bar per stage, one at a time (the previous stage is done)."""
    bars = {}

    def progress(stage, n, total):
        if stage not in bars:
            for bar in bars.values():
                bar.close()
            bars[stage] = progress_bar(total, stage)
        bars[stage].update(n)

    result = call(loaded, progress=progress, **common)
    for bar in bars.values():
        bar.close()
    return result


def _say(line):
    from tqdm import tqdm

    tqdm.write(line, file=sys.stderr)  # above the progress bar, not through it


def write_and_print(result, out: Path, *, overwrite: bool) -> None:
    """Write the pruned grader and its report to `out`, and print the report."""
    from headcut.prune import format_report, write_artifact
    from headcut.prune.artifact import FIGURE

    write_artifact(result, out, overwrite=overwrite, flag="--out")
    typer.echo(format_report(result.record(), names=result.names).replace("# headcut prune\n\n", "", 1))
    typer.echo(f"wrote {out} (report.md, {FIGURE})")
