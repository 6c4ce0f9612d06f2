"""`headcut scan` / `headcut probe` end to end: on a tiny saved grader (real tokenizer) every output is
written and readable; user mistakes exit 2 with a sentence; on the real MiniLM teacher the numbers move
the way masking must move them."""
from __future__ import annotations

import csv
import json
import re

import pytest
import torch
from typer.testing import CliRunner

from conftest import HOMEDEPOT, need_minilm, tiny_model
from headcut.cli.main import app
from headcut.evaluate.importance import read_scores
from headcut.evaluate.scan import parse_experiments, parse_methods
from headcut_grader.errors import UserError

runner = CliRunner()
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def tiny_grader(tmp_path_factory):
    """A 2-layer random BERT with the real MiniLM tokenizer, saved as a headcut artifact."""
    need_minilm()
    from transformers import AutoTokenizer

    from headcut.models import LoadedModel, resolve_source, save_model

    tok = AutoTokenizer.from_pretrained(resolve_source("minilm-l6"))
    model = tiny_model("bert", vocab_size=tok.vocab_size)
    out = tmp_path_factory.mktemp("grader") / "tiny"
    save_model(LoadedModel(model, tok, {"max_length": 32}), out)
    return out


def test_scan_writes_every_output(tiny_grader, tmp_path):
    out = tmp_path / "scan"
    r = runner.invoke(app, ["scan", "--model", str(tiny_grader), "--data", "synthetic", "--limit", "40",
                            "--out", str(out), "--draws", "2", "--bootstrap", "20", "--k", "2"])
    assert r.exit_code == 0, r.output
    assert "ablation  top L" in r.output and "random 20%" in r.output
    for name in ("importance.png", "heads.png", "random.png", "halves.png", "layers.png", "term.png", "probes.png",
                 "attention.png"):
        data = (out / name).read_bytes()
        assert data.startswith(PNG) and len(data) > 5000, name
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 8 and "<table>" in html
    md = (out / "report.md").read_text()
    assert "![" in md and "Experiment 5" in md
    scores, meta = read_scores(out / "importance.json")
    assert meta["method"] == "ablation" and meta["samples"] == 40 and meta["fingerprint"]
    assert meta["methods"] == ["ablation", "kl", "gradient", "fisher", "entropy"]
    assert scores.shape == (2, 4) and torch.isfinite(scores).all()
    extra = json.loads((out / "importance.json").read_text())["extra"]
    assert len(extra["ablation_table"]) == 8 and len(extra["experiments"]["random"]) == 9
    assert extra["top10_overlap"]["kl"]["kl"] == 1.0 and extra["correlations"]["kl"]["kl"] > 0.99
    assert len((out / "importance.csv").read_text().splitlines()) == 1 + 8
    again = runner.invoke(app, ["scan", "--model", str(tiny_grader), "--data", "synthetic", "--out", str(out)])
    assert again.exit_code == 2 and "--overwrite" in again.output


def test_probe_command(tiny_grader, tmp_path):
    r = runner.invoke(app, ["probe", "--model", str(tiny_grader), "--data", "synthetic", "--limit", "30",
                            "--out", str(tmp_path / "p")])
    assert r.exit_code == 0, r.output
    assert "term_match" in r.output and "boundary union" in r.output
    assert (tmp_path / "p" / "attention.png").read_bytes().startswith(PNG)


# no title repeats a word of its query, and every word is one token of MiniLM's vocabulary
NO_SHARED_TERM = "query\ttitle\tgrade\ndrill\tred lamp\t2\npaint\tclaw hammer\t4\nsaw\tgarden hose\t1\n"


def test_probe_of_pairs_without_a_shared_term_says_n_a(tiny_grader, tmp_path):
    """Was: 'term_match best L0H0 0.000' and 'boundary_f1 best L0H0 0.000' (every head 0: there was nothing to
    measure), in the output and the report's table, and L0H0 drawn as the telling term-matching head."""
    data = tmp_path / "pairs.tsv"
    data.write_text(NO_SHARED_TERM)
    r = runner.invoke(app, ["probe", "--model", str(tiny_grader), "--data", str(data), "--out", str(tmp_path / "p")])
    assert r.exit_code == 0, r.output
    assert "term_match   n/a: no pair repeats a token of its query in its title" in r.output
    assert "boundary_f1  n/a: no word of a title spans two tokens" in r.output
    assert "next         best L" in r.output and "boundary union" not in r.output
    assert "| term_match | n/a | no pair repeats" in (tmp_path / "p" / "report.md").read_text()
    probes = json.loads((tmp_path / "p" / "importance.json").read_text())["extra"]["probes"]
    assert probes["twin_tokens"] == 0 and probes["term_match"] == [[None] * 4] * 2
    rows = list(csv.DictReader((tmp_path / "p" / "importance.csv").read_text().splitlines()))
    assert len(rows) == 8 and {r["term_match"] for r in rows} == {""} and all(r["next"] for r in rows)


def test_a_boundary_union_of_no_head_says_n_a_with_the_reason(tiny_grader, tmp_path, monkeypatch):
    """Was: where no head links any within-word pair, `headcut probe` printed 'boundary union   F1 0.000' (no head
    named) and the scan report 'best union of heads  reaches F1 0.000'; both now say n/a with UNMEASURED's reason,
    as a probe with no best head does. A union that found heads is shown as before."""
    import numpy as np

    import headcut.cli.scan as scan_cli
    from headcut.evaluate.probes import UNMEASURED
    from headcut.evaluate.scan_report import render_markdown, report_blocks

    nan = float("nan")
    probes = {"next": np.array([[0.5, 0.25]]), "boundary_f1": np.zeros((1, 2)), "boundary_links": 3,
              "boundary_candidates": 9, "boundary_union": {"heads": [], "f1": nan}}
    result = {"ranking": {}, "correlations": {}, "probes": probes}
    monkeypatch.setattr(scan_cli, "_run", lambda *args, **kwargs: result)
    r = runner.invoke(app, ["probe", "--model", str(tiny_grader), "--data", "synthetic", "--out", str(tmp_path / "p")])
    assert r.exit_code == 0, r.output
    assert "F1" not in r.output and f"boundary union n/a: {UNMEASURED['boundary_union']}" in r.output
    report = render_markdown(report_blocks(result, model_info={}, data_info={}, images={}))
    assert "reaches F1" not in report
    assert (f"best union of heads n/a: {UNMEASURED['boundary_union']} (3 within-word links among 9 neighbouring "
            "token pairs)") in " ".join(report.split())
    probes["boundary_union"] = {"heads": [[0, 1]], "f1": 0.5}
    r = runner.invoke(app, ["probe", "--model", str(tiny_grader), "--data", "synthetic", "--out", str(tmp_path / "q")])
    assert "boundary union L0H1  F1 0.500" in r.output
    report = render_markdown(report_blocks(result, model_info={}, data_info={}, images={}))
    assert "best union of heads L0H1 reaches F1 0.500" in " ".join(report.split())


def test_a_probe_whose_heads_all_score_alike_says_n_a_with_the_reason(tiny_grader, tmp_path, monkeypatch):
    """Was: where every head's boundary F1 was a measured 0, `headcut probe` printed 'boundary_f1  best L0H0  0.000'
    and the scan report's table named L0H0 the best head; both now say n/a: every head scores 0.000 alike."""
    import numpy as np

    import headcut.cli.scan as scan_cli
    from headcut.evaluate.scan_report import render_markdown, report_blocks

    probes = {"next": np.array([[0.5, 0.25]]), "boundary_f1": np.zeros((1, 2)), "boundary_links": 3,
              "boundary_candidates": 9, "boundary_union": {"heads": [], "f1": float("nan")}}
    result = {"ranking": {}, "correlations": {}, "probes": probes}
    monkeypatch.setattr(scan_cli, "_run", lambda *args, **kwargs: result)
    r = runner.invoke(app, ["probe", "--model", str(tiny_grader), "--data", "synthetic", "--out", str(tmp_path / "p")])
    assert r.exit_code == 0, r.output
    said = "every head scores 0.000, so no head is better than another"
    assert f"boundary_f1  n/a: {said}" in r.output and "next         best L0H0  0.500" in r.output
    report = render_markdown(report_blocks(result, model_info={}, data_info={}, images={}))
    assert f"| boundary_f1 | n/a | {said} |" in report and "| next | L0H0 |" in report


def test_an_undefined_effect_or_probe_is_an_empty_field_of_importance_csv(tmp_path):
    """Was: the text 'nan' where the report shows '–' and importance.json null (a spreadsheet reads it as a word);
    now an empty field for a NaN score, effect or probe, and the head a pruned model lacks is still left out."""
    from headcut.evaluate.scan_report import write_csv

    nan = float("nan")
    effect = {"relative_accuracy_pct": nan, "loss_delta": 0.25, "spearman_delta": nan, "flip_rate": 0.5}
    scores = {"ablation": torch.tensor([[1.0, nan], [nan, nan]]), "kl": torch.tensor([[2.0, 3.0], [nan, nan]])}
    result = {"scores": scores,
              "ablation_table": [{"layer": 0, "head": 0, **effect}],
              "probes": {"term_match": torch.tensor([[nan, 0.5], [nan, nan]])}}
    write_csv(tmp_path / "importance.csv", result)
    text = (tmp_path / "importance.csv").read_text()
    assert "nan" not in text.lower()
    assert text.splitlines() == ["layer,head,ablation,kl,relative_accuracy_pct,loss_delta,spearman_delta,flip_rate,"
                                 "term_match", "0,0,1,2,,0.25,,0.5,", "0,1,,3,,,,,0.5"]


@pytest.mark.parametrize("experiments, instead", [("all", "random,halves,layers,heads"), ("5", "none"),
                                                  ("layers,term", "layers")])
def test_experiment_5_on_pairs_without_a_shared_term_is_refused_before_any_pass(tiny_grader, tmp_path, experiments,
                                                                                  instead):
    """Was: experiment 5 masked the first k heads as "the k strongest term-matching heads" (every head scored 0),
    after the whole scan; now one sentence naming --experiments and the file, before any pass, nothing written."""
    data = tmp_path / "pairs.tsv"
    data.write_text(NO_SHARED_TERM)
    r = runner.invoke(app, ["scan", "--model", str(tiny_grader), "--data", str(data), "--out", str(tmp_path / "s"),
                            "--experiments", experiments, "--k", "2", "--bootstrap", "10"])
    assert r.exit_code == 2, r.output
    assert re.search(rf"experiment 5 \(term\) .* no pair of {re.escape(str(data))} repeats a token of its query in "
                     rf"its title, .*; pass --experiments {instead}, or pairs", r.output), r.output
    assert "ablation" not in r.output and "Traceback" not in r.output  # no pass ran (its progress is on stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pairs.tsv"]


@pytest.fixture(scope="module")
def grader_of_three_grades(tiny_grader, tmp_path_factory):
    """The tiny grader's kind, grading 2, 3 and 4 (three outputs), so grades 1 and 5 are not its own."""
    from headcut.models import LoadedModel, read_tokenizer, save_model

    out = tmp_path_factory.mktemp("three") / "tiny"
    tok = read_tokenizer(tiny_grader)
    save_model(LoadedModel(tiny_model("bert", vocab_size=tok.vocab_size, num_labels=3), tok,
                           {"grades": [2, 3, 4], "max_length": 32}), out)
    return out


@pytest.mark.parametrize("text", [
    "query\ttitle\tgrade\ndrill\tcordless drill\t5\nhammer\tclaw hammer\t7\nsaw\thand saw\thigh\n",
    "query\ttitle\ndrill\tcordless drill\nhammer\tclaw hammer\n",
    "synthetic",
])
def test_probe_reads_only_the_texts(grader_of_three_grades, tmp_path, text):
    """Probes read attention, never grades. Was: the preset's grade column was read against the model's grades, so
    a grade the model lacks (5, 7, 'high') or synthetic pairs (graded 1-5) refused the file, and where the grades
    fitted, a baseline pass over the pairs ran whose metrics probe never printed."""
    data = "synthetic" if text == "synthetic" else tmp_path / "pairs.tsv"
    if text != "synthetic":
        data.write_text(text, encoding="utf-8")
    r = runner.invoke(app, ["probe", "--model", str(grader_of_three_grades), "--data", str(data), "--limit", "20",
                            "--out", str(tmp_path / "p")])
    assert r.exit_code == 0, r.output
    assert "term_match" in r.output
    extra = json.loads((tmp_path / "p" / "importance.json").read_text())["extra"]
    assert extra["probes"]["content_tokens"] > 0 and "baseline" not in extra


def test_bad_flags_exit_2(tiny_grader, tmp_path):
    r = runner.invoke(app, ["scan", "--model", str(tiny_grader), "--data", "synthetic", "--out", str(tmp_path / "x"),
                            "--method", "ablation,magic"])
    assert r.exit_code == 2 and "magic" in r.output
    r = runner.invoke(app, ["scan", "--model", str(tiny_grader), "--data", "synthetic", "--out", str(tmp_path / "x"),
                            "--experiments", "7"])
    assert r.exit_code == 2 and "--experiments" in r.output


def test_parsers():
    assert parse_experiments("all") == ("random", "halves", "layers", "heads", "term")
    assert parse_experiments("none") == ()
    assert parse_experiments("1,3,term") == ("random", "layers", "term")
    assert parse_methods("KL, fisher") == ("kl", "fisher")
    with pytest.raises(UserError):
        parse_methods("")


def test_scan_of_the_real_teacher_moves_the_right_way(quick_teacher, tmp_path):
    """Real MiniLM, real Home Depot dev pairs: some heads and layers matter, and the two curvature-style
    methods (KL of the ablated model, Fisher of the mask) agree on the ranking."""
    out = tmp_path / "scan"
    r = runner.invoke(app, ["scan", "--model", str(quick_teacher), "--data", str(HOMEDEPOT / "dev.tsv"),
                            "--preset", "homedepot", "--limit", "120", "--out", str(out), "--method",
                            "ablation,kl,fisher", "--experiments", "3", "--no-probes", "--bootstrap", "50"])
    assert r.exit_code == 0, r.output
    doc = json.loads((out / "importance.json").read_text())
    ablation, _ = read_scores(out / "importance.json", method="ablation")
    assert ablation.shape == (6, 12) and ablation.max() > 0.005  # some head matters
    layers = doc["extra"]["experiments"]["layers"]
    assert sum(row["loss_delta_ci"][0] > 0 for row in layers) >= 2  # whole layers clearly raise the loss
    assert doc["extra"]["correlations"]["kl"]["fisher"] > 0.5


def test_probe_reads_the_segmentation_column(tiny_grader, tmp_path):
    """--seg-col: the boundary reference is the given title words (5 of the 6 neighbour pairs of the first title
    lie within a word), not the tokenizer's `##` marks (1 link in these titles)."""
    rows = [{"query": "怎么起诉", "title": "如何在网上立案", "seg": "如何在 网上立案", "grade": 3},
            {"query": "华为手机", "title": "华为P40手机", "seg": "华为 P40 手机", "grade": 5}]
    data = tmp_path / "zh.jsonl"
    data.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    out = tmp_path / "probe"
    r = runner.invoke(app, ["probe", "--model", str(tiny_grader), "--data", str(data), "--seg-col", "seg",
                            "--out", str(out)])
    assert r.exit_code == 0, r.output
    probes = json.loads((out / "importance.json").read_text())["extra"]["probes"]
    # title 1: 6 candidates, 5 links (如何在 | 网上立案); title 2: 5 candidates, 3 links (华为 | p ##40 | 手机)
    assert probes["boundary_candidates"] == 11 and probes["boundary_links"] == 8
    bad = runner.invoke(app, ["probe", "--model", str(tiny_grader), "--data", "synthetic", "--seg-col", "seg",
                              "--out", str(tmp_path / "bad")])
    assert bad.exit_code == 2 and "--seg-col" in bad.output
    missing = runner.invoke(app, ["probe", "--model", str(tiny_grader), "--data", str(data), "--seg-col", "words",
                                  "--out", str(tmp_path / "bad")])
    said = " ".join(missing.stderr.split())  # the message, unwrapped
    assert missing.exit_code == 2 and "no column 'words'" in said and said.endswith("name it with --seg-col.")


def test_a_gold_column_named_by_its_flag_must_be_there(tiny_grader, tmp_path):
    data = tmp_path / "pairs.tsv"
    data.write_text("query\ttitle\tgrade\nangle bracket\tsteel angle bracket 2 in.\t5\n", encoding="utf-8")
    r = runner.invoke(app, ["scan", "--model", str(tiny_grader), "--data", str(data), "--label-col", "nosuch",
                            "--out", str(tmp_path / "x")])
    said = " ".join(r.output.split())
    assert r.exit_code == 2 and "no label column 'nosuch'" in said and "--label-col" in said, r.output
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("flag, value", [("--label-col", "grade"), ("--label-map", "round"),
                                         ("--label-map", "0:1,1:2")])
def test_probe_refuses_grade_flags_it_would_not_read(tiny_grader, tmp_path, flag, value):
    """Was: --label-map round on unlabelled pairs exit 0, ignored; --label-map 0:1,1:2 refused the file over
    grades probe never reads."""
    data = tmp_path / "pairs.tsv"
    data.write_text("query\ttitle\tgrade\ndrill\tcordless drill\t3\nhammer\tclaw hammer\t2\n", encoding="utf-8")
    r = runner.invoke(app, ["probe", "--model", str(tiny_grader), "--data", str(data), flag, value,
                            "--out", str(tmp_path / "x")])
    said = " ".join(r.output.split())
    assert r.exit_code == 2, r.output
    assert (f"{flag} says how to read grades, and probe reads no grades (it probes what heads attend to); "
            f"drop {flag}." in said)
    assert flag not in " ".join(runner.invoke(app, ["probe", "--help"], env={"COLUMNS": "200"}).output.split())
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("args, words", [
    (["--experiments", "none", "--draws", "3"], "--draws sets up experiments 1, 2, 5"),
    (["--experiments", "1,3", "--k", "3"], "--k sets up experiment 5 (term), and --experiments runs random, layers"),
])
def test_an_experiment_flag_no_chosen_experiment_reads_is_refused(tiny_grader, tmp_path, args, words):
    r = runner.invoke(app, ["scan", "--model", str(tiny_grader), "--data", "synthetic", *args, "--out",
                            str(tmp_path / "x")])
    assert r.exit_code == 2 and words in r.output and "would be ignored" in r.output, r.output
    assert "Traceback" not in r.output and not (tmp_path / "x").exists()


def _on_a_file(tiny_grader, tmp_path, text: str, command: str, *args):
    """(the pairs file, the result) of `command` on the tiny grader and a file of `text`, into tmp_path/x."""
    data = tmp_path / "pairs.tsv"
    data.write_text(text, encoding="utf-8")
    return data, runner.invoke(app, [command, "--model", str(tiny_grader), "--data", str(data), *args, "--out",
                                     str(tmp_path / "x")])


@pytest.mark.parametrize("experiments", ["none", "1,3"])
def test_seg_col_when_no_probe_runs_is_refused(tiny_grader, tmp_path, experiments):
    """Was: exit 0, the file read again for the column and the words never used (no probes, no experiment 5)."""
    _, r = _on_a_file(tiny_grader, tmp_path, "query\ttitle\tgrade\tseg\ndrill\tcordless drill\t3\tcordless drill\n"
                      "hammer\tclaw hammer\t2\tclaw hammer\n", "scan", "--method", "entropy", "--experiments",
                      experiments, "--no-probes", "--seg-col", "seg", "--bootstrap", "10")
    said = " ".join(r.output.split())
    assert r.exit_code == 2 and "--seg-col is the word-boundary probe's reference, and --no-probes" in said, r.output
    assert "would be ignored; drop --seg-col or --no-probes." in said and not (tmp_path / "x").exists()


@pytest.mark.parametrize("methods, read", [(("entropy", "fisher"), "fisher"), (("entropy", "kl"), "entropy")])
def test_scan_method_help_says_which_scores_prune_reads(tmp_path, methods, read):
    """Was: the help said prune reads the first method; it reads fisher when the file has it, else the first."""
    from headcut.evaluate.importance import write_scores
    from headcut.prune.scores import DEFAULT_METHOD

    path = tmp_path / "importance.json"
    write_scores(path, {m: torch.rand(2, 4) for m in methods}, model_info={}, data_info={})
    assert read_scores(path, default=DEFAULT_METHOD)[1]["method"] == read  # what prune --scores reads
    help_text = " ".join(runner.invoke(app, ["scan", "--help"], env={"COLUMNS": "200"}).output.split())
    assert "`headcut prune --scores` ranks heads by fisher when the file has it, else by the first" in help_text


@pytest.mark.parametrize("limit", ["0", "1"])
def test_a_seg_col_row_that_does_not_spell_its_title_is_named_by_its_file_line(tiny_grader, tmp_path, limit):
    """Was: "pairs.tsv row 2" for the pair on line 3 (and the sample's row number under --limit)."""
    data, r = _on_a_file(tiny_grader, tmp_path, "query\ttitle\tseg\ndrill\tcordless drill\tcordless drill\n"
                         "hammer\tclaw hammer\tcompletely different words\n", "probe", "--seg-col", "seg",
                         "--limit", limit, "--seed", "0")  # seed 0 samples line 3
    said = " ".join(r.output.split())
    assert r.exit_code == 2, r.output
    assert f"{data}, line 3: the --seg-col words 'completely different words' do not spell the title" in said


@pytest.mark.parametrize("field, value, words", [
    ("draws", 0, "0 is out of range; it must be in [1, 1000]."),
    ("draws", 2.5, "2.5 is not a whole number; it must be in [1, 1000]."),
    ("k", -1, "-1 is out of range; it must be at least 1."),
    ("iters", -5, "-5 is out of range; it must be in [10, 100000]."),
    ("batch_size", 0, "0 is out of range; it must be in [1, 1024]."),
    ("batch_size", "8", "'8' is not a number; it must be in [1, 1024]."),
    ("max_length", 3, "3 is out of range; it must be in [8, 8192]."),
    ("max_length", 9000, "9000 is out of range; it must be in [8, 8192]."),
    ("seed", -1, "-1 is out of range; it must be in [0, 4294967295]."),
    ("methods", (), "pass a tuple of distinct names from ablation, kl, gradient, fisher, entropy."),
    ("methods", "kl", "pass a tuple of distinct names from ablation, kl, gradient, fisher, entropy."),
    ("methods", ("kl", "kl"), "pass a tuple of distinct names from ablation, kl, gradient, fisher, entropy."),
    ("experiments", ("bogus",), "pass a tuple of distinct names from random, halves, layers, heads, term."),
    ("experiments", "random", "pass a tuple of distinct names from random, halves, layers, heads, term."),
])
def test_scan_settings_out_of_range_are_refused_when_built(field, value, words):
    """Was: `scan(loaded, pairs, ScanSettings(...))` from Python checked nothing: draws=0, k=-1, iters=0 or
    experiments=('bogus',) scanned and wrote nonsense with no error, batch_size=0 and iters=-5 raised numpy's
    ValueError, and methods='kl' was read letter by letter. The ranges are the flags' (one declaration); the field
    is named as the Python caller wrote it (was: "ScanSettings: key 'draws' is 0", a recipe key's wording)."""
    from headcut.evaluate.scan import ScanSettings

    with pytest.raises(UserError) as caught:
        ScanSettings(**{field: value})
    assert str(caught.value) == f"ScanSettings({field}={value!r}): {words}"


def test_scan_flags_and_scan_settings_share_their_ranges():
    """The flags are declared in the torch-free CLI module, ScanSettings beside the scan: the same defaults and
    ranges, so `headcut scan` and `scan(loaded, pairs, ScanSettings(...))` refuse the same values."""
    import dataclasses
    import inspect

    from headcut.cli.scan import scan as command
    from headcut.evaluate.scan import ScanSettings

    fields = {f.name: f for f in dataclasses.fields(ScanSettings)}
    flags = inspect.signature(command).parameters
    for flag, name in (("draws", "draws"), ("k", "k"), ("bootstrap", "iters"), ("batch_size", "batch_size"),
                       ("max_length", "max_length"), ("seed", "seed")):
        option = flags[flag].default
        assert (option.parser.valid, option.default) == (fields[name].metadata["range"], fields[name].default), flag


def test_a_scan_setting_range_is_declared_once_for_the_library_the_flags_and_the_run_recipe():
    """Was: ScanSettings, `headcut scan`'s flags and a run recipe's [scan] draws and bootstrap each wrote their own
    literals, agreeing by hand. Now all read headcut/evaluate_arguments.py; the recipe keeps its own default draws
    (3: the run's scan is a quick look) but not a range of its own."""
    import dataclasses
    import inspect

    from headcut.cli.scan import scan as command
    from headcut.evaluate.scan import ScanSettings
    from headcut.evaluate_arguments import argument_range
    from headcut.pipeline.recipe import ScanSection

    settings = {f.name: f.metadata["range"] for f in dataclasses.fields(ScanSettings) if "range" in f.metadata}
    assert set(settings) == {"batch_size", "max_length", "draws", "k", "iters", "seed"}
    for name, valid in settings.items():
        assert valid is argument_range(name), name
    recipe = {f.name: f for f in dataclasses.fields(ScanSection)}
    assert recipe["draws"].metadata["range"] is argument_range("draws") and recipe["draws"].default == 3
    assert recipe["bootstrap"].metadata["range"] is argument_range("iters")
    flags = inspect.signature(command).parameters
    for flag, name in (("draws", "draws"), ("k", "k"), ("bootstrap", "iters")):
        assert flags[flag].default.parser.valid is argument_range(name), flag


def test_the_shared_flags_and_settings_read_one_declaration_of_their_defaults_and_ranges(monkeypatch):
    """Was: --batch-size, --max-length and --seed (headcut/cli/common.py), ScanSettings and PruneSettings each wrote
    their own 64 / None / 0 and ranges, kept equal by a test. Now all read headcut/evaluate_arguments.py: a changed
    default there is the flags' default (and --help's)."""
    import dataclasses
    import importlib

    import headcut.cli.common as common
    from headcut import evaluate_arguments
    from headcut.evaluate.scan import ScanSettings
    from headcut.prune import PruneSettings

    for cls, names in ((ScanSettings, ("batch_size", "max_length", "seed")), (PruneSettings, ("batch_size", "seed"))):
        fields = {f.name: f for f in dataclasses.fields(cls)}
        for name in names:
            assert fields[name].default == evaluate_arguments.DEFAULTS[name], (cls, name)
            assert fields[name].metadata["range"] is evaluate_arguments.argument_range(name), (cls, name)
    for name, value in (("batch_size", 48), ("max_length", 96), ("seed", 7)):
        monkeypatch.setitem(evaluate_arguments.DEFAULTS, name, value)
    try:
        fresh = importlib.reload(common)
        assert (fresh.BATCH_SIZE.default, fresh.MAX_LENGTH.default, fresh.SEED.default) == (48, 96, 7)
        assert fresh.BATCH_SIZE.parser.valid is evaluate_arguments.argument_range("batch_size")
    finally:
        monkeypatch.undo()
        importlib.reload(common)


def test_scan_and_bootstrap_defaults_are_declared_once_for_the_library_the_flags_and_the_run_recipe():
    """Was: draws=5, k=5, iters=200 written in ScanSettings and again in `headcut scan`'s flags; --bootstrap's 1000
    and 10..MAX_BOOTSTRAP in headcut/cli/common.py, `headcut prune`, PruneSettings (no upper bound there) and a run
    recipe's [bench]; [scan] bootstrap's 200 in the recipe. Now each default and range is evaluate_arguments'."""
    import dataclasses
    import inspect

    from headcut.cli import common
    from headcut.cli.prune import prune as prune_command
    from headcut.cli.scan import scan as scan_command
    from headcut.evaluate.scan import ScanSettings
    from headcut.evaluate_arguments import DEFAULTS, argument_range
    from headcut.pipeline.recipe import BenchSection, DataSection, ScanSection
    from headcut.prune import PruneSettings

    def field(cls, name):
        found = next(f for f in dataclasses.fields(cls) if f.name == name)
        return found.default, found.metadata["range"]

    declared = {name: (DEFAULTS[name], argument_range(name)) for name in ("draws", "k", "iters", "bootstrap", "seed")}
    scan_flags, prune_flags = (inspect.signature(c).parameters for c in (scan_command, prune_command))
    holders = {  # (where, default, range) -> the setting it must read
        ("ScanSettings.draws", *field(ScanSettings, "draws")): "draws",
        ("ScanSettings.k", *field(ScanSettings, "k")): "k",
        ("ScanSettings.iters", *field(ScanSettings, "iters")): "iters",
        ("scan --draws", scan_flags["draws"].default.default, scan_flags["draws"].default.parser.valid): "draws",
        ("scan --k", scan_flags["k"].default.default, scan_flags["k"].default.parser.valid): "k",
        ("scan --bootstrap", scan_flags["bootstrap"].default.default, scan_flags["bootstrap"].default.parser.valid):
            "iters",
        ("[scan] bootstrap", *field(ScanSection, "bootstrap")): "iters",
        ("PruneSettings.bootstrap", *field(PruneSettings, "bootstrap")): "bootstrap",
        ("prune --bootstrap", prune_flags["bootstrap"].default.default, prune_flags["bootstrap"].default.parser.valid):
            "bootstrap",
        ("common --bootstrap", common.BOOTSTRAP.default, common.BOOTSTRAP.parser.valid): "bootstrap",
        ("[bench] bootstrap", *field(BenchSection, "bootstrap")): "bootstrap",
        ("[data] seed", *field(DataSection, "seed")): "seed",
    }
    for (where, default, valid), name in holders.items():
        assert default == declared[name][0], where
        assert valid is declared[name][1], where
    assert field(ScanSection, "draws")[1] is argument_range("draws")  # its default is the run's own quick look (3)


def test_a_run_recipe_s_bench_batch_takes_the_range_headcut_bench_batch_sizes_reads(tmp_path):
    """Was: [bench] batch declared its own 1..4096 (equal to prune's latency_batch, another setting), so the run's
    bench stage timed batches `headcut bench --batch-sizes` (BenchSettings' batch sizes, which stop at MAX_BATCH)
    refuses. Now it reads headcut_grader.ranges.BATCH, the batch-size range every command reads."""
    import dataclasses

    from headcut.pipeline import load_pipeline
    from headcut.pipeline.recipe import BenchSection
    from headcut.recipes import SetError
    from headcut_grader.ranges import BATCH, MAX_BATCH

    assert next(f for f in dataclasses.fields(BenchSection) if f.name == "batch").metadata["range"] is BATCH
    over = f"bench.batch={MAX_BATCH + 1}"
    with pytest.raises(SetError, match=rf"^--set {over}: key 'batch' is {MAX_BATCH + 1}, which is out of range; it "
                                       rf"must be in \[1, {MAX_BATCH}\]"):
        load_pipeline("quickstart", overrides=[over, "bench.seq_len=8"])


def test_bench_s_sequence_lengths_and_repeats_are_declared_once_for_the_flags_the_recipe_and_the_library(tmp_path):
    """Was: `headcut bench --seq-lens` and --repeats and a run recipe's [bench] seq_len and repeats each wrote
    8..8192 and 1..10000 as their own literals. Now BenchSettings (headcut.export.bench_settings, torch-free)
    declares them, checks them, and the flags and the recipe read that declaration."""
    import dataclasses

    import headcut.cli.bench
    from typer.main import get_command

    from headcut.export.bench_settings import SEQ_LEN, BenchSettings
    from headcut.pipeline.recipe import BenchSection

    declared = {f.name: f for f in dataclasses.fields(BenchSettings)}
    recipe = {f.name: f for f in dataclasses.fields(BenchSection)}
    assert declared["seq_lens"].metadata["range"] is SEQ_LEN is recipe["seq_len"].metadata["range"]
    assert headcut.cli.bench.SEQ_LEN is SEQ_LEN
    assert recipe["repeats"].metadata["range"] is declared["repeats"].metadata["range"]
    assert recipe["repeats"].default == declared["repeats"].default
    flags = {p.name: p for p in get_command(app).commands["bench"].params}
    assert flags["repeats"].default == declared["repeats"].default
    assert f"({declared['repeats'].metadata['range'].describe()})." in flags["repeats"].help
    assert SEQ_LEN.describe() in flags["seq_lens"].help
    for flag, value, said in [("--seq-lens", 8193, "--seq-lens '8193': 8193 is out of range; it must be in [8, 8192]"),
                              ("--repeats", 0, "--repeats 0 is out of range; it must be in [1, 10000]")]:
        result = CliRunner().invoke(app, ["bench", "-m", "minilm-l6", "--data", "synthetic", "--out",
                                          str(tmp_path / "b"), flag, str(value)])
        assert result.exit_code == 2 and said in " ".join(result.output.split()), result.output
    with pytest.raises(UserError, match=re.escape("BenchSettings(seq_lens=(4,)): 4 is out of range; it must be in")):
        BenchSettings(seq_lens=(4,))


@pytest.fixture(scope="module")
def exported_grader(tmp_path_factory):
    from test_export import make_tiny_grader

    return make_tiny_grader(tmp_path_factory.mktemp("exported-grader"))[0]


def test_the_thread_count_is_declared_once_and_an_out_of_range_one_is_refused_everywhere(exported_grader, tmp_path):
    """Was: the toolkit's default of 2 threads and the range 1..MAX_THREADS were written separately in `--threads`
    (headcut.cli.common), a run's [export] and [bench] threads and export's ARGUMENTS; BenchSettings.threads had no
    range at all (BenchSettings(threads=0) was taken), nor had its warmup. Now headcut_grader.ranges.THREADS is the
    range every --threads, threads argument and setting reads, BenchSettings.threads declares the toolkit's default
    (build_grader writes it as a number for the API reference), and each refuses 0 and MAX_THREADS + 1."""
    import dataclasses
    import inspect

    from typer.main import get_command

    from headcut.export import build_grader
    from headcut.export.bench_settings import BenchSettings
    from headcut.export.gate import ARGUMENTS
    from headcut.pipeline import load_pipeline
    from headcut.pipeline.recipe import BenchSection, ExportSection
    from headcut.recipes import SetError
    from headcut_grader import Grader
    from headcut_grader.cli.main import app as runtime
    from headcut_grader.grade_file import GradeSettings
    from headcut_grader.ranges import MAX_THREADS, THREADS
    from headcut_grader.ray_data import grade_dataset

    def field(cls, name="threads"):
        return next(f for f in dataclasses.fields(cls) if f.name == name)

    declared = field(BenchSettings)
    assert declared.metadata["range"] is THREADS and ARGUMENTS["threads"] is THREADS
    for cls in (ExportSection, BenchSection):
        assert (field(cls).default, field(cls).metadata["range"]) == (declared.default, THREADS), cls
    assert field(GradeSettings).metadata["range"] is THREADS
    assert inspect.signature(build_grader).parameters["threads"].default == declared.default
    flags = {(app_name, name): p for app_name, program in (("headcut", app), ("headcut-grader", runtime))
             for name, command in get_command(program).commands.items() for p in command.params if p.name == "threads"}
    assert {("headcut", "export"), ("headcut", "bench"), ("headcut-grader", "grade"),
            ("headcut-grader", "serve")} <= set(flags)
    for (app_name, name), param in flags.items():
        assert f"({THREADS.describe()})." in param.help, (app_name, name)
        # the runtime's commands (headcut grade and serve are headcut-grader's) default to cores / workers
        assert param.default == (None if name in ("grade", "serve") else declared.default), (app_name, name)

    for bad in (0, MAX_THREADS + 1):
        with pytest.raises(UserError, match=rf"^BenchSettings\(threads={bad}\): {bad} is out of range; it must be in "
                                            rf"\[1, {MAX_THREADS}\]"):
            BenchSettings(threads=bad)
        for key in ("export.threads", "bench.threads"):
            with pytest.raises(SetError, match=rf"^--set {key}={bad}: key 'threads' is {bad}, which is out of range"):
                load_pipeline("quickstart", overrides=[f"{key}={bad}"])
        with pytest.raises(UserError, match=rf"^Grader threads is {bad}; it must be a whole number in \[1, "):
            Grader(exported_grader, threads=bad)
        with pytest.raises(UserError, match=rf"^grade_dataset threads is {bad}; it must be a whole number in \[1, "):
            grade_dataset(None, exported_grader, threads=bad)
        for program, args in ((app, ["bench", "-m", "minilm-l6", "--data", "synthetic", "--out", str(tmp_path / "b")]),
                              (app, ["export", "-m", "minilm-l6", "--data", "synthetic", "--out", str(tmp_path / "e")]),
                              (runtime, ["grade", str(exported_grader), "pairs.tsv",
                                         "--out", str(tmp_path / "g.tsv")])):
            result = CliRunner().invoke(program, [*args, "--threads", str(bad)])
            said = f"--threads {bad} is out of range; it must be in [1, {MAX_THREADS}]"
            assert result.exit_code == 2 and said in " ".join(result.output.split()), (args[0], result.output)
    with pytest.raises(UserError, match=r"^BenchSettings\(warmup=-1\): -1 is out of range"):
        BenchSettings(warmup=-1)


def test_timing_and_token_ranges_are_read_from_their_one_declaration(tmp_path):
    """Was: prune's measure_latency wrote the warm-up range 0..1000 and the timed runs' 1..10,000 again beside
    BenchSettings', and the evaluate API's max_length (ScanSettings, --max-length, evaluate_model) had no upper bound
    where SEQ_LEN (8..8192) is declared: --max-length 100000 was taken, and build_grader(max_length=0) was read as
    the model's. Each now reads headcut_grader.ranges' one declaration."""
    import dataclasses

    from headcut.evaluate_arguments import argument_range
    from headcut.export.bench_settings import BenchSettings
    from headcut.export.gate import ARGUMENTS as EXPORT_ARGUMENTS
    from headcut.prune.measure import ARGUMENTS as TIMING
    from headcut_grader.ranges import REPEATS, SEQ_LEN, WARMUP

    declared = {f.name: f.metadata["range"] for f in dataclasses.fields(BenchSettings)}
    assert declared["warmup"] is WARMUP and TIMING["warmup"][0] is WARMUP
    assert declared["repeats"] is REPEATS and TIMING["min_runs"][0] is REPEATS
    assert argument_range("max_length") is SEQ_LEN and EXPORT_ARGUMENTS["max_length"] is SEQ_LEN
    result = CliRunner().invoke(app, ["scan", "-m", "minilm-l6", "--data", "synthetic", "--out", str(tmp_path / "s"),
                                      "--max-length", "100000"])
    assert result.exit_code == 2, result.output
    assert "--max-length 100000 is out of range; it must be in [8, 8192]" in " ".join(result.output.split())
    assert not (tmp_path / "s").exists()


def test_a_benchmark_s_threads_default_reads_the_declared_one():
    """Was: benchmarks/deploy_bench.py, fused_attention.py, int8_batch.py and serve_load.py each wrote --threads'
    default 2 again; they now read BenchSettings.threads, the toolkit's one declaration."""
    import ast

    from conftest import ROOT
    from headcut.export.bench_settings import BenchSettings

    written = [f"{path.name}:{node.lineno}" for path in (ROOT / "benchmarks").glob("*.py")
               for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(node, ast.Call)
               and any(isinstance(a, ast.Constant) and a.value == "--threads" for a in node.args)
               for k in node.keywords if k.arg == "default" and isinstance(k.value, ast.Constant)
               and k.value.value == BenchSettings.threads]
    assert not written, f"read BenchSettings.threads: {written}"


@pytest.mark.parametrize("script, args, said", [
    ("deploy_bench.py", ["--threads", "0"], "argument --threads: 0 is out of range; it must be in [1, 256]."),
    ("deploy_bench.py", ["--repeats", "0"], "argument --repeats: 0 is out of range; it must be in [1, 10000]."),
    ("grade_ray.py", ["g", "--rows", "-1"], "argument --rows: -1 is out of range; it must be at least 1."),
    ("held_apart.py", ["t.tsv", "--out", "o", "--pairs", "2.5"],
     "argument --pairs: '2.5' is not a whole number; it must be a whole number of at least 1."),
    ("memory.py", ["--out", "o", "--probe-length", "9000"],
     "argument --probe-length: 9000 is out of range; it must be in [8, 8192]."),
    ("augment_pairs.py", ["t.tsv", "--out", "o", "--ratio", "nan"],
     "argument --ratio: nan is not a finite number; it must be in (0, 10]."),
    ("grade_scale.py", ["g", "--out", "o", "--rows", "1000,0"],
     "argument --rows: 0 is out of range; it must be at least 1."),
    # a flag of several numbers in one item, parsed by hand, was taken unchecked (--layouts 1x0: a grade of 0 threads)
    ("grade_scale.py", ["g", "--out", "o", "--layouts", "1x2,1x0"],
     "argument --layouts: 1x0: T 0 is out of range; it must be in [1, 256]."),
    ("grade_scale.py", ["g", "--out", "o", "--layouts", "1x2x3"],
     "argument --layouts: '1x2x3' is not WxT; write W and T joined by x, e.g. 2x1."),
    ("budget_curve.py", ["--out", "o", "--trained", "1.5=m"],  # was: taken, its share past the whole model's FLOPs
     "argument --trained: 1.5=m: BUDGET 1.5 is out of range; it must be in (0, 1]."),
    ("tune_variants.py", ["--budgets", "0.5,0"],  # was: taken as text, float()ed only after the model loaded
     "argument --budgets: 0 is out of range; it must be in (0, 1]."),
    ("long_titles_memory.py", ["g", "--out", "o", "--chars", "10,x"],
     "argument --chars: 'x' is not a whole number; it must be a whole number of at least 1."),
])
def test_a_benchmark_s_number_flag_out_of_its_range_stops_it_with_one_sentence(tmp_path, script, args, said):
    """Was: the benchmarks/ scripts took --threads 0, --rows -1 or --repeats 0 unchecked (an empty timing, numpy's
    error, or a crash deep in the run); each number flag now reads the range headcut declares for what it sets
    (benchmarks/bench_flags.py, one helper), and a value outside it exits 2 naming the flag before any work."""
    import subprocess
    import sys

    from conftest import ROOT

    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1].endswith(f"error: {said}"), done.stderr
    assert "Traceback" not in done.stderr and not any(tmp_path.iterdir())


BENCHMARK_OUTS = [("grade_ray.py", ["g", "--out", "/proc/x.json"]), ("grade_scale.py", ["g", "--out", "/proc/x"]),
                  ("augment_pairs.py", ["t.tsv", "--out", "/proc/x.tsv"]),
                  ("held_apart.py", ["t.tsv", "--out", "/proc/x"]),
                  ("long_titles_memory.py", ["g", "--out", "/proc/x"]), ("memory.py", ["--out", "/proc/x"]),
                  ("budget_curve.py", ["--out", "/proc/x"]), ("prune_curve.py", ["--model", "m", "--out", "/proc/x"]),
                  ("deploy_bench.py", ["--out", "/proc/x"]), ("serve_load.py", ["--out", "/proc/x"])]


@pytest.mark.parametrize("script, args", BENCHMARK_OUTS)
def test_a_benchmark_s_out_is_checked_before_any_work(tmp_path, script, args):
    """Was: 'benchmarks/grade_ray.py GRADER --out /proc/x.json' graded every row, then failed with a traceback writing
    the result (grade_scale.py, memory.py ... the same, or at their first mkdir); each --out is now checked as the
    commands check theirs (bench_flags.out_file / out_dir over files.check_out_file / check_out_dir), before any work:
    one sentence, exit 2 (here the grader g and pairs t.tsv do not exist: the --out is refused first)."""
    import subprocess
    import sys

    from conftest import ROOT

    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)
    assert done.returncode == 2, done.stderr
    out = args[args.index("--out") + 1]
    assert done.stderr.strip().splitlines()[-1].endswith(
        f"error: --out {out} would write into /proc, where the system keeps devices and streams (standard output "
        "too), not files: headcut writes its outputs to files (atomically); name a file or folder, e.g. --out "
        "results."), done.stderr
    assert "Traceback" not in done.stderr and not any(tmp_path.iterdir())


def test_every_benchmark_that_takes_an_out_checks_it_and_is_tried_above():
    """A benchmark with an --out flag calls bench_flags.out_file or out_dir (so its output place is checked before the
    work), and is among the scripts test_a_benchmark_s_out_is_checked_before_any_work runs."""
    import ast

    from conftest import ROOT

    takes_out, checks = set(), set()
    for path in (ROOT / "benchmarks").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            if "--out" in [a.value for a in node.args if isinstance(a, ast.Constant)]:
                takes_out.add(path.name)
            if getattr(node.func, "id", None) in ("out_file", "out_dir"):
                checks.add(path.name)
    unchecked = takes_out - checks
    assert takes_out and not unchecked, f"check --out with bench_flags.out_file or out_dir: {sorted(unchecked)}"
    assert takes_out == {script for script, _ in BENCHMARK_OUTS}


FILE_WRITERS = {"savefig", "save", "savez", "savez_compressed", "dump", "to_csv", "to_json", "to_parquet",
                "write_text", "write_bytes", "touch", "copy", "copy2", "copyfile", "copytree", "move"}


def _writes_by_hand(source: str) -> list[int]:
    """Lines of `source` that write a file other than through files.atomic_file (write_text / write_json, functions,
    are its own): open() or Path.open() for writing, os.open, a Path's write_text / write_bytes, or a writer call
    (savefig, np.save, torch.save, json.dump, to_csv, shutil's copies) outside a `with atomic_file(...) as f` block."""
    import ast

    found = []

    def visit(node, inside: bool) -> None:
        if isinstance(node, ast.With) and any(isinstance(item.context_expr, ast.Call)
                                              and _called(item.context_expr) == "atomic_file" for item in node.items):
            inside = True
        if isinstance(node, ast.Call):
            name, mode = _called(node), _open_mode(node)
            by_name = isinstance(node.func, ast.Name)
            if (name == "open" and (mode is not None and set(mode) & set("wax+")
                                    or not by_name and _is_module(node.func.value, "os"))
                    or not by_name and name in FILE_WRITERS and not inside):
                found.append(node.lineno)
        for child in ast.iter_child_nodes(node):
            visit(child, inside)

    visit(ast.parse(source), False)
    return found


def _called(call) -> str | None:
    import ast

    return call.func.id if isinstance(call.func, ast.Name) else getattr(call.func, "attr", None)


def _open_mode(call) -> str | None:
    """The mode text of an open() (its second argument or mode=; Path.open's first), or None where unsaid."""
    import ast

    given = [k.value for k in call.keywords if k.arg == "mode"]
    given += call.args[1:2] if isinstance(call.func, ast.Name) else call.args[:1]
    return next((g.value for g in given if isinstance(g, ast.Constant) and isinstance(g.value, str)), None)


def _is_module(node, name: str) -> bool:
    import ast

    return isinstance(node, ast.Name) and node.id == name


def test_every_file_a_benchmark_writes_goes_through_the_atomic_writer():
    """Was: benchmarks/held_apart.py and augment_pairs.py wrote through `.NAME.tmp` (two runs at once shared it, one
    clobbering the other), grade_ray.py a fixed /tmp/grade_ray_ROWS.csv, grade_scale, long_titles_memory and memory
    their pairs with a plain open()/write_text, prune_curve its caches with np.save / torch.save and three scripts
    their figures with savefig(path): a half-written file under the final name. Every file a benchmark writes now
    goes through headcut_grader.files.atomic_file (or write_text / write_json over it), whose temporary is its own;
    the check finds each of the old ways in a sample and none in benchmarks/."""
    from conftest import ROOT

    old = '''
tmp = path.with_name(f".{path.name}.tmp")
with open(tmp, "w", newline="") as f:
    csv.writer(f).writerows(rows)
tmp.replace(path)
path.write_text(text)
with open(source, mode="a") as f: pass
fd = os.open(path, os.O_WRONLY)
np.save(path, out)
torch.save(scores, path)
fig.savefig(path, dpi=120)
with atomic_file(path) as f:
    fig.savefig(f, format="png")
with open(path, encoding="utf-8") as f:
    f.read()
write_text(path, text)
'''
    assert _writes_by_hand(old) == [3, 6, 7, 8, 9, 10, 11]
    written = [f"{path.name}:{line}" for path in sorted((ROOT / "benchmarks").glob("*.py"))
               for line in _writes_by_hand(path.read_text(encoding="utf-8"))]
    assert not written, f"write these through headcut_grader.files.atomic_file / write_text / write_json: {written}"


@pytest.mark.parametrize("script, args, said", [
    ("augment_pairs.py", ["t.tsv", "--out", "x.tsv/"], "--out x.tsv/ ends in /, so it names a folder, but --out is a "
     "file to write; drop the /, or name a file inside that folder, such as x.tsv/pairs.tsv."),
    ("grade_ray.py", ["g", "--out", "x.json/."], "--out x.json/. ends in /., so it names a folder, but --out is a "
     "file to write; drop the /., or name a file inside that folder, such as x.json/results.json."),
    ("held_apart.py", ["t.tsv/", "--out", "o"],
     "argument train: t.tsv/ ends in /, so it names a folder, not a file to read; drop the / at its end."),
    ("augment_pairs.py", ["t.tsv/.", "--out", "x.tsv"],
     "argument train: t.tsv/. ends in /., so it names a folder, not a file to read; drop the /. at its end."),
    ("serve_load.py", ["--data", "d.tsv/"],
     "argument --data: d.tsv/ ends in /, so it names a folder, not a file to read; drop the / at its end."),
    # a folder output named as typed (was '--out x.json: ...', check_out_dir read Path(out) first)
    ("grade_scale.py", ["g", "--out", "x.json/"], "--out x.json/: this writes a folder of files, not one .json file; "
     "name the folder without .json, such as --out x."),
])
def test_a_benchmark_s_file_path_spelled_as_a_folder_is_refused_as_written(tmp_path, script, args, said):
    """Was: the benchmarks' path flags took type=Path, which drops a trailing / (and a last /.), so
    'augment_pairs.py t.tsv --out x.tsv/' wrote the file x.tsv and 'held_apart.py t.tsv/' read t.tsv, where the
    commands refuse both. The flags keep the text as written until bench_flags checks it (out_file, out_dir,
    file_to_read over files.folder_spelled): one sentence naming it, exit 2, nothing written."""
    import subprocess
    import sys

    from conftest import ROOT

    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1].endswith(f"error: {said}"), done.stderr
    assert "Traceback" not in done.stderr and not any(tmp_path.iterdir())


def test_no_benchmark_flag_reads_its_path_as_a_path_object():
    """No benchmarks/ argument takes type=Path (pathlib.Path drops a trailing / before any check could see it: the
    file x.tsv written for --out x.tsv/); a path is checked from its text by bench_flags (out_file, out_dir,
    file_to_read), which hands on a Path."""
    import ast

    from conftest import ROOT

    typed = [f"{path.name}:{node.lineno}" for path in sorted((ROOT / "benchmarks").glob("*.py"))
             for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(node, ast.Call)
             for k in node.keywords if k.arg == "type"
             and (getattr(k.value, "id", None) == "Path" or getattr(k.value, "attr", None) == "Path")]
    assert not typed, f"keep the text; check it with bench_flags.out_file / out_dir / file_to_read: {typed}"


NUMBER_LIST = re.compile(r"[-+.\de]+(,[-+.\de]+)*")  # a default such as "0.65,0.5" or "32"


def _number_read_by_hand(node) -> bool:
    """`node` a flag whose default is number text but has no `type` (so argparse hands the text on unchecked), or
    numbers read from a flag by hand: int/float of the items of `args.NAME.split(",")`, in a comprehension or map."""
    import ast

    if isinstance(node, ast.Call) and node.keywords:
        given = {k.arg: k.value for k in node.keywords}
        default = given.get("default")
        return ("type" not in given and isinstance(default, ast.Constant) and isinstance(default.value, str)
                and NUMBER_LIST.fullmatch(default.value) is not None)
    splits = [n for n in ast.walk(node) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
              and n.func.attr == "split" and isinstance(n.func.value, ast.Attribute)]
    converts = [n for n in ast.walk(node) if isinstance(n, ast.Name) and n.id in ("int", "float")]
    is_map = isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "map"
    return bool(splits and converts) and (is_map or isinstance(node, (ast.GeneratorExp, ast.ListComp, ast.SetComp)))


def test_every_number_flag_of_a_benchmark_is_checked():
    """No benchmarks/ script takes a number flag as a bare int or float (type=int: any value, even --threads 0) or
    as text read by hand (tune_variants' --budgets "0.65,0.5", split and float()ed in the run: --budgets 0 or abc
    went unrefused up front); each has a checked range (bench_flags.whole / real; a comma list's items by
    bench_flags.several), and serve_load's --workers 0, --sizes 8,0 and --concurrency -1 are refused as one sentence."""
    import ast
    import importlib.util

    from conftest import ROOT

    trees = {path.name: ast.parse(path.read_text(encoding="utf-8")) for path in (ROOT / "benchmarks").glob("*.py")}
    bare = [f"{name}:{node.lineno}" for name, tree in trees.items() for node in ast.walk(tree)
            if isinstance(node, ast.Call)
            for k in node.keywords
            if k.arg == "type" and isinstance(k.value, ast.Name) and k.value.id in ("int", "float")]
    by_hand = [f"{name}:{node.lineno}" for name, tree in trees.items() for node in ast.walk(tree)
               if _number_read_by_hand(node)]
    assert not bare + by_hand, f"give these flags a range (benchmarks/bench_flags.py): {bare + by_hand}"
    spec = importlib.util.spec_from_file_location("serve_load", ROOT / "benchmarks" / "serve_load.py")
    serve_load = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(serve_load)
    for bad in (["--workers", "0"], ["--sizes", "8,0"], ["--concurrency", "-1"]):
        with pytest.raises(SystemExit) as caught:
            serve_load.arguments(bad)
        assert caught.value.code == 2, bad
    assert serve_load.arguments(["--sizes", "1,8"]).sizes == [1, 8]


@pytest.mark.parametrize("given, said", [
    ({"warmup": -1}, "BenchSettings(warmup=-1): -1 is out of range; it must be in [0, 1000]."),
    ({"warmup": 1.5}, "BenchSettings(warmup=1.5): 1.5 is not a whole number; it must be in [0, 1000]."),
    ({"warmup": None}, "BenchSettings(warmup=None): None is not a number; it must be in [0, 1000]."),
    ({"repeats": True}, "BenchSettings(repeats=True): True is not a number; it must be in [1, 10000]."),
    ({"batch_sizes": 8}, "BenchSettings(batch_sizes=8): pass a tuple of one value or more, e.g. "
                         "batch_sizes=(1, 8, 32)."),
    ({"batch_sizes": ()}, "BenchSettings(batch_sizes=()): pass a tuple of one value or more"),
    ({"seq_lens": "64"}, "BenchSettings(seq_lens='64'): pass a tuple of one value or more, e.g. "
                         "seq_lens=(32, 64, 128)."),
    ({"batch_sizes": (8, 0)}, "BenchSettings(batch_sizes=(8, 0)): 0 is out of range; it must be in [1, 1024]."),
    ({"seq_lens": (64.0,)}, "BenchSettings(seq_lens=(64.0,)): 64 is not a whole number; it must be in [8, 8192]."),
    ({"seq_lens": (64, 64)}, "BenchSettings(seq_lens=(64, 64)) names 64 twice; list each value once."),
    ({"batch_sizes": (1024,), "seq_lens": (8192,)}, "BenchSettings(batch_sizes, seq_lens): a batch of 1024 at 8192 "
                                                    "tokens would hold"),
])
def test_bench_settings_checks_every_field_and_names_it_as_a_python_caller_wrote_it(given, said):
    """Was: BenchSettings checked only its ranged fields (batch_sizes, seq_lens, repeats), and an int where a tuple
    goes as one value: BenchSettings(warmup=-1) and BenchSettings(batch_sizes=8) were accepted (benchmark then timed
    no warm-up, or failed on 'int' object is not iterable), and a refusal named "key 'seq_lens'", a recipe's word.
    Now every field but threads is checked as the argument it is, and a grid that would not fit in memory too. The
    --repeats help states the declared warm-up runs."""
    from typer.main import get_command

    from headcut.export.bench_settings import BenchSettings

    with pytest.raises(UserError) as caught:
        BenchSettings(**given)
    assert str(caught.value).startswith(said), str(caught.value)
    flags = {p.name: p for p in get_command(app).commands["bench"].params}
    assert f"after {BenchSettings.warmup} warm-up runs" in flags["repeats"].help


def test_every_headcut_command_s_shared_setting_flag_takes_the_declared_range():
    """Was: `headcut probe --batch-size` declared its own Range(1, MAX_BATCH) beside common.BATCH_SIZE's. Every
    --batch-size, --bootstrap, --seed, --max-length, --draws and --k of every headcut command now reads
    evaluate_arguments' range (a command's own default may differ: probe's batch is PROBE_BATCH_SIZE, declared
    there too; was: a 32 written in the command and again in probe_heads). Was: `headcut grade
    --batch-size` declared its own too; headcut_grader cannot import headcut, so the batch-size range is declared in
    headcut_grader.ranges (BATCH) and evaluate_arguments reads that object."""
    import inspect

    from typer.main import get_command

    from headcut.cli.main import app
    from headcut.evaluate_arguments import PROBE_BATCH_SIZE, argument_range

    shared = {"--batch-size": "batch_size", "--bootstrap": "bootstrap", "--seed": "seed", "--max-length": "max_length",
              "--draws": "draws", "--k": "k"}
    seen = set()
    for name, command in get_command(app).commands.items():
        for param in inspect.signature(command.callback).parameters.values():
            option = param.default
            flag = next((f for f in getattr(option, "param_decls", None) or () if f in shared), None)
            if flag is not None:
                seen.add((name, flag))
                assert option.parser.valid is argument_range(shared[flag]), (name, flag)
                if (name, flag) == ("probe", "--batch-size"):
                    assert option.default == PROBE_BATCH_SIZE
    assert {("probe", "--batch-size"), ("grade", "--batch-size"), ("evaluate", "--bootstrap"),
            ("scan", "--draws")} <= seen



def test_the_library_s_shared_setting_defaults_equal_the_declared_ones():
    """seed, max_length, batch_size, iters, bootstrap, draws and k defaults of every public function of
    headcut.evaluate, .prune, .distill and .export (typed as numbers so the API reference shows 1000 and 64) equal
    evaluate_arguments.DEFAULTS, so a Python call batches, resamples and seeds as the commands do; each is written as
    a literal number. Was: distill.teacher_logits batched 128 pairs per forward pass where every other forward pass
    takes 64; the scan's experiments (effects, run_experiments) wrote DEFAULTS["iters"] and the like, which the API
    reference shows as written. prune_to_budget's and budget_of's latency_batch and measure_layer_costs' batch equal
    prune_arguments.LATENCY_BATCH, which `headcut prune --batch` reads (was: 32 written there and in each, agreeing
    by hand)."""
    import ast
    import importlib
    import inspect
    import textwrap

    from headcut.evaluate import compare, experiments, fisher, probes, ranking, tasks
    from headcut.evaluate_arguments import DEFAULTS, PROBE_BATCH_SIZE, units_batch_size
    from headcut.prune.latency import measure_layer_costs
    from headcut.prune.pipeline import budget_of, score_units
    from headcut.prune_arguments import LATENCY_BATCH

    packages = [importlib.import_module(f"headcut.{name}") for name in ("evaluate", "prune", "distill", "export")]
    public = [getattr(package, n) for package in packages for n in package.__all__]
    functions = [f for f in public if inspect.isfunction(f)] + [
        compare.compare_logits, tasks.summary_ci, tasks.paired, ranking.score_bootstrap, ranking.paired_score_bootstrap,
        experiments.effects, experiments.run_experiments, probes.probe_heads, fisher.unit_fisher, score_units,
        budget_of, measure_layer_costs]
    # the API's iters: a report's CI (bootstrap); latency_batch (measure_layer_costs' batch): declared with pruning's
    # arguments
    declared = {"iters": "bootstrap", "batch": "latency_batch",
                **{name: name for name in ("seed", "max_length", "batch_size", "bootstrap", "draws", "k",
                                           "latency_batch")}}
    defaults = {**DEFAULTS, "latency_batch": LATENCY_BATCH}
    # a default declared otherwise: the scan's experiments' iters are its CIs' (ScanSettings.iters), the probes batch
    # fewer pairs, and a backward that scores the neurons too half a forward pass's
    units = units_batch_size(DEFAULTS["batch_size"])
    other = {("effects", "iters"): DEFAULTS["iters"], ("run_experiments", "iters"): DEFAULTS["iters"],
             ("probe_heads", "batch_size"): PROBE_BATCH_SIZE, ("unit_fisher", "batch_size"): units,
             ("score_units", "batch_size"): units}
    own = {("ndcg_at_k", "k")}  # NDCG's cutoff, not a scan's masked heads
    seen = set()
    for function in functions:
        node = ast.parse(textwrap.dedent(inspect.getsource(function))).body[0]
        written = dict(zip([a.arg for a in node.args.args][::-1], node.args.defaults[::-1]))
        written.update((a.arg, d) for a, d in zip(node.args.kwonlyargs, node.args.kw_defaults) if d is not None)
        for name, parameter in inspect.signature(function).parameters.items():
            defaulted = parameter.default is not inspect.Parameter.empty
            if name in declared and defaulted and (function.__name__, name) not in own:
                seen.add((function.__name__, name))
                wanted = other.get((function.__name__, name), defaults[declared[name]])
                assert parameter.default == wanted, (function.__name__, name, parameter.default)
                assert isinstance(written[name], ast.Constant), (function.__name__, name, ast.unparse(written[name]))
    assert {("open_scorer", "batch_size"), ("evaluate_model", "iters"), ("paired", "iters"), ("scan_scores", "seed"),
            ("teacher_logits", "batch_size"), ("build_grader", "max_length"), ("run_experiments", "draws"),
            ("probe_heads", "batch_size"), ("score_units", "batch_size"), ("prune_to_budget", "latency_batch"),
            ("budget_of", "latency_batch"), ("measure_layer_costs", "batch")} <= seen
