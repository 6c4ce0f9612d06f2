"""`headcut bench`: PyTorch models and ONNX graders side by side on the same data, shapes and threads."""
from __future__ import annotations

from pathlib import Path

import typer

from headcut.cli.common import (LABEL_COL, LABEL_MAP, LIMIT, OVERWRITE, PRESET, QUERY_COL, THREADS, TITLE_COL, Opt,
                                number, quiet_transformers, read_data, user_errors)


def _ints(text: str, flag: str, valid) -> tuple[int, ...]:
    from headcut_grader.errors import UserError

    try:
        values = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise UserError(f"{flag} '{text}' is not a comma-separated list of numbers; write e.g. {flag} 1,8,32.") from None
    for value in values:
        problem = valid.problem(value)
        if problem:
            raise UserError(f"{flag} '{text}': {value} {problem}.")
    return values


@user_errors
def bench(
    model: list[str] = typer.Option(..., "--model", "-m", help="PyTorch model folder; the first is the reference (repeatable)."),
    grader: list[Path] = typer.Option([], "--grader", "-g", help="Grader folder from `headcut export` (repeatable); "
                                      "each of its graphs (ONNX Runtime, OpenVINO) is timed."),
    data: str = typer.Option(..., "--data", "-d", help="Labelled pairs for accuracy/agreement and the timing inputs."),
    out: Path = typer.Option(..., "--out", "-o", help="Folder for bench.json, bench.md and bench.png."),
    threads: int = THREADS,
    batch_sizes: str = typer.Option("1,8,32", "--batch-sizes", help="Batch sizes of the grid."),
    seq_lens: str = typer.Option("32,64,128", "--seq-lens", help="Sequence lengths of the grid."),
    repeats: int = number(10, "--repeats", help="Timed runs per variant and cell (after 2 warm-up runs)", low=1,
                          high=10_000),
    preset: Opt[str] = PRESET, query_col: Opt[str] = QUERY_COL, title_col: Opt[str] = TITLE_COL,
    label_col: Opt[str] = LABEL_COL, label_map: Opt[str] = LABEL_MAP, limit: Opt[int] = LIMIT,
    overwrite: bool = OVERWRITE,
):
    """Benchmark models and graders: p50/p95 latency, pairs/s, size, memory, accuracy, agreement with the first --model.

    Example: headcut bench -m runs/teacher -m runs/pruned -g runs/grader-fp32 -g runs/grader-int8
    --data ../shared/data/homedepot/dev.tsv --limit 1000 --out runs/bench
    """
    quiet_transformers()
    from headcut.export.bench import (BenchSettings, benchmark, grader_backends, grader_variant, load_measured,
                                      pytorch_variant)
    from headcut.export.bench_report import write_bench
    from headcut_grader.files import atomic_dir, check_out_dir
    from headcut.models import load_model, outline
    from headcut_grader.grader import read_record

    inputs = [*model, *grader, data]
    check_out_dir(out, overwrite=overwrite, inputs=inputs)  # before the benchmark, not after it
    from headcut.batching import check_max_length
    from headcut_grader.ranges import Range

    settings = BenchSettings(_ints(batch_sizes, "--batch-sizes", Range(1, 4096)),
                             _ints(seq_lens, "--seq-lens", Range(8, 8192)), threads, repeats=repeats)
    for folder in grader:
        read_record(folder, flag="--grader")  # a folder that is not a grader, before any model loads
    reference = outline(model[0])  # the reference's task and grades decide which gold the data gives
    pairs = read_data(data, preset=preset, query_col=query_col, title_col=title_col, label_col=label_col,
                      label_map=label_map, limit=limit, task=reference.task, grades=reference.grades)
    def loaded(name):
        result = load_model(name)
        check_max_length(result.model, max(settings.seq_lens), flag="--seq-lens")
        return result

    # Loaded inside load_measured, so each variant's resident-memory growth includes its weights.
    variants = [load_measured(lambda m=m: pytorch_variant(f"pytorch fp32 {Path(m).name}", loaded(m), threads=threads))
                for m in model]
    for folder in grader:  # every graph of the folder whose runtime is installed: ONNX Runtime, OpenVINO
        variants += [load_measured(lambda f=folder, b=b: grader_variant(f"grader {f.parent.name}/{f.name}", f,
                                                                        threads=threads, backend=b))
                     for b in grader_backends(folder)]
    result = benchmark(variants, variants[0].tokenizer, pairs, settings, progress=lambda m: typer.echo(f"... {m}", err=True))
    with atomic_dir(out, overwrite=overwrite, inputs=inputs) as tmp:
        table = write_bench(result, tmp)
    typer.echo(table)
    typer.echo(f"wrote {out}/bench.json, bench.md, bench.png")
