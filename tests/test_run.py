"""`headcut run` on a tiny recipe (tiny BERT, a few hundred synthetic pairs, a few steps per stage): rerun
skips everything, a changed stage reruns only what depends on it, a killed distillation resumes to the
same table, bad recipes are one sentence, and the report renders in a real headless browser."""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from headcut.cli.main import app
from headcut_grader.errors import UserError
from headcut.synthetic import synthetic_pairs
from headcut.models import LoadedModel, save_model
from headcut.pipeline import load_pipeline, run_pipeline
from headcut.training import checkpoint_step
from conftest import ROOT, tiny_model

RECIPE = """
data: {{train: synthetic, test: "synthetic:2", test_rows: 60}}
teacher: {{recipe: finetune/minilm_synthetic_cpu, model: {base}, train_rows: 200, dev_rows: 40, max_length: 24,
          epochs: 1, batch_size: 16, learning_rate: 1.0e-3, eval_every: 5, checkpoint_every: 5}}
scan: {{data: "synthetic:1", rows: 40, methods: [kl, fisher], experiments: "1", probes: false, draws: 1, bootstrap: 10}}
prune: {{flops: 0.6, score_rows: 32, calibrate: 32}}
distill:
  small: {{recipe: distill/minilm_synthetic_cpu, keep_layers: 1, train_rows: 200, dev_rows: 40, max_length: 24,
          epochs: 3, batch_size: 16, eval_every: 4, checkpoint_every: 2}}
export: {{precision: fp32, backend: onnxruntime, rows: 40, threads: 1}}
bench: {{batch: 4, seq_len: 16, repeats: 2, threads: 1, bootstrap: 50}}
"""
UPSTREAM_OF_SMALL = {"teacher", "scan", "prune", "export.teacher", "export.pruned"}
QUALITY = ("accuracy", "macro_f1", "spearman", "loss")


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: see conftest.one_thread


@pytest.fixture(scope="module")
def tiny_recipe(tmp_path_factory) -> Path:
    from test_export import tiny_tokenizer

    root = tmp_path_factory.mktemp("run")
    tok = tiny_tokenizer(root)
    torch.set_num_threads(1)
    model = tiny_model("bert", attn="sdpa", vocab_size=len(tok), num_hidden_layers=3, initializer_range=0.2)
    base = save_model(LoadedModel(model, tok, {"grades": [1, 2, 3, 4, 5], "max_length": 24}), root / "base")
    (root / "tiny.yaml").write_text(RECIPE.format(base=base))
    return root / "tiny.yaml"


@pytest.fixture(scope="module")
def straight(tiny_recipe):
    """One uninterrupted run of the tiny recipe, and how long it took."""
    torch.set_num_threads(1)
    out = tiny_recipe.parent / "straight"
    started = time.perf_counter()
    result = run_pipeline(load_pipeline(tiny_recipe), out)
    return result, time.perf_counter() - started


def copy_run(result, dest: Path) -> Path:
    shutil.copytree(result.out, dest)
    return dest


def quality_table(report: dict) -> list[tuple]:
    """The final table without the timings (which differ from run to run on a shared machine)."""
    return [(r["name"], *(r["metrics"][k] for k in QUALITY), *(r["vs_teacher"][k]["delta"] for k in QUALITY),
             r["vs_teacher"]["agreement"]["value"], r["flops_per_pair"], r["parameters"]) for r in report["rows"]]


def test_a_run_makes_every_stage_and_one_report(straight):
    result, _ = straight
    assert set(result.states.values()) == {"done"}
    assert list(result.states) == ["teacher", "scan", "prune", "distill.small", "export.teacher", "export.pruned",
                                   "export.small", "bench"]
    report = json.loads((result.out / "report.json").read_text())
    assert [r["name"] for r in report["rows"]] == ["teacher", "pruned", "small"]
    teacher = report["rows"][0]
    assert (teacher["vs_teacher"]["agreement"]["value"] == pytest.approx(1.0)
            and teacher["speedup"] == pytest.approx(1.0))
    assert report["rows"][2]["parameters"] < teacher["parameters"]  # a 1-layer student of a 3-layer teacher
    md = (result.out / "report.md").read_text()
    assert "| grader | precision |" in md and "Pareto" in md and "Experiment 1: random masking" in md
    for row in report["rows"]:
        assert (result.out / row["grader"] / "model.onnx").exists()


def test_rerun_of_a_finished_run_skips_every_stage(straight):
    result, seconds = straight
    started = time.perf_counter()
    again = run_pipeline(load_pipeline(result.out.parent / "tiny.yaml"), result.out)
    took = time.perf_counter() - started
    assert set(again.states.values()) == {"skipped"}
    assert took < seconds / 4, f"rerun took {took:.1f}s, the run {seconds:.1f}s"
    assert quality_table(again.report) == quality_table(result.report)


def test_changing_one_stage_reruns_it_and_downstream_only(straight, tmp_path):
    result, _ = straight
    out = copy_run(result, tmp_path / "run")
    recipe = result.out.parent / "tiny.yaml"
    changed = run_pipeline(load_pipeline(recipe, overrides=["distill.small.learning_rate=5.0e-4"]), out)
    assert {s for s, state in changed.states.items() if state == "skipped"} == UPSTREAM_OF_SMALL
    assert {s for s, state in changed.states.items() if state == "done"} == {"distill.small", "export.small", "bench"}
    pruned = run_pipeline(load_pipeline(recipe, overrides=["distill.small.learning_rate=5.0e-4", "prune.flops=0.7"]),
                          out)
    assert {s for s, state in pruned.states.items() if state == "done"} == {"prune", "export.pruned", "bench"}


def test_a_new_algorithm_version_reruns_that_stage_and_downstream(straight, tmp_path, monkeypatch):
    """Code that changes what a stage makes (same settings) must not be skipped as unchanged."""
    from headcut.pipeline import run as run_module

    result, _ = straight
    out = copy_run(result, tmp_path / "run")
    monkeypatch.setitem(run_module.ALGORITHM_VERSIONS, "prune", 1)
    reasons = {}
    again = run_pipeline(load_pipeline(result.out.parent / "tiny.yaml"), out,
                         progress=lambda e: reasons.update({e["stage"]: e["reason"]}) if "reason" in e else None)
    assert {s for s, state in again.states.items() if state == "done"} == {"prune", "export.pruned", "bench"}
    assert reasons["prune"] == "since its last run: headcut's algorithm for it changed"
    assert reasons["export.pruned"] == "since its last run: the prune stage it reads was rerun"
    assert again.states["distill.small"] == "skipped"  # a bottom-k student does not read the pruned model


def test_a_yardstick_reruns_only_the_bench_and_compares_every_grader_with_it(straight, tmp_path):
    """The run's own teacher as the yardstick: every comparison with it must equal the one with the teacher.
    (A copy: a run folder never holds what its recipe reads, since a stage that reruns clears its folder.)"""
    result, _ = straight
    out = copy_run(result, tmp_path / "run")
    teacher = shutil.copytree(out / json.loads((out / "teacher" / "stage.json").read_text())["result"]["model"],
                              tmp_path / "yardstick")
    reasons = []
    again = run_pipeline(load_pipeline(result.out.parent / "tiny.yaml", overrides=[f"bench.yardstick={teacher}"]),
                         out, progress=lambda e: reasons.append(e["reason"]) if "reason" in e else None)
    assert {s for s, state in again.states.items() if state == "done"} == {"bench"}
    assert reasons == [f'since its last run: bench.yardstick (unset) -> "{teacher}"']
    bench = json.loads((out / "bench" / "bench.json").read_text())
    assert bench["yardstick"]["teacher_vs"]["agreement"]["value"] == 1.0
    for row in bench["rows"]:
        assert row["vs_yardstick"] == row["vs_teacher"], row["name"]
    md = (out / "report.md").read_text()
    assert "## Against the yardstick" in md
    # the floor judged against the yardstick names the graders the floor against the teacher passes
    from headcut.pipeline.report import within_floor

    floor = load_pipeline(result.out.parent / "tiny.yaml").floor
    passing = [r["name"] for r in bench["rows"] if within_floor(r, floor)]
    assert f"Spearman of the yardstick (point estimates): {', '.join(passing) or 'none'}." in md


@pytest.mark.parametrize("where, why", [("nowhere", ": no such folder"), ("file", " is a file, not a model folder"),
                                        ("folder", " is not a model folder (no config.json)")])
def test_a_yardstick_that_is_not_a_grader_is_one_sentence(where, why, tmp_path):
    """Was: '[bench] yardstick PATH is not a grader folder (no config.json)' whatever PATH was, a pairs file too,
    though the yardstick is a model folder (headcut finetune's; a grader folder of headcut export has no
    config.json)."""
    path = tmp_path / "nowhere"
    if where == "file":
        path.write_text("x")
    if where == "folder":
        path.mkdir()
    result = CliRunner().invoke(app, ["run", "quickstart", "--out", str(tmp_path / "out"),
                                      "--set", f"bench.yardstick={path}"])
    assert result.exit_code == 2, result.stderr
    assert (f"[bench] yardstick {path}{why}; pass --set bench.yardstick=DIR (a model folder written by headcut "
            "finetune) or null") in " ".join(result.stderr.split()), result.stderr


def test_a_stage_made_again_reruns_what_depends_on_it(straight, tmp_path):
    result, _ = straight
    out = copy_run(result, tmp_path / "run")
    shutil.rmtree(out / "export-pruned")
    again = run_pipeline(load_pipeline(result.out.parent / "tiny.yaml"), out)
    assert {s for s, state in again.states.items() if state == "done"} == {"export.pruned", "bench"}


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _repoint(out: Path) -> None:
    record = json.loads((out / "prune" / "stage.json").read_text())
    record["result"]["model"] = "prune/nowhere"
    (out / "prune" / "stage.json").write_text(json.dumps(record))


@pytest.mark.parametrize("damage, stage, why", [
    (lambda out: shutil.rmtree(out / "prune" / "model"), "prune", "prune/model/config.json is missing"),
    (lambda out: shutil.rmtree(out / "export-pruned" / "grader"), "export.pruned",
     "export-pruned/grader/README.md is missing"),
    (lambda out: _truncate(out / "export-teacher" / "grader" / "model.onnx"), "export.teacher",
     "export-teacher/grader/model.onnx changed since it was written"),
    (_repoint, "prune", "prune/stage.json changed since it was written"),
    (lambda out: (out / "prune" / "model" / "config.json").write_text("garbage"), "prune",
     "prune/model/config.json changed since it was written"),
    (lambda out: (out / "prune" / "model" / "pytorch_model.bin").write_bytes(b"x"), "prune",
     "prune/model/pytorch_model.bin appeared since it was written"),
    # was: rerun without a word of why
    (lambda out: _truncate(out / "prune" / "stage.json"), "prune",
     "prune/stage.json cannot be read (cut short, or not a stage record)"),
])
def test_a_damaged_stage_folder_reruns_that_stage_saying_why(straight, tmp_path, damage, stage, why):
    """A stage is skipped only while its folder holds exactly the files it recorded; the report never names
    a grader that is gone."""
    result, _ = straight
    out = copy_run(result, tmp_path / "run")
    damage(out)
    run = CliRunner().invoke(app, ["run", str(result.out.parent / "tiny.yaml"), "--out", str(out)])
    assert run.exit_code == 0, run.output
    assert f"{stage}: rerunning, {why}" in run.stderr, run.stderr
    states = json.loads((out / "run.json").read_text())["states"]
    assert states[stage] == "done" and states["bench"] == "done"
    assert {s for s, state in states.items() if state == "done"} <= {stage, "export.pruned", "distill.small",
                                                                      "export.small", "bench"}
    for row in json.loads((out / "report.json").read_text())["rows"]:
        assert (out / row["grader"] / "model.onnx").is_file()


@pytest.mark.parametrize("kind", ["link", "file"])
def test_a_link_or_file_at_a_stage_folder_is_refused_before_any_stage(straight, tmp_path, kind):
    """Was: a link was followed (its target's files taken as the stage's, or a traceback once the stage reran),
    a file a traceback after the stages before it."""
    result, _ = straight
    out = copy_run(result, tmp_path / "run")
    elsewhere = tmp_path / "elsewhere"
    shutil.move(out / "bench", elsewhere)
    before = sorted(p.name for p in elsewhere.rglob("*"))
    if kind == "link":
        (out / "bench").symlink_to(elsewhere, target_is_directory=True)
    else:
        (out / "bench").write_text("mine")
    run = CliRunner().invoke(app, ["run", str(result.out.parent / "tiny.yaml"), "--out", str(out)])
    assert run.exit_code == 2, run.output
    assert f"bench is a {kind}, not a run folder headcut made" in run.stderr, run.stderr
    assert sorted(p.name for p in elsewhere.rglob("*")) == before


def test_a_stage_record_without_checksums_reruns_that_stage(straight, tmp_path):
    """Stage records written before checksums were: nothing vouches for their files, so they run again."""
    result, _ = straight
    out = copy_run(result, tmp_path / "run")
    record = json.loads((out / "bench" / "stage.json").read_text())
    (out / "bench" / "stage.json").write_text(json.dumps({k: v for k, v in record.items()
                                                          if k not in ("outputs", "seal")}))
    reasons = []
    again = run_pipeline(load_pipeline(result.out.parent / "tiny.yaml"), out,
                         progress=lambda e: reasons.append(e["reason"]) if "reason" in e else None)
    assert {s for s, state in again.states.items() if state == "done"} == {"bench"}
    assert reasons == ["bench/stage.json lists no checksums of its files (an older headcut wrote it)"]


@pytest.mark.parametrize("inputs", [{"files": [1], "deps": {}}, {"files": {"t.tsv": "ab"}, "deps": ["teacher"]}])
def test_a_stage_record_whose_inputs_were_edited_into_another_shape_says_what_changed_without_a_traceback(inputs):
    """Was: AttributeError ('list' object has no attribute 'items') from a stage.json whose "files" or "deps" were
    not objects, before the stage reran."""
    from headcut.pipeline.run import what_changed

    now = {"settings": {"rows": 3}, "files": {"t.tsv": "ab"}, "deps": {"teacher": "a"}}
    assert what_changed(inputs, now).startswith("since its last run: rows ")


def test_killed_during_distill_resumes_to_the_same_table(straight, tmp_path):
    result, _ = straight
    out = copy_run(result, tmp_path / "run")
    shutil.rmtree(out / "distill-small")
    recipe = result.out.parent / "tiny.yaml"
    # this checkout's runtime too (conftest put grader/ on PYTHONPATH): the venv's may be another checkout's
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ["PYTHONPATH"]]), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "headcut", "run", str(recipe), "--out", str(out)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    # a whole checkpoint may sit in checkpoint/, or in .tmp or .old while the next one is swapped in (was: only
    # checkpoint/loop.json was looked at, so a kill that landed during a swap failed the test in CI)
    work = out / "distill-small" / "model.partial"
    deadline = time.monotonic() + 300
    while checkpoint_step(work) is None and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert checkpoint_step(work) is not None, proc.stderr.read().decode()[-2000:]
    assert json.loads((out / "distill-small" / "stage.json").read_text())["state"] == "running"
    steps = []

    def progress(event):
        if event["stage"] == "distill.small" and event.get("what") == "steps":
            steps.append(event["done"])

    resumed = run_pipeline(load_pipeline(recipe), out, progress=progress)
    assert {s for s, state in resumed.states.items() if state == "done"} == {"distill.small", "export.small", "bench"}
    assert steps[0] > 1, f"distillation started again from step {steps[0]} instead of resuming"
    for mine, theirs in zip(quality_table(resumed.report), quality_table(result.report)):
        assert mine[0] == theirs[0] and mine[1:] == pytest.approx(theirs[1:], abs=1e-4)


@pytest.mark.parametrize("override, words", [
    (["prune.flops=2", "scan.rowz=3"],
     ["key 'flops' is 2, which is out of range", "unknown key 'rowz' (did you mean 'rows'?)"]),
    (["distill.bottom3.epochs=0", "teacher.lr=1"], ["--set distill.bottom3.epochs=0: key 'epochs' is 0",
                                                    "--set teacher.lr=1: unknown key 'lr'"]),
    (["prune.keep_ratio=0.5"], ["give exactly one of keep_ratio (heads only) or flops"]),
    (["teacher.path=runs/teacher"], ["gives both recipe", "keep one"]),
    (["epochs=2"], ["--set 'epochs=2' is not section.key=value"]),
    (["distill.botom3.epochs=2"], ["no student 'botom3' (students: bottom3)"]),
    (["bench.repeats=many"], ["key 'repeats' must be a whole number, not 'many'"]),
    (["scan.methods=[kl, foo]", "scan.experiments=9"],
     ["[scan] methods [kl, foo]: unknown 'foo'", "[scan] experiments '9': unknown '9'; use all, none or numbers 1-5"]),
    (["prune.flops=null", "prune.keep_ratio=0.5", "prune.method=ablation", "scan.methods=[kl]"],
     ["[prune] method 'ablation' ranks heads by scores the scan does not compute (scan.methods: kl)"]),
    (["prune.flops=null", "prune.keep_ratio=0.5", "prune.iterative=3", "prune.tune_fit=scales"],
     ["[prune] iterative works with flops", "[prune] tune_fit works with flops", "would be ignored"]),
    (["prune.iterative=101"], ["key 'iterative' is 101, which is out of range"]),
    # was: accepted; a synthetic data.test or scan.data refused only in its stage, after the teacher trained
    (["data.test_rows=100000000000000000000000000"], ["key 'test_rows' is a whole number of 27 digits, which is "
                                                      "out of range; it must be in [1, 1000000]"]),
    (["scan.rows=1000001"], ["--set scan.rows=1000001: key 'rows' is 1000001, which is out of range"]),
    (["prune.score_rows=10000000"],
     ["key 'score_rows' is 10000000, which is out of range; it must be in [1, 1000000]"]),
    (["export.rows=10000000"], ["key 'rows' is 10000000, which is out of range; it must be in [20, 1000000]"]),
    # was: accepted, and the prune never read tune_fit (the CLI refuses --tune-fit with --no-tune)
    (["prune.tune=false", "prune.tune_fit=weights"],
     ["[prune] tune_fit chooses what mask tuning fits, and [prune] tune: false turns tuning off; drop one of them"]),
    (["data.test=nowhere/test.tsv", "scan.data=nowhere/scan.tsv"],
     ["--set data.test=nowhere/test.tsv and --set scan.data=nowhere/scan.tsv: no such files"]),
    # a student named as another grader would take its export and its report row; two that differ in case or
    # by a dot would share one folder
    (["distill.teacher.recipe=distill/minilm_synthetic_cpu"], ["student name 'teacher' is the run's teacher grader"]),
    (["distill.Pruned.recipe=distill/minilm_synthetic_cpu"], ["student name 'Pruned' is the run's pruned grader"]),
    (["distill.Bottom3.recipe=distill/minilm_synthetic_cpu"],
     ["students 'bottom3' and 'Bottom3' would share one folder"]),
    (["distill.a-b.recipe=distill/minilm_synthetic_cpu", "distill.a.b.recipe=distill/minilm_synthetic_cpu"],
     ["--set 'distill.a.b.recipe=distill/minilm_synthetic_cpu': the recipe has no student 'a'"]),
    (["bench.repeats=2", "bench.repeats=3"], ["--set bench.repeats=2 and --set bench.repeats=3 set the same key"]),
    # was: killed for memory in the distill stage, after the teacher trained
    (["distill.x.recipe=distill/minilm_config_cpu", "distill.x.student_hidden=65536"],
     ["--set distill.x.student_hidden=65536 is larger than the teacher's 384",
      "pass --set distill.x.student_hidden=384 or less"]),
    # was: refused in the distill stage, after the teacher trained, blaming a student_hidden the recipe left unset
    (["distill.x.recipe=distill/minilm_config_cpu", "distill.x.student_heads=5"],
     ["minilm_config_cpu.yaml): distill.x.student_hidden=192 is not divisible by --set distill.x.student_heads=5, and "
      "each head takes an equal share of the width"]),
    # was: refused only in the export stage, after the teacher trained, naming --precision and --backend
    (["export.precision=bf16"], ["export.precision=bf16: ONNX Runtime graders are fp32 or int8; use "
                                 "export.backend=openvino or auto"]),
    # was: reported on the teacher's own training pairs, exit 0
    (["data.test=synthetic:0"], ["data.test=synthetic:0 holds the pairs of data.train=synthetic", "training pairs"]),
    (["distill.small.recipe=distill/minilm_synthetic_cpu", "distill.small.train_data=synthetic:2"],
     ["quickstart.yaml: data.test=synthetic:2 holds the pairs of --set distill.small.train_data=synthetic:2"]),
])
def test_bad_recipe_keys_and_ranges_are_one_sentence_exit_2(override, words, tmp_path):
    args = ["run", "quickstart", "--out", str(tmp_path / "out")] + [x for o in override for x in ("--set", o)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    message = result.stderr.strip()
    assert message.startswith("error: ") and "\n" not in message and "Traceback" not in message
    for w in words:
        assert w in message
    assert not (tmp_path / "out").exists()  # checked before any work


@pytest.mark.parametrize("overrides, refused", [
    (["prune.tune=false", "prune.calibrate=64"], True), (["prune.tune=false", "prune.calibrate=64",
                                                         "prune.drop_layers=true"], False),
    (["prune.tune=false"], False),  # quickstart.yaml's own calibrate: 256 is let be
])
def test_a_calibrate_no_tuning_and_no_layer_search_reads_is_refused_not_ignored(overrides, refused):
    """Was: accepted, and the prune never read prune.calibrate: only mask tuning and the drop_layers search read its
    pairs (the CLI refuses --calibrate with --no-tune alike)."""
    from headcut_grader.errors import UserError

    if not refused:
        load_pipeline("quickstart", overrides=overrides)
        return
    with pytest.raises(UserError, match=r"\[prune\] calibrate picks the pairs mask tuning fits on, and \[prune\] tune: "
                                        r"false turns tuning off; drop one of them"):
        load_pipeline("quickstart", overrides=overrides)


def test_the_floor_and_the_int8_gate_read_one_range_for_a_loss_of_accuracy_points_and_of_spearman():
    """floor.accuracy_points and export's max_drop are accuracy points a grader may lose, floor.spearman and
    max_spearman_drift a change of Spearman (within_limits judges both alike): their ranges, bounded by the metrics'
    scales, are gate.ACCURACY_LOSS and gate.SPEARMAN_LOSS (were four literals, 0..100 and 0..2 twice)."""
    from headcut.export.gate import ACCURACY_LOSS, SPEARMAN_LOSS, Int8Gate
    from headcut.pipeline.recipe import ExportSection, FloorSection
    from headcut_grader.ranges import declared_range

    for cls, name in ((FloorSection, "accuracy_points"), (Int8Gate, "max_drop"), (ExportSection, "max_drop")):
        assert declared_range(cls, name) is ACCURACY_LOSS, (cls.__name__, name)
    for cls, name in ((FloorSection, "spearman"), (Int8Gate, "max_spearman_drift"),
                      (ExportSection, "max_spearman_drift")):
        assert declared_range(cls, name) is SPEARMAN_LOSS, (cls.__name__, name)
    with pytest.raises(UserError, match=r"key 'spearman' is 2.5, which is out of range; it must be in \[0, 2\]"):
        load_pipeline("quickstart", overrides=["floor.spearman=2.5"])


@pytest.mark.parametrize("scan, flags, words", [
    # was: accepted, and the draws never made
    ({"experiments": "none", "draws": 5}, ["--experiments", "none", "--draws", "5"],
     "{draws} sets up experiments 1, 2, 5 (random, halves, term), and {experiments} runs none, so it would be "
     "ignored; drop {draws} or add 1, 2 or 5 to {experiments}."),
    ({"methods": ["kl", "kl"]}, ["--method", "kl,kl"], "names kl twice; name each once."),  # was: accepted
    # was: "[scan] experiments '1,1' is not all, none or numbers 1-5", which it is
    ({"experiments": "1,1"}, ["--experiments", "1,1"], "{experiments} 1,1 names random twice; name each once."),
])
def test_a_recipes_scan_section_is_refused_in_the_words_scan_refuses_its_flags(scan, flags, words, tmp_path):
    from headcut.pipeline.recipe import from_mapping
    from headcut_grader.errors import UserError

    data = {"data": {"train": "synthetic", "test": "synthetic:2"},
            "teacher": {"recipe": "finetune/minilm_synthetic_cpu"}, "scan": scan}
    with pytest.raises(UserError) as e:
        from_mapping(data, where="r.yaml")
    assert words.format(draws="[scan] draws", experiments="[scan] experiments") in str(e.value)
    result = CliRunner().invoke(app, ["scan", "-m", "minilm-l6", "-d", "synthetic", "--out", str(tmp_path / "s"),
                                      *flags])
    assert result.exit_code == 2 and words.format(draws="--draws", experiments="--experiments") in result.stderr


def test_a_recipe_files_own_draws_do_not_stop_a_set_that_turns_its_experiments_off():
    """quickstart sets draws: 2; a one-score teacher is told to pass --set scan.experiments=none, which must not
    then be refused over the file's draws. A --set draws beside it still is."""
    from headcut_grader.errors import UserError

    assert load_pipeline("quickstart", overrides=["scan.experiments=none"]).scan.experiments == "none"
    with pytest.raises(UserError, match=r"\[scan\] draws sets up experiments"):
        load_pipeline("quickstart", overrides=["scan.experiments=none", "scan.draws=5"])


def test_a_test_file_that_is_a_copy_of_the_train_file_is_refused(tmp_path):
    pairs = synthetic_pairs(60)
    text = "query\ttitle\tgrade\n" + "".join(f"{q}\t{t}\t{pairs.grades[g]}\n"
                                              for q, t, g in zip(pairs.queries, pairs.titles, pairs.labels))
    (tmp_path / "train.tsv").write_text(text)
    (tmp_path / "copy.tsv").write_text(text)
    args = ["run", "quickstart", "--out", str(tmp_path / "out"), "--set", f"data.train={tmp_path / 'train.tsv'}",
            "--set", f"data.test={tmp_path / 'copy.tsv'}"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "copy.tsv holds the pairs of --set data.train=" in result.stderr and not (tmp_path / "out").exists()


@pytest.mark.parametrize("override, words", [
    (["prune.flops=1e-9"], ["--set prune.flops=1e-9 allows", "less than the pooler and classifier alone need"]),
    # was: refused in the prune stage, after the teacher trained and the scan ran, naming --keep-ratio
    (["prune.flops=null", "prune.keep_ratio=0.001"], ["prune.keep_ratio=0.001 keeps round(0.001 x ", ") = 0 heads"]),
    (["distill.small.unlabeled_data=nowhere.tsv"], ["distill.small.unlabeled_data=nowhere.tsv: no such file"]),
    (["prune.drop_layers=true", "prune.iterative=3"], ["[prune] drop_layers searches one plan of the unpruned model; "
                                                       "[prune] iterative 3 re-plans a pruned one, "
                                                       "so pass one of them"]),
    (["teacher.model=/nonexistent"], ["teacher.model=/nonexistent: no such folder, and not a built-in name"]),
    (["distill.small.keep_layers=9"], ["error: --set distill.small.keep_layers=9 is more than the teacher's",
                                       "pass --set distill.small.keep_layers=2 or less"]),
    # was: refused by the distill stage, after the teacher trained, as "layer_map [5] names a layer ..." (no recipe)
    (["distill.small.hidden_weight=0.5", "distill.small.layer_map=[5]"],
     ["error: --set distill.small.layer_map=[5] names a layer the 3-layer teacher lacks; use 0..2."]),
    # was: refused by the distill stage, after the teacher trained, as "max length 600 is more than ..."
    (["distill.small.max_length=600"], ["error: --set distill.small.max_length=600 is more than the teacher's 512 "
                                        "positions; pass --set distill.small.max_length=512 or less."]),
    (["teacher.max_length=600"], ["[teacher] (minilm_synthetic_cpu.yaml) with --set teacher.max_length=600: "
                                  "max_length=600 is more than the model's 512 positions"]),
])
def test_recipe_values_a_stage_would_refuse_stop_the_run_before_any_stage(tiny_recipe, tmp_path, override, words):
    """Refused when the recipe is read, naming the recipe key (not the flag of the command the stage calls)."""
    args = ["run", str(tiny_recipe), "--out", str(tmp_path / "out")] + [x for o in override for x in ("--set", o)]
    result = CliRunner().invoke(app, args)
    message = result.stderr.strip()
    assert result.exit_code == 2 and "\n" not in message and "Traceback" not in message, result.output
    assert all(w in message for w in words) and not any(f in message for f in ("--flops", "--model", "--keep-ratio")), \
        message
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("given", ["--set", "run recipe"])
def test_a_bench_seq_len_past_the_teachers_positions_stops_the_run_before_any_stage(tiny_recipe, tmp_path, given):
    """Was: taken, and the bench stage, the run's last, padded every grader's timed batch to bench.seq_len, past the
    positions the teacher and its students embed."""
    from headcut.pipeline.checks import check_run
    from headcut_grader.errors import UserError

    recipe, overrides = tiny_recipe, ["bench.seq_len=600"] if given == "--set" else []
    if given == "run recipe":
        recipe = tmp_path / "run.yaml"
        recipe.write_text(tiny_recipe.read_text().replace("seq_len: 16", "seq_len: 600"))
    lead, fix = {"--set": ("--set bench.seq_len=600", "pass --set bench.seq_len=512"),
                 "run recipe": (f"{recipe}: bench.seq_len=600", "set bench.seq_len=512")}[given]
    with pytest.raises(UserError, match=f"^{re.escape(lead)} is more than the teacher's 512 positions; "
                                        f"{re.escape(fix)} or less\\.$"):
        check_run(load_pipeline(recipe, overrides=overrides), tmp_path / "out", overwrite=False)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("given", ["--set", "run recipe", "student recipe"])
def test_a_students_value_the_teacher_refuses_is_named_as_the_user_gave_it(tmp_path, given):
    """Was: 'distill.bottom3.max_length=1000 is more than the teacher's 512 positions; set ...', as if the run recipe
    held it, for a --set and a student recipe's own key alike. Now a --set is named as typed, a file's value by its
    file and key."""
    from headcut.pipeline.checks import check_students, run_parts
    from headcut_grader.errors import UserError

    quickstart = ROOT / "headcut" / "recipes" / "run" / "quickstart.yaml"
    student = tmp_path / "student.yaml"
    student.write_text((ROOT / "headcut" / "recipes" / "distill" / "minilm_synthetic_cpu.yaml").read_text().replace(
        "max_length: 32", "max_length: 1000" if given == "student recipe" else "max_length: 32"))
    run = tmp_path / "run.yaml"
    run.write_text(quickstart.read_text().replace(
        "recipe: distill/minilm_synthetic_cpu", f"recipe: {student}" + (
            "\n    max_length: 1000" if given == "run recipe" else "")))
    overrides = ["distill.bottom3.max_length=1000"] if given == "--set" else []
    lead, fix = {"--set": ("--set distill.bottom3.max_length=1000", "pass --set distill.bottom3.max_length=512"),
                 "run recipe": (f"{run}: distill.bottom3.max_length=1000", "set distill.bottom3.max_length=512"),
                 "student recipe": (f"[distill.bottom3] ({student}): distill.bottom3.max_length=1000",
                                    "set distill.bottom3.max_length=512")}[given]
    with pytest.raises(UserError, match=f"^{re.escape(lead)} is more than the teacher's 512 positions; "
                                        f"{re.escape(fix)} or less\\.$"):
        check_students(run_parts(load_pipeline(run, overrides=overrides)))


@pytest.mark.parametrize("given", ["--set", "run recipe"])
@pytest.mark.parametrize("stage, items, words", [
    ("prune", ["prune.flops=1e-9"], "{set}prune.flops={flops} allows 0 FLOPs per pair"),
    ("export", ["export.precision=bf16", "export.backend=onnxruntime"],
     "{set}export.precision=bf16: ONNX Runtime graders are fp32 or int8; use {set}export.backend=openvino or auto."),
])
def test_a_stage_names_a_key_it_refuses_as_the_user_gave_it(tiny_recipe, tmp_path, given, stage, items, words):
    """Was: the prune and export stages named a refused key 'prune.flops=1e-09' and 'export.precision=bf16' although a
    --set gave it, and a key the run recipe's file held without the file; now by that --set, or led by the file, as
    the checks before any stage do (called here directly, past those checks)."""
    from headcut.pipeline import stages
    from headcut_grader.errors import UserError

    teacher = str(tiny_recipe.parent / "base")
    recipe, lead = given_recipe(tmp_path, given, ["teacher.recipe=null", f"teacher.path={teacher}", *items])
    ctx = stages.Context(recipe, tmp_path / stage, {"teacher": {"model": teacher}}, lambda *a: None, tmp_path)
    with pytest.raises(UserError) as caught:
        (stages.prune if stage == "prune" else stages.export("teacher"))(ctx)
    flops = "1e-9" if given == "--set" else "1e-09"  # a --set's value as typed; a file's as Python writes it
    said = words.format(set="--set " if given == "--set" else "", flops=flops)
    assert str(caught.value).startswith(said if given == "--set" else lead + said), str(caught.value)


@pytest.mark.parametrize("methods", ["[kl]", "[kl, ablation]"])
def test_a_runs_scan_reads_gold_only_where_its_methods_or_experiments_do(tiny_recipe, tmp_path, methods):
    """Was: the checks before any stage and the scan stage required gold in scan.data whatever the scan computes, so
    a scan with only kl and no experiments was refused on an unlabelled file that `headcut scan` accepts; now both
    decide as `headcut scan` does (evaluate.scan.scan_gold), and a scan that reads gold still needs it up front."""
    from headcut.pipeline import stages
    from headcut.pipeline.checks import check_run

    texts = tmp_path / "texts.tsv"
    texts.write_text("query\ttitle\n" + "".join(f"query {i}\ttitle {i} words\n" for i in range(12)))
    recipe = load_pipeline(tiny_recipe, overrides=[f"scan.data={texts}", f"scan.methods={methods}",
                                                   "scan.experiments=none"])
    if methods != "[kl]":  # ablation reads gold: refused before any stage, naming the file
        with pytest.raises(UserError, match=re.escape(str(texts)) + ".*data.label_col"):
            check_run(recipe, tmp_path / "out", overwrite=False)
        return
    check_run(recipe, tmp_path / "out", overwrite=False)
    teacher = str(tiny_recipe.parent / "base")
    record = stages.scan(stages.Context(recipe, tmp_path / "scan", {"teacher": {"model": teacher}}, lambda *a: None,
                                        tmp_path))
    assert record["baseline"] is None and json.loads((tmp_path / "scan" / "scan" / "importance.json").read_text())


def given_recipe(tmp_path: Path, given: str, items: list[str]):
    """quickstart with `items` ('section.key=value') given by --set, or written into a copy of its file; and the
    words a message that names the first of them leads with: the --set, or the file."""
    from headcut.recipes import dump_yaml, parse_override, read_recipe_file

    if given == "--set":
        return load_pipeline("quickstart", overrides=items), "--set "
    data = read_recipe_file(ROOT / "headcut" / "recipes" / "run" / "quickstart.yaml")
    for item in items:
        key, value = parse_override(item)
        *sections, last = key.split(".")
        node = data
        for part in sections:
            node = node.setdefault(part, {})
        node[last] = value
    path = tmp_path / "run.yaml"
    path.write_text(dump_yaml(data))
    return load_pipeline(path), f"{path}: "


@pytest.mark.parametrize("given", ["--set", "run recipe"])
@pytest.mark.parametrize("items, words", [
    (["prune.flops=1e-9"], "prune.flops={flops} allows 0 FLOPs per pair, less than the pooler and classifier"),
    (["prune.flops=null", "prune.keep_ratio=0.001"], "prune.keep_ratio=0.001 keeps round(0.001 x 72) = 0 heads"),
])
def test_a_prune_budget_the_teacher_refuses_is_named_as_the_user_gave_it(tmp_path, given, items, words):
    """Was: 'prune.flops=1e-09 allows ...' for a --set and a run recipe's key alike, naming neither the --set nor the
    file. Refused before any stage, on the teacher's outline."""
    from headcut.pipeline.checks import check_prune_budget, run_parts
    from headcut_grader.errors import UserError

    recipe, lead = given_recipe(tmp_path, given, items)
    with pytest.raises(UserError) as caught:
        check_prune_budget(run_parts(recipe))
    flops = "1e-9" if given == "--set" else "1e-09"  # was 1e-09 for a --set 1e-9 too: now as the user typed it
    assert str(caught.value).startswith(lead + words.format(flops=flops)), str(caught.value)


@pytest.mark.parametrize("given", ["--set", "run recipe"])
@pytest.mark.parametrize("items, words", [
    (["export.precision=bf16"], "export.precision=bf16: ONNX Runtime graders are fp32 or int8; use "
                                "export.backend=openvino or auto."),
    (["export.precision=bf16", "export.backend=onnxruntime"],
     "export.precision=bf16: ONNX Runtime graders are fp32 or int8; use {set}export.backend=openvino or auto."),
    (["export.precision=bf16", "export.backend=openvino"],
     "export.precision=bf16: no bf16 on this CPU; or use {set}export.precision=fp32, int8 or auto."),
])
def test_an_export_precision_this_machine_refuses_is_named_as_the_user_gave_it(tmp_path, monkeypatch, given, items,
                                                                              words):
    """Was: 'export.precision=bf16: ...' for a --set and a run recipe's key alike, naming neither the --set nor the
    file (and a --set export.backend as if the file held it). Refused before any stage."""
    from headcut.export import build_openvino
    from headcut.pipeline.checks import check_export
    from headcut_grader.errors import UserError

    if "export.backend=openvino" in items:
        pytest.importorskip("openvino")
        monkeypatch.setattr(build_openvino, "bf16_problem", lambda: "no bf16 on this CPU")
    recipe, lead = given_recipe(tmp_path, given, items)
    with pytest.raises(UserError) as caught:
        check_export(recipe)
    assert str(caught.value) == lead + words.format(set=lead if given == "--set" else ""), str(caught.value)


@pytest.mark.parametrize("given", ["--set", "run recipe"])
@pytest.mark.parametrize("items, words", [
    (["data.test=nowhere.tsv"], "data.test=nowhere.tsv: no such file; pass an existing pairs file"),
    (["data.test=nowhere.tsv", "scan.data=nowhere/scan.tsv"],
     "data.test=nowhere.tsv and {set}scan.data=nowhere/scan.tsv: no such files"),
    (["data.test=synthetic:0"], "data.test=synthetic:0 holds the pairs of data.train=synthetic{quickstart}, so the "
                                "report would grade training pairs"),
    (["data.test=/dev/null"], "data.test=/dev/null is not a regular file (a pipe, device or socket); pass a pairs "
                              "file."),
    (["scan.data=/tmp"], "scan.data=/tmp is a folder; pass a pairs file."),
    (["scan.data=/"], "scan.data=/ names the folder /, but {set}scan.data is a file to read; name a pairs file inside "
                      "that folder."),
])
def test_a_pairs_file_the_run_refuses_is_named_as_the_user_gave_it(tmp_path, given, items, words):
    """Was: 'data.test=nowhere.tsv: no such file' for a --set and a run recipe's key alike, naming neither the --set
    nor the file; a key the recipe file holds beside a --set is named with its file. Refused before any stage. A
    folder or a device (/dev/zero) was 'no such file' too."""
    from headcut.pipeline.checks import check_inputs, run_parts
    from headcut_grader.errors import UserError

    recipe, lead = given_recipe(tmp_path, given, items)
    with pytest.raises(UserError) as caught:
        check_inputs(run_parts(recipe))
    quickstart = f" (in {ROOT / 'headcut' / 'recipes' / 'run' / 'quickstart.yaml'})" if given == "--set" else ""
    assert str(caught.value).startswith(lead + words.format(set=lead if given == "--set" else "",
                                                            quickstart=quickstart)), str(caught.value)


def test_a_refusal_led_by_the_run_recipe_file_keeps_its_own_class(tmp_path):
    """Was: named_in re-raised a ParityError or GateError it led with the run recipe's file as a plain UserError, so
    a caller that told them apart (the export stage falls back to fp32 on a GateError) no longer could."""
    from headcut.export import GateError
    from headcut.pipeline.checks import named_in

    recipe, lead = given_recipe(tmp_path, "run recipe", ["export.precision=int8"])
    with pytest.raises(GateError) as caught:
        with named_in(recipe, "export", "precision"):
            raise GateError("no int8 graph passed the gate")
    assert str(caught.value) == f"{lead}no int8 graph passed the gate"


@pytest.mark.parametrize("in_file, by_set", [("teacher.path", "prune.flops=0.5"), ("prune.flops=0.5", "teacher.path")])
def test_a_prune_refusal_of_the_teacher_is_led_by_where_the_teacher_path_came_from(tiny_recipe, tmp_path, in_file,
                                                                                    by_set):
    """Was: the prune stage led every refusal by where prune.flops came from, so an already pruned teacher the run
    recipe's file names was not led by it where a --set gave prune.flops, and one a --set named was led by the file
    that holds prune.flops."""
    from headcut.arch.surgery import keep_neurons
    from headcut.models import load_model
    from headcut.pipeline import stages
    from headcut_grader.errors import UserError

    teacher = load_model(tiny_recipe.parent / "base")
    keep_neurons(teacher.model, [[0, 1]] * 3)
    cut = str(save_model(teacher, tmp_path / "cut"))
    items = {"teacher.path": ["teacher.recipe=null", f"teacher.path={cut}"]}
    given_recipe(tmp_path, "run recipe", items.get(in_file, [in_file]))
    recipe = load_pipeline(tmp_path / "run.yaml", overrides=items.get(by_set, [by_set]))
    ctx = stages.Context(recipe, tmp_path / "prune", {"teacher": {"model": cut}}, lambda *a: None, tmp_path)
    with pytest.raises(UserError) as caught:
        stages.prune(ctx)
    said = f"{tmp_path / 'run.yaml'}: teacher.path={cut}" if in_file == "teacher.path" else f"--set teacher.path={cut}"
    assert str(caught.value).startswith(f"{said} is already pruned"), str(caught.value)


def test_an_export_refusal_of_a_set_backend_is_not_led_by_the_file_that_holds_the_precision(tiny_recipe, tmp_path,
                                                                                            monkeypatch):
    """Was: the export stage led every refusal by where export.precision came from, so one of a --set
    export.backend was led by the run recipe's file that holds export.precision."""
    from headcut.export import runtimes
    from headcut.pipeline import stages
    from headcut_grader.errors import UserError

    monkeypatch.setattr(runtimes, "BACKENDS", ("onnxruntime", "auto"))  # as if this export could not take openvino
    teacher = str(tiny_recipe.parent / "base")
    given_recipe(tmp_path, "run recipe", ["teacher.recipe=null", f"teacher.path={teacher}", "export.precision=fp32"])
    recipe = load_pipeline(tmp_path / "run.yaml", overrides=["export.backend=openvino"])
    ctx = stages.Context(recipe, tmp_path / "export", {"teacher": {"model": teacher}}, lambda *a: None, tmp_path)
    with pytest.raises(UserError) as caught:
        stages.export("teacher")(ctx)
    assert str(caught.value).startswith("--set export.backend=openvino is not one of"), str(caught.value)


def export_stage_refusal(tiny_recipe, tmp_path, monkeypatch, precision: str, overrides: list[str], error) -> str:
    """The sentence a run's export stage refuses with when building its grader raises `error`, the run file holding
    export.precision=`precision` and `overrides` given by --set."""
    from headcut.pipeline import stages
    from headcut_grader.errors import UserError

    def refused(*args, **kwargs):
        raise error

    monkeypatch.setattr(stages, "_built", refused)
    teacher = str(tiny_recipe.parent / "base")
    given_recipe(tmp_path, "run recipe", ["teacher.recipe=null", f"teacher.path={teacher}",
                                          f"export.precision={precision}"])
    recipe = load_pipeline(tmp_path / "run.yaml", overrides=overrides)
    ctx = stages.Context(recipe, tmp_path / "export", {"teacher": {"model": teacher}}, lambda *a: None, tmp_path)
    with pytest.raises(UserError) as caught:
        stages.export("teacher")(ctx)
    return str(caught.value)


def test_an_export_refusal_that_names_no_key_of_the_run_is_not_led_by_the_run_recipe(tiny_recipe, tmp_path,
                                                                                     monkeypatch):
    """Was: a refusal naming none of the stage's keys (a parity failure) was led by the file that holds
    export.precision, as if that key were the fault."""
    from headcut_grader.errors import UserError

    said = export_stage_refusal(tiny_recipe, tmp_path, monkeypatch, "fp32", [],
                                UserError("the exported graph's logits differ from the model's by 0.3; report it."))
    assert said.startswith("the exported graph's logits differ"), said


@pytest.mark.parametrize("about, led_by_file", [("backend", False), ("precision", True)])  # each names the other first
def test_an_export_refusal_is_led_by_where_the_key_it_is_about_came_from_not_the_key_it_names_first(
        tiny_recipe, tmp_path, monkeypatch, about, led_by_file):
    """Was: the export stage chose the key that leads a refusal by the one its sentence names first (a regex on the
    text), so one about a --set export.backend that named the file's export.precision first was led by that file,
    and one about the file's precision that named the --set backend first was not; now by UserError.about."""
    from headcut_grader.errors import UserError

    said = {"backend": "export.precision=int8 cannot be built with --set export.backend=auto here; drop the --set.",
            "precision": "--set export.backend=auto cannot build export.precision=int8 here; set fp32."}[about]
    got = export_stage_refusal(tiny_recipe, tmp_path, monkeypatch, "int8", ["export.backend=auto"],
                               UserError(said, about=(about,)))
    assert got == (f"{tmp_path / 'run.yaml'}: " if led_by_file else "") + said


def test_an_export_refusal_that_does_not_say_what_it_is_about_is_not_led_by_a_key_its_sentence_names(
        tiny_recipe, tmp_path, monkeypatch):
    """Was: a stage's refusal without UserError.about was led by the file of the key its sentence named first (a
    regex on the text); now a stage's checks say what they are about, and one that does not is not led."""
    from headcut_grader.errors import UserError

    said = "the graph of export.precision=int8 failed; rerun."
    assert export_stage_refusal(tiny_recipe, tmp_path, monkeypatch, "int8", [], UserError(said)) == said


def test_the_export_and_prune_stages_checks_say_what_they_are_about(tiny_recipe):
    """The checks a run's export and prune stages call say which argument they refuse (UserError.about), which the
    stage leads by where that key came from; was: some said nothing, and the stage guessed from the text."""
    from headcut.export import Int8Gate, build_grader
    from headcut.export.build import check_gate_and_pairs
    from headcut.models import load_model
    from headcut.prune import prune
    from headcut_grader.errors import UserError

    loaded = load_model(tiny_recipe.parent / "base")
    calls = {("threads",): lambda: build_grader(loaded, tiny_recipe.parent / "g", threads=0, names="keys"),
             ("max_length",): lambda: build_grader(loaded, tiny_recipe.parent / "g", max_length=10 ** 6,
                                                   names="keys"),
             ("min_agreement",): lambda: check_gate_and_pairs(Int8Gate(min_agreement=2.0), None, "keys"),
             ("scores",): lambda: prune(loaded, keep_ratio=0.5, scores=tiny_recipe.parent / "none.json",
                                        names="keys"),
             ("data",): lambda: prune(loaded, keep_ratio=0.5, names="keys")}
    said = {}
    for about, call in calls.items():
        with pytest.raises(UserError) as caught:
            call()
        said[about] = caught.value.about
    assert said == {about: about for about in calls}


@pytest.mark.parametrize("in_file, by_set, words", [
    ("scan.data=nowhere/scan.tsv", "data.test=nowhere.tsv",
     "--set data.test=nowhere.tsv and scan.data=nowhere/scan.tsv (in {file}): no such files; pass"),
    ("data.test=nowhere.tsv", "scan.data=nowhere/scan.tsv",
     "data.test=nowhere.tsv (in {file}) and --set scan.data=nowhere/scan.tsv: no such files; pass"),
])
def test_missing_pairs_files_from_a_set_and_the_run_recipe_each_say_where_they_came_from(tmp_path, in_file, by_set,
                                                                                        words):
    """Was: '--set data.test=a, scan.data=b in run.yaml: no such file', read as both from the --set, or as a file
    (run.yaml: data.test=a, --set scan.data=b) that holds a --set; now each is named as given, its file in brackets."""
    from headcut.pipeline.checks import check_inputs, run_parts
    from headcut_grader.errors import UserError

    given_recipe(tmp_path, "run recipe", [in_file])
    with pytest.raises(UserError) as caught:
        check_inputs(run_parts(load_pipeline(tmp_path / "run.yaml", overrides=[by_set])))
    assert str(caught.value).startswith(words.format(file=tmp_path / "run.yaml")), str(caught.value)


@pytest.mark.parametrize("given", ["--set", "run recipe"])
@pytest.mark.parametrize("items, words", [
    (["teacher.model=/nonexistent"], "teacher.model=/nonexistent: no such folder, and not a built-in name"),
    (["teacher.path=/nonexistent", "teacher.recipe=null"],
     "teacher.path=/nonexistent: no such folder, and not a built-in name"),
    (["distill.bottom3.student_model=/nowhere", "distill.bottom3.student=pruned"],
     "distill.bottom3.student_model=/nowhere: no such folder, and not a built-in name"),
    (["teacher.path=/etc", "teacher.recipe=null"], "teacher.path=/etc: not a Hugging Face model folder"),
])
def test_a_model_the_run_refuses_is_named_as_the_user_gave_it(tmp_path, given, items, words):
    """Was: 'teacher.model=/nonexistent: no such folder ...' for a --set and a run recipe's key alike, naming neither
    the --set nor the file. Refused before any stage."""
    from headcut.pipeline.checks import check_models, run_parts
    from headcut_grader.errors import UserError

    recipe, lead = given_recipe(tmp_path, given, items)
    with pytest.raises(UserError) as caught:
        check_models(run_parts(recipe))
    assert str(caught.value).startswith(lead + words), str(caught.value)


@pytest.mark.parametrize("items, words", [
    (["prune.flops=null", "prune.keep_ratio=1"], "--set prune.keep_ratio=1 keeps every head"),
    (["prune.flops=null", "prune.keep_ratio=0.999"], "--set prune.keep_ratio=0.999 keeps round(0.999 x 72) = 72 heads, "
                                                     "every head"),
    (["prune.flops=1"], "--set prune.flops=1 keeps every head and FFN neuron"),
])
def test_a_pruned_student_of_a_prune_that_keeps_every_head_stops_the_run_before_any_stage(tmp_path, monkeypatch, items,
                                                                                           words):
    """Was: distilled the prune stage's uncut model into a copy of the teacher; the distill stage now refuses a
    student of the teacher's shape, and the run says so before the teacher trains. Was also: a keep_ratio under 1 that
    rounds to every head (0.999 of MiniLM's 72), or a FLOPs share of 1, refused only by distill, after the teacher,
    scan and prune stages had run."""
    from headcut.pipeline import run as run_module

    def no_stage(*args, **kwargs):
        raise AssertionError("the checks let the run start its stages")

    monkeypatch.setattr(run_module, "_run", no_stage)
    args = ["run", "quickstart", "--out", str(tmp_path / "out"), "--set", "distill.p.recipe=distill/minilm_pruned_cpu"]
    result = CliRunner().invoke(app, [*args, *(word for item in items for word in ("--set", item))])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"error: {words}, so [distill.p]'s pruned student would have the teacher's shape, "
                                    "no smaller than its teacher; lower prune."), result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("items", [["prune.flops=null", "prune.keep_ratio=0.99"], ["prune.flops=0.999"],
                                   ["prune.flops=null", "prune.keep_ratio=1", "distill.p.student=bottom-k"]])
def test_a_prune_that_cuts_a_unit_or_no_pruned_student_passes_the_checks(items):
    """round(0.99 x 72) = 71 heads, and 0.999 of the FLOPs, each cut something; a prune that keeps every head is
    refused only where a pruned student trains its model."""
    from headcut.pipeline.checks import check_prune_budget, run_parts

    check_prune_budget(run_parts(load_pipeline("quickstart", overrides=["distill.p.recipe=distill/minilm_pruned_cpu",
                                                                        *items])))


def test_the_checks_before_any_stage_read_each_sub_recipe_once(tmp_path, monkeypatch):
    """Was: the checks rebuilt every sub-recipe about a dozen times (12 for quickstart with a pruned student), each
    build of the teacher's finetune recipe outlining its base model again; now once each, passed down."""
    from collections import Counter

    from headcut import models
    from headcut.pipeline import checks, recipe as pipeline_recipe

    built, outlined = Counter(), Counter()
    read, outline = pipeline_recipe.read_sub_recipe, models._outlined  # outline and outline_if_present both

    def counted_read(cls, name, *args, **kwargs):
        built[name] += 1
        return read(cls, name, *args, **kwargs)

    def counted_outline(path, **kwargs):
        outlined[str(path)] += 1
        return outline(path, **kwargs)

    monkeypatch.setattr(pipeline_recipe, "read_sub_recipe", counted_read)
    monkeypatch.setattr(models, "_outlined", counted_outline)
    recipe = load_pipeline("quickstart", overrides=["distill.p.recipe=distill/minilm_pruned_cpu"])
    checks.check_run(recipe, tmp_path / "out", overwrite=False)
    assert built == {"finetune/minilm_synthetic_cpu": 1, "distill/minilm_synthetic_cpu": 1,
                     "distill/minilm_pruned_cpu": 1}
    # the finetune recipe's own check of its base model, and the checks' outline of it as the run's teacher
    assert list(outlined.values()) == [2] and not (tmp_path / "out").exists()  # minilm-l6's folder, twice


def test_a_run_reads_each_sub_recipe_once_from_its_recipe_to_its_first_stage(tmp_path, monkeypatch):
    """Was: `headcut run` built every sub-recipe 4 times before its first stage (reading the recipe, the CLI's plan
    to size its lines, the checks, the run's plan); now the recipe carries what it was read with, down to the
    stages."""
    from collections import Counter

    from headcut.pipeline import recipe as pipeline_recipe, stages

    built, read = Counter(), pipeline_recipe.read_sub_recipe

    def counted_read(cls, name, *args, **kwargs):
        built[name] += 1
        return read(cls, name, *args, **kwargs)

    def stop(ctx):
        raise UserError("stopped at the teacher stage")

    monkeypatch.setattr(pipeline_recipe, "read_sub_recipe", counted_read)
    monkeypatch.setattr(stages, "teacher", stop)
    result = CliRunner().invoke(app, ["run", "quickstart", "--out", str(tmp_path / "out"),
                                      "--set", "distill.p.recipe=distill/minilm_pruned_cpu"])
    assert result.exit_code == 2 and "stopped at the teacher stage" in result.stderr, result.output
    assert built == {"finetune/minilm_synthetic_cpu": 1, "distill/minilm_synthetic_cpu": 1,
                     "distill/minilm_pruned_cpu": 1}


@pytest.mark.parametrize("teacher, words", [("/nonexistent", ": no such folder"), ("pruned", " is already pruned")])
def test_a_teacher_path_a_stage_would_refuse_stops_the_run_before_any_stage(straight, tmp_path, teacher, words):
    if teacher == "pruned":
        teacher = str(shutil.copytree(straight[0].out / "prune" / "model", tmp_path / "pruned"))
    args = ["run", "quickstart", "--out", str(tmp_path / "out"), "--set", "teacher.recipe=null",
            "--set", f"teacher.path={teacher}"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"error: --set teacher.path={teacher}{words}") and "--model" not in result.stderr
    assert not (tmp_path / "out").exists()


def test_an_existing_teacher_without_pairs_to_check_exports_on_is_refused_before_any_stage(straight, tmp_path):
    """Was: a TypeError traceback in the export stage, after the teacher stage."""
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"data: {{test: 'synthetic:2', test_rows: 60}}\n"
                      f"teacher: {{path: {straight[0].out / 'teacher' / 'model'}}}\n")
    result = CliRunner().invoke(app, ["run", str(recipe), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert "[export] checks each grader on pairs apart from the report's data.test" in result.stderr
    assert "--set data.train=FILE" in result.stderr and not (tmp_path / "out").exists()

def recipe_refused(tmp_path, text: str, words: str) -> None:
    """`headcut run` on a recipe file holding `text`: exit 2, `words` in its one sentence, no run folder."""
    path = tmp_path / "r.yaml"
    path.write_text(text)
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and words in " ".join(result.stderr.split()), result.output
    assert not (tmp_path / "out").exists()



@pytest.mark.parametrize("students, words", [
    ('{"a.b": {recipe: distill/minilm_synthetic_cpu}}', "student name 'a.b' must be 1-64 letters, digits"),
    ('{Ab: {recipe: distill/minilm_synthetic_cpu}, ab: {recipe: distill/minilm_synthetic_cpu}}',
     "students 'Ab' and 'ab' would share one folder"),
    # was: named '10' and '1.5', the names as written lost; a quoted '010' is the name 010
    ('{010: {recipe: distill/minilm_synthetic_cpu}}', "student name 10 is a number to YAML; quote the name as written"),
    ('{1.50: {recipe: distill/minilm_synthetic_cpu}}', "student name 1.5 is a number to YAML; quote the name"),
    ('{s: {recipe: null}}', "[distill] s.recipe is empty"),  # was: "recipe 'None' is neither a YAML file ..."
    ('{s: {recipe: [a]}}', "[distill] s.recipe is ['a']"),
    # was: named 'None' and 'True' (their folders distill.None, export.True)
    ('{null: {recipe: distill/minilm_synthetic_cpu}}', "student name null is not text; write the name, quoted"),
    ('{true: {recipe: distill/minilm_synthetic_cpu}}', "student name true is not text; write the name, quoted"),
])
def test_student_names_that_would_share_a_folder_are_refused(tmp_path, students, words):
    recipe_refused(tmp_path, f"data: {{train: synthetic, test: 'synthetic:2'}}\ndistill: {students}\n", words)


@pytest.mark.parametrize("section, words", [
    ("data: {train: 5, test: 'synthetic:2'}", "[data], line 1: key 'train' is the number 5; quote it as written to "
     'give text (e.g. "5", not 5)'),
    ("data: {train: synthetic, test: 1.50}", "key 'test' is the number 1.5; quote it as written"),
    ("data: {train: synthetic, test: 'synthetic:2', label_col: 3}", "key 'label_col' is the number 3; quote it"),
    ("data: {train: synthetic, test: 'synthetic:2'}\nteacher: {recipe: finetune/minilm_synthetic_cpu, model: 7}",
     "key 'model' is the number 7; quote it"),
])
def test_a_file_or_name_written_as_a_yaml_number_is_refused_saying_to_quote_it(tmp_path, section, words):
    """Was: turned into text by str(): train: 5 read the file "5", and test: 1.50 the file "1.5", not "1.50"."""
    recipe_refused(tmp_path, section + "\n", words)


def test_a_scan_experiment_number_is_still_its_text():
    """experiments: 3 names experiment 3 as "3" does (a number is harmless there: its digits are the text)."""
    from headcut.pipeline.recipe import from_mapping

    recipe = from_mapping({"data": {"train": "synthetic", "test": "synthetic:2"}, "scan": {"experiments": 3},
                           "teacher": {"recipe": "finetune/minilm_synthetic_cpu"}})
    assert recipe.scan.experiments == "3"


@pytest.mark.parametrize("teacher, words", [
    ("{path: [a, b]}", '[teacher] path is ["a", "b"], not text; name a grader folder'),
    ("{path: {dir: a}}", '[teacher] path is {"dir": "a"}, not text'),
    ("{recipe: true}", "[teacher] recipe is true, not text; name a finetune recipe"),
    ("{recipe: ''}", '[teacher] recipe is "", not text'),
])
def test_a_teacher_recipe_or_path_that_is_not_text_is_refused_naming_the_key(tmp_path, teacher, words):
    """Was: turned into text by str(): path [a, b] was the folder "['a', 'b']", recipe true the recipe 'True'."""
    recipe_refused(tmp_path, f"data: {{train: synthetic, test: 'synthetic:2'}}\nteacher: {teacher}\n", words)


@pytest.mark.parametrize("items, words", [
    (["teacher.recipe=010"], "--set teacher.recipe=010: [teacher] recipe is 10, not text"),
    (["teacher.recipe=null"], "--set teacher.recipe=null: [teacher] names no teacher"),
    (["teacher.path=/x"], "[teacher] gives both recipe finetune/minilm_synthetic_cpu and path /x (from --set "
                          "teacher.path=/x); keep one"),
    (["teacher.recipe=null", "teacher.path=/x", "teacher.epochs=1"],
     "--set teacher.path=/x --set teacher.epochs=1: [teacher] path /x is used as it is; drop epochs, or train a "
     "teacher with it instead (--set teacher.recipe=NAME --set teacher.path=null)."),
    (["distill.bottom3.recipe=null"], "--set distill.bottom3.recipe=null: [distill] bottom3.recipe is empty"),
])
def test_a_teacher_or_student_section_refused_names_the_set_that_gave_it(items, words):
    """Was: '[teacher] recipe is 10, not text', '[teacher] gives both recipe (...) and path (/x)', as if the run
    recipe's file held what a --set gave; a path with finetune keys ended '... or use recipe:.'. Was also led by the
    run recipe's file where only --set values made the problem."""
    from headcut_grader.errors import UserError

    with pytest.raises(UserError) as caught:
        load_pipeline("quickstart", overrides=items)
    assert words in str(caught.value), str(caught.value)
    # a problem of --set values alone is led by them, not by the run recipe's file (which holds the recipe of /x's)
    assert str(caught.value).startswith("--set ") == (items != ["teacher.path=/x"]), str(caught.value)


@pytest.mark.parametrize("in_file", [True, False])
def test_sub_recipe_problems_are_led_by_where_each_value_came_from(tmp_path, in_file):
    """Was: the teacher's and the students' problems were joined into one sentence before the run recipe judged
    its lead by that sentence's text, so a --set teacher problem first hid a student problem the run recipe's file
    holds ('--set teacher.epochs=0: ...; [distill.bottom3] ...: key 'epochs' is 0', no file named)."""
    from headcut_grader.errors import UserError

    run = tmp_path / "run.yaml"
    student = "\n    epochs: 0" if in_file else ""
    run.write_text((ROOT / "headcut" / "recipes" / "run" / "quickstart.yaml").read_text().replace(
        "recipe: distill/minilm_synthetic_cpu", "recipe: distill/minilm_synthetic_cpu" + student))
    overrides = ["teacher.epochs=0"] + ([] if in_file else ["distill.bottom3.epochs=0"])
    with pytest.raises(UserError) as caught:
        load_pipeline(run, overrides=overrides)
    said = str(caught.value)
    assert "--set teacher.epochs=0: key 'epochs' is 0" in said and "distill.bottom3" in said, said
    assert said.startswith(f"{run}: ") == in_file, said  # --set values alone: led by them, not the file


@pytest.mark.parametrize("in_run, in_student, words", [
    # was: f"{run}: [distill.bottom3] (student.yaml): key 'epochs' is 0", the student's recipe file for the run's value
    # and each names the line its key stands on in that file
    ("\n    epochs: 0", "", ": [distill.bottom3], line 26: key 'epochs' is 0"),
    ("", "epochs", ": [distill.bottom3] (student.yaml, line 15): key 'epochs' is 0"),
    ("\n    epochs: 0", "keep_layers", ": [distill.bottom3]: key 'keep_layers' is 0, which is out of range; it must "
                                      "be in [1, 256] (from student.yaml, line 5); on line 26, key 'epochs' is 0"),
])
def test_a_sub_recipe_problem_names_the_file_that_holds_the_value(tmp_path, in_run, in_student, words):
    """A student's key the run recipe's file sets is that file's, led by it alone; one its own distill recipe sets
    is that recipe's, named beside the section; each named apart where the two files share a sentence."""
    from headcut_grader.errors import UserError

    student = tmp_path / "student.yaml"
    student.write_text((ROOT / "headcut" / "recipes" / "distill" / "minilm_synthetic_cpu.yaml").read_text().replace(
        f"\n{in_student}: 3", f"\n{in_student}: 0"))
    run = tmp_path / "run.yaml"
    run.write_text((ROOT / "headcut" / "recipes" / "run" / "quickstart.yaml").read_text().replace(
        "recipe: distill/minilm_synthetic_cpu", f"recipe: {student}{in_run}"))
    with pytest.raises(UserError) as caught:
        load_pipeline(run)
    assert str(caught.value).startswith(f"{run}{words}"), str(caught.value)


@pytest.mark.parametrize("item, words", [
    ("distill.Teacher.recipe=distill/minilm_synthetic_cpu", "student name 'Teacher' is the run's teacher grader's"),
    ("distill.bad!.recipe=distill/minilm_synthetic_cpu", "student name 'bad!' must be 1-64 letters"),
    ("distill.Bottom3.recipe=distill/minilm_synthetic_cpu", "students 'bottom3' and 'Bottom3' would share one"),
    ("distill.s2=5", "student 's2' must be a mapping"),
])
def test_a_student_a_set_alone_gave_is_refused_led_by_that_set(item, words):
    """Was: 'quickstart.yaml: student name ...' (and the same for a student that is not a mapping, or a --set recipe
    name no recipe has), led by the run recipe's file, which holds no such student; now by the --set."""
    from headcut.recipes import SetError

    with pytest.raises(SetError) as caught:
        load_pipeline("quickstart", overrides=[item])
    assert str(caught.value).startswith(f"--set {item}: {words}"), str(caught.value)


@pytest.mark.parametrize("item", ["teacher.recipe=nope", "distill.s2.recipe=nope", "teacher.recipe=FOLDER/"])
def test_a_run_s_recipe_key_is_named_once_as_given(tmp_path, item):
    """Was: '--set teacher.recipe=x.yaml/: recipe=x.yaml/ ends in /, ... but recipe is a file to read' and '--set
    teacher.recipe=nope: recipe 'nope' is neither ...', the key said twice, once as 'recipe', a key the run has not;
    in a run file 'recipe=nope', without its section. Now the key once, as given: its --set, or section.recipe."""
    from headcut.recipes import SetError

    folder = tmp_path / "x.yaml"
    folder.mkdir()
    item = item.replace("FOLDER", str(folder))
    key, value = item.split("=")
    said = (f"names the folder {folder}, but --set {key} is a file to read; name a recipe file inside that folder."
            if value.endswith("/") else "is neither a YAML file nor a built-in name (")
    with pytest.raises(SetError) as caught:
        load_pipeline("quickstart", overrides=[item])
    assert str(caught.value).startswith(f"--set {item} {said}"), str(caught.value)
    assert str(caught.value).count("recipe=") == 1 and "recipe '" not in str(caught.value), str(caught.value)
    run = tmp_path / "run.yaml"
    run.write_text((ROOT / "headcut" / "recipes" / "run" / "quickstart.yaml").read_text().replace(
        "recipe: finetune/minilm_synthetic_cpu", f"recipe: {value}"))
    with pytest.raises(UserError) as caught:
        load_pipeline(run)
    assert f"teacher.recipe={value} {said.replace('--set ', '')}" in str(caught.value), str(caught.value)
    assert "--set" not in str(caught.value).split("teacher.recipe=")[1], str(caught.value)


def test_a_recipe_is_named_as_its_caller_gave_it():
    """find_recipe's refusals began 'recipe ...' whoever named it; now by find_recipe's, load_recipe's or
    load_pipeline's own argument from Python, a command's RECIPE by its value alone (as setting() says one)."""
    from headcut.finetune import FinetuneRecipe
    from headcut.recipes import find_recipe, load_recipe

    for call, name in [(lambda: find_recipe("nope"), "find_recipe name_or_path"),
                       (lambda: load_recipe(FinetuneRecipe, "nope"), "load_recipe name_or_path"),
                       (lambda: load_pipeline("nope"), "load_pipeline name_or_path")]:
        with pytest.raises(UserError, match=f"^{name}=nope is neither a YAML file nor a built-in name \\("):
            call()
    result = CliRunner().invoke(app, ["run", "nope", "--out", "o"])
    assert result.exit_code == 2 and "error: nope is neither a YAML file nor a built-in name (run/" in result.output, \
        result.output


@pytest.mark.parametrize("text, words", [("kd_weight: [1\n", ", line 2, column 1: invalid YAML"),
                                         ("- 1\n", ", line 1: a recipe is a mapping of keys to values"),
                                         ("# nothing\n", ": no keys (the file is empty")])
@pytest.mark.parametrize("key", ["distill.s2.recipe", "teacher.recipe"])
def test_a_recipe_file_a_set_alone_named_that_does_not_read_is_refused_led_by_that_set(tmp_path, text, words, key):
    """Was: 'quickstart.yaml: BAD.yaml, line 2, ...: invalid YAML', led by the run recipe's file, which does not name
    BAD.yaml; now by the --set that did."""
    from headcut.recipes import SetError

    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(SetError) as caught:
        load_pipeline("quickstart", overrides=[f"{key}={bad}"])
    assert str(caught.value).startswith(f"--set {key}={bad}: {bad}{words}"), str(caught.value)


ZERO_LOSS = "every loss weight is 0; set kd_weight or ce_weight above 0."


@pytest.mark.parametrize("in_run, by_set, lead", [
    # was: "quickstart.yaml: [distill.bottom3] (minilm_synthetic_cpu.yaml) with --set ...: every loss weight is 0"
    ("", ["kd_weight=0", "ce_weight=0"],
     "--set distill.bottom3.kd_weight=0 --set distill.bottom3.ce_weight=0: "),
    # was: "run.yaml: [distill.bottom3] (minilm_synthetic_cpu.yaml): ...", a file that holds neither key
    # and on the lines the run's file holds them on (was: no line)
    ("\n    kd_weight: 0\n    ce_weight: 0", [], "{run}: [distill.bottom3], lines {kd} and {ce}: "),
    ("\n    kd_weight: 0", ["ce_weight=0"],
     "{run}: [distill.bottom3], line {kd} with --set distill.bottom3.ce_weight=0: "),
    # the distill recipe's own ce_weight 0.5 is not what it refuses: its file is named, as before
    ("", ["kd_weight=0"], None),
])
def test_a_students_loss_weights_refused_together_are_led_by_where_they_came_from(tmp_path, in_run, by_set, lead):
    """Was: a student's keys refused together (every loss weight 0) were placed in its distill recipe's file
    whether the run recipe's [distill.NAME] or --set gave them; now led by those --sets, or by the run's section."""
    from headcut_grader.errors import UserError

    run = tmp_path / "run.yaml"
    run.write_text((ROOT / "headcut" / "recipes" / "run" / "quickstart.yaml").read_text().replace(
        "recipe: distill/minilm_synthetic_cpu", f"recipe: distill/minilm_synthetic_cpu{in_run}"))
    lines = run.read_text().splitlines()
    kd, ce = (next((i + 1 for i, line in enumerate(lines) if line == f"    {key}: 0"), 0) for key in ("kd_weight",
                                                                                                   "ce_weight"))
    overrides = [f"distill.bottom3.{item}" for item in by_set]
    if lead is None:
        load_pipeline(run, overrides=overrides)  # kd_weight 0 alone: ce_weight 0.5 still teaches
        return
    with pytest.raises(UserError) as caught:
        load_pipeline(run, overrides=overrides)
    assert str(caught.value) == lead.format(run=run, kd=kd, ce=ce) + ZERO_LOSS


@pytest.mark.parametrize("items, words", [
    (["distill.bottom3.layer_map=[0,1,2]"], "key 'layer_map' matches layers for the hidden-state"),
    (["distill.bottom3.student_layers=2"], "key 'student_layers' applies to student=config only"),
    (["distill.bottom3.mse_weight=2"], "key 'mse_weight' applies to task=score only"),
    (["teacher.mse_weight=2"], "key 'mse_weight' applies to task=score only"),
    # a run's tune_fields is refused whole (a run never searches):
    # test_a_students_tune_fields_a_run_never_searches_is_refused_not_ignored
    (["distill.bottom3.grades=[1]"], "key 'grades' is [1]"),
    (["distill.bottom3.unlabeled_rows=5"], "key 'unlabeled_rows' is set but unlabeled_data is not"),
    (["distill.bottom3.unlabeled_data=synthetic"], "key 'unlabeled_data' takes a file of pairs without grades"),
    # a refusal of a section's key and a [data] key is led by both --sets; each named as the run names it
    (["distill.bottom3.dev_fraction=0.3", "data.dev=synthetic:5"],
     "key 'distill.bottom3.dev_fraction' (0.3) holds out a share of data.train's queries as dev pairs only when "
     "data.dev is unset, and data.dev is synthetic:5; remove distill.bottom3.dev_fraction, or remove data.dev to hold "
     "out that split."),
    (["teacher.dev_data=synthetic", "data.train=synthetic"],
     "teacher.dev_data synthetic holds the pairs of data.train, so checkpoints would be chosen and dev metrics "
     "reported on pairs it trains on; set teacher.dev_data to other pairs in the run file or by --set (synthetic:1 for "
     "another synthetic draw), or remove it"),
    (["distill.bottom3.layer_map=[0]", "distill.bottom3.student_layers=2", "distill.bottom3.student=config"],
     "layer_map=[0] has 1 entries for 2 student layers"),
])
def test_a_sub_recipe_key_a_set_alone_gave_refused_by_its_check_is_led_by_that_set(items, words):
    """Was: 'quickstart.yaml: [distill.bottom3] (minilm_synthetic_cpu.yaml) with --set ...: key ...', led by the
    run recipe's file and the student's distill recipe, neither of which holds the key its check refuses; now a
    SetError led by the --set values that gave what it refuses (UserError.about)."""
    from headcut.recipes import SetError

    with pytest.raises(SetError) as caught:
        load_pipeline("quickstart", overrides=items)
    refused = [item for item in items if not item.startswith("distill.bottom3.student=")]
    assert str(caught.value).startswith(" ".join(f"--set {item}" for item in refused) + f": {words}"), \
        str(caught.value)


def test_a_sub_recipe_key_the_run_section_gave_refused_by_its_check_is_led_by_that_section(tmp_path):
    """Was: 'run.yaml: [distill.bottom3] (minilm_synthetic_cpu.yaml): key 'layer_map' ...', a file that does not
    hold it; now led by the run recipe's section that gave it, on its line there."""
    from headcut_grader.errors import UserError

    run = tmp_path / "run.yaml"
    run.write_text((ROOT / "headcut" / "recipes" / "run" / "quickstart.yaml").read_text().replace(
        "recipe: distill/minilm_synthetic_cpu", "recipe: distill/minilm_synthetic_cpu\n    layer_map: [0, 1, 2]"))
    line = run.read_text().splitlines().index("    layer_map: [0, 1, 2]") + 1
    with pytest.raises(UserError) as caught:
        load_pipeline(run)
    assert str(caught.value).startswith(f"{run}: [distill.bottom3], line {line}: key 'layer_map' matches layers"), \
        str(caught.value)


DEV_IS_TRAIN = ("data.dev {dev} holds the pairs of data.train, so checkpoints would be chosen and dev metrics reported "
                "on pairs it trains on; set data.dev to other pairs in the run file or by --set (synthetic:1 for "
                "another synthetic draw), or remove it to hold out dev_fraction of data.train by query.")


@pytest.mark.parametrize("given", ["--set", "run recipe"])
@pytest.mark.parametrize("items", [["data.dev=synthetic"], ["data.train=synthetic:3", "data.dev=synthetic:3"]])
def test_a_data_key_a_sub_recipe_refuses_is_led_by_where_the_run_got_it(tmp_path, given, items):
    """Was: 'quickstart.yaml: [teacher] (minilm_synthetic_cpu.yaml): dev_data synthetic holds ...; [distill.bottom3]
    (minilm_synthetic_cpu.yaml): ...', led by the teacher's and the student's sections and recipe files, none of
    which holds data.dev, once per sub-recipe; now once, led by the --set that gave data.dev (a SetError), or by
    the run recipe's file and its [data] section. Was: its sentence spoke of the sub-recipe's dev_data and
    train_data, keys the run has not; now of the run's data.dev and data.train, and where to change them. Was: led
    by the --set of data.dev alone, though the run recipe's file gave data.train; now by every place that gave
    them, [data] with that --set (a SetError only where --sets gave both)."""
    from headcut.recipes import SetError

    with pytest.raises(UserError) as caught:
        given_recipe(tmp_path, given, items)
    dev = items[-1].partition("=")[2]
    by_sets = given == "--set" and len(items) == 2
    source = ROOT / "headcut" / "recipes" / "run" / "quickstart.yaml" if given == "--set" else tmp_path / "run.yaml"
    lead = (f"--set {items[1]} --set {items[0]}: " if by_sets else
            f"{source}: [data]{f' with --set {items[0]}' if given == '--set' else ''}: ")
    assert str(caught.value) == lead + DEV_IS_TRAIN.format(dev=dev)
    assert isinstance(caught.value, SetError) == by_sets


def test_a_sub_recipe_refusal_names_every_data_key_the_run_gave_as_the_run_names_it(tmp_path):
    """Every key the run's [data] gives a sub-recipe (DATA_INTO_SUBS) is named in a refusal (training.worded) as the run
    names it (data.train for train_data, data.preset for preset), with where to change it. Was: a key the section
    sets over [data] was named by its bare sub-recipe name (preset, train_data), which the run has not, and the --set
    that gave it did not lead; now named as the run names it (teacher.preset) and its --set leads too; a refusal
    said alike by two sub-recipes is said once, and one worded otherwise (the section's train_data) under its own
    lead."""
    from headcut.pipeline.recipe import DATA_INTO_SUBS, _sub_problem
    from headcut.training import worded

    train, dev = tmp_path / "train.tsv", tmp_path / "dev.tsv"
    train.write_text("query\ttitle\tgrade\ndrill\tcordless drill\t3\n")
    dev.write_text("query\ttitle\tgrade\nsaw\thand saw\t2\n")
    sets = [f"data.train={train}", f"data.dev={dev}", "data.preset=homedepot", "data.query_col=query",
            "data.title_col=title", "data.label_col=grade"]
    keys = tuple(DATA_INTO_SUBS)
    refusal = worded("[teacher]", lambda name, how: "; ".join(f"{name(k)}{how(k)}" for k in keys), about=keys)
    said = _sub_problem(refusal, load_pipeline("quickstart", overrides=sets), ("teacher",))
    assert said == " ".join(f"--set {s}" for s in sets) + ": " + "; ".join(  # sets: in DATA_INTO_SUBS' order
        f"data.{DATA_INTO_SUBS[k]} in the run file or by --set" for k in keys)
    section = load_pipeline("quickstart", overrides=[*sets, "teacher.preset=homedepot"])
    said = _sub_problem(refusal, section, ("teacher",))
    assert said.startswith(f"--set data.train={train} --set data.dev={dev} --set teacher.preset=homedepot --set "
                           "data.query_col=query "), said
    assert "; teacher.preset in the run file or by --set; " in said, said
    with pytest.raises(UserError) as caught:
        load_pipeline("quickstart", overrides=["teacher.train_data=synthetic:3", "data.dev=synthetic:3"])
    in_teacher = DEV_IS_TRAIN.replace("of data.train", "of teacher.train_data")
    assert str(caught.value) == "--set data.dev=synthetic:3 --set teacher.train_data=synthetic:3: " + in_teacher.format(
        dev="synthetic:3")
    with pytest.raises(UserError) as caught:
        load_pipeline("quickstart", overrides=["data.train=synthetic:4", "data.dev=synthetic:4",
                                               "teacher.train_data=synthetic:4"])
    teacher = "--set data.dev=synthetic:4 --set teacher.train_data=synthetic:4: " + in_teacher.format(dev="synthetic:4")
    student = "--set data.dev=synthetic:4 --set data.train=synthetic:4: " + DEV_IS_TRAIN.format(dev="synthetic:4")
    assert str(caught.value) == f"{teacher[:-1]}; {student}"


def test_a_teacher_key_the_run_recipe_file_sets_is_not_placed_in_the_finetune_recipe(tmp_path):
    from headcut_grader.errors import UserError

    run = tmp_path / "run.yaml"
    run.write_text((ROOT / "headcut" / "recipes" / "run" / "quickstart.yaml").read_text().replace(
        "recipe: finetune/minilm_synthetic_cpu", "recipe: finetune/minilm_synthetic_cpu\n  epochs: 0"))
    with pytest.raises(UserError) as caught:
        load_pipeline(run)
    assert str(caught.value).startswith(f"{run}: [teacher], line 12: key 'epochs' is 0"), str(caught.value)


@pytest.mark.parametrize("items, words", [
    # was: "quickstart.yaml: [scan]: key 'rows' is 0, ... (from --set scan.rows=0); key 'draws' is 0, ... (from ...)"
    (["scan.rows=0", "scan.draws=0"], "--set scan.rows=0 --set scan.draws=0: key 'rows' is 0, which is out of range; "
                                      "it must be in [1, 1000000]; key 'draws' is 0"),
    (["distill.bottom3.keep_layers=0", "distill.bottom3.epochs=0"],
     "--set distill.bottom3.keep_layers=0 --set distill.bottom3.epochs=0: key 'keep_layers' is 0"),
    (["teacher.epochs=0", "teacher.max_length=1"],
     "--set teacher.max_length=1 --set teacher.epochs=0: key 'max_length'"),
])
def test_several_problems_of_set_values_alone_are_led_by_those_sets(items, words):
    from headcut_grader.errors import UserError

    with pytest.raises(UserError) as caught:
        load_pipeline("quickstart", overrides=items)
    said = str(caught.value)
    assert said.startswith(words) and "quickstart" not in said and "(from --set" not in said, said


def test_an_unknown_section_names_the_valid_ones(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("teacher: {path: runs/teacher}\ndistil: {}\n")
    result = CliRunner().invoke(app, ["run", str(path)])
    assert result.exit_code == 2 and ("unknown section 'distil' (did you mean 'distill'?); the sections are data, "
                                      "teacher") in result.stderr


@pytest.mark.parametrize("item, words", [
    # was: "unknown section 'scn' (sections: ...)", naming neither the --set nor the nearest section; then
    # "quickstart.yaml: unknown section 'scn' (from --set scn.rows=5; ...)", led by the file that does not hold it
    ("scn.rows=5", "--set scn.rows=5: unknown section 'scn' (did you mean 'scan'?); the sections are data"),
    ("scan.metods=[kl]", "--set scan.metods=[kl]: unknown key 'metods' (did you mean 'methods'?)"),
    ("distill.bottom3.epoch=2", "--set distill.bottom3.epoch=2: unknown key 'epoch' (did you mean 'epochs'?)"),
    ("teacher.epoch=2", "--set teacher.epoch=2: unknown key 'epoch' (did you mean 'epochs'?)"),
    # was: no nearest name across case
    ("SCAN.rows=5", "--set SCAN.rows=5: unknown section 'SCAN' (did you mean 'scan'?)"),
    ("teacher.EPOCHS=2", "--set teacher.EPOCHS=2: unknown key 'EPOCHS' (did you mean 'epochs'?)"),
    # was: every distill (finetune) recipe key, and no word of the section's own recipe (path) key
    ("distill.bottom3.recipee=x", "--set distill.bottom3.recipee=x: unknown key 'recipee' (did you mean 'recipe'?); "
                                  "valid keys are: recipe, epochs"),
    ("teacher.pth=x", "--set teacher.pth=x: unknown key 'pth' (did you mean 'path'?); valid keys are: recipe, path, "
                      "epochs"),
    ("scan.rows", "--set 'scan.rows' is not section.key=value; write e.g. --set teacher.epochs=1"),
    ("scan.rows 5", "--set 'scan.rows 5' is not section.key=value"),
    # was: "'methods' is not a section; write e.g. --set teacher.epochs=1", whatever the key
    ("scan.methods.0=kl", "--set 'scan.methods.0=kl': scan.methods is a key holding a list, not a section, and --set "
                          "gives a list whole; write e.g. --set 'scan.methods=[A, B]'."),
    ("scan.rows.x=5", "--set 'scan.rows.x=5': scan.rows is a key, not a section; set its value, e.g. "
                      "--set scan.rows=VALUE."),
    ("distill.bottom3.recipe.x=1", "--set 'distill.bottom3.recipe.x=1': distill.bottom3.recipe is a key, not a "
                                   "section; set its value, e.g. --set distill.bottom3.recipe=VALUE."),
    # each was led by quickstart's file, which holds none of them
    ("distill.bottom3.teacher=/x", "--set distill.bottom3.teacher=/x: [distill.bottom3] key 'teacher' (/x) would "
                                   "replace the run's teacher"),
    ("bench.yardstick=/x", "--set bench.yardstick=/x: [bench] yardstick /x: no such folder"),
    ("data.test=null", "--set data.test=null: [data] test is not set; pass --set data.test=FILE"),
])
def test_a_mistyped_set_or_a_problem_of_one_set_value_is_led_by_that_set(item, words):
    from headcut_grader.errors import UserError

    with pytest.raises(UserError) as caught:
        load_pipeline("quickstart", overrides=[item])
    assert str(caught.value).startswith(words), str(caught.value)  # led by the --set, not quickstart's file


@pytest.mark.parametrize("items, words", [
    (["data.train=null"], "--set data.train=null: [prune] flops (in {run}, line {line}) scores units on data.train, "
                          "which is not set; pass --set data.train=FILE."),
    (["data.train=null", "prune.flops=0.4"], "--set data.train=null --set prune.flops=0.4: [prune] flops scores units "
                                             "on data.train, which is not set; pass --set data.train=FILE."),
    (["prune.flops=0.4"], "{run}: [prune] flops (from --set prune.flops=0.4) scores units on data.train, which is "
                          "not set; pass --set data.train=FILE."),
])
def test_a_flops_prune_without_train_data_is_led_by_where_each_key_came_from(tmp_path, items, words):
    """Was: '.../quickstart.yaml: [prune] flops scores units on data.train, which is not set', led by the run file
    whose data.train is synthetic, where --set data.train=null unset it."""
    from headcut_grader.errors import UserError

    run = tmp_path / "run.yaml"  # quickstart; with data.train null in the file where no --set unsets it
    text = (ROOT / "headcut" / "recipes" / "run" / "quickstart.yaml").read_text()
    run.write_text(text if "data.train=null" in items else text.replace("  train: synthetic ", "  train: null "))
    with pytest.raises(UserError) as caught:
        load_pipeline(run, overrides=items)
    line = text[:text.index("  flops: 0.5")].count("\n") + 1
    assert str(caught.value) == words.format(run=run, line=line), str(caught.value)


def test_an_unknown_section_of_the_file_and_one_of_a_set_are_each_led_by_where_they_came_from(tmp_path):
    from headcut_grader.errors import UserError

    run = tmp_path / "run.yaml"
    run.write_text((ROOT / "headcut" / "recipes" / "run" / "quickstart.yaml").read_text() + "distil: {}\n")
    with pytest.raises(UserError) as caught:
        load_pipeline(run, overrides=["scn.rows=5", "scn.draws=2"])
    said = str(caught.value)
    assert said.startswith(f"{run}: unknown section 'distil' (did you mean 'distill'?); the sections are "), said
    assert "; --set scn.rows=5 --set scn.draws=2: unknown section 'scn' (did you mean 'scan'?); the sections " in said


def test_every_recipe_key_a_message_advises_is_a_key_of_the_run_recipe():
    """Each `section.key` (or `section.key=value`) that a spelling table gives a run's messages to advise names a key
    of that run recipe section, with a value it takes. Was: arch.widen told a run to prune with
    prune.drop_layers=false, which [prune] refused as an unknown key."""
    import dataclasses

    from headcut.data_spec import ROWS
    from headcut.evaluate.scan import SCAN_SPELLED
    from headcut.export.gate import SPELLED as EXPORT_SPELLED
    from headcut.pipeline.recipe import CLASSES, TeacherSection
    from headcut.prune_arguments import SPELLED as PRUNE_SPELLED
    from headcut.recipes import from_dict, parse_override

    sections = {**CLASSES, "teacher": TeacherSection}
    advised = [said for table in (PRUNE_SPELLED, EXPORT_SPELLED, SCAN_SPELLED, ROWS)
               for said in table.get("keys", {}).values() if re.fullmatch(r"\w+\.\w+(=\S+)?", said)]
    assert "prune.drop_layers=false" in advised
    for item in advised:
        key, value = parse_override(item) if "=" in item else (item, None)
        section, name = key.split(".")
        assert name in {f.name for f in dataclasses.fields(sections[section])}, item
        if value is not None:
            from_dict(sections[section], {name: value}, checked=False)


def test_prune_drop_layers_at_its_default_leaves_an_older_run_folder_s_prune_fingerprint_alone():
    """[prune] drop_layers came after run folders were made: left false it stays out of the prune stage's settings
    (an older folder's prune still skips); set true it is in them (a rerun prunes again)."""
    from headcut.pipeline.run import plan

    def prune_settings(*overrides):
        return next(s.settings["prune"] for s in plan(load_pipeline("quickstart", overrides=list(overrides)))
                    if s.name == "prune")

    assert "drop_layers" not in prune_settings() and prune_settings("prune.drop_layers=true")["drop_layers"] is True


def test_a_key_set_twice_is_refused_as_its_help_says():
    """Which of two values was meant is not for headcut to guess (as a YAML file's key given twice is refused)."""
    from headcut_grader.errors import UserError

    with pytest.raises(UserError, match=r"^--set scan.rows=5 and --set scan.rows =6 set the same key; keep one"):
        load_pipeline("quickstart", overrides=["scan.rows=5", "scan.rows =6"])
    for command in ("run", "distill", "finetune"):
        help_text = " ".join(CliRunner().invoke(app, [command, "--help"], terminal_width=200).output.split())
        assert "(repeatable; each key once)" in help_text.replace("│ ", ""), command


def test_the_report_renders_in_a_headless_browser(straight, tmp_path):
    """Every figure loads and nothing reaches the console: the page is checked by Chromium itself."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        pytest.skip("no headless browser installed (apt-get install chromium)")
    result, _ = straight
    page = (result.out / "report.html").read_text()
    assert "src=\"data:image/png;base64," in page and not re.search(r"(src|href)=\"(?!data:)", page)
    assert not _broken_pngs(page)  # a browser paints a truncated PNG's top rows and calls it loaded
    # Hooks installed before the page's own content, results written into the DOM that --dump-dom prints.
    hooks = ("<script>window.__errors=[];addEventListener('error',e=>__errors.push(String(e.message||e.target.src"
             "||e.target.tagName)),true);const ce=console.error;console.error=(...a)=>{__errors.push(a.join(' '));"
             "ce(...a)};</script>")
    probe = ("<script>addEventListener('load',()=>{const i=[...document.images];document.body.setAttribute("
             "'data-probe',JSON.stringify({images:i.length,loaded:i.filter(x=>x.complete&&x.naturalWidth>0).length,"
             "errors:__errors,tables:document.querySelectorAll('table').length}))});</script>")
    probed = tmp_path / "report.html"
    probed.write_text(page.replace("<head>", "<head>" + hooks, 1).replace("</body>", probe + "</body>", 1))
    run = subprocess.run([browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files",
                          "--virtual-time-budget=5000", "--enable-logging=stderr", "--v=0", "--dump-dom",
                          probed.as_uri()], capture_output=True, text=True, timeout=120)
    match = re.search(r"data-probe=\"([^\"]*)\"", run.stdout)
    assert match, run.stderr[-2000:]
    found = json.loads(match.group(1).replace("&quot;", "\""))
    assert found["images"] >= 2 and found["loaded"] == found["images"], found  # the Pareto figure and the scan's
    assert found["errors"] == [] and found["tables"] >= 2, found
    assert "CONSOLE" not in run.stderr, run.stderr[-2000:]  # console messages are logged as INFO:CONSOLE(...)


def _broken_pngs(page: str) -> list[str]:
    """Embedded PNGs that do not decode to the size their header states, with the reason."""
    import base64
    import io

    from PIL import Image

    broken = []
    for number, data in enumerate(re.findall(r"src=\"data:image/png;base64,([^\"]*)\"", page)):
        try:
            with Image.open(io.BytesIO(base64.b64decode(data))) as image:
                image.load()
        except (OSError, ValueError) as e:
            broken.append(f"image {number}: {e}")
    return broken


def test_a_truncated_png_is_caught(tmp_path):
    import base64
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (64, 48), "white").save(buffer, "PNG")
    whole = base64.b64encode(buffer.getvalue()).decode()
    cut = base64.b64encode(buffer.getvalue()[: len(buffer.getvalue()) * 2 // 3]).decode()
    assert _broken_pngs(f'<img src="data:image/png;base64,{whole}">') == []
    assert len(_broken_pngs(f'<img src="data:image/png;base64,{cut}">')) == 1


def test_export_backend_auto_reruns_the_exports_and_benches_both_runtimes(straight, tmp_path):
    pytest.importorskip("openvino")
    result, _ = straight
    out = copy_run(result, tmp_path / "run")
    again = run_pipeline(load_pipeline(result.out.parent / "tiny.yaml", overrides=["export.backend=auto"]), out)
    exports = {s for s in again.states if s.startswith("export.")}
    assert {s for s, state in again.states.items() if state == "done"} == exports | {"bench"}
    rows = json.loads((out / "bench" / "bench.json").read_text())["rows"]
    backends = {(r["name"].replace(" [openvino]", ""), r["backend"]) for r in rows}
    names = {r["name"] for r in rows if r["backend"] == "onnxruntime"}
    assert backends == {(n, b) for n in names for b in ("onnxruntime", "openvino")}  # every grader on both
    assert "[openvino]" in (out / "report.md").read_text()


def test_a_run_s_auto_backend_without_openvino_is_onnx_runtime_alone_and_says_so(tiny_recipe, monkeypatch):
    """export.backend=auto (the default) asks for every runtime installed here: without OpenVINO a run is not refused
    (was: 'an OpenVINO export needs the openvino package' before any stage) but exports ONNX Runtime alone."""
    from headcut.pipeline import checks

    for name in ("openvino", "nncf"):  # as if not installed: importing them raises ImportError
        monkeypatch.setitem(sys.modules, name, None)
    recipe = load_pipeline(tiny_recipe, overrides=["export.backend=auto", "export.precision=auto"])
    checks.check_export(recipe)  # not refused
    from headcut.export.runtimes import ExportBackend, export_backend
    from headcut.pipeline.recipe import key_names

    built = export_backend(recipe.export.backend, recipe.export.precision, names=key_names(recipe, "export"))
    assert built.name == "onnxruntime" and built.alone.startswith("--set export.backend=auto: OpenVINO is not "
                                                                  "installed here")
    assert export_backend("openvino", "auto", names="keys") == ExportBackend("openvino", None)


NNCF_SAID = "NNCF (which judges OpenVINO's INT8 graphs) is not installed here"


@pytest.mark.parametrize("openvino, nncf, said", [
    ("missing", "missing", f"OpenVINO is not installed here and {NNCF_SAID}"),
    ("ok", "missing", NNCF_SAID),  # was: 'OpenVINO is not installed'
    ("broken", "ok", "OpenVINO fails to import here (RuntimeError: no CPU plugin)"),  # was: a traceback
])
def test_an_auto_run_without_a_usable_openvino_says_why_and_what_to_install(tiny_recipe, monkeypatch, openvino, nncf,
                                                                             said):
    """Was: bf16 under auto without OpenVINO told 'use --set export.backend=openvino or auto' (it was auto); NNCF
    missing said 'OpenVINO is not installed'; an OpenVINO whose import raised another error stopped the run."""
    import types

    from headcut.pipeline import checks

    class Broken:
        def find_spec(self, name, path=None, target=None):
            if name == "openvino":
                raise RuntimeError("no CPU plugin\nmore")

    for name, state in (("openvino", openvino), ("nncf", nncf)):
        monkeypatch.delitem(sys.modules, name, raising=False)
        if state != "broken":
            monkeypatch.setitem(sys.modules, name, types.ModuleType(name) if state == "ok" else None)
    monkeypatch.setattr(sys, "meta_path", [Broken(), *sys.meta_path])
    recipe = load_pipeline(tiny_recipe, overrides=["export.backend=auto", "export.precision=auto"])
    checks.check_export(recipe)  # not refused
    from headcut.export.runtimes import ExportBackend, export_backend
    from headcut.pipeline.recipe import key_names

    assert export_backend(recipe.export.backend, "auto", names=key_names(recipe, "export")) == ExportBackend(
        "onnxruntime", f"--set export.backend=auto: {said}, so ONNX Runtime alone (pip install 'headcut[openvino]' for "
                       "both)")
    if openvino == "ok":  # bf16 needs no NNCF (tests/test_export.py: auto at fp32 or bf16 without it)
        return
    with pytest.raises(UserError) as err:
        checks.check_export(load_pipeline(tiny_recipe, overrides=["export.backend=auto", "export.precision=bf16"]))
    said = said.partition(" and NNCF")[0]  # what bf16 needs: OpenVINO alone
    assert str(err.value) == (f"--set export.precision=bf16 needs OpenVINO, and {said}; pip install "
                              "'headcut[openvino]', or choose another precision.")


def test_a_run_decides_its_export_backend_once(tiny_recipe, tmp_path, monkeypatch):
    """Was: headcut run's check_export chose the export (runtimes.export_backend) and dropped the choice, and the
    export stage's build_grader chose again, so a runtime that changed state between them was checked one way and
    built another. The checks' ExportChoice is what the export stage builds."""
    import yaml

    from headcut.export import build

    data = yaml.safe_load(RECIPE.format(base="x"))
    data.update(teacher={"path": str(tiny_recipe.parent / "base")}, scan=None, prune=None, distill={},
                export={"precision": "fp32", "backend": "onnxruntime", "rows": 40, "threads": 1})
    (tmp_path / "one.yaml").write_text(yaml.safe_dump(data))
    decided, decide = [], build.export_backend
    monkeypatch.setattr(build, "export_backend", lambda *a, **k: decided.append(a) or decide(*a, **k))
    result = CliRunner().invoke(app, ["run", str(tmp_path / "one.yaml"), "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    assert decided == [("onnxruntime", "fp32")]
    grader = tmp_path / "run" / "export-teacher" / "grader" / "grader.json"
    assert json.loads(grader.read_text())["backend"] == "onnxruntime"

def test_a_run_s_bench_says_which_graph_it_skipped_and_why(tiny_recipe, tmp_path, monkeypatch):
    """Was: the bench stage kept grader_backends' usable runtimes alone ([0]), so a grader's OpenVINO graph whose
    runtime failed to import by the bench was left out of bench.json, the report and the printed table without a
    word, where headcut bench notes it. Now bench.json's "skipped" holds the note, and report.md, report.html and
    headcut run's table say it. OpenVINO is made to fail its import once the export has built its graph."""
    pytest.importorskip("openvino")
    import html

    import yaml

    from headcut.export import bench as export_bench
    from test_export import FailsToImport

    data = yaml.safe_load(RECIPE.format(base="x"))
    data.update(teacher={"path": str(tiny_recipe.parent / "base")}, scan=None, prune=None, distill={},
                export={"precision": "fp32", "backend": "openvino", "rows": 40, "threads": 1})
    (tmp_path / "one.yaml").write_text(yaml.safe_dump(data))
    usable = export_bench.grader_backends

    def openvino_broken_by_now(folder):
        monkeypatch.delitem(sys.modules, "openvino", raising=False)
        monkeypatch.setattr(sys, "meta_path", [FailsToImport("openvino"), *sys.meta_path])
        return usable(folder)

    monkeypatch.setattr(export_bench, "grader_backends", openvino_broken_by_now)
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["run", str(tmp_path / "one.yaml"), "--out", str(out)])
    assert result.exit_code == 0, result.output
    note = ("teacher's openvino graph was skipped: openvino fails to import here (RuntimeError: no CPU plugin); "
            "reinstall it: pip install --force-reinstall openvino")
    bench = json.loads((out / "bench" / "bench.json").read_text())
    assert [r["backend"] for r in bench["rows"]] == ["onnxruntime"] and bench["skipped"] == [note]
    assert f"Note: {note}." in (out / "report.md").read_text().split("## Every grader", 1)[1].split("![", 1)[0]
    assert html.escape(f"Note: {note}.") in (out / "report.html").read_text()
    assert f"Note: {note}." in result.stdout


def test_an_auto_export_made_without_openvino_reruns_once_it_is_installed(tiny_recipe, monkeypatch):
    """Was: the export stage's fingerprint covered export.backend=auto but not which runtimes auto could choose from,
    so a run made without OpenVINO/NNCF (ONNX Runtime alone) was skipped on rerun after installing them; now the
    fingerprint names them (only under auto: a pinned backend's fingerprint is as it was)."""
    pytest.importorskip("openvino")
    pytest.importorskip("nncf")
    from headcut.pipeline.run import plan

    def settings(overrides: list[str]) -> dict:
        return {s.name: s.settings for s in plan(load_pipeline(tiny_recipe, overrides=overrides))}

    auto, pinned = ["export.backend=auto", "export.precision=auto"], ["export.backend=onnxruntime"]
    installed = settings(auto), settings(pinned)
    for name in ("openvino", "nncf"):  # as if not installed: importing them raises ImportError
        monkeypatch.setitem(sys.modules, name, None)
    without = settings(auto), settings(pinned)
    exports = {n for n in installed[0] if n.startswith("export.")}
    assert exports and all(installed[0][n] != without[0][n] for n in exports)
    assert {n: s for n, s in installed[0].items() if n not in exports} == \
        {n: s for n, s in without[0].items() if n not in exports}
    assert installed[1] == without[1] and all("auto_from" not in installed[1][n] for n in exports)


def test_a_run_s_default_export_ships_each_grader_on_its_measured_runtime_and_reports_the_timings(tiny_recipe,
                                                                                                   tmp_path):
    """Was: every run recipe shipped ONNX Runtime INT8 (export.precision: int8, export.backend: onnxruntime), and the
    report said nothing of the runtime. Now export's auto: each runtime's graph is the fastest that passes the gate
    (fp32 where none does), the grader grades with the runtime timed fastest, and the report shows both with the
    timings. Which one wins is this CPU's business; that the recorded choice is the measured fastest is asserted.
    One grader (the untrained tiny base as the teacher, no scan, prune or student) and the fewest gate pairs: auto
    judges every runtime's candidates, which is what takes the time."""
    pytest.importorskip("openvino")
    pytest.importorskip("nncf")
    import yaml
    from headcut.export.gate import MIN_GATE_PAIRS
    from headcut.pipeline.recipe import ExportSection
    from headcut_grader import Grader
    from headcut_grader.backends import graphs

    assert (ExportSection.backend, ExportSection.precision) == ("auto", "auto")
    data = yaml.safe_load(RECIPE.format(base="x"))
    data.update(teacher={"path": str(tiny_recipe.parent / "base")}, scan=None, prune=None, distill={},
                export={"rows": MIN_GATE_PAIRS, "threads": 1})  # export: the section's defaults, but for these
    (tmp_path / "one.yaml").write_text(yaml.safe_dump(data))
    out = tmp_path / "run"
    again = run_pipeline(load_pipeline(tmp_path / "one.yaml"), out)
    md = (out / "report.md").read_text()
    assert "## The runtime each grader ships on" in md
    stages = [s for s in again.states if s.startswith("export.")]
    assert stages == ["export.teacher"]
    for stage in stages:
        runtime = again.records[stage]["runtime"]
        saved = json.loads((out / again.records[stage]["grader"] / "grader.json").read_text())
        assert runtime["backend"] == min(runtime["speed"]["ms"], key=runtime["speed"]["ms"].get)
        assert runtime["speed"]["ms"] == {k: 1000 * s for k, s in saved["speed"]["seconds"].items()}
        assert runtime["precision"] == graphs(saved)[runtime["backend"]]["precision"]
        assert Grader(out / again.records[stage]["grader"], threads=1).backend.name == runtime["backend"]
        for graph in runtime["graphs"].values():
            trials = [c for c in graph["candidates"] if c["graph"] != "fp32"]
            assert trials, "auto judged no candidate"
            passing = [c for c in trials if c["passes"]]
            assert graph["chosen"] == (min(passing, key=lambda c: c["ms"])["graph"] if passing else "fp32")
        name = stage.partition(".")[2]
        shown = {"onnxruntime": "ONNX Runtime", "openvino": "OpenVINO"}[runtime["backend"]]
        lead = f"| {name} | {shown} | {runtime['precision']} |"
        row = next(line for line in md.splitlines() if line.startswith(lead))
        assert all(f"{ms:.1f} ms" in row for ms in runtime["speed"]["ms"].values())
        assert all(f"{c['graph']} {c['ms']:.1f} ms" in row for g in runtime["graphs"].values() for c in g["candidates"])


def test_a_run_folder_never_holds_what_the_recipe_reads(straight, tmp_path):
    result, _ = straight
    out = copy_run(result, tmp_path / "run")
    teacher = out / "teacher" / "model"
    before = (out / "teacher" / "stage.json").read_text()
    args = ["run", str(result.out.parent / "tiny.yaml"), "--out", str(out), "--set", f"bench.yardstick={teacher}"]
    refused = CliRunner().invoke(app, args)
    assert refused.exit_code == 2 and f"--set bench.yardstick={teacher} is inside {out / 'teacher'}, the teacher " \
        "stage's folder" in refused.stderr, refused.stderr
    assert (out / "teacher" / "stage.json").read_text() == before


DELETES = "which the run deletes whenever that stage reruns; move it out of that folder and pass its new path."


@pytest.mark.parametrize("key, stage, source", [
    ("", "teacher", "run"),  # the run recipe itself
    ("teacher.recipe", "scan", "finetune/minilm_synthetic_cpu"),
    ("distill.small.recipe", "distill-small", "distill/minilm_synthetic_cpu"),
    ("data.test", "export-pruned", "pairs"),
    ("data.test", "bench", "pairs in the file"),
    ("data.train", "distill-old", "pairs"),  # the folder of a stage the recipe no longer has: --overwrite deletes it
])
def test_an_input_inside_a_folder_the_run_deletes_is_refused_before_any_stage(tiny_recipe, tmp_path, key, stage,
                                                                               source):
    """Was: a stage that reruns deletes its folder (and --overwrite the folders of stages the recipe dropped), so a
    recipe, a sub-recipe or a pairs file kept there was destroyed. Now one sentence, before any stage, naming the
    input as given, the folder and the fix; the input and the run folder are left as they were."""
    out = tmp_path / "run"
    folder = out / stage
    folder.mkdir(parents=True)
    (out / "run.json").write_text("{}")  # a run's folder: without the check, the stages would run into it
    if stage == "distill-old":
        (folder / "stage.json").write_text("{}")
    recipe, text = tmp_path / "run.yaml", tiny_recipe.read_text()
    if source == "run":
        inside = recipe = folder / "run.yaml"
    elif source.startswith("pairs"):
        inside = folder / "pairs.tsv"
        inside.write_text("query\ttitle\tgrade\n" + "".join(f"q{i}\tt{i}\t{1 + i % 5}\n" for i in range(20)))
    else:
        inside = folder / "sub.yaml"
        shutil.copy(ROOT / "recipes" / f"{source}.yaml", inside)
    if source == "pairs in the file":
        text = text.replace('test: "synthetic:2"', f"test: {inside}")
    recipe.write_text(text)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    sets = ["--set", f"{key}={inside}"] if key and source != "pairs in the file" else []
    args = ["run", str(recipe), "--out", str(out), *sets] + (["--overwrite"] if stage == "distill-old" else [])
    refused = CliRunner().invoke(app, args)
    said = f"--set {key}={inside}" if sets else f"{recipe}: {key}={inside}" if key else f"the recipe {inside}"
    what = (f"the folder of a stage the recipe no longer has, which --overwrite deletes; move it out of that folder "
            "and pass its new path." if stage == "distill-old" else
            f"the {stage.replace('-', '.')} stage's folder, {DELETES}")
    assert refused.exit_code == 2, refused.output
    assert refused.stderr == f"error: {said} is inside {folder}, {what}\n"
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_an_overwrite_that_is_not_true_or_false_is_refused_before_the_inputs_it_would_endanger(tiny_recipe, tmp_path):
    """overwrite='no' is truthy: the folders --overwrite deletes were counted for it, and an input in one refused as
    endangered by an overwrite never asked for; now the value itself is refused, as check_run_dir refuses it."""
    out = tmp_path / "run"
    (out / "distill-old").mkdir(parents=True)
    (out / "distill-old" / "stage.json").write_text("{}")
    recipe = out / "distill-old" / "run.yaml"
    recipe.write_text(tiny_recipe.read_text())
    with pytest.raises(UserError, match=r"^overwrite is 'no'; pass True or False\.$"):
        run_pipeline(load_pipeline(recipe), out, overwrite="no")
    assert recipe.read_text() == tiny_recipe.read_text()


def test_a_recipe_beside_the_stage_folders_of_its_run_folder_is_not_refused(straight, tmp_path):
    """The run folder itself is never deleted, only its stage folders: runs/demo/recipe.yaml with --out runs/demo
    runs (here: skips every stage) and is left as it was."""
    out = copy_run(straight[0], tmp_path / "run")
    recipe = out / "recipe.yaml"
    shutil.copy(straight[0].out.parent / "tiny.yaml", recipe)
    result = CliRunner().invoke(app, ["run", str(recipe), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert recipe.read_text() == (straight[0].out.parent / "tiny.yaml").read_text()


@pytest.mark.parametrize("name, key", [("report.md", "data.test"), ("report.json", "data.train"),
                                       ("report.html", "data.test"), ("pareto.png", "data.test"),
                                       ("run.json", "data.dev")])
def test_an_input_that_is_a_file_the_run_writes_is_refused_before_any_stage(tiny_recipe, tmp_path, name, key):
    """Was: report.md, report.html, report.json, pareto.png and run.json are written at the top of the run folder,
    so a pairs file saved there under one of those names was written over at the run's end (run.json at its start).
    Now one sentence, before any stage, naming the input as given and the fix; nothing is written."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "run.json").write_text("{}")  # a run's folder
    inside = out / name
    inside.write_text("query\ttitle\tgrade\n" + "".join(f"q{i}\tt{i}\t{1 + i % 5}\n" for i in range(20)))
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    refused = CliRunner().invoke(app, ["run", str(tiny_recipe), "--out", str(out), "--set", f"{key}={inside}"])
    assert refused.exit_code == 2, refused.output
    assert refused.stderr == (f"error: --set {key}={inside} names the run's own {name}, which the run writes over; "
                              f"rename it or move it out of {out}, and pass its new path.\n")
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_a_pairs_file_beside_the_stage_folders_of_its_run_folder_is_not_refused(straight, tmp_path):
    """Was: --set data.test=runs/demo/t.tsv with --out runs/demo was refused as '--out ... would replace the input',
    though the run deletes only its stage folders and writes only its own files there; now the run reads it (its
    bench reruns on the new test pairs) and leaves it as it was."""
    out = copy_run(straight[0], tmp_path / "run")
    pairs = out / "t.tsv"
    text = "query\ttitle\tgrade\n" + "".join(f"q{i % 7}\tt{i}\t{1 + i % 5}\n" for i in range(40))
    pairs.write_text(text)
    tiny = straight[0].out.parent / "tiny.yaml"
    result = CliRunner().invoke(app, ["run", str(tiny), "--out", str(out), "--set", f"data.test={pairs}"])
    assert result.exit_code == 0, result.output
    assert pairs.read_text() == text


def test_overwrite_removes_the_folders_of_stages_the_recipe_no_longer_has(straight, tmp_path):
    """Was: --overwrite with a recipe that dropped the scan, the prune and the student reran the rest and left
    scan/, prune/, distill-small/ and export-small/ (a grader) from the old run beside the new one's."""
    out = copy_run(straight[0], tmp_path / "run")
    teacher = shutil.copytree(out / "teacher" / "model", tmp_path / "teacher")
    (out / "notes").mkdir()  # the user's, not a stage's
    recipe = tmp_path / "r.yaml"
    recipe.write_text("data: {train: synthetic, test: 'synthetic:2', test_rows: 60}\n"
                      f"teacher: {{path: {teacher}}}\n"
                      "export: {precision: fp32, backend: onnxruntime, rows: 40, threads: 1}\n"
                      "bench: {batch: 4, seq_len: 16, repeats: 2, threads: 1, bootstrap: 50}\n")
    result = run_pipeline(load_pipeline(recipe), out, overwrite=True)
    assert list(result.states) == ["teacher", "export.teacher", "bench"]
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["bench", "export-teacher", "notes", "teacher"]


def test_a_second_run_on_the_same_folder_is_refused_and_a_dead_ones_lock_is_not(straight, tmp_path):
    import fcntl

    result, _ = straight
    out = copy_run(result, tmp_path / "run")
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*")}
    with open(out / ".lock", "a") as held:  # another run's: flock belongs to an open file, not to a process
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        refused = CliRunner().invoke(app, ["run", str(result.out.parent / "tiny.yaml"), "--out", str(out)])
    assert refused.exit_code == 2 and refused.stderr.strip() == (
        f"error: another run is using {out}; wait for it to finish or choose another --out."), refused.output
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*")} == before  # nothing written, nothing skipped
    again = run_pipeline(load_pipeline(result.out.parent / "tiny.yaml"), out)  # the lock file stays, unheld
    assert set(again.states.values()) == {"skipped"}


@pytest.mark.parametrize("content, words", [
    (b"query\ttitle\tgrade\ndrill\tcordless\x00 drill\t4\n", "line 2"),
    (b"query\ttitle\tscore\ndrill\tcordless drill\t2.5\n", "--set data.label_col=NAME"),  # no grades: no report
])
def test_a_named_data_file_that_does_not_read_stops_the_run_before_any_stage(tmp_path, content, words):
    bad = tmp_path / "test.tsv"
    bad.write_bytes(content)
    args = ["run", "quickstart", "--out", str(tmp_path / "out"), "--set", f"data.test={bad}"]
    started = time.perf_counter()
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    message = result.stderr.strip()
    assert str(bad) in message and words in message and "\n" not in message and "Traceback" not in message
    assert not (tmp_path / "out").exists() and time.perf_counter() - started < 30  # before the teacher trains


def test_test_pairs_of_one_grade_stop_the_run_before_any_stage(tmp_path):
    """Was: the run trained, exported and benched, then the report's within_floor met Spearman as null (n/a, read
    back from the bench record) and stopped on a TypeError traceback."""
    test = tmp_path / "test.tsv"
    test.write_text("query\ttitle\tgrade\n" + "".join(f"q{i}\ttitle {i}\t3\n" for i in range(4)))
    result = CliRunner().invoke(app, ["run", "quickstart", "--out", str(tmp_path / "out"),
                                      "--set", f"data.test={test}"])
    message = result.stderr.strip()
    assert result.exit_code == 2 and "\n" not in message and "Traceback" not in message, result.output
    assert message.endswith(f"--set data.test={test}: all 4 test pairs have grade 3; Spearman against one grade is "
                            "undefined, so the report could not compare the graders on them; pass test pairs of two "
                            "or more grades with --set data.test=FILE."), message
    assert not (tmp_path / "out").exists()


def _bench_record(spearman, *, scores: bool) -> dict:
    """A bench record of one grader as the report reads it back from JSON, its Spearman `spearman` (None: n/a)."""
    change = {"delta": spearman, "ci": [spearman, spearman]}
    share = {"value": 0.9, "ci": [0.8, 1.0]}
    if scores:
        metrics = {"spearman": spearman, "pearson": spearman, "ndcg@10": spearman, "mrr": 1.0}
        vs = {"spearman": change, "ndcg@10": change, "mrr": {"delta": 0.0, "ci": [0.0, 0.0]},
              "pair_accuracy": {"delta": 0.0, "ci": [0.0, 0.0]}, "pair_order": share, "top1": share}
    else:
        metrics = {"accuracy": 0.5, "macro_f1": 0.4, "spearman": spearman}
        vs = {"accuracy": {"delta": 0.0, "ci": [-0.01, 0.01]}, "macro_f1": {"delta": 0.0, "ci": [-0.01, 0.01]},
              "spearman": change, "agreement": share}
    row = {"name": "pruned", "grader": "export.pruned/grader", "precision": "fp32", "size_mb": 1.0,
           "flops_per_pair": 1e9, "p50_ms": 1.0, "pairs_per_s": 100.0, "speedup": 2.0, "metrics": metrics,
           "vs_teacher": vs}
    return {"task": "score" if scores else "grades", "rows": [row], "teacher": metrics, "seq_len_mean": 12,
            "data": {"rows": 4, "source": "test.tsv"},
            "settings": {"threads": 1, "batch_sizes": [4], "seq_lens": [16], "repeats": 2, "warmup": 1}}


@pytest.mark.parametrize("scores", [False, True])
def test_a_report_whose_spearman_is_n_a_shows_it_and_does_not_fail_the_floor(tmp_path, scores):
    """Was: within_floor compared None (a NaN Spearman read back from the bench record as null) with the floor, and
    the chosen grader's sentence and the Pareto figure formatted it: TypeError after every stage had run."""
    from headcut.pipeline.report import report_blocks

    blocks, summary = report_blocks(tmp_path, load_pipeline("quickstart"),
                                    {"bench": _bench_record(None, scores=scores)})
    assert summary["deploy"]["name"] == "pruned" and (tmp_path / "pareto.png").stat().st_size > 0
    chosen = next(text for kind, text, *_ in blocks if kind == "p" and text.startswith("pruned:"))
    assert "Spearman n/a" in chosen, chosen


def test_a_run_folder_follows_the_umask(straight):
    """Every folder and file of a run (pruned model, exported graders, records) as a plain write makes them."""
    result, _ = straight
    umask = os.umask(0)
    os.umask(umask)
    wrong = {str(p.relative_to(result.out)): oct(p.stat().st_mode & 0o777) for p in result.out.rglob("*")
             if p.stat().st_mode & 0o777 != (0o777 if p.is_dir() else 0o666) & ~umask}
    assert wrong == {}


def test_the_teacher_stage_trains_before_a_pruned_student_exists(tiny_recipe, tmp_path):
    """A recipe that trains its teacher and distils the prune stage's model: the teacher stage must not need
    the pruned model, which only the prune stage after it makes."""
    from headcut.pipeline import stages

    text = tiny_recipe.read_text().replace("distill:\n", "distill:\n  cut: {recipe: distill/minilm_pruned_cpu, "
                                           "train_rows: 200, dev_rows: 40, max_length: 24, epochs: 1}\n")
    (tmp_path / "cut.yaml").write_text(text)
    recipe = load_pipeline(tmp_path / "cut.yaml")
    folder = tmp_path / "run" / "teacher"
    folder.mkdir(parents=True)
    record = stages.teacher(stages.Context(recipe, folder, {}, lambda *event: None, tmp_path / "run"))
    assert record["trained"] and (tmp_path / "run" / record["model"] / "config.json").is_file()


def test_a_bad_data_key_is_the_only_problem_reported(tmp_path):
    """A [data] section that does not read left every sub-recipe without data.train: 'no training pairs' was
    said of each student although --set data.train was given."""
    args = ["run", "homedepot", "--out", str(tmp_path / "out"), "--set", "data.train=train.tsv",
            "--set", "data.test_rows=none"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "key 'test_rows' must be a whole number, not 'none'" in result.stderr
    assert "no training pairs" not in result.stderr


@pytest.mark.parametrize("edited", ["headcut.json", "tokenizer.json", "model.safetensors"])
def test_an_edited_model_folder_reruns_the_stages_that_read_it(tmp_path, edited):
    """Was: only a model folder's weights were hashed, so a teacher whose headcut.json (max_length) or tokenizer
    was edited left every stage 'unchanged', and the run kept graders made from the old settings."""
    from headcut.pipeline.run import Stage, fingerprint

    model = tmp_path / "teacher"
    model.mkdir()
    for name in ("config.json", "headcut.json", "tokenizer.json", "model.safetensors"):
        (model / name).write_text(f"{name} as written")
    other = tmp_path / "not-a-model"
    other.mkdir()
    stage = Stage("teacher", (), {"path": str(model), "cache": str(other)}, None)
    before = fingerprint(stage, {}, {})
    (other / "anything").write_text("a folder that is no model is not read")
    assert fingerprint(stage, {}, {}) == before
    (model / edited).write_text("edited")
    assert fingerprint(stage, {}, {}) != before


@pytest.mark.parametrize("item, words, typed", [
    ("data.label_col=a: b", "key 'label_col' is the mapping {a: 'b'}", """--set 'data.label_col="a: b"'"""),
    ("data.label_col=[grade]", "key 'label_col' is the list ['grade']", """--set 'data.label_col="[grade]"'"""),
    ("distill.bottom3.preset=true", "key 'preset' is the boolean true", """--set 'distill.bottom3.preset="true"'"""),
    ("scan.experiments=null", "key 'experiments' is null", """--set 'scan.experiments="null"'"""),
    ("teacher.recipe=010", "[teacher] recipe is 10, not text", """--set 'teacher.recipe="010"'"""),
    ("distill.bottom3.recipe=[a]", "[distill] bottom3.recipe is ['a'], not text",
     """--set 'distill.bottom3.recipe="[a]"'"""),
    # a list's element: named by its place, and only it quoted
    ("scan.methods=[5]", "key 'methods' item 1 is the number 5", """--set 'scan.methods=["5"]'"""),
    ("scan.methods=[kl, 1.50]", "key 'methods' item 2 is the number 1.5", """--set 'scan.methods=[kl, "1.50"]'"""),
    ("scan.methods=[kl, a: b]", "key 'methods' item 2 is the mapping {a: 'b'}",
     """--set 'scan.methods=[kl, "a: b"]'"""),
    ("scan.methods=kl", "key 'methods' must be a list, not 'kl'", """--set 'scan.methods=[kl]'"""),
])
def test_a_set_value_yaml_reads_as_another_type_than_text_says_what_to_type(item, words, typed):
    """Was: '--set data.label_col=a: b: key 'label_col' must be text, not {'a': 'b'}' (and the same for a list, true
    or null), with no word of how to type text on a shell; a list's element was named as the whole key ('key
    'methods' is the number 5'), and teacher.recipe=010 was read as the recipe '10'. Typed as said, it is text."""
    from headcut.pipeline.recipe import load_pipeline
    from headcut.recipes import parse_override
    from headcut_grader.errors import UserError

    with pytest.raises(UserError) as caught:
        load_pipeline("quickstart", overrides=[item])
    message = str(caught.value)
    assert words in message and f"type {typed})." in message, message
    assert f"--set {item}" in message or words.startswith("[")
    _, value = parse_override(shlex.split(typed)[1])
    assert all(isinstance(v, str) for v in (value if isinstance(value, list) else [value]))


@pytest.mark.parametrize("load, item, typed", [
    ("run", "data.train=5", """--set 'data.train="5"'"""),
    ("run", "data.test=1.50", """--set 'data.test="1.50"'"""),
    ("run", "teacher.model=7", """--set 'teacher.model="7"'"""),
    ("finetune", "train_data=010", """--set 'train_data="010"'"""),
    ("run", "data.train=[x", """--set 'data.train="[x"'"""),
])
def test_a_set_value_to_quote_is_refused_spelling_what_to_type_on_a_shell(load, item, typed):
    """Was: 'quote it as written (e.g. "5", not 5)', but a shell drops the quotes of --set data.train="5", and
    'e.g. --set key='[x'' the single ones: YAML got the same 5 and [x again."""
    from headcut.finetune import FinetuneRecipe
    from headcut.pipeline.recipe import load_pipeline
    from headcut.recipes import load_recipe
    from headcut_grader.errors import UserError

    with pytest.raises(UserError) as caught:
        if load == "run":
            load_pipeline("quickstart", overrides=[item, "teacher.recipe=finetune/minilm_synthetic_cpu"])
        else:
            load_recipe(FinetuneRecipe, "finetune/minilm_synthetic_cpu", overrides=[item])
    assert typed in str(caught.value), str(caught.value)
    assert shlex.split(typed)[1] == item.partition("=")[0] + '="' + item.partition("=")[2] + '"'


@pytest.mark.parametrize("teacher, said", [
    ([], "{run}/teacher/model: no such folder"),  # a model the run made: its path in the run folder
    (["--set", "teacher.path={run}/mine", "--set", "teacher.recipe=null"],
     "--set teacher.path={run}/mine: no such folder"),
])
def test_a_stage_names_the_model_it_loads_by_the_recipe_key_or_its_run_folder_path(tmp_path, teacher, said):
    """Was: a stage loading the teacher (scan, prune, export, bench) or a student's best checkpoint said
    'load_model source=RUN/teacher/model', the library's argument, which neither the recipe nor `headcut run` has;
    now the recipe key that named it as the user gave it (--set teacher.path=...) or, for a model the run made, its
    path alone."""
    from headcut.pipeline import stages
    from headcut.pipeline.bench import bench
    from headcut_grader.errors import UserError

    overrides = [o.format(run=tmp_path) for o in teacher[1::2]]
    recipe = load_pipeline("quickstart", overrides=overrides)
    recorded = str(tmp_path / "mine") if overrides else "teacher/model"
    ctx = stages.Context(recipe, tmp_path / "export-teacher", {"teacher": {"model": recorded}}, lambda *a: None,
                         tmp_path)
    for stage in (stages.scan, stages.prune, stages.export("teacher"), bench):
        with pytest.raises(UserError) as e:
            stage(ctx)
        assert str(e.value).startswith(said.format(run=tmp_path)), e.value


@pytest.mark.parametrize("given", ["--set", "run recipe"])
def test_a_stage_names_the_teacher_path_it_refuses_as_the_user_gave_it(tmp_path, given):
    """Was: the teacher stage and the stages loading it named the teacher 'teacher.path=...' although a --set gave it
    (a key name written out, not given_as's); now '--set teacher.path=...' for a --set."""
    from headcut.pipeline import stages
    from headcut.pipeline.bench import bench
    from headcut_grader.errors import UserError

    missing = str(tmp_path / "no-teacher")
    recipe, lead = given_recipe(tmp_path, given, ["teacher.recipe=null", f"teacher.path={missing}",
                                                  "prune.flops=null", "prune.keep_ratio=0.5"])
    ctx = stages.Context(recipe, tmp_path / "teacher", {"teacher": {"model": missing}}, lambda *a: None, tmp_path)
    key = "--set teacher.path" if given == "--set" else "teacher.path"
    # was: each stage said 'teacher.path=...' for the run recipe's key, without the file that holds it
    said = f"{key}={missing}: no such folder" if given == "--set" else f"{lead}{key}={missing}: no such folder"
    for stage in (stages.teacher, stages.scan, stages.prune, stages.export("teacher"), bench):
        with pytest.raises(UserError) as caught:
            stage(ctx)
        assert str(caught.value).startswith(said), (stage, str(caught.value))


@pytest.mark.parametrize("given", ["--set", "run recipe"])
def test_a_bench_yardstick_the_bench_refuses_is_led_by_the_file_that_holds_it(tiny_recipe, tmp_path, given):
    """Was: 'bench.yardstick=DIR: ...' for the run recipe's key, without the file that holds it."""
    from headcut.pipeline import stages
    from headcut.pipeline.bench import bench
    from headcut_grader.errors import UserError

    teacher, yardstick = str(tiny_recipe.parent / "base"), tmp_path / "yardstick"
    yardstick.mkdir()
    (yardstick / "config.json").write_text((tiny_recipe.parent / "base" / "config.json").read_text())  # no weights
    recipe, lead = given_recipe(tmp_path, given, ["teacher.recipe=null", f"teacher.path={teacher}",
                                                  "data.test_rows=20", f"bench.yardstick={yardstick}"])
    ctx = stages.Context(recipe, tmp_path / "bench", {"teacher": {"model": teacher}}, lambda *a: None, tmp_path)
    with pytest.raises(UserError) as caught:
        bench(ctx)
    said = f"bench.yardstick={yardstick}: "
    assert str(caught.value).startswith(f"--set {said}" if given == "--set" else lead + said), str(caught.value)


@pytest.mark.parametrize("given", ["--set", "run recipe"])
def test_int8_asked_for_by_a_run_is_named_by_its_precision_key_as_the_user_gave_it(tmp_path, given):
    """Was: export.gate spelled a run's int8 as the text 'export.precision=int8', which key_names could not rewrite,
    so 'drop export.precision=int8' although a --set gave it; now the precision key, named as any other."""
    from headcut.export.build import choose_export
    from headcut.export.gate import gate_fix
    from headcut.pipeline.recipe import key_names
    from headcut_grader.errors import UserError

    recipe, lead = given_recipe(tmp_path, given, ["export.precision=int8"])
    names, said = key_names(recipe, "export"), ("--set " if given == "--set" else "") + "export.precision=int8"
    assert gate_fix(names, int8=True).startswith(f"drop {said}, or relax "), gate_fix(names, int8=True)
    with pytest.raises(UserError, match=f"^{re.escape(said)} and "):
        choose_export("onnxruntime", "fp32", int8=True, names=names)


@pytest.mark.parametrize("sets, words", [
    (["prune.drop_layers=true", "prune.iterative=3"], "[prune] drop_layers searches one plan"),
    (["prune.tune=false", "prune.tune_fit=weights"], "[prune] tune_fit chooses what mask tuning fits"),
])
def test_prune_keys_that_contradict_each_other_by_set_alone_are_led_by_those_sets(sets, words):
    """Was: led by the run recipe's file, which holds neither key."""
    with pytest.raises(UserError) as caught:
        load_pipeline("quickstart", overrides=sets)
    said = str(caught.value)
    assert said.startswith(" ".join(f"--set {s}" for s in sets)) or said.startswith(
        " ".join(f"--set {s}" for s in reversed(sets))), said
    assert words in said and "quickstart.yaml" not in said, said


@pytest.mark.parametrize("link, words", [("loop", "a loop of symbolic links"),
                                         ("broken", "a broken symbolic link to ")])
def test_a_pairs_file_of_a_run_that_is_a_link_loop_or_a_broken_link_says_so(tmp_path, link, words):
    """Was: '--set data.test=LINK: no such file', sending the user looking for a file whose link is there."""
    from headcut.pipeline.checks import check_inputs, run_parts

    if link == "loop":
        (tmp_path / "a").symlink_to(tmp_path / "b")
        (tmp_path / "b").symlink_to(tmp_path / "a")
        path = tmp_path / "a"
    else:
        path = tmp_path / "test.tsv"
        path.symlink_to(tmp_path / "gone.tsv")
    recipe = load_pipeline("quickstart", overrides=[f"data.test={path}"])
    with pytest.raises(UserError) as caught:
        check_inputs(run_parts(recipe))
    assert str(caught.value).startswith(f"--set data.test={path}: {words}"), str(caught.value)


def test_a_recipe_changed_in_python_is_checked_as_a_recipe_file_is_before_any_stage(tmp_path, monkeypatch):
    """Was: replace(recipe, prune=replace(recipe.prune, drop_layers=True, iterative=3)) passed run_pipeline's checks
    (check_recipe looks at the sections, not their keys) and failed in the prune stage, after the teacher and scan."""
    from dataclasses import replace

    from headcut.pipeline import stages

    def no_stage(ctx):
        raise AssertionError("a stage ran")

    monkeypatch.setattr(stages, "teacher", no_stage)
    recipe = load_pipeline("quickstart")
    changed = replace(recipe, prune=replace(recipe.prune, drop_layers=True, iterative=3))
    with pytest.raises(UserError, match=r"\[prune\] drop_layers searches one plan"):
        run_pipeline(changed, tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("given", ["--set", "run recipe"])
def test_a_students_grades_other_than_an_existing_teachers_are_refused_before_any_stage(tiny_recipe, tmp_path, given):
    """Was: a student section's grades other than those the run's existing teacher (teacher.path) records were refused
    only by the distill stage, after the stages before it ran. Now check_students refuses them with the other student
    checks, naming the student's key and led by where it was given."""
    from headcut.pipeline.checks import check_students, run_parts

    teacher = str(tiny_recipe.parent / "base")
    recipe, lead = given_recipe(tmp_path, given, ["distill.bottom3.grades=[0,1,2,3,4]", "teacher.recipe=null",
                                                  f"teacher.path={teacher}"])
    with pytest.raises(UserError) as caught:
        check_students(run_parts(recipe))
    assert str(caught.value) == (f"{'' if given == '--set' else lead}key 'distill.bottom3.grades' is [0, 1, 2, 3, 4], "
                                 f"but the teacher {teacher} grades [1, 2, 3, 4, 5]; set grades to the teacher's "
                                 "(--set distill.bottom3.grades=[1,2,3,4,5]), or pass a teacher of these grades.")


def test_a_refusal_a_sub_recipe_makes_as_its_stage_runs_names_the_run_s_keys(tmp_path):
    """Was: a run's teacher given data.dev a copy of data.train saved with a BOM (passing the byte check) was refused
    as its stage read them by 'dev_data F: ... (train_data G) ...; remove dev_data to hold out dev_fraction of
    train_data', and a teacher too short for one optimizer step by '(N in train_data synthetic) ... (--set
    gradient_accumulation=N)', the finetune recipe's keys, which the run has not; now by the run's data.dev,
    data.train and teacher.gradient_accumulation (a WordedError worded again as the stage runs, or as the run is
    read)."""
    from headcut.pipeline.stages import Context, teacher

    train, dev = tmp_path / "train.tsv", tmp_path / "dev.tsv"
    train.write_text("query\ttitle\tgrade\ndrill\tcordless drill\t3\nsaw\thand saw\t2\n")
    dev.write_bytes(b"\xef\xbb\xbf" + train.read_bytes().replace(b"\n", b"\r\n"))
    recipe = load_pipeline("quickstart", overrides=[f"data.train={train}", f"data.dev={dev}",
                                                     "teacher.batch_size=1", "teacher.train_rows=null"])
    ctx = Context(recipe, tmp_path / "run" / "teacher", {}, lambda *a: None, tmp_path / "run")
    with pytest.raises(UserError) as caught:
        teacher(ctx)
    assert str(caught.value) == (
        f"data.dev {dev}: each of its 2 dev pairs is also among the pairs the run trains on (data.train {train}), so "
        "checkpoints would be chosen and dev metrics reported on training pairs; set data.dev to dev pairs kept apart "
        f"from those in the run file or by --set, or remove data.dev to hold out dev_fraction of data.train by query.")
    with pytest.raises(UserError) as caught:
        load_pipeline("quickstart", overrides=["teacher.gradient_accumulation=1000", "teacher.train_rows=null"])
    said = str(caught.value)
    assert (": teacher.gradient_accumulation=1000 batches make one optimizer step, but at most 2000 pairs (2000 in "
            "data.train synthetic) in batches of 32 over teacher.epochs=") in said, said
    assert said.endswith("lower teacher.gradient_accumulation or teacher.batch_size (--set "
                         "teacher.gradient_accumulation=N)."), said


@pytest.mark.parametrize("case", ["split", "dev gold", "train gold"])
def test_a_refusal_of_the_pairs_a_teacher_reads_names_the_run_s_keys(tmp_path, case):
    """Was: a run's teacher whose query split left no dev pairs, whose dev pairs all had one grade, or whose training
    pairs did, was refused by 'train_data F: holding out dev_fraction=... (whole queries, as dev_data is unset) ...
    --set dev_data=FILE', 'dev_data F: ... Spearman (select_metric) ... with --set dev_data=FILE, or set
    select_metric=loss' or 'train_data F: all N training pairs ...', the finetune recipe's keys, which the run has not;
    now by the run's data.train, data.dev, teacher.dev_fraction and teacher.select_metric (finetune.check_split,
    check_dev_gold, check_train_gold word them: WordedError)."""
    from headcut.pipeline.stages import Context, teacher

    one_query, one_grade = tmp_path / "one_query.tsv", tmp_path / "one_grade.tsv"
    one_query.write_text("query\ttitle\tgrade\n" + "".join(f"drill\ttitle {i}\t{1 + i % 5}\n" for i in range(8)))
    one_grade.write_text("query\ttitle\tgrade\n" + "".join(f"q{i % 2}\ttitle {i}\t3\n" for i in range(12)))
    data, said = {
        "split": ([f"data.train={one_query}"], f"data.train {one_query}: holding out teacher.dev_fraction=0.2 of its 1 "
                  "query (whole queries, as teacher.dev_data is unset) leaves no dev pairs; pass dev pairs with --set "
                  "teacher.dev_data=FILE, or train on pairs of two or more queries."),
        "dev gold": ([f"data.dev={one_grade}"], f"data.dev {one_grade}: all 12 dev pairs have grade 3; Spearman "
                     "(teacher.select_metric) against one grade is undefined, so no checkpoint could be chosen on it; "
                     "pass dev pairs of two or more grades with --set data.dev=FILE, or set teacher.select_metric=loss "
                     "in the run file or by --set."),
        "train gold": ([f"data.train={one_grade}", "data.dev=synthetic:1"], f"data.train {one_grade}: all 12 training "
                       "pairs have grade 3, so the grader would learn to give every pair that grade; train on pairs of "
                       "two or more grades."),
    }[case]
    recipe = load_pipeline("quickstart", overrides=[*data, "teacher.batch_size=1", "teacher.train_rows=null"])
    ctx = Context(recipe, tmp_path / "run" / "teacher", {}, lambda *a: None, tmp_path / "run")
    with pytest.raises(UserError) as caught:
        teacher(ctx)
    assert str(caught.value) == said


@pytest.mark.parametrize("backend, precision, lead", [
    ("auto", "auto", "Chosen at export on this CPU, by measurement: each runtime's graph is the fastest of its INT8"),
    ("onnxruntime", "int8", "Pinned by the recipe: every graph is int8, as export.precision=int8 pins it, where it "
                            "passes the gate"),
    ("onnxruntime", "fp32", "Pinned by the recipe: every graph is fp32, as export.precision=fp32 pins it, and a "
                            "grader grades with ONNX Runtime, as export.backend=onnxruntime pins it."),
    ("auto", "fp32", "Chosen at export on this CPU, by measurement where the recipe pins nothing: every graph is fp32"),
])
def test_the_report_says_which_runtime_and_precision_the_recipe_pinned(backend, precision, lead):
    """Was: 'Chosen at export on this CPU, by measurement ...' whatever export.backend and export.precision were,
    though the demo pins onnxruntime and int8 and docs/tasks/run.md's example fp32."""
    from headcut.pipeline.recipe import ExportSection
    from headcut.pipeline.report import _runtime_blocks

    runtime = {"backend": "onnxruntime", "precision": precision, "reason": "the only runtime", "speed": None,
               "graphs": {}}
    blocks = _runtime_blocks({"export.teacher": {"runtime": runtime}},
                             ExportSection(backend=backend, precision=precision))
    said = blocks[1][1]
    assert said.startswith(lead), said
    assert ("by measurement" in said) == (backend == "auto")


def test_a_students_tune_fields_a_run_never_searches_is_refused_not_ignored(tmp_path):
    """Was: taken, and the run trained the student once (a run never searches), the key ignored, exit 0; a distill
    recipe file's own tune_fields (kept for headcut distill --tune) is still taken."""
    from headcut_grader.errors import UserError

    with pytest.raises(UserError) as caught:
        load_pipeline("quickstart", overrides=["distill.bottom3.tune_fields=[temperature]"])
    assert str(caught.value).startswith("--set distill.bottom3.tune_fields=[temperature]: [distill.bottom3] key "
                                        "'tune_fields' says what headcut distill --tune searches, and a run trains "
                                        "each student once, so it would be ignored; drop it"), str(caught.value)
    recipe_refused(tmp_path, "data: {train: synthetic, test: 'synthetic:2'}\nteacher: {path: /x}\ndistill:\n  s:\n"
                   "    recipe: distill/minilm_synthetic_cpu\n    tune_fields: [temperature]\n",
                   "[distill.s] key 'tune_fields' says what headcut distill --tune searches")


def test_an_empty_set_value_of_a_run_is_refused_for_every_key():
    """Was: --set distill.bottom3.dev_rows= (an optional key) read as null silently; a run's --set is read as a
    command's, so an empty one is refused whatever the key."""
    from headcut_grader.errors import UserError

    for item in ("distill.bottom3.dev_rows=", "teacher.epochs=", "scan.data="):
        key = item[:-1]
        with pytest.raises(UserError) as caught:
            load_pipeline("quickstart", overrides=[item])
        assert str(caught.value) == (f"--set {item}: key '{key}' is empty (YAML reads nothing as null); write a value "
                                     f"(--set {key}=VALUE), null where it is meant (--set {key}=null, or ~), or drop "
                                     "that --set."), str(caught.value)
