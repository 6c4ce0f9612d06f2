"""`headcut bench`: every variant timed on the same grid, compared with the reference, written three ways."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from headcut.cli.main import app
from headcut.synthetic import synthetic_pairs
from headcut_grader.data import read_pairs
from headcut.export.bench import BenchResult, BenchSettings, benchmark, cell_inputs, onnx_variant, pytorch_variant
from headcut.export.bench_report import write_bench
from headcut.models import LoadedModel, load_model, save_model
from conftest import tiny_model
from test_export import SPECIAL, make_tiny_grader


def test_bench_cli_small_grid(tmp_path):
    folder, loaded, _ = make_tiny_grader(tmp_path / "a")
    int8_folder = make_tiny_grader(tmp_path / "b", int8=True)[0]
    save_model(loaded, tmp_path / "pruned")
    data = tmp_path / "pairs.tsv"
    pairs = synthetic_pairs(60, seed=7)
    data.write_text("query\ttitle\tgrade\n" + "".join(f"{q}\t{t}\t{pairs.grades[y]}\n"
                                                      for q, t, y in zip(pairs.queries, pairs.titles, pairs.labels)))
    out = tmp_path / "bench"
    args = ["bench", "-m", str(tmp_path / "pruned"), "-g", str(folder), "-g", str(int8_folder), "--data", str(data),
            "--out", str(out), "--batch-sizes", "1,8", "--seq-lens", "16", "--repeats", "3", "--threads", "1"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads((out / "bench.json").read_text())
    names = [v["name"] for v in report["variants"]]
    assert names == ["pytorch fp32 pruned", "grader a/grader (ORT fp32)", "grader b/grader (ORT int8)"]
    reference, fp32, int8 = report["variants"]
    assert fp32["agreement"] == 1.0 and fp32["max_abs_diff"] <= 1e-4  # the ONNX fp32 grader is the same model
    assert int8["precision"] == "int8" and int8["int8_choice"] and int8["size_mb"] > 0
    for row in report["variants"]:
        assert [(c["batch"], c["seq"]) for c in row["cells"]] == [(1, 16), (8, 16)]
        assert all(c["p95_ms"] >= c["p50_ms"] > 0 for c in row["cells"])
    assert all(c["speedup"] == 1.0 for c in reference["cells"])
    assert (out / "bench.png").stat().st_size > 5000
    assert "| pytorch fp32 pruned |" in (out / "bench.md").read_text()
    # was: headed "b32 x s64", a cell not in this grid, over the first cell's figures
    summary = (out / "bench.md").read_text().split("p50 ms per batch")[0]
    assert "speedup (b8 x s16)" in summary and "b32 x s64" not in summary
    assert f"| {reference['cells'][1]['p50_ms']:.1f} |" in summary.split("| pytorch fp32 pruned |")[1].splitlines()[0]
    bad = CliRunner().invoke(app, args[:-10] + ["--out", str(tmp_path / "x"), "--batch-sizes", "0"])
    assert bad.exit_code == 2 and "--batch-sizes" in bad.output

    # From Python: the same typed result, written to the same three files with the same layout
    variants = [pytorch_variant("pytorch fp32 pruned", load_model(tmp_path / "pruned"), threads=1),
                *(onnx_variant(f"grader {f.parent.name}/{f.name}", f, threads=1) for f in (folder, int8_folder))]
    timed = benchmark(variants, variants[0].tokenizer, read_pairs(data), BenchSettings((1, 8), (16,), 1, repeats=3))
    assert isinstance(timed, BenchResult) and [v["name"] for v in timed.variants] == names
    write_bench(timed, tmp_path / "python")
    assert sorted(p.name for p in (tmp_path / "python").iterdir()) == sorted(p.name for p in out.iterdir())
    assert _layout(json.loads((tmp_path / "python" / "bench.json").read_text())) == _layout(report)


def _layout(doc):
    """The keys and value types of a JSON document, without the (timed, so varying) numbers."""
    if isinstance(doc, dict):
        return {k: _layout(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_layout(v) for v in doc]
    return "number" if isinstance(doc, (int, float)) and not isinstance(doc, bool) else doc


def test_cell_inputs_have_the_exact_shape(tmp_path):
    _, loaded, _ = make_tiny_grader(tmp_path)
    batch = cell_inputs(loaded.tokenizer, synthetic_pairs(5), 8, 32)
    assert ({k: v.shape for k, v in batch.items()}
            == {k: (8, 32) for k in ("input_ids", "attention_mask", "token_type_ids")})
    assert batch["attention_mask"].sum(1).min() > 4 and (batch["input_ids"][5] == batch["input_ids"][0]).all()


def _model_with_vocab(folder, vocab):
    """A tiny saved BERT whose tokenizer has the WordPiece vocabulary `vocab` (after the special tokens)."""
    from transformers import BertTokenizerFast

    folder.mkdir(parents=True)
    (folder / "vocab.txt").write_text("\n".join(SPECIAL + vocab) + "\n")
    tokenizer = BertTokenizerFast(str(folder / "vocab.txt"))
    model = tiny_model("bert", vocab_size=len(tokenizer), max_position_embeddings=128)
    save_model(LoadedModel(model, tokenizer, {"grades": [1, 2, 3, 4, 5], "max_length": 64}), folder / "model")
    return folder / "model"


def test_bench_refuses_a_variant_whose_tokenizer_differs_from_the_first(tmp_path):
    """Every variant is timed on the first --model's token ids. Was: a grader of a smaller vocabulary crashed
    inside ONNX Runtime (an index past its embedding table), and a model of the same words in another order was
    timed on wrong ids without a word."""
    grader, loaded, _ = make_tiny_grader(tmp_path / "a")
    words = [loaded.tokenizer.convert_ids_to_tokens(i) for i in range(len(SPECIAL), len(loaded.tokenizer))]
    larger = _model_with_vocab(tmp_path / "larger", [f"extra{i}" for i in range(300)] + words)
    reordered = _model_with_vocab(tmp_path / "reordered", words[::-1])
    data = tmp_path / "pairs.tsv"
    pairs = synthetic_pairs(20, seed=7)
    data.write_text("query\ttitle\tgrade\n" + "".join(f"{q}\t{t}\t{pairs.grades[y]}\n"
                                                      for q, t, y in zip(pairs.queries, pairs.titles, pairs.labels)))
    grid = ["--data", str(data), "--batch-sizes", "2", "--seq-lens", "16", "--repeats", "1", "--threads", "1"]
    for first, flag, other in ((larger, "--grader", grader), (reordered, "--grader", grader),
                               (larger, "--model", reordered)):
        result = CliRunner().invoke(app, ["bench", "-m", str(first), flag, str(other), *grid, "--out",
                                          str(tmp_path / "bench")])
        assert result.exit_code == 2, (result.output, result.exception)
        assert (f"{flag} {other} has another tokenizer than the first --model {first}, and bench times every "
                "variant on the first's token ids; bench models that share a tokenizer, or run bench separately "
                "for each.") in " ".join(result.output.split())
        assert not (tmp_path / "bench").exists()
    save_model(loaded, tmp_path / "same")  # the grader's own model: the same tokenizer, timed side by side
    result = CliRunner().invoke(app, ["bench", "-m", str(tmp_path / "same"), "-g", str(grader), *grid, "--out",
                                      str(tmp_path / "bench")])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "bench" / "bench.json").read_text())["variants"][1]["agreement"] == 1.0


def test_variants_of_folders_of_one_name_are_told_apart_in_the_report(tmp_path, monkeypatch):
    """Was: runs/a/teacher and runs/b/teacher were both 'pytorch fp32 teacher' (and `-m .` was 'pytorch fp32 '), so
    the report's rows and legend could not say which was which; two graders in x/a/grader and y/a/grader too."""
    import pytest

    from headcut_grader.errors import UserError

    _, loaded, _ = make_tiny_grader(tmp_path / "g")
    for run in ("a", "b"):
        save_model(loaded, tmp_path / run / "teacher")
    data = tmp_path / "pairs.tsv"
    pairs = synthetic_pairs(20, seed=7)
    data.write_text("query\ttitle\tgrade\n" + "".join(f"{q}\t{t}\t{pairs.grades[y]}\n"
                                                      for q, t, y in zip(pairs.queries, pairs.titles, pairs.labels)))
    monkeypatch.chdir(tmp_path / "a" / "teacher")
    result = CliRunner().invoke(app, ["bench", "-m", ".", "-m", str(tmp_path / "b" / "teacher"), "--data", str(data),
                                      "--batch-sizes", "2", "--seq-lens", "16", "--repeats", "1", "--threads", "1",
                                      "--out", str(tmp_path / "bench")])
    assert result.exit_code == 0, result.output
    names = [v["name"] for v in json.loads((tmp_path / "bench" / "bench.json").read_text())["variants"]]
    assert names == ["pytorch fp32 a/teacher", "pytorch fp32 b/teacher"]
    from headcut.export.bench import short_names

    assert short_names(["/x/a/grader", "/y/a/grader", "/y/b/grader"], 2) == ["x/a/grader", "y/a/grader", "b/grader"]
    assert short_names(["/r/teacher", "/teacher"], 1) == ["r/teacher", "/teacher"]
    variant = pytorch_variant("same", loaded, threads=1)
    with pytest.raises(UserError,
                       match=r"^benchmark: two variants are named 'same'; give each variant its own name\.$"):
        benchmark([variant, variant], loaded.tokenizer, pairs, BenchSettings((1,), (16,), 1, repeats=1))


def test_a_name_or_token_holding_dollar_signs_is_drawn_as_written(tmp_path):
    """Was: matplotlib read the span between two $ as math: a model folder m$a_b$ was drawn as 'ma' with a subscript
    b, and a folder m$\\q$ (or a token '$$' in `headcut probe`'s attention grid) failed the figure with a ValueError
    traceback once the whole benchmark had run."""
    import io

    import torch
    from matplotlib.cbook import is_math_text

    from headcut.evaluate.figures import attention_grid
    from headcut.export.bench_report import figure

    names = ["pytorch fp32 m$a_b$", "grader m$\\q$ (ORT fp32)"]
    cells = [{"batch": 1, "seq": 16, "pairs_per_s": 10.0}]
    report = {"reference": names[0], "settings": {"threads": 1},
              "variants": [{"name": n, "kind": "pytorch", "agreement": 1.0, "cells": cells} for n in names]}
    fig = figure(report)
    fig.savefig(io.BytesIO(), format="png")
    ax = fig.axes[0]
    drawn = [t.get_text() for t in ax.get_legend().get_texts()] + [ax.get_ylabel()]
    # what matplotlib draws of a text that is no math: its escaped dollars as dollars
    assert [text.replace("\\$", "$") for text in drawn] == [*names, f"% same grade as {names[0]}"], drawn
    assert not any(is_math_text(text) for text in drawn), drawn
    grid = attention_grid([torch.ones(1, 2, 2)], ["$$", "$5"], [(0, 0, "test")])
    grid.savefig(io.BytesIO(), format="png")


def test_two_writers_of_one_bench_folder_each_write_the_figure_through_their_own_temporary(tmp_path, monkeypatch):
    """Was: write_bench saved bench.png through the fixed name .bench.png.partial, so a second writer of the folder
    truncated the first's temporary and renamed it away, and the first's rename failed (FileNotFoundError). The
    figure now goes through files.atomic_file, whose temporary is its writer's own: both writes end, bench.png whole."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from headcut.export import bench_report

    result = BenchResult(BenchSettings((1,), (16,), 1), {"rows": 1}, [{"name": "a"}])
    figures = []

    def figure(_report):
        fig = plt.figure(figsize=(1, 1))
        figures.append(fig)
        if len(figures) == 1:  # the first writer's figure: a second writer of the folder runs while it is saved
            save = fig.savefig

            def save_then_another_writes(target, **kwargs):
                save(target, **kwargs)
                write_bench(result, tmp_path)
            fig.savefig = save_then_another_writes
        return fig

    monkeypatch.setattr(bench_report, "figure", figure)
    monkeypatch.setattr(bench_report, "markdown", lambda report: "table\n")
    write_bench(result, tmp_path)
    assert len(figures) == 2
    assert (tmp_path / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench.json", "bench.md", "bench.png"]


def test_a_name_holding_markdown_or_html_is_shown_as_written_in_the_markdown_reports():
    """Was: bench.md and a run's report.md wrote names (a grader folder, a recipe or data path, a runtime's error) as
    they were, so a folder 'a|b' split its table row into two cells, one holding a line break started a new row or
    block, and '<script>' was a tag to a markdown renderer. Each is escaped; the name otherwise stays as written
    (report.html escapes for HTML)."""
    from headcut.evaluate.scan_report import render_markdown
    from headcut.export.bench_report import markdown

    name = "grader a|b\n# <script>x</script>"
    shown = "grader a\\|b\\n# \\<script>x\\</script>"
    cells = [{"batch": 1, "seq": 16, "p50_ms": 1.0, "p95_ms": 1.0, "pairs_per_s": 10.0, "speedup": 1.0}]
    report = {"reference": "m<i>", "settings": {"threads": 1, "warmup": 1, "repeats": 1},
              "data": {"rows": 1, "source": "d|\n.tsv"},
              "variants": [{"name": name, "size_mb": 1.0, "memory_mb": 1.0, "agreement": 1.0, "cells": cells}]}
    lines = markdown(report).splitlines()
    assert lines[0] == ("Threads 1, warm-up 1, 1 timed runs per cell; accuracy and agreement with `m<i>` on 1 pairs "
                        "of d|\\n.tsv.")
    rows = [line for line in lines if line.startswith("| grader")]
    assert [row.split(" | ")[0] for row in rows] == [f"| {shown}"] * 2
    assert all(len(row.replace("\\|", "").split("|")) == len(lines[3].split("|")) for row in rows[:1])
    text = render_markdown([("h2", "x\n# y"), ("p", "Recipe r<b>.yaml\n| z"), ("table", ["a|b"], [[name]])])
    assert text == ("## x\\n# y\n\nRecipe r\\<b>.yaml\\n| z\n\n| a\\|b |\n|---|\n| " + shown + " |\n\n")


def test_a_name_in_a_code_span_is_shown_as_written():
    """Was: markdown_text escaped names inside code spans too (bench.md's reference, a scan report's model and data),
    where a backslash shows literally ('m\\<i>'), and left their backticks, which closed the span early. Code spans
    escape nothing and take a fence longer than any backtick run in the name (CommonMark)."""
    from headcut.evaluate.scan_report import code_span, render_html, render_markdown, report_blocks
    from headcut.export.bench_report import markdown

    assert code_span("m<i>|x") == "`m<i>|x`"
    assert code_span("a`b``c") == "```a`b``c```"
    assert code_span("`x`") == "`` `x` ``" and code_span(" y ") == "`  y  `"
    assert code_span("a\nb") == "`a\\nb`"
    cells = [{"batch": 1, "seq": 16, "p50_ms": 1.0, "p95_ms": 1.0, "pairs_per_s": 10.0, "speedup": 1.0}]
    report = {"reference": "m`<i>", "settings": {"threads": 1, "warmup": 1, "repeats": 1},
              "data": {"rows": 1, "source": "d.tsv"}, "variants": [{"name": "g", "size_mb": 1.0, "memory_mb": 1.0,
                                                                     "agreement": 1.0, "cells": cells}]}
    assert "agreement with ``m`<i>`` on 1 pairs" in markdown(report).splitlines()[0]
    blocks = report_blocks({"ranking": {}, "correlations": {}}, model_info={"path": "m<`a`>", "weights_hash": "h"},
                           data_info={"source": "s"}, images={})
    assert render_markdown(blocks).splitlines()[2].startswith("Model ``m<`a`>`` (weights h), data `s` (")
    assert "<p>Model `m&lt;`a`&gt;` (weights h), data `s` (" in render_html(blocks, Path("."))

def test_a_run_s_pareto_figure_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    """Was: the run report's pareto.png was saved straight to its name, so a save that failed or was interrupted
    midway left a cut PNG where the last whole one was. It is saved through files.atomic_file, as bench.png is; and
    NaN figures or speed-ups all equal draw."""
    import errno

    from matplotlib.figure import Figure

    from headcut_grader.errors import UserError
    from headcut.pipeline.recipe import FloorSection
    from headcut.pipeline.report import pareto_figure

    def row(name, speedup, delta):
        d = {"delta": delta, "ci": [delta, delta]}
        return {"name": name, "speedup": speedup, "vs_teacher": {"accuracy": d, "spearman": d}}

    rows = [row("a", 1.0, 0.0), row("b", 1.0, float("nan")), row("c", 1.0, None)]
    path = tmp_path / "pareto.png"
    pareto_figure(rows, FloorSection(), None, path)
    whole = path.read_bytes()
    assert whole.startswith(b"\x89PNG")

    def cut_short(self, target, **kwargs):
        (open(target, "wb") if isinstance(target, (str, Path)) else target).write(whole[:100])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", cut_short)
    with pytest.raises((OSError, UserError)):  # atomic_file says it in a sentence (UserError)
        pareto_figure(rows, FloorSection(), rows[0], path)
    assert path.read_bytes() == whole and [p.name for p in tmp_path.iterdir()] == ["pareto.png"]
