"""Every command explains itself: --help works and carries an example."""
import pytest
from typer.testing import CliRunner

from headcut.cli.main import app

COMMANDS = sorted(c.name or c.callback.__name__ for c in app.registered_commands)


def test_all_commands_are_registered():
    assert {"evaluate", "finetune", "prune", "distill", "export", "grade", "serve", "bench"} <= set(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_help_has_an_example(command):
    result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "Example" in result.output or "example" in result.output


def test_unknown_flag_exits_2():
    result = CliRunner().invoke(app, ["evaluate", "--no-such-flag"])
    assert result.exit_code == 2


@pytest.mark.parametrize("args, said", [
    (["evaluate", "--model", "m"], "error: Missing option '--data' / '-d'; see `headcut evaluate --help`."),
    (["grade", "g", "p.tsv", "--label-map", "round"], "error: No such option: --label-map"),
    (["nosuch"], "error: No such command 'nosuch'; see `headcut --help`."),
])
def test_a_command_line_typed_wrong_is_one_sentence_exit_2(args, said):
    """Missing and unknown options were a usage block and a box; every other user error is one sentence."""
    result = CliRunner().invoke(app, args, prog_name="headcut")
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().startswith(said) and result.stderr.strip().count("\n") == 0, result.stderr


def test_the_runtime_command_line_typed_wrong_is_one_sentence_too():
    from headcut_grader.cli.main import app as runtime

    result = CliRunner().invoke(runtime, ["grade"], prog_name="headcut-grader")
    assert result.exit_code == 2
    assert result.stderr.strip() == "error: Missing argument 'grader_dir'; see `headcut-grader grade --help`."



ONE_RUNTIME_ON_PURPOSE = ("ONNX Runtime operator fusion", "onnx-int8 / onnx-fp32 (ONNX Runtime")  # export, prune


def test_help_that_names_one_runtime_names_the_other_too():
    """Was: `headcut-grader --help` said "ONNX Runtime only" and serve's --batch-size, evaluate's --model and
    --threads named ONNX Runtime alone, though a grader folder may run in OpenVINO (`./grader[openvino]`)."""
    from headcut_grader.cli.main import app as runtime

    for cli in (app, runtime):
        for command in [None, *sorted(c.name or c.callback.__name__ for c in cli.registered_commands)]:
            result = CliRunner().invoke(cli, [command, "--help"] if command else ["--help"], env={"COLUMNS": "1000"})
            assert result.exit_code == 0, result.output
            alone = [" ".join(line.split()) for line in result.output.splitlines()
                     if "ONNX Runtime" in line and "OpenVINO" not in line
                     and not any(s in line for s in ONE_RUNTIME_ON_PURPOSE)]
            assert not alone, (command, alone)

def test_help_shows_each_path_as_path_also_where_a_parser_reads_it():
    """Was: `headcut grade --help` showed PAIRS_FILE as <Path> and `headcut prune --help` --scores as <Path>, where
    every other path shows <path>: typer 0.29 names a parameter read by a parser (file_to_read) by its annotation."""
    import re

    from headcut_grader.cli.main import app as runtime

    for cli, command, name in [(app, "grade", "pairs_file"), (runtime, "grade", "pairs_file"),
                               (app, "prune", "--scores")]:
        text = CliRunner().invoke(cli, [command, "--help"], env={"COLUMNS": "200"}).output
        assert re.search(rf"{name} +<path>", text) and "<Path>" not in text, text


def test_a_metrics_line_shows_figures_with_nothing_to_judge_as_n_a():
    """Was: a score finetune whose dev pairs have one title per query stored NDCG@10 as null, and its final line
    was a TypeError traceback after the model was written."""
    from headcut.cli.common import metrics_line

    line = metrics_line({"spearman": 0.5, "pearson": float("nan"), "ndcg@10": None, "loss": 0.25})
    assert line == "Spearman 0.5000  Pearson n/a  NDCG@10 n/a  MSE 0.2500"
    grades = metrics_line({"accuracy": 0.5, "macro_f1": None, "spearman": 0.1, "loss": 1.0})
    assert grades == "accuracy 0.5000  macro-F1 n/a  Spearman 0.1000  loss 1.0000"


def _interrupted_at_start(monkeypatch, command: str):
    """`command` with its required values given, stopped by Ctrl-C in the first thing its body calls."""
    import sys

    import typer.main

    def ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt

    click_command = typer.main.get_command(app).commands[command]
    module = sys.modules[click_command.callback.__module__]
    if hasattr(module, "quiet_transformers"):
        monkeypatch.setattr(module, "quiet_transformers", ctrl_c)
    else:  # the runtime's grade: its flags read GradeSettings' defaults, its body calls it first
        monkeypatch.setattr(module, "GradeSettings", ctrl_c)
    args = [command]
    for p in click_command.params:
        if p.required:
            args += ["x"] if p.param_type_name == "argument" else [p.opts[0], "x"]
    return CliRunner().invoke(app, args)


@pytest.mark.parametrize("command", [c for c in COMMANDS if c != "serve"])  # serve: Ctrl-C is how it stops
def test_ctrl_c_in_any_command_says_what_was_kept(monkeypatch, command):
    """Was: scan, probe, evaluate, prune, export, bench and cross-encoder (and the others before their work
    began) exited 130 without a word, so a user could not tell whether OUT was half written or what to do."""
    result = _interrupted_at_start(monkeypatch, command)
    assert result.exit_code == 130, result.output
    # grade keeps rows as it goes, so its own line says what it kept (here: nothing)
    said = ("interrupted: x was not written and no graded rows were kept; rerun the same command to start again."
            if command == "grade" else
            "interrupted: no output was written (outputs appear only whole, at the end); rerun the same command to "
            "start again.")
    assert result.output.splitlines() == [said]


@pytest.mark.parametrize("where", ["typer.core.TyperGroup.parse_args", "typer.core.TyperCommand.parse_args"])
def test_ctrl_c_while_the_command_line_is_parsed_says_one_line(monkeypatch, where):
    """Was: a Ctrl-C 0.35-0.45 s into `python -m headcut_grader grade ...`, while typer parsed the command line
    (the group's, then the command's options), exited 130 without a word: typer ends a Ctrl-C there in silence.
    Now the one `interrupted:` line says that nothing was written."""
    from headcut_grader.cli.main import app as runtime

    def ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(where, ctrl_c)
    result = CliRunner().invoke(runtime, ["grade", "g", "p.tsv", "--out", "o.tsv"])
    assert result.exit_code == 130 and result.output.splitlines() == [
        "interrupted: stopped while starting, before anything was written; rerun the same command."], result.output

