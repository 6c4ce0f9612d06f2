"""`headcut bench`: every variant timed on the same grid, compared with the reference, written three ways."""
from __future__ import annotations

import json

from typer.testing import CliRunner

from headcut.cli.main import app
from headcut.synthetic import synthetic_pairs
from headcut_grader.data import read_pairs
from headcut.export.bench import BenchResult, BenchSettings, benchmark, cell_inputs, onnx_variant, pytorch_variant
from headcut.export.bench_report import write_bench
from headcut.models import load_model, save_model
from test_export import make_tiny_grader


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
    bad = CliRunner().invoke(app, args[:-8] + ["--batch-sizes", "0", "--out", str(tmp_path / "x")])
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
    assert {k: v.shape for k, v in batch.items()} == {k: (8, 32) for k in ("input_ids", "attention_mask", "token_type_ids")}
    assert batch["attention_mask"].sum(1).min() > 4 and (batch["input_ids"][5] == batch["input_ids"][0]).all()
