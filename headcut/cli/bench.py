"""`headcut bench`: PyTorch models and ONNX graders side by side on the same data, shapes and threads."""
from __future__ import annotations

import os
from pathlib import Path

import typer

from headcut.cli.common import (LABEL_COL, LABEL_MAP, LIMIT, OVERWRITE, PRESET, QUERY_COL, THREADS, TITLE_COL, Opt,
                                field_option, file_to_read, folder_option, path, quiet_transformers, read_data,
                                user_errors)
from headcut.export.bench_settings import SEQ_LEN, BenchSettings


def _ints(text: str, flag: str, valid, example: str) -> tuple[int, ...]:
    """The comma list of whole numbers `text` of `flag`, each in range `valid`; `example`: a list the flag takes
    (its default: 1,8,32 is no list of --seq-lens, whose values start at 8)."""
    from headcut_grader.errors import UserError, quoted
    from headcut_grader.validation import cell_number

    try:
        values = tuple(cell_number(x, int, ascii_only=True) for x in text.split(","))
    except ValueError:
        raise UserError(f"{flag} {quoted(text)} is not a comma-separated list of whole numbers; write e.g. "
                        f"{flag} {example}.") from None
    for value in values:
        problem = valid.problem(value)
        if problem:
            raise UserError(f"{flag} {quoted(text)}: {value} {problem}.")
    twice = next((v for v in values if values.count(v) > 1), None)
    if twice is not None:
        raise UserError(f"{flag} {quoted(text)} names {twice} twice; list each value once.")
    return values


# the grid's defaults, as the flags write them
BATCH_SIZES = ",".join(map(str, BenchSettings.batch_sizes))
SEQ_LENS = ",".join(map(str, BenchSettings.seq_lens))


def _check_variants(models: list[str], graders: list[Path], longest: int):
    """Every --model and --grader named once, and each of the first --model's task, grades and tokenizer, before
    any loads: bench compares each with the first; and no --model is timed past its positions, nor --grader past its
    max_length (`longest`: the longest --seq-lens; a grader's graph may have no positions past it). Returns the first's
    outline."""
    from headcut.batching import check_max_length
    from headcut.evaluate.report import comparison_problem
    from headcut.models import outline
    from headcut_grader.errors import UserError
    from headcut_grader.grader import read_record

    for flag, names in (("--model", [str(m) for m in models]), ("--grader", [str(g) for g in graders])):
        seen = {}
        for name in names:
            key = os.path.realpath(name) if os.path.exists(name) else name
            if key in seen:
                twice = "is given twice" if name == seen[key] else f"names the same model as {flag} {seen[key]}"
                raise UserError(f"{flag} {name} {twice}; pass each {flag[2:]} once (to time a model against itself, "
                                "copy its folder).")
            seen[key] = name
    # a grader folder given as --model: bench times it as it is with --grader, beside a reference --model
    hint = ", and time the grader itself with --grader {} (bench times each against the first --model)"
    outlines = [outline(m, flag="--model", grader_hint=hint.format(m)) for m in models]
    for name, outlined in zip(models, outlines):  # each model's positions, named, before the first loads
        check_max_length(outlined.model, longest, flag="--seq-lens", whose=f"--model {name}'s")
    first, *others = outlines
    kinds = [(f"--model {m}", (other.task, other.grades)) for m, other in zip(models[1:], others)]
    for g in graders:
        record = read_record(g, flag="--grader")  # a folder that is not a grader is one sentence
        kinds.append((f"--grader {g}", (record.get("task", "grades"), record.get("grades"))))
        if longest > record["max_length"]:
            raise UserError(f"--seq-lens {longest} is longer than --grader {g} reads (its max_length is "
                            f"{record['max_length']}); time lengths up to {record['max_length']}.")
    for name, kind in kinds:
        problem = comparison_problem((first.task, first.grades), kind, names=(f"the first --model {models[0]}", name))
        if problem:
            raise UserError(problem)
    _check_tokenizers(models, graders)
    return first


def _check_tokenizers(models: list[str], graders: list[Path]) -> None:
    """Every variant is timed on the first --model's token ids, so each must tokenise as it does: another
    vocabulary gives wrong ids, or ids past its embedding table (an ONNX Runtime error midway)."""
    from headcut.export.bench import tokenizer_digest
    from headcut_grader.errors import UserError

    first = tokenizer_digest(models[0], flag="--model")
    others = [*(("--model", m, False) for m in models[1:]), *(("--grader", g, True) for g in graders)]
    for flag, name, grader in others:
        if tokenizer_digest(name, grader=grader, flag=flag) != first:
            raise UserError(f"{flag} {name} has another tokenizer than the first --model {models[0]}, and bench times "
                            "every variant on the first's token ids; bench models that share a tokenizer, or run "
                            "bench separately for each.")



@user_errors
def bench(
    model: list[str] = typer.Option(..., "--model", "-m",
                                    help="PyTorch model folder; the first is the reference (repeatable)."),
    grader: list[Path] = typer.Option([], "--grader", "-g", help="Grader folder from `headcut export` (repeatable); "
                                      "each of its graphs (ONNX Runtime, OpenVINO) is timed."),
    data: str = typer.Option(..., "--data", "-d", parser=file_to_read("--data"),
                             help="Labelled pairs for accuracy/agreement and the timing inputs."),
    out: path = folder_option(..., "--out", "-o", help="Folder for bench.json, bench.md and bench.png."),
    threads: int = THREADS,
    batch_sizes: str = typer.Option(BATCH_SIZES, "--batch-sizes", help="Batch sizes of the grid."),
    seq_lens: str = typer.Option(SEQ_LENS, "--seq-lens", help=f"Sequence lengths of the grid, each "
                                 f"{SEQ_LEN.describe()}."),
    repeats: int = field_option(BenchSettings, "repeats", "--repeats",
                                help=f"Timed runs per variant and cell (after {BenchSettings.warmup} warm-up runs)"),
    preset: Opt[str] = PRESET, query_col: Opt[str] = QUERY_COL, title_col: Opt[str] = TITLE_COL,
    label_col: Opt[str] = LABEL_COL, label_map: Opt[str] = LABEL_MAP, limit: Opt[int] = LIMIT,
    overwrite: bool = OVERWRITE,
):
    """Benchmark models and graders: p50/p95 latency, pairs/s, size, memory, accuracy, agreement with the first --model.

    Example: headcut bench -m runs/teacher -m runs/pruned -g runs/grader-fp32 -g runs/grader-int8
    --data ../shared/data/homedepot/dev.tsv --limit 1000 --out runs/bench
    """
    quiet_transformers()
    from headcut.export.bench import (benchmark, grader_backends, grader_variant, load_measured, pytorch_variant,
                                      short_names, skipped_note)
    from headcut.export.bench_report import write_bench
    from headcut_grader.files import atomic_dir, check_out_dir
    from headcut.models import load_model

    inputs = [*model, *grader, data]
    check_out_dir(out, overwrite=overwrite, inputs=inputs, flag="--out",  # before the benchmark, not after it
                  holds="bench.json, bench.md and bench.png")
    from headcut_grader.ranges import BATCH, check_timed_batch

    sizes = _ints(batch_sizes, "--batch-sizes", BATCH, BATCH_SIZES)
    lengths = _ints(seq_lens, "--seq-lens", SEQ_LEN, SEQ_LENS)
    check_timed_batch(max(sizes), max(lengths), flags="--batch-sizes, --seq-lens")  # as flags, before BenchSettings
    settings = BenchSettings(sizes, lengths, threads, repeats=repeats)
    reference = _check_variants(model, grader, max(settings.seq_lens))  # before any model loads
    # the reference's task and grades decide which gold the data gives
    pairs = read_data(data, preset=preset, query_col=query_col, title_col=title_col, label_col=label_col,
                      label_map=label_map, limit=limit, task=reference.task, grades=reference.grades)
    # Loaded inside load_measured, so each variant's resident-memory growth includes its weights.
    variants = [load_measured(lambda m=m, n=n: pytorch_variant(f"pytorch fp32 {n}", load_model(m, flag="--model"),
                                                               threads=threads))
                for m, n in zip(model, short_names(model, 1))]
    for folder, name in zip(grader, short_names(grader, 2)):  # each graph whose runtime imports here
        usable, skipped = grader_backends(folder)
        variants += [load_measured(lambda f=folder, b=b, n=name: grader_variant(f"grader {n}", f, threads=threads,
                                                                                backend=b))
                     for b in usable]
        for runtime, why in skipped.items():  # as grade says it: which graph, why, and the fix
            typer.echo(f"note: {skipped_note(str(folder), runtime, why)}.", err=True)
    result = benchmark(variants, variants[0].tokenizer, pairs, settings,
                       progress=lambda m: typer.echo(f"... {m}", err=True))
    with atomic_dir(out, overwrite=overwrite, inputs=inputs, flag="--out") as tmp:
        table = write_bench(result, tmp)
    typer.echo(table)
    typer.echo(f"wrote {out}/bench.json, bench.md, bench.png")
