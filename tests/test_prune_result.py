"""`prune()` / `prune_to_budget()` + `write_artifact()` from Python record exactly what `headcut prune` records:
the library chooses the data, the score provenance and the notes; the command only parses and prints."""
import json

import pytest
import torch
from typer.testing import CliRunner

from headcut.cli.main import app
from headcut_grader.data import read_pairs
from headcut.evaluate.importance import write_scores
from headcut.models import load_model
from headcut.prune import PruneSettings, prune, prune_to_budget, write_artifact
from headcut.prune.report import OPTIMISTIC, optimistic
from tests.test_prune_cli import tiny_grader  # noqa: F401  (fixture)

QUICK = ["--no-timing", "--bootstrap", 50]  # no latency rows: every other figure is deterministic
SETTINGS = PruneSettings(timing=False, bootstrap=50)


def command(*args):
    result = CliRunner().invoke(app, ["prune", *map(str, args), *map(str, QUICK)])
    assert result.exit_code == 0, result.output
    return result


def records(folder):
    return json.loads((folder / "headcut.json").read_text()), (folder / "report.md").read_text()


TOP = {"ablation": [[], [2, 3], [0, 1, 2, 3]], "kl": [[0, 1, 2, 3], [0, 1], []], "fisher": [[0, 1], [0, 1], [0, 1]]}


def score_file(path, loaded, *, fisher: bool = True):
    """Methods whose top heads (TOP, at keep 0.5) differ; ablation first, as `headcut scan` writes them."""
    ablation = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    methods = {"ablation": ablation, "kl": -ablation}
    if fisher:
        methods["fisher"] = torch.tensor([[11, 10, 0, 1], [9, 8, 2, 3], [7, 6, 4, 5]], dtype=torch.float32)
    write_scores(path, methods, model_info={"path": loaded.path, "weights_hash": loaded.weights_hash},
                 data_info={"source": "scan.tsv", "fingerprint": "f"})
    return path


@pytest.mark.parametrize("case", ["data", "recorded dev data", "score file", "score file without fisher",
                                  "score file, kl", "flops"])
def test_python_and_the_command_record_the_same(tmp_path, tiny_grader, case):  # noqa: F811
    grader, dev = tiny_grader
    loaded = load_model(grader)
    scores = score_file(tmp_path / "importance.json", loaded, fisher=case != "score file without fisher")
    flags, call = {
        "data": (["--keep-ratio", 0.5, "--data", dev],
                 lambda: prune(loaded, keep_ratio=0.5, data=read_pairs(dev), settings=SETTINGS)),
        "recorded dev data": (["--keep-ratio", 0.5], lambda: prune(loaded, keep_ratio=0.5, settings=SETTINGS)),
        "score file": (["--keep-ratio", 0.5, "--scores", scores, "--eval-data", dev],
                       lambda: prune(loaded, keep_ratio=0.5, scores=scores, eval_data=read_pairs(dev),
                                     settings=SETTINGS)),
        "score file without fisher": (["--keep-ratio", 0.5, "--scores", scores],
                                      lambda: prune(loaded, keep_ratio=0.5, scores=scores, settings=SETTINGS)),
        "score file, kl": (["--keep-ratio", 0.5, "--scores", scores, "--method", "kl"],
                           lambda: prune(loaded, keep_ratio=0.5, scores=scores, method="kl", settings=SETTINGS)),
        "flops": (["--flops", 0.5, "--calibrate", 40],
                  lambda: prune_to_budget(loaded, flops=0.5, settings=PruneSettings(calibrate_rows=40, timing=False,
                                                                                    bootstrap=50))),
    }[case]
    command("--model", grader, "--out", tmp_path / "cli", *flags)
    write_artifact(call(), tmp_path / "python")
    (cli_meta, cli_report), (py_meta, py_report) = records(tmp_path / "cli"), records(tmp_path / "python")

    # the same record; the reports differ only where the note names the caller's --eval-data, eval_data
    assert py_meta == cli_meta and py_report == cli_report.replace(optimistic("flags"), optimistic())
    recorded = cli_meta["prune"]
    if case.startswith("score file"):
        # --method, else the default method when the file has it, else the file's first; recorded as used
        used = {"score file": "fisher", "score file without fisher": "ablation", "score file, kl": "kl"}[case]
        assert recorded["scores"]["method"] == used and recorded["scores"]["how"].endswith(f"({used})")
        assert recorded["scores"]["file"]["path"] == str(scores)
        assert [sorted(k) for k in recorded["plan"]["keep"]] == TOP[used]
        assert recorded["notes"] == []  # quality on held-out pairs (or none) is not flagged
    else:
        assert recorded["scores"]["data"]["fingerprint"] == read_pairs(dev).sample(512).fingerprint
        # quality on the scoring pairs
        assert recorded["notes"] == [OPTIMISTIC] and optimistic("flags") in cli_report
        assert "pass eval_data for held-out pairs." in py_report


def test_the_report_names_a_setting_as_the_prunes_caller_set_it(tmp_path, tiny_grader):  # noqa: F811
    """Was: the report of prune_to_budget() from Python said '(--calibrate asked for 180; the data holds no more)' and
    noted 'pass --eval-data for held-out pairs', flags a Python caller does not have; now settings.calibrate_rows and
    eval_data (a run's keys: prune.calibrate, and its report's data.test), while `headcut prune` says what it said."""
    from headcut.prune import format_report

    grader, dev = tiny_grader
    asked = len(read_pairs(dev)) + 100
    result = prune_to_budget(load_model(grader), flops=0.5,
                             settings=PruneSettings(calibrate_rows=asked, timing=False, bootstrap=50))
    write_artifact(result, tmp_path / "python")
    report = records(tmp_path / "python")[1]
    assert f"(settings.calibrate_rows asked for {asked}; the data holds no more)" in report
    assert "so the change is optimistic; pass eval_data for held-out pairs." in report
    assert "--calibrate" not in report and "--eval-data" not in report
    run = format_report(result.record(), names="keys")
    assert f"(prune.calibrate asked for {asked}; the data holds no more)" in run
    assert optimistic("keys") == ("These pairs also chose the pruned units, so the change is optimistic; the run's "
                                  "report grades on data.test.")
    printed = command("--model", grader, "--flops", 0.5, "--calibrate", asked, "--out", tmp_path / "cli").output
    for said in (records(tmp_path / "cli")[1], " ".join(printed.split())):
        assert f"(--calibrate asked for {asked}; the data holds no more)" in said
        assert ("These pairs also chose the pruned units, so the change is optimistic; pass --eval-data for held-out "
                "pairs.") in said


def test_settings_refuse_out_of_range_values_with_one_sentence():
    """Named as the Python caller wrote it (was: "PruneSettings: key 'calibrate_rows' is 4", a recipe key's words)."""
    from headcut_grader.errors import UserError

    sentence = r"^PruneSettings\(calibrate_rows=4\): 4 is out of range; it must be in \[5, 100000\]\.$"
    with pytest.raises(UserError, match=sentence):
        PruneSettings(calibrate_rows=4)
    # was: taken, though --calibrate and a run's prune.calibrate stop at 100,000 (the range is declared once now)
    with pytest.raises(UserError, match=r"^PruneSettings\(calibrate_rows=1000000\): 1000000 is out of range"):
        PruneSettings(calibrate_rows=10**6)
    # where the field's type allows None (all pairs), a Python caller's None is no value out of range
    assert PruneSettings(score_rows=None, calibrate_rows=None).score_rows is None


def test_a_prune_s_sample_sizes_are_one_range_for_the_settings_the_flags_and_a_run():
    """PruneSettings' score_rows, calibrate_rows and eval_rows, `headcut prune --score-rows / --calibrate /
    --eval-rows` and a run's prune.score_rows and prune.calibrate read one declaration (prune_arguments); a run's
    score_rows stops at what a synthetic draw makes."""
    import inspect

    from headcut.cli.prune import prune
    from headcut.pipeline.recipe import PruneSection
    from headcut.prune_arguments import argument_range
    from headcut_grader.ranges import declared_range

    flags = inspect.signature(prune).parameters
    for setting, flag, key in (("score_rows", "score_rows", None), ("calibrate_rows", "calibrate", "calibrate"),
                               ("eval_rows", "eval_rows", None)):
        declared = argument_range(setting)
        assert declared_range(PruneSettings, setting) is declared
        assert flags[flag].default.parser.valid is declared
        if key:
            assert declared_range(PruneSection, key) is declared
    assert declared_range(PruneSection, "score_rows").low == argument_range("score_rows").low
