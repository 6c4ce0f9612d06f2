"""Issue 12: every bad input a user can cause gets one sentence naming the file, line, column or flag,
exit code 2, and nothing lost. One test (or a parametrised group) per defect of the sweep."""
from __future__ import annotations

import json
import os
import re
import stat
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from headcut.cli.main import app
from headcut_grader.data import read_pairs
from headcut_grader.errors import UserError


def run(*args):
    return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})


def refused(result, *words):
    """Exit 2, one line naming what is wrong, no traceback."""
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    text = result.output
    assert "Traceback" not in text
    for word in words:
        assert word in text, (word, text)


def write(tmp_path, name, text):
    path = tmp_path / name
    (path.write_bytes if isinstance(text, bytes) else path.write_text)(text)
    return path


# --- 1. nan / inf grades ------------------------------------------------------------------------

@pytest.mark.parametrize("grade", ["nan", "inf", "-inf", "1e400"])
@pytest.mark.parametrize("label_map", [None, "round"])
def test_1_non_finite_grade_is_a_user_error(tmp_path, grade, label_map):
    path = write(tmp_path, "a.tsv", f"query\ttitle\tgrade\ndrill\tcordless drill\t{grade}\n")
    with pytest.raises(UserError, match=r"line 2, column 'grade'.*not a finite number"):
        read_pairs(path, label_map=label_map)


def test_1_json_nan_grade_is_a_user_error(tmp_path):
    path = write(tmp_path, "a.jsonl", '{"query": "drill", "title": "cordless drill", "grade": NaN}\n')
    with pytest.raises(UserError, match=r"line 1, column 'grade'"):
        read_pairs(path)
    refused(run("grade", tmp_path / "no-grader", path, "--out", tmp_path / "o.tsv"), "line 1", "grade")
    refused(run("evaluate", "--model", "minilm-l6", "--data", path), "line 1", "grade")


# --- 2. over-long fields: one rule for every format --------------------------------------------

def _long_rows(fmt, title):
    if fmt == "tsv":
        return f"query\ttitle\tgrade\ndrill\t{title}\t3\n"
    if fmt == "csv":
        return f"query,title,grade\ndrill,{title},3\n"
    if fmt == "jsonl":
        return json.dumps({"query": "drill", "title": title, "grade": 3}) + "\n"
    return json.dumps([{"query": "drill", "title": title, "grade": 3}])


@pytest.mark.parametrize("fmt", ["tsv", "csv", "jsonl", "json"])
def test_2_long_title_under_the_limit_reads_in_every_format(tmp_path, fmt):
    title = "x" * 200_000
    pairs = read_pairs(write(tmp_path, f"a.{fmt}", _long_rows(fmt, title)))
    assert pairs.titles == [title]


@pytest.mark.parametrize("fmt", ["tsv", "csv", "jsonl", "json"])
def test_2_text_over_the_limit_is_refused_in_every_format(tmp_path, fmt):
    from headcut_grader.data import MAX_TEXT_CHARS

    path = write(tmp_path, f"a.{fmt}", _long_rows(fmt, "x" * (MAX_TEXT_CHARS + 1)))
    with pytest.raises(UserError, match=r"line \d+.*longer than .* characters"):
        read_pairs(path)


def test_2_quoted_csv_field_over_many_lines_is_bounded_too(tmp_path):
    from headcut_grader.data import MAX_TEXT_CHARS

    text = "query,title,grade\ndrill,\"" + ("y" * 1000 + "\n") * (MAX_TEXT_CHARS // 1000 + 2) + "\",3\n"
    with pytest.raises(UserError, match=r"longer than .* characters"):
        read_pairs(write(tmp_path, "a.csv", text))


# --- 3. FIFOs, devices, endless lines ----------------------------------------------------------

def test_3_fifo_is_refused_without_hanging(tmp_path):
    fifo = tmp_path / "pairs.tsv"
    os.mkfifo(fifo)
    result = {}

    def read():
        try:
            read_pairs(fifo)
        except UserError as e:
            result["error"] = str(e)

    worker = threading.Thread(target=read, daemon=True)
    worker.start()
    worker.join(10)
    if worker.is_alive():  # unblock the reader so the test process can end
        with open(fifo, "w"):
            pass
        pytest.fail("reading a FIFO hangs")
    assert "not a regular file" in result.get("error", "")


def test_3_dev_zero_is_refused(tmp_path):
    with pytest.raises(UserError, match="not a regular file"):
        read_pairs("/dev/zero", fmt="tsv")
    refused(run("grade", tmp_path / "no-grader", "/dev/zero", "--out", tmp_path / "o.tsv"), "/dev/zero",
            "not a regular file")


@pytest.mark.parametrize("name, row", [("p.tsv", "drill\tcordless drill\t4\n"),
                                       ("p.jsonl", '{"query": "drill", "title": "cordless drill", "grade": 4}\n')])
@pytest.mark.parametrize("change", ["appended", "cut short", "rewritten"])
def test_3_a_pairs_file_written_to_while_it_is_read_is_refused(tmp_path, name, row, change):
    """Was: a file still being written (a download, an export not yet done) or rewritten in place as it was read
    gave the rows there were when the reader reached its end, some of one version and some of another, with nothing
    said; grade wrote them all as the file's grades."""
    from headcut_grader.data import iter_pairs

    header = "" if name.endswith(".jsonl") else "query\ttitle\tgrade\n"
    path = write(tmp_path, name, header + row * 3)
    chunks = iter_pairs(path, chunk_rows=1)
    next(chunks)
    if change == "appended":
        with open(path, "a") as f:
            f.write(row * 2)
    elif change == "cut short":
        os.truncate(path, len(header) + len(row))
    else:  # the same size, another modification time: said so, not '30 bytes when opened, 30 at the end'
        os.utime(path, ns=(0, os.stat(path).st_mtime_ns + 1_000_000_000))
    said = {"appended": f"{len(header + row * 3):,} bytes when opened, {len(header + row * 5):,} at the end",
            "cut short": f"{len(header + row * 3):,} bytes when opened, {len(header + row):,} at the end",
            "rewritten": "its modification time changed while it was read"}[change]
    with pytest.raises(UserError, match=re.escape(f"{path} changed while it was read ({said}); wait until")):
        list(chunks)
    assert len(read_pairs(path)) == {"appended": 5, "cut short": 1, "rewritten": 3}[change]  # read whole once still


def test_3_an_endless_line_stops_at_the_cap(tmp_path, monkeypatch):
    import headcut_grader.lines as lines

    monkeypatch.setattr(lines, "MAX_LINE_BYTES", 10_000)
    path = write(tmp_path, "a.tsv", "query\ttitle\tgrade\n" + "z" * 50_000)  # no newline at all
    with pytest.raises(UserError, match=r"line 2 is longer than 10,000 bytes"):
        read_pairs(path)


# --- 4. NUL and other control characters in texts ----------------------------------------------

# A JSON \u escape of half a UTF-16 pair (\udc80) reads as a lone surrogate, which no text encodes: was a
# UnicodeEncodeError traceback from grade (the data's fingerprint) and a nameless TypeError from the tokenizer.
@pytest.mark.parametrize("name, text, said", [
    ("a.tsv", "query\ttitle\tgrade\ndrill\tcord\x00less\t3\n", "control character"),
    ("a.jsonl", '{"query": "drill", "title": "cord\\u0000less", "grade": 3}\n', "control character"),
    ("b.jsonl", '{"query": "dr\\u0007ill", "title": "cordless", "grade": 3}\n', "control character"),
    ("c.jsonl", '{"query": "dr\\udc80ill", "title": "cordless", "grade": 3}\n', "lone surrogate U+DC80 at character 3"),
    ("d.json", '[{"query": "drill", "title": "co\\ud83drdless", "grade": 3}]', "lone surrogate U+D83D at character 3"),
])
def test_4_nul_control_characters_and_lone_surrogates_are_refused(tmp_path, name, text, said):
    path = write(tmp_path, name, text)
    with pytest.raises(UserError, match=r"line \d, column '(title|query)'.*" + re.escape(said)):
        read_pairs(path)
    refused(run("grade", tmp_path / "no-grader", path, "--out", tmp_path / "o.tsv"), said)


@pytest.mark.parametrize("queries, titles, lines, said", [
    (["\udc80"], ["b"], None, "<memory> row 1, query: lone surrogate U+DC80 at character 1, which is not a character; "
     "fix that pair or drop it."),
    (["", "a"], ["", "co\ud83drd"], [2, 5], "<memory>, line 5, title: lone surrogate U+D83D at character 3"),
    (["a", 7], ["b", "c"], None, "<memory> row 2, query: 7, not a string; fix that pair or drop it."),
])
def test_4_pairs_made_in_python_with_a_lone_surrogate_name_the_pair(queries, titles, lines, said):
    """Files and the server refuse a lone surrogate by its place; Pairs made by a Python caller did not. Was: a
    UnicodeEncodeError (an AttributeError for a number) from Pairs' fingerprint, naming no pair."""
    from headcut_grader.pairs import Pairs

    with pytest.raises(UserError, match="^" + re.escape(said)):
        Pairs(queries, titles, None, lines=lines)


@pytest.mark.parametrize("fmt", ["tsv", "jsonl", "json"])
def test_4_a_line_or_paragraph_separator_in_a_text_reads_in_every_format(tmp_path, fmt):
    """Was: a JSON lines row whose title held U+2028 or U+0085 as it is (valid JSON, as json.dumps(ensure_ascii=False)
    writes it; TSV and JSON arrays read it) was split there, "invalid JSON (Unterminated string ...)"; a CR alone
    still ends a JSON line, on the line numbers a file of CRLF ends counts."""
    rows = [{"query": "drill", "title": "cordless\u2028drill", "grade": 3},
            {"query": "saw", "title": "hand\x85saw", "grade": 4}]
    text = {"tsv": "query\ttitle\tgrade\n" + "".join(f"{r['query']}\t{r['title']}\t{r['grade']}\n" for r in rows),
            "jsonl": "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
            "json": json.dumps(rows, ensure_ascii=False)}[fmt]
    pairs = read_pairs(write(tmp_path, f"p.{fmt}", text))
    assert pairs.titles == ["cordless\u2028drill", "hand\x85saw"]
    if fmt == "jsonl":
        with pytest.raises(UserError, match=r"p\.jsonl, line 4, column 2: invalid JSON"):
            read_pairs(write(tmp_path, "p.jsonl", json.dumps(rows[0]) + "\r" + json.dumps(rows[1]) + "\r\n\n{bad\r\n"))


def test_4_pairs_refuse_a_text_that_is_not_a_string_and_leave_other_errors_as_they_are():
    """Only a query or title that is not a string is told as a bad pair, checked before the fingerprint reads it.
    Was: every AttributeError from the fingerprint was caught, and one from elsewhere (a gold value whose str()
    raises) became AssertionError('fingerprint failed on texts that all encode')."""
    from headcut_grader.pairs import Pairs

    class Broken:
        def __str__(self):
            raise AttributeError("no such thing")

    with pytest.raises(AttributeError, match="no such thing"):
        Pairs(["a"], ["b"], None, scores=[Broken()])
    with pytest.raises(UserError, match=re.escape("<memory> row 1, title: b'b', not a string; fix that pair")):
        Pairs(["a"], [b"b"], None)


# --- 5. JSON values of the wrong type ----------------------------------------------------------

@pytest.mark.parametrize("row, column", [
    ({"query": 123, "title": "drill", "grade": 3}, "query"),
    ({"query": "drill", "title": {"a": 1}, "grade": 3}, "title"),
    ({"query": True, "title": "drill", "grade": 3}, "query"),
    ({"query": "drill", "title": ["a"], "grade": 3}, "title"),
    ({"query": "drill", "title": "x", "grade": True}, "grade"),
    ({"query": "drill", "title": "x", "grade": {"g": 3}}, "grade"),
])
@pytest.mark.parametrize("fmt", ["jsonl", "json"])
def test_5_json_values_of_the_wrong_type_are_refused(tmp_path, row, column, fmt):
    text = json.dumps(row) + "\n" if fmt == "jsonl" else json.dumps([row])
    path = write(tmp_path, f"a.{fmt}", text)
    with pytest.raises(UserError, match=rf"line 1, column '{column}'.*(must be (text|a number or text))"):
        read_pairs(path)


# --- weak: a preset's format does not override the file's own -----------------------------------

@pytest.mark.parametrize("name, text", [
    ("a.jsonl", '{"query": "drill", "title": "cordless drill", "grade": 4}\n'),
    ("a.json", '[{"query": "drill", "title": "cordless drill", "grade": 4}]'),
    ("a.csv", "query,title,grade\ndrill,cordless drill,4\n"),
])
def test_weak_preset_does_not_force_tsv_on_other_suffixes(tmp_path, name, text):
    pairs = read_pairs(write(tmp_path, name, text), preset="homedepot")
    assert pairs.queries == ["drill"] and pairs.titles == ["cordless drill"] and pairs.labels == [3]


def test_weak_json_content_in_a_tsv_gets_a_hint(tmp_path):
    path = write(tmp_path, "a.tsv", '{"query": "drill", "title": "cordless drill", "grade": 4}\n')
    with pytest.raises(UserError, match=r"looks like JSON lines"):
        read_pairs(path, preset="homedepot")


# --- 6. outputs: an input is never an output, an existing file needs --overwrite ------------------

PAIRS_TSV = "query\ttitle\tgrade\ndrill\tcordless drill\t4\npaint\tred lamp\t1\n"


@pytest.fixture(scope="module")
def tiny_grader(tmp_path_factory):
    from test_export import make_tiny_grader

    return make_tiny_grader(tmp_path_factory.mktemp("bad-input-grader"))[0]


def test_6_grade_out_equal_to_its_input_is_refused(tmp_path, tiny_grader):
    pairs = write(tmp_path, "pairs.tsv", PAIRS_TSV)
    for extra in ([], ["--overwrite"]):
        refused(run("grade", tiny_grader, pairs, "--out", pairs, *extra), "--out", "input")
        assert pairs.read_text() == PAIRS_TSV
    link = tmp_path / "link.tsv"
    link.symlink_to(pairs)
    refused(run("grade", tiny_grader, pairs, "--out", link, "--overwrite"), "input")
    assert pairs.read_text() == PAIRS_TSV


def test_6_an_existing_out_file_needs_overwrite(tmp_path, tiny_grader):
    pairs = write(tmp_path, "pairs.tsv", PAIRS_TSV)
    out = write(tmp_path, "grades.tsv", "keep me\n")
    refused(run("grade", tiny_grader, pairs, "--out", out), "--overwrite")
    assert out.read_text() == "keep me\n"
    result = run("grade", tiny_grader, pairs, "--out", out, "--overwrite")
    assert result.exit_code == 0, result.output
    assert out.read_text().startswith("query\ttitle\ttrue_grade\tgrade")


@pytest.mark.parametrize("command", ["export", "cross-encoder", "prune"])
def test_6_an_out_folder_another_run_wrote_meanwhile_is_kept_and_its_flag_named(tmp_path, saved_models, command,
                                                                                 monkeypatch):
    """Was: `out=DIR was written by another run while this one worked ...; pass overwrite=True` from export,
    cross-encoder and prune, whose library writers (build_grader, save_model, write_artifact) named their own argument
    to a command's user, who has --out and --overwrite."""
    import headcut_grader.files
    from conftest import tiny_model
    from headcut.models import LoadedModel, load_model, save_model

    model = saved_models["artifact"]
    if command == "cross-encoder":  # it writes one-score models only
        model = save_model(LoadedModel(tiny_model("bert", num_labels=1, vocab_size=99), load_model(model).tokenizer,
                                       {"task": "score", "activation": "sigmoid"}, "tiny", ""), tmp_path / "reranker")
    out = tmp_path / "out"
    real = headcut_grader.files.temp_sibling

    def other_run_writes_meanwhile(path):
        if path == out:  # the work starts: its temporary folder is named
            out.mkdir(exist_ok=True)
            (out / "theirs.txt").write_text("the other run's\n")
        return real(path)

    monkeypatch.setattr(headcut_grader.files, "temp_sibling", other_run_writes_meanwhile)
    args = {"export": ["export", model], "cross-encoder": ["cross-encoder", "--model", model],
            "prune": ["prune", "--model", model, "--keep-ratio", "0.5", "--data", "synthetic"]}[command]
    refused(run(*args, "--out", out), f"--out {out} was written by another run while this one worked, and is left as "
                                      "it is; choose a new folder, or pass --overwrite.")
    assert [p.name for p in out.iterdir()] == ["theirs.txt"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out")] == []


def test_prune_on_pairs_shorter_than_the_shortest_timed_length_times_at_that_length(tmp_path, saved_models):
    """Was: pairs of a few words (6 tokens on average) stopped `headcut prune` after the pruning with 'speed_summary
    seq_len is 6; it must be a whole number in [8, 8192]', an argument no user passed; distill's speed summary, at
    the median dev length, after the whole training. Both time at the shortest length timed instead."""
    from headcut.prune.measure import timed_length

    pairs = write(tmp_path, "pairs.tsv", PAIRS_TSV)
    result = run("prune", "--model", saved_models["artifact"], "--keep-ratio", "0.5", "--data", pairs, "--no-timing",
                 "--out", tmp_path / "pruned")
    assert result.exit_code == 0, result.output
    speed = json.loads((tmp_path / "pruned" / "headcut.json").read_text())["prune"]["speed"]
    assert speed["seq_len"] == 8
    assert [timed_length(n) for n in (1, 7, 8, 40)] == [8, 8, 8, 40]


def test_6_a_path_starting_with_an_unexpanded_tilde_names_the_home_folder_it_meant(tmp_path, tiny_grader,
                                                                                  saved_models, monkeypatch):
    """Was: `--out=~/o.tsv` (a shell expands ~ only at the start of a word) graded into a folder named ~ made in the
    current one, and said 'graded ... -> ~/o.tsv'; an input so written was 'no such file'. Python never expands ~."""
    from headcut.models import load_model, save_model

    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    pairs = write(tmp_path, "pairs.tsv", PAIRS_TSV)
    why = "~ was not read as a home folder (a shell expands it only at the start of a word, not after --flag=, and " \
          "Python never); write the path in full: "
    refused(run("grade", tiny_grader, pairs, "--out=~/o.tsv"), f"--out ~/o.tsv: {why}{home / 'o.tsv'}.")
    refused(run("grade", tiny_grader, "~/pairs.tsv", "--out", "o.tsv"), f"~/pairs.tsv: {why}{home / 'pairs.tsv'}.")
    refused(run("grade", "~/grader", pairs, "--out", "o.tsv"), f"~/grader: {why}{home / 'grader'}.")
    with pytest.raises(UserError, match=re.escape(f"out=~/model: {why}{home / 'model'}.")):
        save_model(load_model(saved_models["artifact"]), "~/model")
    assert not (tmp_path / "~").exists()
    (tmp_path / "~").mkdir()  # a folder named ~ is there: meant, then
    assert run("grade", tiny_grader, pairs, "--out=~/o.tsv").exit_code == 0
    assert (tmp_path / "~" / "o.tsv").is_file()


def test_6_evaluate_out_follows_the_same_rule(tmp_path, tiny_grader):
    pairs = write(tmp_path, "pairs.tsv", PAIRS_TSV)
    refused(run("evaluate", "--model", tiny_grader, "--data", pairs, "--out", pairs, "--overwrite"), "input")
    assert pairs.read_text() == PAIRS_TSV
    out = write(tmp_path, "m.json", "{}")
    refused(run("evaluate", "--model", tiny_grader, "--data", pairs, "--out", out), "--overwrite")
    assert out.read_text() == "{}"


@pytest.mark.parametrize("command", ["grade", "evaluate"])
def test_6_an_out_file_another_run_wrote_meanwhile_is_kept_without_overwrite(tmp_path, tiny_grader, command,
                                                                             monkeypatch):
    """Was: two `evaluate --out m.json` (or `grade --out`) started together both said 'wrote', exit 0, and the one
    that finished last silently replaced the other's file; only the check before the work refused."""
    import headcut_grader.files
    import headcut_grader.grade_file

    pairs = write(tmp_path, "pairs.tsv", PAIRS_TSV)
    out = tmp_path / ("out.txt" if command == "grade" else "out.json")  # evaluate writes JSON
    real = headcut_grader.files.check_out_file

    def other_run_writes_meanwhile(*args, **kwargs):
        checked = real(*args, **kwargs)
        out.write_text("the other run's\n")
        return checked

    for module in (headcut_grader.files, headcut_grader.grade_file):
        monkeypatch.setattr(module, "check_out_file", other_run_writes_meanwhile)
    args = {"grade": ["grade", tiny_grader, pairs], "evaluate": ["evaluate", "--model", tiny_grader, "--data", pairs]}
    refused(run(*args[command], "--out", out), f"--out {out} was written by another run while this one worked, and is "
                                               "left as it is; choose a new file name, or pass --overwrite.")
    assert out.read_text() == "the other run's\n"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(f".{out.name}")) == (
        [".out.txt.partial", ".out.txt.partial.json"] if command == "grade" else [])  # grade's: for --resume


@pytest.mark.parametrize("command", ["grade", "evaluate", "bench", "export", "run"])
def test_6_an_out_under_a_file_is_refused_before_any_work(tmp_path, tiny_grader, command):
    """Under a file nothing can be written: said before the work (bench and evaluate found it after), naming the
    file, not as 'rerun with --resume' or 'File exists'."""
    pairs = write(tmp_path, "pairs.tsv", PAIRS_TSV)
    blocker = write(tmp_path, "afile", "keep me\n")
    out = blocker / "sub" / "out.tsv"
    args = {"grade": ["grade", tiny_grader, pairs], "evaluate": ["evaluate", "--model", tiny_grader, "--data", pairs],
            "bench": ["bench", "--model", tiny_grader, "--data", pairs, "--repeats", "1"],
            "export": ["export", tiny_grader], "run": ["run", "quickstart"]}[command]
    refused(run(*args, "--out", out), f"--out {out}: {blocker} is a file, not a folder")
    assert blocker.read_text() == "keep me\n"


@pytest.mark.parametrize("command", ["grade", "evaluate", "export"])
def test_6_an_out_in_a_folder_that_cannot_be_written_is_refused_before_any_work(tmp_path, tiny_grader, command,
                                                                               monkeypatch):
    """A read-only folder: said before the work. The tests run as root, who may write anywhere, so the folder's
    permission bits are what os.access reports here."""
    import os

    from pathlib import Path

    import headcut_grader.files as files

    pairs = write(tmp_path, "pairs.tsv", PAIRS_TSV)
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    real = os.access
    monkeypatch.setattr(files.os, "access", lambda path, mode: real(path, mode) and (
        Path(path) != locked or bool(locked.stat().st_mode & 0o200)))
    out = locked / "sub" / "out.tsv"
    args = {"grade": ["grade", tiny_grader, pairs], "evaluate": ["evaluate", "--model", tiny_grader, "--data", pairs],
            "export": ["export", tiny_grader]}[command]
    refused(run(*args, "--out", out), f"--out {out}: the folder {locked} is not writable")
    assert list(locked.iterdir()) == []


UNWRITABLE = Path("/proc") if Path("/proc/self").is_dir() else None  # no file can be made there, even by root


@pytest.mark.skipif(UNWRITABLE is None, reason="needs /proc, a folder where no file can be made")
@pytest.mark.parametrize("command", ["grade", "headcut-grader grade", "evaluate", "bench", "export", "run", "scan",
                                     "probe", "prune", "cross-encoder", "finetune", "distill"])
def test_6_an_out_where_no_file_can_be_made_is_refused_before_any_work(tmp_path, tiny_grader, saved_models,
                                                                       command):
    """Was: the check asked os.access, which says yes to root anywhere, so `bench --out /proc/x` failed after the
    whole benchmark and `grade --out /proc/x.tsv` said 'rerun with --resume' with nothing written. Now the place is
    checked before any work (an output in /proc, /dev or /sys is refused outright; elsewhere a file is made and removed
    in the folder that will hold it)."""
    from headcut_grader.cli.main import app as grader_app

    pairs = write(tmp_path, "pairs.tsv", PAIRS_TSV)
    out = UNWRITABLE / f"headcut-test-{os.getpid()}" / ("out.tsv" if "grade" in command else "out")
    model = ["--model", saved_models["artifact"]]
    args = {"grade": ["grade", tiny_grader, pairs], "headcut-grader grade": ["grade", tiny_grader, pairs],
            "evaluate": ["evaluate", "--model", tiny_grader, "--data", pairs],
            "bench": ["bench", *model, "--data", pairs], "export": ["export", saved_models["artifact"]],
            "run": ["run", "quickstart"], "scan": ["scan", *model, "--data", pairs],
            "probe": ["probe", *model, "--data", pairs], "prune": ["prune", *model, "--keep-ratio", 0.5],
            "cross-encoder": ["cross-encoder", *model],
            "finetune": ["finetune", "finetune/minilm_synthetic_cpu", "--set", f"model={saved_models['artifact']}"],
            "distill": ["distill", "distill/minilm_synthetic_cpu", "--set", f"teacher={saved_models['artifact']}",
                        "--set", "keep_layers=1"]}[command]
    if command == "evaluate":
        out = out.with_suffix(".json")
    invoke = (lambda *a: CliRunner().invoke(grader_app, [str(x) for x in a])) if command.startswith("headcut-") else run
    result = invoke(*args, "--out", out)
    refused(result, f"--out {out} would write into {UNWRITABLE}, where the system keeps devices and streams")
    assert "--resume" not in result.output


def test_6_a_grade_whose_first_write_fails_does_not_offer_resume(tmp_path, tiny_grader, monkeypatch):
    """Was: any failed write said 'rerun with --resume', also where no row was kept for it to continue after (the
    partial file could not be made); --resume then had nothing to continue. Now: rerun from the start."""
    import headcut_grader.grade_file

    pairs = write(tmp_path, "pairs.tsv", PAIRS_TSV)
    out = tmp_path / "grades.tsv"
    real = os.open
    monkeypatch.setattr(headcut_grader.grade_file.os, "open", lambda path, *a, **k: (
        real(path, *a, **k) if Path(path).name != ".grades.tsv.partial" else real(tmp_path / "no" / "such", *a)))
    result = run("grade", tiny_grader, pairs, "--out", out)
    refused(result, f"{out}: writing failed (No such file or directory); check free space and permissions, then "
                    "rerun from the start.")
    assert "--resume" not in result.output and sorted(p.name for p in tmp_path.iterdir()) == ["pairs.tsv"]


def test_6_a_grade_whose_write_fails_after_kept_rows_offers_resume(tmp_path, tiny_grader, monkeypatch):
    """The other side of the rule above: a full disk at the second chunk keeps the first one's row for --resume."""
    import errno

    import headcut_grader.grade_file

    pairs = write(tmp_path, "pairs.tsv", PAIRS_TSV)
    out = tmp_path / "grades.tsv"
    real, calls = os.fsync, []

    def full_at_the_second_chunk(fd):
        calls.append(fd)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd)

    monkeypatch.setattr(headcut_grader.grade_file.os, "fsync", full_at_the_second_chunk)
    result = run("grade", tiny_grader, pairs, "--out", out, "--chunk-rows", 1)
    refused(result, f"{out}: writing failed (No space left on device); check free space and permissions, then rerun "
                    "with --resume.")
    monkeypatch.undo()
    result = run("grade", tiny_grader, pairs, "--out", out, "--chunk-rows", 1, "--resume")
    assert result.exit_code == 0 and "1 of them by the interrupted run" in result.output, result.output


def test_6_grade_makes_the_folders_its_out_needs(tmp_path, tiny_grader):
    pairs = write(tmp_path, "pairs.tsv", PAIRS_TSV)
    out = tmp_path / "new" / "sub" / "grades.tsv"
    result = run("grade", tiny_grader, pairs, "--out", out)
    assert result.exit_code == 0, result.output
    assert out.read_text().startswith("query\ttitle\ttrue_grade\tgrade")


def test_6_grade_refuses_a_named_label_column_the_file_lacks(tmp_path, tiny_grader):
    pairs = write(tmp_path, "pairs.tsv", PAIRS_TSV)
    refused(run("grade", tiny_grader, pairs, "--out", tmp_path / "g.tsv", "--label-col", "relevance"), "'relevance'")
    assert not (tmp_path / "g.tsv").exists()


def test_6_a_folder_out_holding_an_input_is_refused(tmp_path):
    pairs = write(tmp_path, "pairs.tsv", PAIRS_TSV)
    refused(run("scan", "--model", "minilm-l6", "--data", pairs, "--out", tmp_path, "--overwrite"), "input")
    assert pairs.read_text() == PAIRS_TSV


# --- weak: an export killed mid-write leaves nothing the next run keeps ---------------------------

def test_weak_a_killed_writer_leaves_no_hidden_folder_after_the_next_run(tmp_path):
    import signal
    import subprocess
    import sys

    from headcut_grader.files import atomic_dir

    out = tmp_path / "grader"
    script = ("import os, sys, time\nfrom headcut_grader.files import atomic_dir\n"
              "with atomic_dir(sys.argv[1]) as tmp:\n"
              "    (tmp / 'model.onnx').write_bytes(b'0' * 1000)\n"
              "    print('ready', flush=True)\n    time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", script, str(out)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    assert [p.name for p in tmp_path.glob(".grader.tmp-*")]  # the kill left its temporary folder
    with atomic_dir(out) as tmp:
        (tmp / "model.onnx").write_bytes(b"1")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["grader"]


def test_an_output_another_run_wrote_meanwhile_is_not_replaced_without_overwrite(tmp_path):
    """Was: two scans (prunes, exports, benches) started on one new --out both said 'wrote OUT', exit 0, and the
    one that finished last silently replaced the other's folder; only the check before the work refused."""
    from headcut_grader.files import atomic_dir

    out = tmp_path / "scan"
    with pytest.raises(UserError, match=f"out={out} was written by another run while this one worked, and is left "
                                        "as it is; choose a new folder, or pass overwrite=True"):  # atomic_dir's own
        with atomic_dir(out) as tmp:
            (tmp / "importance.json").write_text("mine")
            out.mkdir()
            (out / "importance.json").write_text("the other run's")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scan"]
    assert (out / "importance.json").read_text() == "the other run's"
    (tmp_path / "empty").mkdir()  # an empty folder is still an output's place, as before the work
    (tmp_path / "link").symlink_to(tmp_path / "empty", target_is_directory=True)
    for place in ("link", "empty"):  # a link is replaced, not followed (was: left beside as .link.old-PID)
        with atomic_dir(tmp_path / place) as tmp:
            (tmp / "importance.json").write_text(place)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "link", "scan"]
    assert [(tmp_path / place / "importance.json").read_text() for place in ("empty", "link")] == ["empty", "link"]


WRITE_MANY = """\
import sys
from headcut_grader.files import atomic_dir
out, me = sys.argv[1], sys.argv[2]
for i in range(int(sys.argv[3])):
    with atomic_dir(out, overwrite=True) as tmp:
        for name in ("a", "b", "c"):
            (tmp / name).write_text(f"{me} {i}")
"""


def test_writers_of_one_folder_with_overwrite_at_once_leave_one_whole_folder_and_no_copies(tmp_path):
    """Was: two `scan --out S --overwrite` at once could fail with a FileNotFoundError traceback (one moved S aside
    between the other's check that S exists and its own move), or a NotADirectoryError/OSError once the other
    put its folder back first. Now each retries until its own folder lands: every run ends well, S is one
    writer's whole folder, and no moved-aside copy is left beside it."""
    import subprocess
    import sys

    out = tmp_path / "scan"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    runs = [subprocess.Popen([sys.executable, "-c", WRITE_MANY, str(out), me, "300"], env=env, text=True,
                             stderr=subprocess.PIPE) for me in ("first", "second", "third")]
    errors = [run.communicate(timeout=300)[1] for run in runs]
    assert [run.returncode for run in runs] == [0, 0, 0], errors
    assert len({(out / name).read_text() for name in ("a", "b", "c")}) == 1  # one writer's whole folder
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scan"]


def test_an_old_copy_a_kill_left_while_a_folder_was_replaced_goes_with_the_next_write(tmp_path, monkeypatch):
    """Was: a kill between moving the old --out aside and deleting it left .OUT.old-PID beside it for good (the
    sweep knew only .OUT.tmp- names). Now the copy takes its writer's temporary name, which a later write removes
    once that writer is gone; a .OUT.old-PID left by an earlier headcut whose pid is gone goes too."""
    import subprocess
    import sys

    import headcut_grader.files as files

    def killed(path):
        raise KeyboardInterrupt

    out = tmp_path / "scan"
    out.mkdir()
    (out / "importance.json").write_text("0")
    monkeypatch.setattr(files, "_remove", killed)  # as the old copy is deleted
    monkeypatch.setattr(files.shutil, "rmtree", killed)  # (before this fix, it deleted it with rmtree)
    with pytest.raises(KeyboardInterrupt):
        with files.atomic_dir(out, overwrite=True) as tmp:
            (tmp / "importance.json").write_text("1")
    monkeypatch.undo()
    assert (out / "importance.json").read_text() == "1"
    [copy] = tmp_path.glob(".scan.tmp-*")
    assert (copy / "importance.json").read_text() == "0"
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = gone.stdout.strip()
    copy.rename(copy.with_name(copy.name.replace(f"-{os.getpid()}@", f"-{pid}@")))
    (tmp_path / f".scan.old-{pid}").mkdir()  # what headcut before this left
    (tmp_path / f".scan.old-{pid}" / "importance.json").write_text("older")
    (tmp_path / f".scan.old-{os.getpid()}").mkdir()  # a live writer's own: it deletes it itself
    with files.atomic_dir(out, overwrite=True) as tmp:
        (tmp / "importance.json").write_text("2")
    assert sorted(p.name for p in tmp_path.iterdir()) == [f".scan.old-{os.getpid()}", "scan"]
    assert (out / "importance.json").read_text() == "2"


@pytest.mark.parametrize("overwrite", [True, False])
def test_two_writers_of_one_file_never_mix_and_without_overwrite_the_first_to_publish_keeps_it(tmp_path, overwrite):
    """Two runs writing one --out FILE (two `evaluate --out m.json`): each writes its own temporary, so the file is
    one writer's whole bytes, never a mix. Was: without --overwrite both said 'wrote m.json', exit 0, and the one
    that finished last silently replaced the other's file (as atomic_dir no longer does for a folder)."""
    from headcut_grader.files import atomic_file

    out = tmp_path / "m.json"

    def first_run():
        with atomic_file(out, overwrite=overwrite) as first:
            first.write(b"first half, ")
            with atomic_file(out, overwrite=overwrite) as second:  # started later, published first
                second.write(b"the second run's whole file\n")
            assert out.read_bytes() == b"the second run's whole file\n"
            first.write(b"second half\n")

    if overwrite:
        first_run()
    else:
        with pytest.raises(UserError, match=f"^path={re.escape(str(out))} was written by another run while this one "
                                             "worked, and is left as it is; choose a new file name, or pass "
                                             "overwrite=True.$"):  # atomic_file's own arguments
            first_run()
    wanted = b"first half, second half\n" if overwrite else b"the second run's whole file\n"
    assert out.read_bytes() == wanted and sorted(p.name for p in tmp_path.iterdir()) == ["m.json"]


# --- 7 / 8. every numeric flag has a range, checked before any work ------------------------------

def _numeric_options():
    """(command, flag, parser) of every int or float option of every command."""
    import typing

    import typer.main

    out = []
    group = typer.main.get_command(app)
    for name, command in sorted(group.commands.items()):
        for param in command.params:
            descriptor = getattr(param, "type_descriptor", None)
            if descriptor is None or not param.opts[0].startswith("--"):
                continue
            kinds = {descriptor.annotation, *typing.get_args(descriptor.annotation)}
            if kinds & {int, float}:
                out.append((name, param.opts[0], getattr(descriptor.parameter_info, "parser", None),
                            float if float in kinds else int))
    return out


NUMERIC = _numeric_options()


def test_8_there_are_numeric_flags_to_check():
    assert len(NUMERIC) >= 30 and {"grade", "evaluate", "prune", "scan", "export", "serve", "bench"} <= {
        c for c, *_ in NUMERIC}


@pytest.mark.parametrize("command, flag, func, kind", NUMERIC, ids=[f"{c} {f}" for c, f, *_ in NUMERIC])
def test_8_every_numeric_flag_has_a_checked_range(command, flag, func, kind):
    valid = getattr(func, "valid", None)
    assert valid is not None, f"{command} {flag} has no range"
    bad = []
    if valid.low is not None:
        bad.append(valid.low if valid.low_open else valid.low - 1)
    if valid.high is not None:
        bad.append(valid.high if valid.high_open else valid.high + 1)
    if kind is float:
        bad += ["nan", "inf"]
    required = {"grade": ["g", "p", "--out", "o"], "evaluate": ["--model", "m", "--data", "d"],
                "prune": ["--model", "m", "--keep-ratio", "0.5", "--out", "o"],
                "scan": ["--model", "m", "--data", "d", "--out", "o"],
                "probe": ["--model", "m", "--data", "d", "--out", "o"],
                "export": ["m", "--out", "o"], "bench": ["-m", "m", "--data", "d", "--out", "o"], "serve": ["g"],
                "distill": ["r"]}
    for value in bad:
        # everything else given, so the refusal comes from the range and nothing starts
        given = required.get(command, [])
        if flag in given:  # drop the flag's own required value
            given = given[:given.index(flag)] + given[given.index(flag) + 2:]
        result = run(command, *given, flag, value)
        refused(result, flag)
        assert result.output.strip().startswith("error: ") and len(result.output.strip().splitlines()) == 1


def test_7_grade_batch_size_out_of_range_writes_nothing(tmp_path, tiny_grader):
    pairs = write(tmp_path, "pairs.tsv", PAIRS_TSV)
    for value in ("-1", "0"):
        refused(run("grade", tiny_grader, pairs, "--out", tmp_path / "g.tsv", "--batch-size", value), "--batch-size")
        assert not (tmp_path / "g.tsv").exists()
    refused(run("evaluate", "--model", tiny_grader, "--data", pairs, "--batch-size", "0"), "--batch-size")


@pytest.mark.parametrize("args, flag", [
    (["--limit", "0"], "--limit"), (["--limit", "-5"], "--limit"), (["--bootstrap", "0"], "--bootstrap"),
    (["--max-length", "0"], "--max-length"),
])
def test_8_evaluate_flags_out_of_range(tmp_path, tiny_grader, args, flag):
    pairs = write(tmp_path, "pairs.tsv", PAIRS_TSV)
    refused(run("evaluate", "--model", tiny_grader, "--data", pairs, *args), flag)


def test_7_the_grader_refuses_a_bad_batch_size(tiny_grader):
    from headcut_grader.grader import Grader

    for value in (0, -1):
        with pytest.raises(UserError, match="batch_size"):
            Grader(tiny_grader, batch_size=value)
    with pytest.raises(UserError, match="threads"):
        Grader(tiny_grader, threads=0)


def test_8_max_length_over_the_models_positions_is_refused(tmp_path):
    from headcut.batching import encode
    from headcut.synthetic import synthetic_pairs
    from test_export import tiny_tokenizer
    from conftest import tiny_model

    model = tiny_model("bert", max_position_embeddings=64)
    with pytest.raises(UserError, match="^encode max_length=100 is more than the model's 64 positions"):
        encode(tiny_tokenizer(tmp_path / "tok"), synthetic_pairs(3), max_length=100, model=model)


def test_max_length_over_the_positions_leads_with_the_flag_or_key_the_command_has(tmp_path):
    """Was: evaluate and export were told to "set the recipe's max_length", and finetune to pass --max-length; then
    every command said "max length 600 is more than ...", leading with neither the flag nor the key."""
    from headcut.recipes import RECIPE_ROOT

    result = run("evaluate", "-m", "minilm-l6", "-d", "synthetic", "--limit", 5, "--max-length", 600)
    refused(result, "error: --max-length 600 is more than --model minilm-l6's 512 positions; pass --max-length 512 or "
            "less.")
    assert "recipe" not in result.stderr
    refused(run("finetune", "minilm_synthetic_cpu", "--set", "max_length=600", "--out", tmp_path / "t"),
            f"error: {RECIPE_ROOT / 'finetune' / 'minilm_synthetic_cpu.yaml'} with --set max_length=600: "
            "max_length=600 is more than the model's 512 positions; set max_length=512 or less.")


@pytest.mark.parametrize("command", ["scan", "probe", "export"])
def test_scan_probe_and_export_name_max_length_past_the_positions_before_the_model_loads(tmp_path, saved_models,
                                                                                        monkeypatch, command):
    """Was: 'encode max_length=100 is more than the model's 64 positions; set encode max_length=64 or less', the
    argument of an internal function, said once the model was loaded, the pairs read and the first pass begun;
    export said it in these words, but once the model was loaded and --data read."""
    import headcut.models

    def no_load(*args, **kwargs):
        raise AssertionError("the model was loaded before --max-length was checked")

    monkeypatch.setattr(headcut.models, "load_model", no_load)
    out = tmp_path / "o"
    result = run(command, "--model", saved_models["artifact"], "--data", "synthetic", "--limit", 25, "--max-length",
                 100, "--out", out, *(["--precision", "int8"] if command == "export" else []))
    refused(result, "error: --max-length 100 is more than the model's 64 positions; pass --max-length 64 or less.")
    assert not out.exists()


def test_scan_settings_max_length_over_the_positions_is_named_as_the_caller_wrote_it(saved_models):
    from headcut.evaluate.scan import ScanSettings, scan
    from headcut.models import load_model
    from headcut.synthetic import synthetic_pairs

    with pytest.raises(UserError, match=r"^ScanSettings max_length=100 is more than the model's 64 positions; set "
                                        r"ScanSettings max_length=64 or less\.$"):
        scan(load_model(saved_models["artifact"]), synthetic_pairs(5),
             ScanSettings(methods=("entropy",), experiments=(), probes=False, max_length=100))


@pytest.mark.parametrize("command, key", [("finetune", "model"), ("distill", "teacher")])
@pytest.mark.parametrize("given", ["file", "--set"])
def test_a_recipes_max_length_over_the_positions_names_its_source_before_any_model_loads(
        tmp_path, saved_models, monkeypatch, command, key, given):
    """Was: "max length 100 is more than the model's 64 positions; set max_length=64 or less", naming neither the
    recipe file nor the --set, and said only once the data was read and the models loaded (the model's config says
    its positions)."""
    import headcut.distill.run
    import headcut.distill.students
    import headcut.finetune

    def no_load(*args, **kwargs):
        raise AssertionError("a model was loaded before the recipe's max_length was checked")

    for module in (headcut.finetune, headcut.distill.run, headcut.distill.students):
        monkeypatch.setattr(module, "load_model", no_load)
    model = saved_models["plain" if command == "finetune" else "artifact"]  # 64 positions
    text = f"{key}: {model}\ntrain_data: synthetic\n" + ("keep_layers: 1\n" if command == "distill" else "")
    recipe = write(tmp_path, "r.yaml", text + ("max_length: 100\n" if given == "file" else ""))
    where = f"{recipe} with --set max_length=100" if given == "--set" else str(recipe)
    args = ["--set", "max_length=100"] if given == "--set" else []
    refused(run(command, recipe, "--out", tmp_path / "o", *args),
            f"error: {where}: max_length=100 is more than the {key}'s 64 positions; set max_length=64 or less.")
    assert not (tmp_path / "o").exists() and not (tmp_path / "o.partial").exists()


# --- 10. recipe fields have ranges too; a refused recipe leaves no OUT.partial ----------------------

def _recipe_classes():
    from headcut.distill import DistillRecipe
    from headcut.finetune import FinetuneRecipe

    return {"finetune/minilm_synthetic_cpu": FinetuneRecipe, "distill/minilm_bottom3_cpu": DistillRecipe}


def _numeric_fields():
    import dataclasses
    import typing

    out = []
    for name, cls in _recipe_classes().items():
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            hint = hints[f.name]
            kinds = {hint, *typing.get_args(hint)}
            for inner in list(kinds):
                kinds |= set(typing.get_args(inner))
            if kinds & {int, float} and f.name != "grades":  # grades are names of classes, not quantities
                out.append((name, cls, f))
    return out


RECIPE_FIELDS = _numeric_fields()


@pytest.mark.parametrize("recipe, cls, f", RECIPE_FIELDS, ids=[f"{r} {f.name}" for r, _, f in RECIPE_FIELDS])
def test_10_every_numeric_recipe_field_has_a_checked_range(recipe, cls, f):
    from headcut.recipes import load_recipe

    valid = f.metadata.get("range")
    assert valid is not None, f"{cls.__name__}.{f.name} has no range"
    bad = []
    if valid.low is not None:
        bad.append(valid.low if valid.low_open else valid.low - 1)
    if valid.high is not None:
        bad.append(valid.high if valid.high_open else valid.high + 1)
    if float in {*__import__("typing").get_args(f.type), f.type} or "float" in str(f.type):
        bad += [".nan", ".inf"]
    extra = ["train_data=synthetic", "teacher=minilm-l6"] if "distill" in recipe else []
    for value in bad:
        value = [value] if "tuple" in str(f.type) else value
        with pytest.raises(UserError, match=rf"key '{f.name}' is .*(out of range|not a finite number); it must be"):
            load_recipe(cls, recipe,
                        overrides=extra + [f"{f.name}={json.dumps(value) if isinstance(value, list) else value}"])


@pytest.mark.parametrize("override", ["gradient_accumulation=0", "warmup_ratio=2", "epochs=-1", "learning_rate=.nan"])
def test_10_finetune_refuses_the_recipe_and_leaves_no_partial(tmp_path, override):
    out = tmp_path / "teacher"
    result = run("finetune", "finetune/minilm_synthetic_cpu", "--out", out, "--set", override,
                 "--set", "train_rows=40", "--set", "dev_rows=20",
                 "--set", "epochs=0.05" if "epochs" not in override else "seed=0")
    refused(result, override.split("=")[0])
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_10_a_bad_data_file_leaves_no_partial(tmp_path):
    out = tmp_path / "teacher"
    bad = write(tmp_path, "train.tsv", "query\ttitle\tgrade\ndrill\tcordless\tnan\n")
    refused(run("finetune", "finetune/minilm_synthetic_cpu", "--out", out, "--train", bad), "line 2")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.tsv"]


# --- 9. NaN head scores: an error for a present head, never pruned first ----------------------------

def test_9_ablation_nan_for_a_present_head_is_an_error():
    import numpy as np

    from conftest import tiny_model
    from headcut.evaluate.criteria import ablation_scores

    model = tiny_model("bert")  # 2 layers x 4 heads, all present
    labels = np.array([0, 1, 2])
    base = np.zeros((3, 5), dtype=np.float32)
    masked = np.zeros((2, 4, 3, 5), dtype=np.float32)
    masked[1, 2, 0, 0] = np.nan
    for method in ("ablation", "kl"):
        with pytest.raises(UserError, match=r"L1H2.*not a number"):
            ablation_scores(model, labels, base, masked, method=method)


def test_9_scan_scores_nan_is_an_error_not_minus_inf(monkeypatch):
    import numpy as np

    from conftest import tiny_model
    from headcut.evaluate import criteria
    from headcut.prune.scores import scan_scores
    from test_scan_importance import CharTokenizer, toy_pairs

    def nan_at_l0h1(data):
        scores = np.ones((2, 4))
        scores[0, 1] = np.nan
        return scores, None

    monkeypatch.setitem(criteria.CRITERIA, "nan", criteria.Criterion("nan", "a NaN for L0H1", nan_at_l0h1))
    with pytest.raises(UserError, match=r"L0H1.*not a number"):
        scan_scores(tiny_model("bert"), CharTokenizer(), toy_pairs(), method="nan")


@pytest.mark.parametrize("bad", ["NaN", "Infinity", "-Infinity", '"high"', "true"])
def test_9_a_score_file_with_nan_is_refused_with_its_head(tmp_path, bad):
    import torch

    from conftest import tiny_model
    from headcut.evaluate.importance import write_scores
    from headcut.models import LoadedModel
    from headcut.prune.scores import scores_from_file

    path = tmp_path / "importance.json"
    write_scores(path, {"fisher": torch.arange(8.0).view(2, 4)}, model_info={}, data_info={})
    doc = path.read_text().replace("5.0", bad, 1)
    path.write_text(doc)
    loaded = LoadedModel(tiny_model("bert"), None, {}, "tiny", "")
    with pytest.raises(UserError, match=r"importance.json.*L1H1"):
        scores_from_file(path, loaded)


# --- 11 / 12. broken model folders; pickle weights of a pruned artifact ------------------------------

@pytest.fixture(scope="module")
def saved_models(tmp_path_factory):
    """A headcut artifact (shape record, safetensors) and a plain Hugging Face folder of the same tiny BERT."""
    from conftest import tiny_model
    from headcut.models import LoadedModel, save_model
    from test_export import tiny_tokenizer

    root = tmp_path_factory.mktemp("bad-models")
    tokenizer = tiny_tokenizer(root / "tok")
    model = tiny_model("bert", vocab_size=len(tokenizer), max_position_embeddings=64)
    artifact = save_model(LoadedModel(model, tokenizer, {"grades": [1, 2, 3, 4, 5]}, "tiny", ""), root / "artifact")
    plain = root / "plain"
    model.save_pretrained(plain)
    tokenizer.save_pretrained(plain)
    return {"artifact": artifact, "plain": plain}


def _copy(folder, tmp_path):
    import shutil

    return shutil.copytree(folder, tmp_path / folder.name)


@pytest.mark.parametrize("kind", ["artifact", "plain"])
@pytest.mark.parametrize("damage", ["half", "100 bytes", "random"])
def test_11_damaged_weights_name_the_file(tmp_path, saved_models, kind, damage):
    from headcut.models import load_model

    folder = _copy(saved_models[kind], tmp_path)
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2] if damage == "half" else data[:100] if damage == "100 bytes"
                        else os.urandom(5000))
    with pytest.raises(UserError, match=r"model.safetensors .*(damaged|incomplete)"):
        load_model(folder)
    refused(run("evaluate", "--model", folder, "--data", "synthetic", "--limit", "10"), "model.safetensors")


@pytest.mark.parametrize("kind", ["artifact", "plain"])
@pytest.mark.parametrize("extra, missing", [(["pooler.extra"], False), ([f"extra.{i}" for i in range(5)], False),
                                            (["pooler.extra"], True), ([], True)])
def test_11_weights_of_another_config_are_not_called_damaged(tmp_path, saved_models, kind, extra, missing):
    """Was: an intact model.safetensors holding a tensor its config does not declare was "damaged or incomplete
    (... Unexpected key(s) ...)"; it now names the file, the first few extra weights and the config to put back.
    A weight the config declares and the file lacks (its header intact) is the same mismatch, said the same way."""
    import torch
    from safetensors.torch import load_file, save_file

    from headcut.models import load_model

    folder = _copy(saved_models[kind], tmp_path)
    weights = folder / "model.safetensors"
    state = load_file(weights)
    state.update({name: torch.zeros(2, 2) for name in extra})
    if missing:
        state.pop("bert.encoder.layer.0.output.dense.weight")
    save_file(state, weights, metadata={"format": "pt"})
    with pytest.raises(UserError) as caught:
        load_model(folder)
    said = str(caught.value)
    if missing:
        assert said == (f"{weights} lacks bert.encoder.layer.0.output.dense.weight, which the model "
                        f"{folder / 'config.json'} describes has; put back the config.json saved with these weights, "
                        "or copy or download the model folder again."), said
    else:
        shown = ", ".join(extra[:3]) + (" and 2 more" if len(extra) > 3 else "")
        assert said == (f"{weights} holds {shown}, which the model {folder / 'config.json'} describes lacks; put "
                        "back the config.json saved with these weights, or copy or download the model folder again.")


@pytest.mark.parametrize("kind", ["artifact", "plain"])
@pytest.mark.parametrize("name, text", [("config.json", "{not json"), ("config.json", "[1, 2]"),
                                        ("headcut.json", "{not json"), ("tokenizer.json", "{not json")])
def test_11_invalid_json_files_name_the_file(tmp_path, saved_models, kind, name, text):
    from headcut.models import load_model

    folder = _copy(saved_models[kind], tmp_path)
    (folder / name).write_text(text)
    with pytest.raises(UserError, match=rf"{name}"):
        load_model(folder)


def test_12_allow_pickle_loads_a_pruned_artifact_saved_as_pytorch_model_bin(tmp_path, saved_models):
    import torch
    from safetensors.torch import load_file

    from headcut.models import load_model

    folder = _copy(saved_models["artifact"], tmp_path)
    state = load_file(folder / "model.safetensors")
    torch.save(state, folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    with pytest.raises(UserError, match="allow_pickle=True"):  # a Python caller's argument, not the CLI's flag
        load_model(folder)
    for given in ("no", "False", 0):  # was: truthy, so pickle weights loaded (and could run code) though refused
        with pytest.raises(UserError, match=rf"^allow_pickle is {given!r}; pass True or False\.$"):
            load_model(folder, allow_pickle=given)
    loaded = load_model(folder, allow_pickle=True)
    assert all(torch.equal(loaded.model.state_dict()[k], v) for k, v in state.items())


def _not_a_state_dict(kind):
    import pickle

    import torch

    if kind == "pickled object":  # torch's weights-only refusal runs to several long sentences
        return pickle.dumps({"weight": object()})
    if kind == "a list":
        import io

        buffer = io.BytesIO()
        torch.save([1, 2, 3], buffer)
        return buffer.getvalue()
    return {"text": b"not weights at all", "empty": b""}[kind]


@pytest.mark.parametrize("model", ["artifact", "plain"])
@pytest.mark.parametrize("kind", ["pickled object", "a list", "text", "empty"])
def test_12_a_bin_that_is_not_a_state_dict_is_one_sentence_of_ours(tmp_path, saved_models, model, kind):
    """Was: torch's notice cut mid-sentence at 200 characters, '(101)', or an AttributeError traceback."""
    folder = _copy(saved_models[model], tmp_path)
    (folder / "model.safetensors").unlink()
    (folder / "pytorch_model.bin").write_bytes(_not_a_state_dict(kind))
    result = run("evaluate", "--model", folder, "--allow-pickle", "--data", "synthetic", "--limit", "10")
    refused(result, f"{folder / 'pytorch_model.bin'} is not a PyTorch state dict",
            "torch.save(model.state_dict())", "model.safetensors")
    text = result.output.strip()
    assert len(text.splitlines()) == 1 and text.endswith(".") and "In PyTorch 2.6" not in text, text


# --- 13. a corrupt model.onnx in a grader folder ---------------------------------------------------

@pytest.mark.parametrize("damage", ["truncated", "random"])
def test_13_corrupt_onnx_names_the_file(tmp_path, tiny_grader, damage):
    from headcut_grader.grader import Grader

    folder = _copy(tiny_grader, tmp_path)
    model = folder / "model.onnx"
    data = model.read_bytes()
    model.write_bytes(data[: len(data) // 2] if damage == "truncated" else os.urandom(len(data)))
    with pytest.raises(UserError, match=r"model.onnx .*(damaged|incomplete)"):
        Grader(folder)
    pairs = write(tmp_path, "pairs.tsv", PAIRS_TSV)
    refused(run("grade", folder, pairs, "--out", tmp_path / "g.tsv"), "model.onnx")
    refused(run("evaluate", "--model", folder, "--data", pairs), "model.onnx")


@pytest.mark.parametrize("name, text", [("grader.json", "{not json"), ("grader.json", "[]"),
                                        ("tokenizer.json", "{not json")])
def test_13_invalid_grader_files_name_the_file(tmp_path, tiny_grader, name, text):
    from headcut_grader.grader import Grader

    folder = _copy(tiny_grader, tmp_path)
    (folder / name).write_text(text)
    with pytest.raises(UserError, match=rf"{name}"):
        Grader(folder)


def _set_max_length(folder, value):
    record = json.loads((folder / "grader.json").read_text())
    record["max_length"] = value
    (folder / "grader.json").write_text(json.dumps(record))
    return folder


@pytest.mark.parametrize("max_length, words", [
    (300, "'max_length' is 300, but the graph has position embeddings for at most 128 tokens"),
    (4, "'max_length' is 4, but a pair needs at least 5 tokens"),
])
def test_13_a_max_length_the_graph_or_a_pair_cannot_take_is_refused(tmp_path, tiny_grader, max_length, words):
    """The tiny grader's graph embeds 128 positions and its tokenizer adds 3 special tokens to a pair. Before: 300
    graded short titles, then a long one stopped with an ONNX Runtime kernel error and a traceback; 2..4 tokens
    graded pairs without a title (or, at 2, not truncated at all)."""
    import subprocess
    import sys

    folder = _set_max_length(_copy(tiny_grader, tmp_path), max_length)
    pairs = write(tmp_path, "pairs.tsv", PAIRS_TSV + "drill\t" + "cordless drill in black " * 100 + "\t3\n")
    done = subprocess.run([sys.executable, "-m", "headcut_grader", "grade", str(folder), str(pairs), "--out",
                           str(tmp_path / "g.tsv")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and words in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "g.tsv").exists()
    refused(run("evaluate", "--model", folder, "--data", pairs), words)


# --- the same classes elsewhere ------------------------------------------------------------------

def test_class_serve_refuses_a_damaged_grader_and_a_taken_port(tmp_path, tiny_grader):
    import socket
    import subprocess
    import sys

    def serve(folder, port, host="127.0.0.1"):
        return subprocess.run([sys.executable, "-m", "headcut", "serve", str(folder), "--host", host,
                               "--port", str(port)], capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})

    folder = _copy(tiny_grader, tmp_path)
    (folder / "model.onnx").write_bytes(b"\x00" * 100)
    done = serve(folder, 1)
    assert done.returncode == 2 and "model.onnx" in done.stderr and "Traceback" not in done.stderr, done.stderr
    with socket.create_server(("127.0.0.1", 0)) as taken:
        done = serve(tiny_grader, taken.getsockname()[1])
    assert done.returncode == 2 and "cannot listen" in done.stderr and "Traceback" not in done.stderr, done.stderr
    done = serve(tiny_grader, 8000, host="")  # the socket layer would read it as every interface
    assert done.returncode == 2 and "--host is empty, which would listen on every interface; pass 127.0.0.1 (this " \
        "machine only) or 0.0.0.0 (the network) on purpose" in " ".join(done.stderr.split()), done.stderr


LONG = "x" * 300  # one name of 300 bytes: past the 255 a file or folder name may have


@pytest.mark.parametrize("args, named", [
    (["grade", "g", "p.tsv", "--out", f"{LONG}/o.tsv"], f"--out {LONG}/o.tsv"),
    (["grade", "g", f"{LONG}.tsv", "--out", "o.tsv"], f"{LONG}.tsv"),
    (["grade", LONG, "p.tsv", "--out", "o.tsv"], LONG),
    (["serve", LONG], LONG),
    (["finetune", "--out", LONG], f"--out {LONG}"),
    (["finetune", f"{LONG}.yaml", "--out", "o"], f"{LONG}.yaml"),
    (["evaluate", "--model", "minilm-l6", "--data", f"{LONG}.tsv"], f"{LONG}.tsv"),
    (["scan", "--model", LONG, "--data", "p.tsv", "--out", "s"], LONG),
    (["export", f"{LONG}/m", "--out", "g"], f"{LONG}/m"),
    (["export", "minilm-l6", "--out", f"{LONG}/g"], f"--out {LONG}/g"),
    (["run", f"{LONG}.yaml", "--out", "o"], f"{LONG}.yaml"),
])
def test_class_a_name_longer_than_the_file_system_takes_is_a_sentence(tmp_path, monkeypatch, args, named):
    """Was: OSError 36 (File name too long) and a traceback from whichever call met the path first."""
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "p.tsv", "query\ttitle\tgrade\ndrill\tcordless drill\t3\n")
    result = run(*args)
    refused(result, f"error: {named}: the name 'xxxxxxxxxxxxxxxxxxxxxxxx...' is 30")
    assert result.output.rstrip().endswith("; use a shorter name.") and len(result.output.splitlines()) == 1


def test_class_an_output_name_leaves_room_for_the_files_written_beside_it(tmp_path):
    """A 240-byte `grade --out` name was taken, and writing its partial state (`.NAME.partial.json`, through a
    longer temporary) failed after the first chunk was graded, blaming the folder's permissions and leaving
    `.NAME.partial` behind; now refused before any work."""
    from headcut_grader.files import check_out_dir, check_out_file

    check_out_file(tmp_path / ("x" * 200), overwrite=False)
    with pytest.raises(UserError, match=r"the name 'x+\.\.\.' is 240 bytes, and an output's name may have at most "
                                        r"\d+ \(255 less room for the files written beside it\); "
                                        r"use a shorter name\.$"):
        check_out_file(tmp_path / ("x" * 240), overwrite=False)
    with pytest.raises(UserError, match=f"^--into {re.escape(str(tmp_path / LONG / 'out'))}: the name"):
        check_out_dir(tmp_path / LONG / "out", overwrite=False, flag="--into")


def test_class_fifo_score_file_and_recipe_are_refused(tmp_path):
    from headcut.distill import DistillRecipe
    from headcut.evaluate.importance import read_scores
    from headcut.recipes import load_recipe

    for name in ("importance.json", "r.yaml"):
        os.mkfifo(tmp_path / name)
    with pytest.raises(UserError, match=r"not a regular file .*; save the scores \(`headcut scan` writes importance"):
        read_scores(tmp_path / "importance.json")  # was told to "save the pairs to a file"
    with pytest.raises(UserError, match="not a regular file"):
        load_recipe(DistillRecipe, tmp_path / "r.yaml")


def test_class_a_damaged_run_stamp_is_a_sentence(tmp_path):
    from headcut.run_folder import RunFolder

    out = tmp_path / "teacher"
    (tmp_path / "teacher.partial").mkdir()
    (tmp_path / "teacher.partial" / "recipe.json").write_text('{"hash": "ab')  # killed mid-write
    with pytest.raises(UserError, match="pass overwrite=True to start afresh"):
        RunFolder.open(out, "abc", {}, overwrite=False)
    assert RunFolder.open(out, "abc", {}, overwrite=True).path.is_dir()


@pytest.mark.parametrize("grades", ["[]", "[3]", "[1, 1, 2]"])
def test_class_recipe_grades_need_two_different_values(grades):
    from headcut.finetune import FinetuneRecipe
    from headcut.recipes import load_recipe

    with pytest.raises(UserError, match="key 'grades'"):
        load_recipe(FinetuneRecipe, "finetune/minilm_synthetic_cpu", overrides=[f"grades={grades}"])


@pytest.mark.parametrize("flag, value", [("--seq-lens", "0,64"), ("--seq-lens", "64,100000"),
                                         ("--batch-sizes", "1,100000")])
def test_class_bench_lists_have_ranges(tmp_path, flag, value):
    refused(run("bench", "-m", "minilm-l6", "--data", "synthetic", "--out", tmp_path / "b", flag, value), flag)


def test_class_a_full_disk_inside_an_output_folder_is_a_sentence(tmp_path):
    import errno

    from headcut_grader.files import atomic_dir

    with pytest.raises(UserError, match="No space left"):
        with atomic_dir(tmp_path / "out"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    assert list(tmp_path.iterdir()) == []


# how torch and safetensors say that the disk filled as they wrote (seen on a 400 KiB tmpfs): no OSError
TORCH_FULL = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")
SAFETENSORS_FULL = RuntimeError("Error while serializing: I/O error: No space left on device (os error 28)")


def disk_full(monkeypatch) -> None:
    import shutil
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(1 << 20, 1 << 20, 0))


@pytest.mark.parametrize("error, full", [(TORCH_FULL, True), (SAFETENSORS_FULL, False)])
def test_class_a_full_disk_a_library_reports_without_an_errno_is_a_sentence(tmp_path, monkeypatch, error, full):
    """Was: a traceback of torch's RuntimeError (or safetensors' error) from inside save_model's folder."""
    from headcut_grader.files import atomic_dir

    if full:
        disk_full(monkeypatch)
    with pytest.raises(UserError, match=r"out: writing failed \(No space left on device\); check free space"):
        with atomic_dir(tmp_path / "out"):
            raise error
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    with pytest.raises(RuntimeError, match="unexpected pos"):  # on a disk with room it is no write fault
        with atomic_dir(tmp_path / "out"):
            raise TORCH_FULL


@pytest.mark.parametrize("error", [
    KeyError("teacher"),  # a bug, not a full disk: was 'writing failed (No space left on device)', traceback dropped
    RuntimeError("Error while deserializing header: Permission denied (os error 13)"),  # a read: was 'writing failed'
    PermissionError(13, "Permission denied", "/etc/an-input.tsv"),  # a read of an input outside the folder written
])
def test_an_error_that_is_no_failed_write_propagates_from_atomic_dir_even_on_a_full_disk(tmp_path, monkeypatch,
                                                                                           error):
    from headcut_grader.files import atomic_dir

    disk_full(monkeypatch)
    with pytest.raises(type(error)) as raised:
        with atomic_dir(tmp_path / "out"):
            raise error
    assert raised.value is error and list(tmp_path.iterdir()) == []


def test_a_checkpoint_error_that_is_no_failed_write_keeps_its_cause(tmp_path):
    """Was: `raise _unsaved(...) from None` dropped the cause of an error _unsaved returns as it is."""
    from headcut.training import LoopState, _checkpoint

    class Accelerator:
        is_main_process = True

        def wait_for_everyone(self):
            pass

        def save_state(self, folder):
            try:
                {}["model"]
            except KeyError as e:
                raise ValueError("no model to save") from e

    with pytest.raises(ValueError) as raised:
        _checkpoint(Accelerator(), tmp_path / "checkpoint", LoopState(step=1))
    assert isinstance(raised.value.__cause__, KeyError)


def test_class_a_full_disk_while_a_checkpoint_is_written_is_a_sentence_and_keeps_the_last_one(tmp_path, monkeypatch):
    """Was: a traceback of torch's RuntimeError from accelerate's save_state, out of `headcut run`, finetune and
    distill alike; the half-written checkpoint is removed, the last whole one kept for the rerun."""
    from headcut.training import LoopState, _checkpoint, checkpoint_step

    class Accelerator:
        is_main_process = True

        def __init__(self, fails: bool):
            self.fails = fails

        def wait_for_everyone(self):
            pass

        def save_state(self, folder):
            Path(folder).mkdir(parents=True)
            (Path(folder) / "optimizer.bin").write_bytes(b"half")
            if self.fails:
                raise TORCH_FULL

    ckpt = tmp_path / "model.partial" / "checkpoint"
    _checkpoint(Accelerator(fails=False), ckpt, LoopState(step=5))
    disk_full(monkeypatch)
    with pytest.raises(UserError) as raised:
        _checkpoint(Accelerator(fails=True), ckpt, LoopState(step=10))
    assert str(raised.value) == (f"{ckpt}: writing the checkpoint failed (No space left on device); check free space "
                                 "and permissions, then rerun: it resumes from the checkpoint of step 5.")
    assert sorted(p.name for p in ckpt.parent.iterdir()) == ["checkpoint"] and checkpoint_step(ckpt.parent) == 5


@pytest.mark.parametrize("name, text", [
    ("a.jsonl", '{"query": ' + "[" * 100_000 + "]" * 100_000 + ', "title": "x", "grade": 3}\n'),
    ("a.json", "[" * 100_000 + "]" * 100_000),
])
def test_class_deeply_nested_json_is_a_sentence(tmp_path, name, text):
    with pytest.raises(UserError, match=r"a.json.*(nested too deeply|JSON)"):
        read_pairs(write(tmp_path, name, text))


@pytest.mark.parametrize("content, override, words", [
    (b"epochs: 1\n\xff\xfe\n", None, "UTF-8"),
    (b"train_data: synthetic\n", "epochs=[", "--set"),
    (b"train_data: synthetic\nlayer_map: " + b"[" * 50_000 + b"]" * 50_000 + b"\n", None, "nested"),
    # Was: Python's int-length ValueError, a traceback, as JSON inputs were before (test_class_a_number_of_thousands)
    # now a whole number of that size, out of the key's range (test_recipes.test_a_decimal_where_a_whole_number_goes)
    (b"train_data: synthetic\nbatch_size: " + b"7" * 5001 + b"\n", None, "key 'batch_size' is a whole number of 5,001 "
     "digits, which is out of range"),
    (b"train_data: synthetic\n", "learning_rate=" + "7" * 5001, "key 'learning_rate' is a whole number of 5,001 "
     "digits, which is out of range"),
])
def test_class_unreadable_recipes_are_a_sentence(tmp_path, content, override, words):
    from headcut.finetune import FinetuneRecipe
    from headcut.recipes import load_recipe

    path = write(tmp_path, "r.yaml", content)
    with pytest.raises(UserError, match=words):
        load_recipe(FinetuneRecipe, path, overrides=[override] if override else [])


@pytest.mark.parametrize("name", ["r.yaml", "importance.json", "grader.json", "headcut.json", "state.json"])
def test_class_a_huge_recipe_or_record_is_refused_by_its_size_before_it_is_read(tmp_path, name):
    """A 100 MB recipe, score file, grader.json, model record or grading state (sparse: no disk) was read whole
    and then parsed (a 6 MB YAML list took 1.4 GB and 53 s); now one sentence naming the file and its size."""
    from headcut.evaluate.importance import read_scores
    from headcut.models import read_json_file
    from headcut.recipes import read_recipe_file
    from headcut_grader.grade_file import _read_state
    from headcut_grader.grader import read_record

    path = tmp_path / name
    with open(path, "wb") as f:
        f.truncate(100_000_000)
    if name == "state.json":  # a grading run's own file: said to be damaged, as other damage is
        assert _read_state(path) == (None, "it is over 64,000,000 bytes")
        return
    read = {"r.yaml": read_recipe_file, "importance.json": read_scores, "grader.json": lambda p: read_record(p.parent),
            "headcut.json": read_json_file}[name]
    with pytest.raises(UserError, match=rf"^{re.escape(str(path))} is 100,000,000 bytes, and a [a-z' ]+ is at most "
                                        r"[\d,]+ bytes; check that it is the right file\.$"):
        read(path)
    if name == "r.yaml":
        refused(run("finetune", path, "--out", tmp_path / "out"),
                f"{path} is 100,000,000 bytes, and a recipe is at most 1,000,000 bytes")


def test_9_prune_scores_with_nan_exits_2_naming_the_head(tmp_path, saved_models):
    import torch

    from headcut.evaluate.importance import write_scores

    path = tmp_path / "importance.json"
    scores = torch.arange(8.0).view(2, 4)
    write_scores(path, {"fisher": scores}, model_info={}, data_info={})
    path.write_text(path.read_text().replace("6.0", "NaN", 1))
    refused(run("prune", "--model", saved_models["artifact"], "--keep-ratio", "0.5", "--scores", path,
                "--out", tmp_path / "pruned", "--no-timing"), "L1H2", "NaN")
    assert not (tmp_path / "pruned").exists()


def test_class_a_damaged_study_db_is_a_sentence(tmp_path):
    from headcut.distill import DistillRecipe
    from headcut.distill.tune import STUDY_FILE, tune
    from headcut.recipes import load_recipe

    recipe = load_recipe(DistillRecipe, "distill/minilm_bottom3_cpu",
                         overrides=["train_data=synthetic", "teacher=minilm-l6"])
    out = tmp_path / "study"
    out.mkdir()
    (out / STUDY_FILE).write_bytes(os.urandom(4096))  # a disk error, or a copy cut short
    with pytest.raises(UserError, match=r"study.db.*pass overwrite=True"):
        tune(recipe, out, trials=1)


@pytest.mark.parametrize("name, make", [("study.db", "folder"), ("tune.json", "folder"), ("trials", "file"),
                                        ("study.db", "broken link")])
@pytest.mark.parametrize("overwrite", [False, True])
def test_class_a_search_s_own_file_of_the_wrong_kind_is_refused_before_any_trial(tmp_path, name, make, overwrite):
    """Was: a folder named study.db was 'damaged ... pass overwrite=True', and the run with it an IsADirectoryError
    traceback (the study's unlink); a file named trials failed when the first trial's folder was made. Now each is
    one sentence naming it, with or without overwrite (a user's folder is never deleted), and nothing is trained."""
    from headcut.distill import DistillRecipe
    from headcut.distill.tune import tune
    from headcut.recipes import load_recipe

    recipe = load_recipe(DistillRecipe, "distill/minilm_bottom3_cpu",
                         overrides=["train_data=synthetic", "teacher=minilm-l6"])
    out = tmp_path / "study"
    out.mkdir()
    path = out / name
    if make == "folder":
        (path / "kept.txt").parent.mkdir()
        (path / "kept.txt").write_text("mine")
    elif make == "file":
        path.write_text("mine")
    else:
        path.symlink_to(tmp_path / "gone")
    kind = {"folder": "a folder", "file": "a file", "broken link": "a broken link"}[make]
    with pytest.raises(UserError, match=rf"holds {re.escape(name)}, which is {kind}, .*move .*{name} away"):
        tune(recipe, out, trials=1, overwrite=overwrite)
    assert sorted(p.name for p in out.iterdir()) == [name]
    assert make != "folder" or (path / "kept.txt").read_text() == "mine"


@pytest.mark.parametrize("where", ["create_study", "ask"])
def test_class_a_full_disk_while_the_study_db_is_written_is_a_sentence(tmp_path, monkeypatch, where):
    """sqlite says a full disk as 'database or disk is full' (seen on a 200 KiB tmpfs): opening the study said
    'study.db is damaged (database or disk is full); pass overwrite=True', and a write mid-search (ask, tell) was
    sqlite's traceback. Now one sentence through files.write_fault, at either place."""
    import sqlite3

    import optuna
    from sqlalchemy.exc import OperationalError

    from headcut.distill import DistillRecipe
    from headcut.distill.tune import tune
    from headcut.recipes import load_recipe

    def full(*args, **kwargs):
        raise OperationalError("INSERT INTO studies", {}, sqlite3.OperationalError("database or disk is full"))

    recipe = load_recipe(DistillRecipe, "distill/minilm_bottom3_cpu",
                         overrides=["train_data=synthetic", "teacher=minilm-l6"])
    out = tmp_path / "study"
    monkeypatch.setattr(optuna if where == "create_study" else optuna.Study, where, full)
    disk_full(monkeypatch)
    with pytest.raises(UserError) as err:
        tune(recipe, out, trials=1)
    assert str(err.value) == (f"{out}/study.db: writing the study failed (No space left on device); check free space "
                              "and permissions, then rerun: it continues the study (finished trial folders are "
                              "reused).")



@pytest.mark.parametrize("case", ["open", "write", "folder", "writable folder", "another's study", "another's folder"])
def test_class_a_read_only_study_db_or_folder_is_said_so_not_damaged(tmp_path, monkeypatch, case):
    """sqlite's 'attempt to write a readonly database' (study.db or its folder read-only) was optuna's traceback
    (StorageInternalError, raised from sqlite's error), and 'unable to open database file' (a read-only folder, no
    study.db yet) 'study.db is damaged ...; pass overwrite=True', which throws the study away. Root ignores file
    modes, so sqlite is given the study read-only by its URI (mode=ro): its own errors, through the same code."""
    import optuna

    from headcut.distill import DistillRecipe
    from headcut.distill.tune import STUDY_FILE, study_name, tune
    from headcut.recipes import load_recipe

    recipe = load_recipe(DistillRecipe, "distill/minilm_bottom3_cpu",
                         overrides=["train_data=synthetic", "teacher=minilm-l6"])
    out = tmp_path / "study"
    db, create = out / STUDY_FILE, optuna.create_study
    if "folder" not in case:
        out.mkdir()
        create(study_name=study_name(recipe), storage=f"sqlite:///{db}")  # the study, as an earlier search made it
    before = db.read_bytes() if "folder" not in case else None
    read_only = f"sqlite:///file:{db}?mode=ro&uri=true"

    def opened_read_only(**kwargs):  # open: create_study writes first; write: the study opens, its first write fails
        if case == "write":
            return optuna.load_study(study_name=kwargs["study_name"], storage=read_only, sampler=kwargs["sampler"])
        return create(**{**kwargs, "storage": read_only})

    monkeypatch.setattr(optuna, "create_study", opened_read_only)
    access = os.access  # root may write anywhere: the folder is read-only as a user's would be (case "folder")
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: (case not in ("folder", "another's folder")
                                                              or Path(path) != out)
                        and access(path, mode, **kw))
    if "another" in case:  # study.db (or the folder) is another user's: this process runs as uid 4242, not its owner
        real, owned = os.stat, db if case == "another's study" else out
        monkeypatch.setattr(os, "geteuid", lambda: 4242)
        monkeypatch.setattr(os, "stat", lambda path, *a, **kw: _owned_by(real(path, *a, **kw), OTHER_UID)
                            if isinstance(path, (str, os.PathLike)) and Path(path) == owned else
                            _owned_by(real(path, *a, **kw), 4242))
    with pytest.raises(UserError) as err:
        tune(recipe, out, trials=1)
    if case == "writable folder":  # sqlite's 'unable to open' has other causes: not said to be the folder's mode
        assert str(err.value) == (f"{db} is damaged (unable to open database file); pass overwrite=True to start a "
                                  "fresh study (finished trial folders are reused).")
        return
    another = ("another user ({}), whose mode only they can change: ask them to let this user write it, then rerun "
               "(it continues the study), or choose another out for a study of this user's own.")
    if case == "folder":
        held = (f"(unable to open database file), as {out} is read-only to this user, so study.db cannot be made in "
                f"it; make it writable (chmod u+w {out})")
    elif case == "another's folder":  # was: told to chmod u+w, which only the owner may
        held = (f"(unable to open database file), as {out} is read-only to this user, so study.db cannot be made in "
                f"it, and {out} belongs to " + another.format(f"uid {OTHER_UID}"))
    elif case == "another's study":
        held = (f"(attempt to write a readonly database), as {db} or its folder is read-only to this user, and {db} "
                "belongs to " + another.format(f"uid {OTHER_UID}"))
    else:
        held = (f"(attempt to write a readonly database), as {db} or its folder is read-only to this user; make both "
                f"writable (chmod u+w {out} {db})")
    if "another" in case:
        assert str(err.value) == f"{db}: the study cannot be written {held}"
    else:
        assert str(err.value) == (f"{db}: the study cannot be written {held}, then rerun: it continues the study "
                                  "(finished trial folders are reused).")
    assert (db.read_bytes() if "folder" not in case else None) == before  # kept as it was


OTHER_UID = 54321  # a uid no user of the test machine has: said as a number


def _owned_by(result: os.stat_result, uid: int) -> os.stat_result:
    """`result` as if user `uid` owned the file."""
    fields = list(result)
    fields[stat.ST_UID] = uid
    return os.stat_result(fields)


# --- run-folder sweep: file modes, outputs beside inputs ------------------------------------------

def _checksums(folder):
    import hashlib

    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("command", [
    ["prune", "--model", "{model}", "--flops", "0.5", "--data", "synthetic", "--no-timing"],
    ["export", "{model}"],
    ["scan", "--model", "{model}", "--data", "synthetic"],
    # keep_layers=1: the recipe's 3 is refused for the 2-layer model when the recipe is read, before --out is looked at
    ["distill", "distill/minilm_synthetic_cpu", "--set", "teacher={model}", "--set", "keep_layers=1"],
    ["finetune", "finetune/minilm_synthetic_cpu", "--set", "model={model}"],
    ["run", "quickstart", "--set", "teacher.recipe=null", "--set", "teacher.path={model}"],
])
@pytest.mark.parametrize("where", ["inside", "equal"])
def test_run_an_output_folder_inside_its_input_folder_is_refused(tmp_path, saved_models, command, where):
    import shutil

    model = shutil.copytree(saved_models["artifact"], tmp_path / "model")
    meta = json.loads((model / "headcut.json").read_text())
    (model / "headcut.json").write_text(json.dumps({**meta, "max_length": 24}))  # within its 64 positions
    before = _checksums(model)
    out = model / "out" if where == "inside" else model
    args = [a.replace("{model}", str(model)) for a in command]
    refused(run(*args, "--out", out, "--overwrite"), f"--out {out}", "input")
    assert _checksums(model) == before and sorted(p.name for p in model.iterdir()) == sorted(before)


@pytest.mark.parametrize("umask, folder_mode, file_mode", [(0o022, 0o755, 0o644), (0o027, 0o750, 0o640)])
def test_run_outputs_follow_the_umask(tmp_path, saved_models, umask, folder_mode, file_mode):
    """A grader exported by one user is read by a service account: no 0700 folders, no 0600 files."""
    before = os.umask(umask)
    try:
        _write_outputs(tmp_path, saved_models["artifact"])
    finally:
        os.umask(before)
    modes = {str(p.relative_to(tmp_path)): oct(p.stat().st_mode & 0o777) for p in tmp_path.rglob("*")}
    assert len(modes) > 5 and modes == {name: oct(folder_mode if (tmp_path / name).is_dir() else file_mode)
                                        for name in modes}


def _write_outputs(root, model):
    from headcut_grader.files import atomic_dir, write_json
    from headcut.models import load_model, save_model

    with atomic_dir(root / "folder") as tmp:
        (tmp / "inside.txt").write_text("x")
    write_json(root / "record.json", {"a": 1})
    save_model(load_model(model), root / "model")  # safetensors writes its file 0o600 itself


# --- class: a message names only a fix the user has (a real flag, recipe key or the file) -------------

def test_class_a_grade_outside_the_grades_names_a_fix_this_command_has(tmp_path):
    """Was: every command said 'fix it or pass --grades', a flag no command has."""
    path = write(tmp_path, "zero.tsv", "query\ttitle\tgrade\ndrill\tcordless drill\t0\n")
    where = f"{path}, line 2, column 'grade': grade 0 is not one of the grades [1, 2, 3, 4, 5]"
    evaluate = run("evaluate", "--model", "minilm-l6", "--data", path)
    refused(evaluate, where, "--label-map 0:1,1:2,2:3,3:4,4:5")
    grade = run("grade", tmp_path / "no-grader", path, "--out", tmp_path / "o.tsv")
    refused(grade, where, "fix the row or drop it")
    finetune = run("finetune", "finetune/minilm_synthetic_cpu", "--out", tmp_path / "teacher", "--train", path)
    refused(finetune, where, "recipe key 'grades'", "--set grades=")
    for result in (evaluate, grade, finetune):
        assert "--grades" not in result.output and len(result.output.strip().splitlines()) == 1, result.output


@pytest.mark.parametrize("grade, example", [("7", "[1,2,3,4,5,7]"), ("0", "[0,1,2,3,4,5]")])
def test_a_grade_outside_the_recipes_grades_is_told_grades_that_hold_it(tmp_path, grade, example):
    """Was: the example was always --set grades=[0,1,2,3,4], which a file with grade 7 fails again."""
    path = write(tmp_path, "seven.tsv", f"query\ttitle\tgrade\ndrill\tcordless drill\t3\nsaw\thand saw\t{grade}\n")
    result = run("finetune", "finetune/minilm_synthetic_cpu", "--out", tmp_path / "teacher", "--train", path)
    refused(result, f"grade {grade} is not one of the grades", f"--set grades={example}")
    assert len(read_pairs(path, grades=tuple(json.loads(example)))) == 2  # the example reads the file


@pytest.mark.parametrize("grade, example", [("7", "3:1,4:2,5:3,6:4,7:5 for labels 3 to 7"),
                                            ("0", "0:1,1:2,2:3,3:4,4:5 for labels 0 to 4")])
def test_a_grade_outside_the_model_s_grades_is_told_a_label_map_that_holds_it(tmp_path, grade, example):
    """Was: the --label-map example was always 0:1,1:2,2:3,3:4,4:5, which a file with grade 7 fails again."""
    from headcut_grader.data import parse_label_map

    path = write(tmp_path, "seven.tsv", f"query\ttitle\tgrade\ndrill\tcordless drill\t3\nsaw\thand saw\t{grade}\n")
    refused(run("evaluate", "--model", "minilm-l6", "--data", path), f"grade {grade} is not one of the grades",
            f"--label-map {example}")
    label_map = parse_label_map(example.split()[0])
    assert len(read_pairs(path, label_map=label_map)) == 2  # the example reads the file

@pytest.mark.parametrize("flag, value", [("--min-agreement", "0.9"), ("--max-spearman-drift", "0.01"),
                                         ("--max-drop", "2")])
@pytest.mark.parametrize("backend", ["onnxruntime", "openvino"])
def test_an_int8_gate_flag_on_an_fp32_export_is_refused(tmp_path, saved_models, flag, value, backend):
    """The gate's thresholds do nothing to an fp32 graph: refused, not silently ignored, and nothing written."""
    out = tmp_path / "grader"
    refused(run("export", saved_models["artifact"], "--out", out, "--backend", backend, flag, value),
            f"{flag} sets the gate", "would be ignored", f"drop {flag}")
    assert not out.exists()


@pytest.mark.parametrize("name, text", [
    ("dup.tsv", "query\ttitle\ttitle\tgrade\ndrill\tcordless drill\thammer\t3\n"),
    ("dup.csv", "query,title,grade,title\ndrill,cordless drill,3,hammer\n"),
    ("dup.jsonl", '{"query": "drill", "title": "cordless drill", "title": "hammer", "grade": 3}\n'),
    ("dup.json", '[{"query": "drill", "title": "cordless drill", "title": "hammer", "grade": 3}]'),
])
def test_a_column_named_twice_is_refused_not_read_from_its_last_copy(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(UserError, match=r"names (column|key) 'title' twice; rename or remove one of them\.") as e:
        read_pairs(path)
    assert str(path) in str(e.value)


@pytest.mark.parametrize("key, value, words", [
    ("max_length", "64 tokens", "'max_length' is \"64 tokens\", not a whole number"),
    ("grades", "x", "'grades' is \"x\", not a list of at least two whole numbers"),
    ("task", "rank", "'task' is \"rank\", not grades or score"),
    ("grades", [0, 1, 2], "records 3 grades, but the classifier in"),
    ("task", "score", "records task score (one output), but the classifier in"),
])
def test_11_a_wrong_value_in_headcut_json_names_that_file_not_the_weights(tmp_path, saved_models, key, value, words):
    """A headcut.json value of the wrong type, or grades the classifier does not have, was a traceback or
    'model.safetensors is damaged'."""
    from headcut.models import load_model

    folder = _copy(saved_models["artifact"], tmp_path)
    meta = json.loads((folder / "headcut.json").read_text())
    (folder / "headcut.json").write_text(json.dumps({**meta, key: value}))
    with pytest.raises(UserError, match=words.replace("(", r"\(").replace(")", r"\)")) as e:
        load_model(folder)
    assert str(folder / "headcut.json") in str(e.value)


@pytest.mark.parametrize("args, said", [
    (["distill", "minilm_pruned_cpu", "--set", "student_model={missing}", "--set", "train_data={data}"],
     "student_model={missing}: no such folder"),
    (["distill", "minilm_bottom3_cpu", "--set", "teacher={missing}", "--set", "train_data={data}"],
     "teacher={missing}: no such folder"),
    (["finetune", "minilm_homedepot_cpu", "--train", "{data}", "--set", "model={missing}"],
     "model={missing}: no such folder"),
    (["export", "{missing}"], "error: {missing}: no such folder"),
])
def test_a_missing_model_is_named_by_the_key_or_argument_that_named_it(tmp_path, args, said):
    """distill, finetune and export take no --model flag: their messages name the recipe key or the argument."""
    data = tmp_path / "pairs.tsv"
    data.write_text("query\ttitle\tgrade\ndrill\tcordless drill\t3\n")
    fill = {"missing": str(tmp_path / "nothere"), "data": str(data)}
    result = CliRunner().invoke(app, [a.format(**fill) for a in args] + ["--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert said.format(**fill) in result.stderr and "--model" not in result.stderr


def test_9_a_scan_folder_as_score_file_points_at_its_importance_json(tmp_path):
    from headcut.evaluate.importance import read_scores

    scan = tmp_path / "scan"
    scan.mkdir()
    with pytest.raises(UserError, match=r"importance\.json \(`headcut scan --out DIR` writes it\)\.$"):
        read_scores(scan)
    (scan / "importance.json").write_text("{}")
    with pytest.raises(UserError, match=f"is a folder; pass the score file in it, {scan / 'importance.json'}\\.$"):
        read_scores(scan)


def test_the_same_column_for_queries_and_titles_is_refused(tmp_path, tiny_grader):
    pairs = write(tmp_path, "pairs.tsv", PAIRS_TSV)
    refused(run("grade", tiny_grader, pairs, "--out", tmp_path / "g.tsv", "--query-col", "title"),
            "--query-col and --title-col both name column 'title'")
    assert not (tmp_path / "g.tsv").exists()


def test_finetune_train_given_twice_is_refused(tmp_path):
    pairs = write(tmp_path, "pairs.tsv", PAIRS_TSV)
    refused(run("finetune", "minilm_homedepot_cpu", "--train", pairs, "--set", f"train_data={pairs}x",
                "--out", tmp_path / "t"), f"--train {pairs} and --set train_data={pairs}x both name train_data")


def test_finetune_names_the_train_and_dev_flags_the_user_typed_in_a_refusal_of_them(tmp_path):
    """Was: 'headcut finetune ... --train synthetic:2 --dev synthetic:2' was led by '... with --set
    train_data=synthetic:2, --set dev_data=synthetic:2:' and told to 'set dev_data to other pairs', --set values and
    keys the user never typed; now led by the flags and naming them."""
    result = run("finetune", "minilm_synthetic_cpu", "--train", "synthetic:2", "--dev", "synthetic:2", "--out",
                 tmp_path / "t")
    refused(result, "minilm_synthetic_cpu.yaml with --train synthetic:2, --dev synthetic:2: --dev synthetic:2 holds "
                    "the pairs of --train, so checkpoints would be chosen and dev metrics reported on pairs it trains "
                    "on; pass other pairs to --dev (synthetic:1 for another synthetic draw), or remove it to hold out "
                    "dev_fraction of --train by query.")
    assert "--set" not in result.output and "_data" not in result.output, result.output
    assert not (tmp_path / "t").exists()
    pairs = write(tmp_path, "pairs.tsv", PAIRS_TSV)
    copy = tmp_path / "copy.tsv"  # the same pairs saved another way: refused as they are read
    copy.write_bytes(b"\xef\xbb\xbf" + pairs.read_bytes().replace(b"\n", b"\r\n"))
    result = run("finetune", "minilm_synthetic_cpu", "--train", pairs, "--dev", copy, "--out", tmp_path / "t")
    refused(result, f"--dev {copy}: each of its ", f"(--train {pairs}), so checkpoints", "; pass dev pairs kept apart "
            "from those to --dev, or remove --dev to hold out dev_fraction of --train by query.")
    assert "--set" not in result.output and "_data" not in result.output, result.output


def test_a_refusal_asks_to_drop_a_key_given_by_set_as_typed(tmp_path):
    """Was: 'headcut finetune ... --train P --set dev_data=COPY_OF_P' (or dev_data=P, or with --set dev_fraction=0.3)
    ended 'or remove dev_data' ('remove it', 'remove dev_fraction'), a recipe key the user never wrote alone; now
    'drop --set dev_data=COPY_OF_P', as typed."""
    pairs = write(tmp_path, "pairs.tsv", PAIRS_TSV)
    copy = write(tmp_path, "copy.tsv", pairs.read_bytes().replace(b"\n", b"\r\n"))
    for given, words in [([f"dev_data={copy}"], f"or drop --set dev_data={copy} to hold out dev_fraction"),
                         ([f"dev_data={pairs}"], f"or drop --set dev_data={pairs} to hold out dev_fraction"),
                         ([f"dev_data={copy}", "dev_fraction=0.3"],
                          f"; drop --set dev_fraction=0.3, or drop --set dev_data={copy} to hold out that split.")]:
        sets = [word for value in given for word in ("--set", value)]
        result = run("finetune", "minilm_synthetic_cpu", "--train", pairs, *sets, "--out", tmp_path / "t")
        refused(result, words)
        assert "remove" not in result.output, result.output
    assert not (tmp_path / "t").exists()


@pytest.mark.parametrize("command", ["finetune", "distill"])
def test_dev_data_refused_as_train_data_s_pairs_names_train_data_as_typed(tmp_path, command):
    """Was: 'headcut distill R --set train_data=P --set dev_data=P' said '--set dev_data=P holds the pairs of
    train_data', a key the user never wrote alone; now '... of --set train_data=P', as typed. --train P stays
    '--train'."""
    pairs = write(tmp_path, "pairs.tsv", PAIRS_TSV)
    recipe = {"finetune": "minilm_synthetic_cpu", "distill": "minilm_bottom3_cpu"}[command]
    result = run(command, recipe, "--set", f"train_data={pairs}", "--set", f"dev_data={pairs}", "--out", tmp_path / "t")
    refused(result, f"--set dev_data={pairs} holds the pairs of --set train_data={pairs}, so checkpoints")
    if command == "finetune":
        result = run(command, recipe, "--train", pairs, "--set", f"dev_data={pairs}", "--out", tmp_path / "t")
        refused(result, f"--set dev_data={pairs} holds the pairs of --train, so checkpoints")
    assert not (tmp_path / "t").exists()


@pytest.mark.parametrize("given", ["--dev", "--set"])
def test_a_training_refusal_on_the_command_line_says_the_set_flag_that_fixes_it(tmp_path, given):
    """Was: 'headcut finetune ... --dev F' (or --set dev_data=F), F's pairs all of one grade, ended 'or set
    select_metric=loss', and dev pairs copied from --train 'set dev_data to dev pairs kept apart from those', which
    no flag of the command says; now 'pass --set select_metric=loss' and 'with --set dev_data=FILE', as typed (Python
    callers still read 'set select_metric=loss', a run 'in the run file or by --set')."""
    one_grade = write(tmp_path, "one.tsv",
                      "query\ttitle\tgrade\n" + "".join(f"q{i % 2}\tt {i}\t3\n" for i in range(12)))
    dev = ["--dev", one_grade] if given == "--dev" else ["--set", f"dev_data={one_grade}"]
    result = run("finetune", "minilm_synthetic_cpu", *dev, "--out", tmp_path / "t")
    # led by what the user typed (was: 'dev_data F:' for --set dev_data=F, a key they never wrote alone)
    refused(result, f"error: {' '.join(map(str, dev)) if given == '--dev' else f'--set dev_data={one_grade}'}: all 12 "
                    f"dev pairs have grade 3; ",
                    f"grades with {'--dev FILE' if given == '--dev' else '--set dev_data=FILE'}"
                    ", or pass --set select_metric=loss.")
    pairs = write(tmp_path, "pairs.tsv", PAIRS_TSV)
    copy = write(tmp_path, "copy.tsv", b"\xef\xbb\xbf" + pairs.read_bytes())  # the same pairs saved another way
    result = run("finetune", "minilm_synthetic_cpu", "--train", pairs, "--set", f"dev_data={copy}", "--out",
                 tmp_path / "t")
    refused(result, f"error: --set dev_data={copy}: each of its 2 dev pairs", "; pass dev pairs kept apart from those "
                    f"with --set dev_data=FILE, or drop --set dev_data={copy} to hold out dev_fraction of --train by "
                    "query.")
    result = run("finetune", "minilm_synthetic_cpu", "--set", f"train_data={one_grade}", "--out", tmp_path / "t")
    refused(result, f"error: --set train_data={one_grade}: holding out dev_fraction=0.2 of its 2 queries")
    assert not (tmp_path / "t").exists()


@pytest.mark.parametrize("args, words", [
    (("--batch-sizes", "8,8"), "--batch-sizes '8,8' names 8 twice"),
    (("--seq-lens", "32,64,32"), "--seq-lens '32,64,32' names 32 twice"),
    (("-m", "minilm-l6"), "--model minilm-l6 is given twice; pass each model once"),
])
def test_bench_refuses_a_value_or_model_named_twice(tmp_path, args, words):
    refused(run("bench", "-m", "minilm-l6", "--data", "synthetic", "--out", tmp_path / "b", *args), words)
    assert not (tmp_path / "b").exists()


def test_bench_says_a_grader_given_twice_or_named_twice_by_two_paths(tmp_path):
    """Was: '--grader g names the same model as --grader g; name each once' for one spelling given twice."""
    folder = tmp_path / "g"
    folder.mkdir()
    refused(run("bench", "-m", "minilm-l6", "-g", folder, "-g", folder, "--data", "synthetic", "--out", tmp_path / "b"),
            f"--grader {folder} is given twice; pass each grader once")
    (tmp_path / "link").symlink_to(folder)
    refused(run("bench", "-m", "minilm-l6", "-g", folder, "-g", tmp_path / "link", "--data", "synthetic", "--out",
                tmp_path / "b"), f"names the same model as --grader {folder}; pass each grader once")


def test_bench_names_the_grader_flag_of_a_folder_that_is_no_grader(tmp_path):
    folder = tmp_path / "not-a-grader"
    folder.mkdir()
    refused(run("bench", "--model", "minilm-l6", "--grader", folder, "--data", "synthetic", "--out", tmp_path / "b"),
            f"--grader {folder}: no grader.json")
    assert not (tmp_path / "b").exists()


def test_bench_refuses_to_time_a_grader_past_its_max_length(tmp_path, tiny_grader):
    """Was: timed at lengths the grader never reads (it truncates to max_length), and an ONNX Runtime traceback
    once a length passed the graph's positions."""
    import json

    length = json.loads((tiny_grader / "grader.json").read_text())["max_length"]
    refused(run("bench", "--model", "minilm-l6", "--grader", tiny_grader, "--data", "synthetic", "--out",
                tmp_path / "b", "--seq-lens", f"8,{length + 8}"),
            f"--seq-lens {length + 8} is longer than --grader {tiny_grader} reads (its max_length is {length})")
    assert not (tmp_path / "b").exists()


def test_a_file_is_read_against_the_models_own_grades(tmp_path):
    """A grader of grades [2, 3, 4] (3 outputs): a file's grade 2 is its output 0. Read against 1..5 it was output 1,
    and every metric was silently wrong."""
    from conftest import tiny_model
    from headcut.evaluate.predict import predict_logits
    from headcut.models import LoadedModel, load_model, save_model
    from test_export import tiny_tokenizer

    tokenizer = tiny_tokenizer(tmp_path / "tok")
    model = tiny_model("bert", num_labels=3, vocab_size=len(tokenizer), max_position_embeddings=64)
    folder = save_model(LoadedModel(model, tokenizer, {"grades": [2, 3, 4], "max_length": 32}, "tiny", ""),
                        tmp_path / "g234")
    rows = [("drill", "cordless drill"), ("hammer", "claw hammer"), ("saw", "hand saw"), ("nail", "box of nails")] * 5
    pairs = write(tmp_path, "pairs.tsv", "query\ttitle\tgrade\n" + "".join(f"{q}\t{t}\t2\n" for q, t in rows))
    result = run("evaluate", "--model", folder, "--data", pairs, "--bootstrap", 10, "--out", tmp_path / "m.json")
    assert result.exit_code == 0, result.output
    loaded = load_model(folder)
    logits = predict_logits(loaded.model, loaded.tokenizer, read_pairs(pairs, grades=(2, 3, 4)), batch_size=8)
    expected = float((logits.argmax(1) == 0).mean())  # gold grade 2 is output 0
    assert json.loads((tmp_path / "m.json").read_text())["accuracy"] == pytest.approx(expected)
    # a grade the model lacks is one sentence whose --label-map example maps onto the model's grades
    five = write(tmp_path, "five.tsv", "query\ttitle\tgrade\ndrill\tcordless drill\t5\n")
    refused = run("evaluate", "--model", folder, "--data", five, "--out", tmp_path / "m5.json")
    assert refused.exit_code == 2 and "--label-map 3:2,4:3,5:4 for labels 3 to 5" in " ".join(refused.output.split())


def test_prune_reads_the_recorded_dev_data_against_the_models_own_grades(tmp_path):
    """prune's default pairs (the dev data finetune recorded) index the model's grades too: grade 2 of a
    [2, 3, 4] grader is label 0."""
    from conftest import tiny_model
    from headcut.models import LoadedModel
    from headcut.prune.inputs import data_pool

    pairs = write(tmp_path, "dev.tsv", "query\ttitle\tgrade\ndrill\tcordless drill\t2\nsaw\thand saw\t4\n")
    loaded = LoadedModel(tiny_model("bert", num_labels=3), None,
                         {"grades": [2, 3, 4], "dev_data": {"path": str(pairs)}}, "tiny", "")
    assert list(data_pool(loaded, None).labels) == [0, 2]


@pytest.mark.parametrize("command,flag,value", [
    ("bench", "--threads", "100000"), ("evaluate", "--bootstrap", "1000000000"), ("grade", "--threads", "1000"),
    ("prune", "--bootstrap", "200000"), ("scan", "--bootstrap", "200000")])
def test_thread_and_resample_counts_have_a_top_checked_before_any_work(tmp_path, tiny_grader, command, flag, value):
    """Was: bench --threads 100000 exhausted the process limit (a tokenizers panic, then a hang) and evaluate
    --bootstrap 1e9 ran for hours without a word."""
    pairs = write(tmp_path, "pairs.tsv", PAIRS_TSV)
    args = {"bench": ["bench", "--model", tiny_grader, "--data", pairs], "grade": ["grade", tiny_grader, pairs],
            "evaluate": ["evaluate", "--model", tiny_grader, "--data", pairs],
            "prune": ["prune", "--model", tiny_grader, "--keep-ratio", "0.5", "--data", pairs],
            "scan": ["scan", "--model", tiny_grader, "--data", pairs]}[command]
    refused(run(*args, flag, value, "--out", tmp_path / "out"), f"{flag} {value} is out of range; it must be in [")
    assert not (tmp_path / "out").exists()


def test_evaluate_against_a_model_of_other_grades_or_task_is_refused_before_any_grading(tmp_path, monkeypatch):
    """Was: a [0..4] reference was compared with a [1..5] model as if the grades meant the same (agreement 100%),
    and a score reference was refused only after the model had graded every pair."""
    from conftest import tiny_model
    from headcut.evaluate import report
    from headcut.models import LoadedModel, save_model
    from test_export import tiny_tokenizer

    tokenizer = tiny_tokenizer(tmp_path / "tok")
    model = tiny_model("bert", vocab_size=len(tokenizer), max_position_embeddings=64)
    ones = save_model(LoadedModel(model, tokenizer, {"max_length": 32}, "tiny", ""), tmp_path / "one-to-five")
    zeros = save_model(LoadedModel(model, tokenizer, {"grades": [0, 1, 2, 3, 4], "max_length": 32}, "tiny", ""),
                       tmp_path / "zero-to-four")
    scorer = save_model(LoadedModel(tiny_model("bert", num_labels=1, vocab_size=len(tokenizer),
                                               max_position_embeddings=64), tokenizer,
                                    {"task": "score", "activation": "identity", "max_length": 32}, "tiny", ""),
                        tmp_path / "reranker")
    pairs = write(tmp_path, "pairs.tsv", PAIRS_TSV)
    graded = []
    real = report.predict_logits
    monkeypatch.setattr(report, "predict_logits", lambda *a, **k: graded.append(1) or real(*a, **k))
    refused(run("evaluate", "--model", ones, "--data", pairs, "--against", zeros),
            f"--against {zeros} grades [0, 1, 2, 3, 4] and the model [1, 2, 3, 4, 5]")
    refused(run("evaluate", "--model", ones, "--data", pairs, "--against", scorer),
            f"--against {scorer} is a score model and the model a grades one")
    assert graded == []


def test_a_record_naming_a_key_twice_is_refused(tmp_path, tiny_grader):
    """A hand-edited grader.json or headcut.json with a key given twice: json keeps the last value without a word,
    so the edit a user meant may be the one dropped."""
    import shutil

    from headcut.models import read_json_file
    from headcut_grader.grader import read_record

    grader = shutil.copytree(tiny_grader, tmp_path / "g")
    text = (grader / "grader.json").read_text()
    (grader / "grader.json").write_text(text.replace('"max_length":', '"max_length": 8, "max_length":', 1))
    with pytest.raises(UserError, match="an object names key 'max_length' twice"):
        read_record(grader)
    (tmp_path / "headcut.json").write_text('{"task": "score", "task": "grades"}')
    with pytest.raises(UserError, match="headcut.json: an object names key 'task' twice"):
        read_json_file(tmp_path / "headcut.json")


# --- the hunt of stop 44 ---------------------------------------------------------------------------------


def test_a_model_folder_without_its_tokenizer_is_refused(tmp_path):
    """Was: transformers made a placeholder tokenizer of five special tokens, and every grade was wrong, exit 0."""
    from conftest import tiny_model
    from headcut.models import LoadedModel, load_model, save_model
    from test_export import tiny_tokenizer

    tokenizer = tiny_tokenizer(tmp_path / "tok")
    folder = save_model(LoadedModel(tiny_model("bert", vocab_size=len(tokenizer)), tokenizer, {}), tmp_path / "m")
    assert load_model(folder).tokenizer.vocab_size == len(tokenizer)
    for name in ("tokenizer.json", "vocab.txt"):
        (folder / name).unlink(missing_ok=True)
    with pytest.raises(UserError, match=r"m: no tokenizer in the folder \(none of tokenizer.json, vocab.txt"):
        load_model(folder)
    refused(run("evaluate", "-m", folder, "-d", "synthetic", "--limit", 5), "no tokenizer in the folder")


@pytest.mark.parametrize("text, words", [
    ("query,title,grade\nq1,t1,3\n" + 'q2,"Behr paint,4\n' + "".join(f"q{i},t{i},3\n" for i in range(3, 60)),
     "x.csv, line 3: a quote opened on this row is never closed"),  # was: 57 rows folded into one title
    ('query,title,grade\nq1,t1,3\nq2,"6" pipe,4\n', "x.csv, line 3: text follows the closing quote"),  # was: '6 pipe'
    # a quote opened on one row and closed on a later one is the first row's: was 'line 5: text follows...'
    ('query,title,grade\nq1,t1,3\nq2,"Behr paint,4\nq3,t3,3\nq4,12" pipe,3\n',
     "x.csv, line 3: a quote opened on this row closes only on line 5, where text follows it"),
    ('query,title,grade\nq1,"' + ("y" * 999 + "\n") * 1002 + '",3\n',  # was: 'line 1002: the text is longer'
     "x.csv, line 2: the text is longer than 1,000,000 characters (it runs on to line 1002)"),
    ('query,title,grade\nq1,"Behr\npaint"\n', "x.csv, line 2: 2 fields where the header has 3"),  # was: line 3
])
def test_a_csv_quote_left_open_or_closed_early_names_its_line(tmp_path, text, words):
    with pytest.raises(UserError, match=re.escape(words)):
        read_pairs(write(tmp_path, "x.csv", text))


@pytest.mark.parametrize("out, words", [(".", "is the folder you are in"), ("..", "holds the one you are in"),
                                        ("", "--out is empty; give it a value"), ("-", "not to standard output")])
def test_an_output_that_is_the_current_folder_or_above_it_is_refused(tmp_path, monkeypatch, out, words):
    """Was: --out . renamed the folder in use: a traceback, exit 1, and a complete output left in a hidden folder;
    --out - wrote a file named '-' where a pipe was meant."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    refused(run("evaluate", "-m", "minilm-l6", "-d", "synthetic", "--limit", 5, "--out", out), words)
    refused(run("cross-encoder", "-m", "minilm-l6", "--out", out), words)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["work"] and not any(work.iterdir())


def test_synthetic_data_is_bounded_and_scan_checks_k_before_work(tmp_path):
    refused(run("scan", "-m", "minilm-l6", "-d", "synthetic", "--limit", 10**11, "--method", "kl",
                "--experiments", "none", "--no-probes", "--out", tmp_path / "a"), "ask for at most 1,000,000")
    refused(run("scan", "-m", "minilm-l6", "-d", "synthetic", "--limit", 8, "--method", "kl", "--experiments", "5",
                "--k", 1000, "--draws", 1, "--no-probes", "--out", tmp_path / "b"),
            "--k 1000 is more than the 72 heads")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


@pytest.mark.parametrize("text, words", [("kl,kl", "names kl twice"), ("kl,,entropy", "an empty entry"),
                                         (",", "an empty entry")])
def test_scan_methods_named_twice_or_empty_are_refused(text, words):
    from headcut.evaluate.scan import parse_methods

    with pytest.raises(UserError, match=words):
        parse_methods(text)


@pytest.mark.parametrize("text, words", [("", "an empty entry"), ("all,none", "'all' stands alone"),
                                         ("1,random", "names random twice")])
def test_scan_experiments_empty_mixed_or_twice_are_refused(text, words):
    from headcut.evaluate.scan import parse_experiments

    with pytest.raises(UserError, match=words):
        parse_experiments(text)


@pytest.mark.parametrize("command", [["probe", "-m", "minilm-l6", "-d", "synthetic"],
                                     ["evaluate", "-m", "minilm-l6", "-d", "synthetic"],
                                     ["scan", "-m", "minilm-l6", "-d", "synthetic", "--experiments", "none"]])
def test_batch_sizes_are_bounded(tmp_path, command):
    """Was: unbounded; probe's memory grows about 3 MB a pair of the batch."""
    refused(run(*command, "--batch-size", 100_000, "--out", tmp_path / "o"), "--batch-size 100000", "[1, 1024]")


def test_export_refuses_data_flags_without_data(tmp_path):
    refused(run("export", "minilm-l6", "--out", tmp_path / "g", "--limit", 16),
            "--limit reads --data, which is not given")


def test_export_takes_the_model_as_its_first_argument_or_as_model_as_the_other_commands_do(tmp_path):
    """Was: `headcut export --model X` gave "No such option: --model (Possible options: --help)"."""
    nowhere = tmp_path / "nowhere"
    refused(run("export", "--model", nowhere, "--out", tmp_path / "g"), f"--model {nowhere}: no such folder")
    refused(run("export", "-m", nowhere, "--out", tmp_path / "g"), f"--model {nowhere}: no such folder")
    refused(run("export", "minilm-l6", "--model", "minilm-l6", "--out", tmp_path / "g"),
            "export's first argument (minilm-l6) and --model (minilm-l6) both name the model; pass one of them.")
    refused(run("export", "--out", tmp_path / "g"), "no model given; pass it as export's first argument")
    assert not (tmp_path / "g").exists()


@pytest.mark.parametrize("precision", ["int8", "auto"])
def test_export_refuses_to_gate_a_precision_on_too_few_pairs(tmp_path, precision):
    """Was: `--limit 1` judged INT8 on one pair (agreement 0% or 100%) and shipped what it passed."""
    refused(run("export", "minilm-l6", "--out", tmp_path / "g", "--precision", precision, "--data", "synthetic",
                "--limit", 5), f"5 pairs are too few for the gate that judges --precision {precision} against fp32",
            "at least 20")
    assert not (tmp_path / "g").exists()


# --- stop 46's hunt (scan, probe, evaluate, prune, grade) ---------------------------------------------------------

def _with_meta(tmp_path, saved_models, **meta):
    folder = _copy(saved_models["artifact"], tmp_path)
    record = json.loads((folder / "headcut.json").read_text())
    (folder / "headcut.json").write_text(json.dumps({**record, **meta}))
    return folder


def test_prune_overwrite_never_replaces_the_folder_of_the_recorded_dev_data(tmp_path, saved_models):
    """Was: with no --data, prune read the dev data headcut.json names, then --overwrite replaced its folder."""
    keep = tmp_path / "dd"
    keep.mkdir()
    dev = write(keep, "dev.tsv", PAIRS_TSV)
    model = _with_meta(tmp_path, saved_models, dev_data={"path": str(dev)})
    refused(run("prune", "--model", model, "--keep-ratio", "0.5", "--out", keep, "--overwrite", "--no-timing"),
            "would replace the input", str(dev))
    assert dev.read_text() == PAIRS_TSV


def test_grade_never_writes_through_a_link_at_its_partial_file(tmp_path, tiny_grader):
    """Was: a link left at OUT's partial path was followed, and the input it pointed at was overwritten."""
    pairs = write(tmp_path, "pairs.tsv", PAIRS_TSV)
    out = tmp_path / "graded.tsv"
    (tmp_path / f".{out.name}.partial").symlink_to(pairs)
    result = run("grade", tiny_grader, pairs, "--out", out)
    assert result.exit_code == 0, result.output
    assert pairs.read_text() == PAIRS_TSV and out.is_file() and not out.is_symlink()


@pytest.mark.parametrize("edit, words", [
    (lambda doc: doc | {"model": "m6"}, "'model' must be a JSON object, not str"),
    (lambda doc: doc | {"data": [1, 2]}, "'data' must be a JSON object, not list"),
    (lambda doc: doc | {"extra": 7}, "'extra' must be a JSON object, not int")])
def test_a_score_file_whose_sections_are_not_objects_is_a_sentence(tmp_path, saved_models, edit, words):
    import torch

    from headcut.evaluate.importance import write_scores

    path = tmp_path / "importance.json"
    write_scores(path, {"fisher": torch.arange(8.0).view(2, 4)}, model_info={}, data_info={})
    path.write_text(json.dumps(edit(json.loads(path.read_text()))))
    refused(run("prune", "--model", saved_models["artifact"], "--keep-ratio", "0.5", "--scores", path,
                "--out", tmp_path / "pruned", "--no-timing"), words)


HUGE = "7" * 5001  # past Python's 4,300-digit limit for reading an int


def test_class_a_number_of_thousands_of_digits_in_any_json_input_is_a_sentence(tmp_path, saved_models):
    """Was: Python's int-length ValueError, a traceback, from data files, headcut.json and score files."""
    lines = write(tmp_path, "pairs.jsonl", '{"query": "drill", "title": "cordless drill", "grade": 3}\n'
                                           f'{{"query": "saw", "title": "hand saw", "grade": {HUGE}}}\n')
    refused(run("evaluate", "--model", saved_models["artifact"], "--data", lines), "pairs.jsonl", "line 2")
    array = write(tmp_path, "pairs.json", f'[{{"query": "saw", "title": "hand saw", "grade": {HUGE}}}]')
    refused(run("evaluate", "--model", saved_models["artifact"], "--data", array), "pairs.json")
    model = _copy(saved_models["artifact"], tmp_path)
    meta = model / "headcut.json"
    meta.write_text(meta.read_text().rstrip().rstrip("}") + f', "max_length": {HUGE}}}')
    refused(run("evaluate", "--model", model, "--data", write(tmp_path, "p.tsv", PAIRS_TSV)), "headcut.json",
            "max_length")
    scores = write(tmp_path, "importance.json", json.dumps({"format": 1, "methods": {"fisher": {"scores": [[1]]}}})
                   .replace('"format": 1', f'"format": {HUGE}'))
    refused(run("prune", "--model", saved_models["artifact"], "--keep-ratio", "0.5", "--scores", scores,
                "--out", tmp_path / "pruned", "--no-timing"), "importance.json")


@pytest.mark.parametrize("text, words", [("1:²", "is not RAW:GRADE"), ("1:--3", "is not RAW:GRADE"),
                                         (f"1:{HUGE}", "is not RAW:GRADE"), ("1:1,2:2,1:3", "maps '1' twice"),
                                         (":1,1:3", "item ':1' is not RAW:GRADE"),
                                         ("0:1, :3", "item ' :3' is not RAW:GRADE")])
def test_a_label_map_of_other_digits_or_a_label_twice_is_refused(text, words):
    """Was: '²' passed str.isdigit() and int() raised; a raw label mapped twice kept its last grade silently; an
    item without its raw label (':1') was an entry for the empty label, which no row meets (an empty label is
    refused), so a row's label '0' was then told to extend the map."""
    from headcut_grader.validation import parse_label_map

    with pytest.raises(UserError, match=re.escape(words)):
        parse_label_map(text)


@pytest.mark.parametrize("text, grade", [("1:0000000000000000003", 3), ("1:+000000000000000003", 3), ("1:+3", 3),
                                         ("1:-00000000000000000003", -3), ("1:" + "0" * 5000 + "3", 3),
                                         ("1:999999999999999999", 999999999999999999)])
def test_a_label_map_grade_s_sign_and_leading_zeros_are_no_digits_of_its_size(text, grade):
    """Was: validation.whole_number counted a sign and leading zeros toward its 18 digits, so 1:0000000000000000003
    (19 characters, the value 3) was 'not RAW:GRADE' while 1:3 was read, and 1:+3 was refused for its sign; the
    digits of the value are counted now ('+0012' is 12, as a recipe's whole numbers read)."""
    from headcut_grader.validation import parse_label_map, whole_number

    assert parse_label_map(text) == {"1": grade}
    assert whole_number("1" + "0" * 18) is None and whole_number("-" + "0" * 30) == 0  # 19 digits; -0 is 0


@pytest.mark.parametrize("label_map, shown", [({0: 1, 1: 3}, "0"), ({"": 1, "0": 1}, "''"),
                                              ({" 0": 1, "1": 3}, "' 0'")])
def test_a_python_label_map_key_no_cell_can_be_is_refused_before_any_row(tmp_path, label_map, shown):
    """Was: label_map={0: 1, 1: 3} (int keys, as Python writes them) refused the first row, "label '0' is not in the
    label map [0, 1]; extend label_map": a cell is read as stripped text, so the map never met one."""
    pairs = write(tmp_path, "p.tsv", "query\ttitle\tlab\nq\tt\t0\nq\tu\t1\n")
    with pytest.raises(UserError, match=re.escape(f"label_map maps {shown}, which no label cell can be")):
        read_pairs(pairs, label_col="lab", label_map=label_map)
    assert read_pairs(pairs, label_col="lab", label_map={"0": 1, "1": 3}).label_array().tolist() == [0, 2]


def test_scan_experiments_of_other_digits_are_refused():
    from headcut.evaluate.scan import parse_experiments

    with pytest.raises(UserError, match="unknown '²'"):
        parse_experiments("²")


@pytest.mark.parametrize("edit, words", [
    (lambda shape: [1, 2], "headcut_shape must be an object, not list"),
    (lambda shape: shape | {"head_ids": [None, [0]]}, "head_ids must hold"),
    (lambda shape: shape | {"head_ids": 5}, "head_ids must hold"),
    (lambda shape: shape | {"head_ids": [[0.5], [0]]}, "head_ids must hold"),
    (lambda shape: shape | {"head_ids": [[1, 1], [0]]}, "head_ids must hold"),
    (lambda shape: shape | {"layer_ids": [0, 0]}, "layer_ids must list different layer numbers"),
    (lambda shape: shape | {"heads_per_layer": [-1, 4]}, "heads_per_layer must be a list"),
    (lambda shape: shape | {"head_ids": [[0, 99], [0]], "heads_per_layer": [2, 1]},
     "config.json is damaged or incomplete"),
    # counts that contradict the ids beside them: were loaded silently by the ids, the counts left to mislead
    (lambda shape: shape | {"heads_per_layer": [len(h) + 1 for h in shape["head_ids"]]},
     "headcut_shape.heads_per_layer is [5, 5], but head_ids keeps [4, 4] per layer"),
    (lambda shape: shape | {"heads_per_layer": [4]}, "headcut_shape.heads_per_layer is [4], but head_ids keeps"),
    (lambda shape: shape | {"neuron_ids": [[0, 1], [0, 1]], "intermediate_per_layer": [2, 3]},
     "headcut_shape.intermediate_per_layer is [2, 3], but neuron_ids keeps [2, 2] per layer")])
def test_an_edited_shape_record_names_config_json(tmp_path, saved_models, edit, words):
    """Was: AttributeError / TypeError tracebacks, or ids read wrongly (0.5 as 0, a layer twice) with exit 0."""
    from headcut.models import load_model

    folder = _copy(saved_models["artifact"], tmp_path)
    _edit_shape(folder, edit, keep_hash=False)  # a folder saved before headcut.json recorded the shape's hash
    with pytest.raises(UserError, match=re.escape(words)) as caught:
        load_model(folder)
    assert "config.json" in str(caught.value)


def _edit_shape(folder: Path, edit, *, keep_hash: bool) -> None:
    config = json.loads((folder / "config.json").read_text())
    config["headcut_shape"] = edit(config.get("headcut_shape") or {"head_ids": [[0, 1, 2, 3], [0, 1, 2, 3]]})
    (folder / "config.json").write_text(json.dumps(config))
    meta = json.loads((folder / "headcut.json").read_text())
    if not keep_hash:
        meta.pop("shape_hash", None)
    (folder / "headcut.json").write_text(json.dumps(meta))


@pytest.mark.parametrize("edit", [
    lambda shape: shape | {"head_ids": [[1, 0, 2, 3], [0, 1, 2, 3]]},  # two heads' ids swapped, the same counts
    lambda shape: shape | {"layer_ids": [0, 9]},  # a layer the 2-layer source never had
    lambda shape: None])  # the record dropped: the weights would load as an unpruned model's
def test_a_shape_record_that_is_not_the_one_saved_is_refused_and_an_older_folder_still_loads(tmp_path, saved_models,
                                                                                            edit):
    """Was: loaded with exit 0, the weights labelled by the edited ids for every later mask, score and plan."""
    from headcut.arch import layer_ids
    from headcut.models import load_model

    folder = _copy(saved_models["artifact"], tmp_path)
    recorded = json.loads((folder / "headcut.json").read_text()).get("shape_hash")
    _edit_shape(folder, edit, keep_hash=True)
    words = "headcut_shape is not the one" if edit({}) is not None else "no headcut_shape, which"
    with pytest.raises(UserError, match=re.escape(f"config.json: {words} headcut.json records (shape_hash "
                                                  f'"{recorded}"): it was edited or comes from another model; copy '
                                                  "the model folder again, or prune (or save) it again.")):
        load_model(folder)
    _edit_shape(folder, lambda shape: shape, keep_hash=False)  # as a folder saved before the hash was recorded
    assert len(layer_ids(load_model(folder).model)) == 2


def _three_grades_over(saved: Path, tmp_path: Path, *, outputs: int, by: str) -> Path:
    """A copy of the 5-output model `saved` whose headcut.json says 3 grades, and whose config.json declares
    `outputs` outputs by its id2label or by num_labels alone (transformers' other spelling)."""
    folder = _copy(saved, tmp_path)
    config = json.loads((folder / "config.json").read_text())
    config.pop("label2id", None)
    config.pop("id2label")
    if by == "id2label":
        config["id2label"] = {str(i): f"LABEL_{i}" for i in range(outputs)}
    else:
        config["num_labels"] = outputs
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "headcut.json").write_text(json.dumps({"grades": [1, 2, 3]}))
    return folder


@pytest.mark.parametrize("kind", ["artifact", "plain"])
@pytest.mark.parametrize("outputs", ["id2label", "num_labels"])
def test_a_config_whose_outputs_are_not_the_weights_classifier_is_refused(tmp_path, saved_models, kind, outputs):
    """config.json (and headcut.json) edited to 3 grades over weights of a 5-output classifier. Was: a pruned artifact
    loaded with a fresh random classifier, exit 0 (its grades noise); a plain folder 'model.safetensors is damaged or
    incomplete (You set `ignore_mismatched_sizes` to `False` ...)', blaming the weights and the transformers report."""
    from headcut.models import load_model

    folder = _three_grades_over(saved_models[kind], tmp_path, outputs=3, by=outputs)
    with pytest.raises(UserError) as caught:
        load_model(folder)
    assert str(caught.value) == (
        f"{folder / 'config.json'} gives the classifier 3 outputs, but classifier.weight in "
        f"{folder / 'model.safetensors'} has 5; put back the config.json and headcut.json saved with these weights, "
        "or copy or download the model folder again.")


PUT_BACK_CONFIG = "put back the config.json saved with the model, or copy or download the model folder again."


@pytest.mark.parametrize("edit, sentence", [
    # was: transformers named each of 10^6 outputs in memory (10^9: the process was killed), then loaded
    ({"num_labels": 10**6}, "'num_labels' is 1000000, not a whole number in [1, 10000]"),
    # was: 'config.json gives the classifier 5 outputs, but the classifier in model.safetensors has 5'
    ({"num_labels": "5"}, "'num_labels' is \"5\", not a whole number in [1, 10000]"),
    ({"num_labels": 0}, "'num_labels' is 0, not a whole number in [1, 10000]"),
    # was: 'is damaged or incomplete ('list' object has no attribute 'items')'; an output 9 of five loaded
    ({"id2label": ["a", "b"]}, "'id2label' is [\"a\", \"b\"], not an object naming each output by its number"),
    ({"id2label": {"0": "a", "9": "b"}}, "'id2label' is {\"0\": \"a\", \"9\": \"b\"}, not an object naming"),
    # was: loaded, transformers' warning on stderr
    ({"num_labels": 3, "id2label": {str(i): "g" for i in range(5)}}, "'num_labels' is 3, but 'id2label' names 5"),
    # was: 'is damaged or incomplete (Unrecognized model ...); copy or download the model folder again'
    ({"model_type": None}, "has no 'model_type' (transformers reads the architecture from it)"),
])
def test_config_json_s_outputs_and_model_type_are_checked_before_transformers_reads_them(tmp_path, saved_models, edit,
                                                                                        sentence):
    from headcut.models import load_model, outline

    folder = _copy(saved_models["plain"], tmp_path)
    config = {k: v for k, v in json.loads((folder / "config.json").read_text()).items() if k not in edit}
    (folder / "config.json").write_text(json.dumps({**config, **{k: v for k, v in edit.items() if v is not None}}))
    for read in (outline, load_model):
        with pytest.raises(UserError) as caught:
            read(folder)
        assert str(caught.value).startswith(f"{folder / 'config.json'}{'' if 'has no' in sentence else ':'} "
                                            f"{sentence}") and str(caught.value).endswith(PUT_BACK_CONFIG)
    refused(run("bench", "--model", folder, "--data", write(tmp_path, "p.tsv", PAIRS_TSV), "--out", tmp_path / "b"),
            sentence)
    assert not (tmp_path / "b").exists()


def test_an_unknown_model_type_is_said_to_be_unsupported(tmp_path, saved_models):
    """Was: 'config.json is damaged or incomplete (The checkpoint you are trying to load has model type `foo` but
    Transformers does not recognize this architecture.); copy or download the model folder again'."""
    from headcut.models import outline

    folder = _copy(saved_models["plain"], tmp_path)
    (folder / "config.json").write_text(json.dumps({**json.loads((folder / "config.json").read_text()),
                                                    "model_type": "foo"}))
    with pytest.raises(UserError, match=re.escape(f"outline source={folder}: model type 'foo' is not supported; "
                                                  "headcut supports bert, roberta,")):
        outline(folder)


def _hugging_face_folder(saved: Path, tmp_path: Path) -> Path:
    """A copy of the plain folder `saved` without the headcut_shape its config.json took from the artifact saved first
    (the fixture's model): a folder transformers saved, which from_pretrained loads."""
    folder = _copy(saved, tmp_path)
    config = json.loads((folder / "config.json").read_text())
    config.pop("headcut_shape", None)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def _rename_weight(folder: Path, old: str, new: str) -> None:
    from safetensors.torch import load_file, save_file

    state = load_file(folder / "model.safetensors")
    state[new] = state.pop(old)
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})


def _edit_heads(folder: Path, heads: list) -> None:
    """headcut_shape's heads per layer edited (headcut.json's shape_hash dropped, as a folder saved before it)."""
    config = json.loads((folder / "config.json").read_text())
    config["headcut_shape"].update(head_ids=heads, heads_per_layer=[len(h) for h in heads])
    (folder / "config.json").write_text(json.dumps(config))
    meta = json.loads((folder / "headcut.json").read_text())
    meta.pop("shape_hash")
    (folder / "headcut.json").write_text(json.dumps(meta))


@pytest.mark.parametrize("case", ["renamed weight", "one layer fewer", "heads edited", "a layer's heads emptied"])
def test_a_config_not_saved_with_its_weights_is_told_apart_from_damaged_weights(tmp_path, saved_models, case):
    """Was: a Hugging Face folder whose weights lack an encoder weight (renamed) loaded with it random, and one whose
    config.json builds a layer fewer than its weights hold loaded without that layer, both exit 0; an artifact whose
    headcut_shape was edited was 'model.safetensors is damaged or incomplete (... has shape [32, 32], the model
    [32, 24])' or '(Error(s) in loading state_dict for BertForSequenceClassification:)'."""
    from headcut.models import load_model

    if case in ("renamed weight", "one layer fewer"):
        folder = _hugging_face_folder(saved_models["plain"], tmp_path)
    else:
        folder = _copy(saved_models["artifact"], tmp_path)
    weights, config = folder / "model.safetensors", folder / "config.json"
    if case == "renamed weight":
        _rename_weight(folder, "bert.encoder.layer.1.output.dense.bias", "other.bias")
        sentence = f"{weights} lacks bert.encoder.layer.1.output.dense.bias, which the model {config} describes has"
    elif case == "one layer fewer":
        config.write_text(json.dumps({**json.loads(config.read_text()), "num_hidden_layers": 1}))
        sentence = f"{weights} holds bert.encoder.layer.1."
    elif case == "heads edited":
        _edit_heads(folder, [[0, 1, 2], [0, 1, 2, 3]])
        sentence = (f"{weights} holds bert.encoder.layer.0.attention.output.dense.weight of shape [32, 32], but the "
                    f"model {config} describes has [32, 24]")
    else:
        _edit_heads(folder, [[], [0, 1, 2, 3]])
        sentence = f"{weights} lacks bert.encoder.layer.0.attention."
    with pytest.raises(UserError) as caught:
        load_model(folder)
    assert str(caught.value).startswith(sentence), str(caught.value)
    assert str(caught.value).endswith("put back the config.json saved with these weights, or copy or download the "
                                      f"model folder again.")
    refused(run("export", "--model", folder, "--out", tmp_path / "g"), sentence)
    assert not (tmp_path / "g").exists()


def test_a_keep_ratio_that_keeps_no_head_is_refused(tmp_path, saved_models):
    """Was: 'Kept 0 of 8 heads', a grader giving every pair the same output, exit 0."""
    import torch

    from headcut.evaluate.importance import write_scores

    path = tmp_path / "importance.json"
    write_scores(path, {"fisher": torch.arange(8.0).view(2, 4)}, model_info={}, data_info={})
    refused(run("prune", "--model", saved_models["artifact"], "--keep-ratio", "0.01", "--scores", path,
                "--out", tmp_path / "pruned", "--no-timing"), "= 0 heads", "at least 0.125")
    refused(run("prune", "--model", saved_models["artifact"], "--keep-ratio", "1", "--min-heads", "5", "--scores",
                path, "--out", tmp_path / "pruned", "--no-timing"), "--min-heads 5 is more than the 4 heads")
    assert not (tmp_path / "pruned").exists()


def test_grades_named_twice_in_headcut_json_are_refused(tmp_path, saved_models):
    model = _with_meta(tmp_path, saved_models, grades=[1, 1, 2, 3, 4])
    refused(run("evaluate", "--model", model, "--data", write(tmp_path, "p.tsv", PAIRS_TSV)), "headcut.json",
            "names a grade twice")


def test_prune_sequence_length_and_timed_batch_are_checked_before_work(tmp_path, saved_models):
    """Was: --seq-len past the model's positions was counted; --latency --batch 4096 --seq-len 512 ran out of
    memory in the timing."""
    from conftest import tiny_model
    from headcut.cli.prune import check_sequence
    from headcut.models import LoadedModel

    refused(run("prune", "--model", saved_models["artifact"], "--flops", "0.6", "--seq-len", "65", "--no-tune",
                "--out", tmp_path / "pruned", "--no-timing"), "--seq-len 64 or less")
    loaded = LoadedModel(tiny_model("bert", max_position_embeddings=512), None, {}, "tiny", "")
    check_sequence(loaded, seq_len=512, batch=128)
    with pytest.raises(UserError, match=r"--batch, --seq-len: a batch of 256 at 512 tokens .* batches of 128 or less"):
        check_sequence(loaded, seq_len=512, batch=256)


def test_evaluate_names_the_against_flag_of_a_missing_reference(tmp_path, saved_models):
    refused(run("evaluate", "--model", saved_models["artifact"], "--data", write(tmp_path, "p.tsv", PAIRS_TSV),
                "--against", tmp_path / "nowhere"), "--against")


def _grade_with_an_edited_grader_json_is_refused(tmp_path, tiny_grader, edit, words):
    import shutil

    grader = shutil.copytree(tiny_grader, tmp_path / "g")
    record = json.loads((grader / "grader.json").read_text())
    (grader / "grader.json").write_text(json.dumps({**record, **edit}))
    refused(run("grade", grader, write(tmp_path, "p.tsv", PAIRS_TSV), "--out", tmp_path / "o.tsv"), "grader.json",
            words)
    assert not (tmp_path / "o.tsv").exists()


@pytest.mark.parametrize("edit, words", [({"grades": [1, 1, 2, 3, 4]}, "names a grade twice"),
                                         ({"max_length": 10 ** 9}, "'max_length' is 1000000000, not a whole number"),
                                         ({"pad_id": 10 ** 30}, "'pad_id' is 1000000000000000000000000000000")])
def test_a_grader_json_with_grades_twice_or_huge_numbers_is_refused_before_work(tmp_path, tiny_grader, edit, words):
    """Was: grades named twice lost a probability column (exit 0); a max_length of 1e9 probed gigabytes for minutes;
    a pad_id past a C long was an OverflowError."""
    _grade_with_an_edited_grader_json_is_refused(tmp_path, tiny_grader, edit, words)


def test_export_precision_auto_without_data_is_refused(tmp_path, saved_models):
    """Was: fp32 shipped silently, and gate flags given with it were ignored."""
    refused(run("export", saved_models["artifact"], "--out", tmp_path / "g", "--precision", "auto", "--max-drop", "5",
                "--max-length", "64"),
            "--precision auto", "--data FILE")
    assert not (tmp_path / "g").exists()


def test_bench_batches_that_cannot_fit_in_memory_are_refused_before_work(tmp_path):
    """Was: --batch-sizes up to 4096 (other commands stop at 1024), and 4096 x 512 ran out of memory."""
    refused(run("bench", "-m", "minilm-l6", "--data", "synthetic", "--out", tmp_path / "b", "--batch-sizes", "1024",
                "--seq-lens", "512"), "--batch-sizes, --seq-lens", "batches of 128 or less")
    refused(run("bench", "-m", "minilm-l6", "--data", "synthetic", "--out", tmp_path / "b", "--batch-sizes", "4096"),
            "--batch-sizes")


def test_a_label_map_for_a_one_score_model_is_refused(tmp_path):
    """Was: ignored (the score column is read as numbers), exit 0."""
    path = write(tmp_path, "s.tsv", "query\ttitle\tscore\ndrill\tcordless drill\t2.5\n")
    with pytest.raises(UserError, match="^label_map maps labels to grades, and this model is a one-score reranker"):
        read_pairs(path, task="score", label_map={"zzz": 1})
    with pytest.raises(UserError, match="^--label-map maps labels to grades"):
        read_pairs(path, task="score", label_map={"zzz": 1}, names="flags")


def test_evaluate_max_length_with_an_exported_grader_is_refused(tmp_path, tiny_grader):
    """Was: ignored (a grader reads the max_length it was exported with), exit 0."""
    refused(run("evaluate", "--model", tiny_grader, "--data", write(tmp_path, "p.tsv", PAIRS_TSV),
                "--max-length", "200"),
            "--max-length applies to PyTorch models", "exported grader")


# --- stop 47 (the left-alone list of stop 46, and a new hunt) ---------------------------------------------------

@pytest.mark.parametrize("edit, words", [
    ({"openvino": [1]}, "'openvino' is [1], not an object"),
    ({"openvino": {"precision": "int4", "files": {}}}, '\'openvino.precision\' is "int4"'),
    ({"openvino": {"precision": "fp32", "files": "x"}}, '\'openvino.files\' is "x", not an object'),
    ({"speed": {"seconds": [1]}}, "'speed.seconds' is [1]"),
    ({"speed": {"seconds": {"onnxruntime": -1.0}}}, "'speed.seconds'"),
    ({"speed": {"cpu": "x"}}, '\'speed.cpu\' is "x", not an object'),
    ({"precision": "int4"}, '\'precision\' is "int4", not one of fp32, int8'),
    ({"backend": "gpu"}, '\'backend\' is "gpu"'),
    ({"pad_id": 100000}, "'pad_id' is 100000, but the tokenizer has"),
    # a value of the wrong type is shown as the file spells it (was: 'max_length' is 64, not a whole number)
    ({"max_length": "64"}, "'max_length' is \"64\", not a whole number in [2, 8192]"),
    ({"max_length": True}, "'max_length' is true, not a whole number"),
    ({"format": "1"}, "grader format \"1\" is not 1"),  # was: grader format 1 is not 1
    ({"format": True}, "grader format true is not 1"), ({"format": 1.0}, "grader format 1.0 is not 1"),  # were read
    ({"task": None}, "'task' is null, not grades or score"),
    ({"task": "score", "activation": "relu"}, "'activation' is \"relu\", not one of identity, sigmoid, tanh"),
    ({"task": "score", "activation": ["tanh"]}, "'activation' is [\"tanh\"], not one of identity, sigmoid, tanh"),
])
def test_a_grader_json_with_sections_of_the_wrong_type_is_refused(tmp_path, tiny_grader, edit, words):
    """Was: a speed section of the wrong type was an AttributeError traceback, a pad_id past the vocabulary an
    ONNX Runtime traceback, and an unknown precision or backend graded on and was reported as it stood."""
    _grade_with_an_edited_grader_json_is_refused(tmp_path, tiny_grader, edit, words)


@pytest.mark.parametrize("length", [3, 65])
def test_a_recorded_max_length_too_short_for_a_pair_or_past_the_positions_is_refused(tmp_path, saved_models, length):
    """Was: 3 exported a grader the runtime then refused; 65 (of 64 positions) failed deep in torch."""
    model = _with_meta(tmp_path, saved_models, max_length=length)
    record = json.loads((model / "tokenizer_config.json").read_text())  # as save_model writes it: the same length
    (model / "tokenizer_config.json").write_text(json.dumps({**record, "model_max_length": length}))
    refused(run("export", model, "--out", tmp_path / "g"), "headcut.json", f"'max_length' is {length}", "from 5 to 64")
    assert not (tmp_path / "g").exists()


def test_a_backend_that_is_not_one_is_refused_by_its_flag(tmp_path, tiny_grader):
    refused(run("grade", tiny_grader, write(tmp_path, "p.tsv", PAIRS_TSV), "--out", tmp_path / "o.tsv", "--backend",
                "gpu"), "--backend gpu is not one of auto, onnxruntime, openvino")


def test_a_label_map_to_a_grade_the_model_lacks_blames_the_map(tmp_path, tiny_grader):
    """Was: the first row with that label was blamed ('fix the row'), though the row was right."""
    pairs = write(tmp_path, "p.tsv", "query\ttitle\tgrade\ndrill\tcordless drill\t0\nsaw\tmiter saw\t1\n")
    refused(run("evaluate", "--model", tiny_grader, "--data", pairs, "--label-map", "0:1,1:9"),
            "--label-map maps '1' to 9, which is not one of the grades [1, 2, 3, 4, 5]")
    with pytest.raises(UserError, match=r"^--set label_map maps '0' to 7"):
        read_pairs(pairs, label_map={"0": 7}, keys="")


def test_a_label_or_label_map_key_with_hidden_characters_is_quoted_with_them(tmp_path):
    """Was: quoted as it stands, so a zero-width space did not show: "maps '0' to 7" for the key '0\u200b', and
    "label '4' is not a number" for a grade cell holding 4 and a zero-width space."""
    pairs = write(tmp_path, "p.tsv", "query\ttitle\tgrade\ndrill\tcordless drill\t4\u200b\n")
    with pytest.raises(UserError, match=re.escape(r"--set label_map maps '0\u200b' to 7, which is not one")):
        read_pairs(pairs, label_map={"0\u200b": 7}, keys="")
    with pytest.raises(UserError, match=re.escape(r"line 2, column 'grade': label '4\u200b' is not a number")):
        read_pairs(pairs)
    with pytest.raises(UserError, match=re.escape(r"column 'grade': label '4\u200b' is not in the label map ['4']")):
        read_pairs(pairs, label_map={"4": 5})


@pytest.mark.parametrize("flag, value", [("--max-text-chars", "1000001"), ("--max-pairs", "65537"),
                                         ("--max-body-bytes", str(2 ** 30 + 1))])
def test_serve_limits_have_a_top(tiny_grader, flag, value):
    """Was: no top, so one request could hold a worker, or its memory, without bound."""
    refused(run("serve", tiny_grader, flag, value), flag, "out of range")


@pytest.mark.parametrize("args, named", [
    (["grade", "", "pairs.tsv", "--out", "o.tsv"], "GRADER_DIR"),
    (["grade", "g", "", "--out", "o.tsv"], "PAIRS_FILE"),
    (["grade", "g", "pairs.tsv", "--out", ""], "--out"),
    (["grade", "g", "pairs.tsv", "--out= "], "--out"),
    (["grade", "g", "pairs.tsv", "--out", "o.tsv", "--overwrite", "--", ""], "PAIRS_FILE"),
    (["export", "", "--out", "x"], "MODEL"),
    (["export", "m", "--out", "x", "--query-col", ""], "--query-col"),
    (["bench", "-m", "", "--data", "pairs.tsv", "--out", "x"], "--model"),
    (["bench", "-m", "m", "-g", " ", "--data", "pairs.tsv", "--out", "x"], "--grader"),
    (["prune", "-m", "m", "--keep-ratio", "0.5", "--scores", "", "--out", "x"], "--scores"),
    (["probe", "-m", "m", "-d", "", "-o", "x"], "--data"),
    (["scan", "-m", "m", "-d", "d.tsv", "-o", "x", "--method", ""], "--method"),
    (["evaluate", "-m", "m", "-d", "d.tsv", "--against", " "], "--against"),
])
def test_a_blank_path_or_value_is_refused_naming_it_not_read_as_the_current_folder(tmp_path, monkeypatch, args, named):
    """Was: typer read '' as Path('.'), so `grade "" pairs.tsv` said '--out o.tsv is inside the input ., which must
    stay as it is', `export "" --out x` '--out x is inside the input ,' and `--out ""` '--out . would replace the
    input pairs.tsv' (or `serve --host ""` listened on every address), naming the wrong thing. The help it points to
    is the command's, as for an option given twice (was the tool's: `python -m headcut --help`)."""
    from headcut_grader.cli.main import app as grader_app

    monkeypatch.chdir(tmp_path)
    for invoke in ((run, lambda *a: CliRunner().invoke(grader_app, list(a))) if args[0] in ("grade", "serve")
                   else (run,)):
        refused(invoke(*args), f"{named} is empty; give it a value; see `", f" {args[0]} --help`.")
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("host", ["", "  "])
def test_a_blank_host_is_refused_saying_it_would_listen_on_every_interface(tmp_path, monkeypatch, host):
    """Was: the generic 'is empty; give it a value' ran first, so serve's own sentence (what a blank host does and
    which host to pass) was never shown."""
    from headcut_grader.cli.main import app as grader_app

    monkeypatch.chdir(tmp_path)
    for invoke in (run, lambda *a: CliRunner().invoke(grader_app, list(a))):
        for args in (["serve", "g", "--host", host], ["serve", f"--host={host}", "g"]):
            refused(invoke(*args), "--host is empty, which would listen on every interface; pass 127.0.0.1 (this "
                    "machine only) or 0.0.0.0 (the network) on purpose")


def test_a_model_of_fewer_positions_than_the_default_max_length_runs_without_a_flag(tmp_path, saved_models):
    """Was: a model with 64 positions and no recorded max_length was refused by every command at the default 128
    ('max length 128 is more than the model's 64 positions; pass --max-length 64 or less'), by bench too, which has
    no --max-length: it could not be benchmarked at all."""
    from headcut.batching import max_length_of
    from headcut.models import load_model

    loaded = load_model(saved_models["artifact"])
    assert "max_length" not in loaded.meta and loaded.max_length == max_length_of(loaded.model) == 64
    pairs = write(tmp_path, "pairs.tsv", "query\ttitle\tgrade\n" + "drill\tcordless drill\t3\n" * 5)
    result = run("bench", "-m", saved_models["artifact"], "--data", pairs, "--out", tmp_path / "bench",
                 "--batch-sizes", 1, "--seq-lens", 8, "--repeats", 1)
    assert result.exit_code == 0, result.output
    result = run("export", saved_models["artifact"], "--out", tmp_path / "grader")
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "grader" / "grader.json").read_text())["max_length"] == 64


@pytest.mark.parametrize("args, shown", [
    (["bench", "-m", "M", "--data", "p.tsv", "--out", "b", "--batch-sizes", "1,\u200b8"],
     r"--batch-sizes '1,\u200b8' is not"),
    (["prune", "--model", "M", "--flops", "0.5\u200b", "--out", "o"], r"--flops '0.5\u200b' is not a number"),
    (["run", "quickstart", "--set", "teacher\u200b"], r"--set 'teacher\u200b' is not section.key=value"),
    (["run", "quickstart", "--set", "distill.x\u200b.epochs=1"], r"the recipe has no student 'x\u200b'"),
    (["distill", "minilm_bottom3_cpu\u200b"], r"error: 'minilm_bottom3_cpu\u200b' is neither"),  # RECIPE: its value
])
def test_a_flag_value_with_hidden_characters_is_quoted_with_them(tmp_path, monkeypatch, args, shown):
    """Was: quoted as typed, so a pasted zero-width space did not show: "--flops '0.5' is not a number"."""
    monkeypatch.chdir(tmp_path)
    refused(run(*args), shown)


@pytest.mark.parametrize("kind", ["artifact", "plain"])
def test_headcut_json_grades_against_a_config_of_num_labels_alone_blame_headcut_json(tmp_path, saved_models, kind):
    """config.json declaring its 5 outputs by num_labels alone (no id2label) and headcut.json edited to 3 grades. Was:
    'config.json gives the classifier 3 outputs', which config.json does not say; headcut.json is the file to fix."""
    from headcut.models import load_model

    folder = _three_grades_over(saved_models[kind], tmp_path, outputs=5, by="num_labels")
    with pytest.raises(UserError) as caught:
        load_model(folder)
    assert str(caught.value) == (f"{folder / 'headcut.json'} records 3 grades, but the classifier in "
                                 f"{folder / 'config.json'} has 5 outputs; fix 'task' or 'grades' in headcut.json.")


def test_a_fresh_head_replaces_the_classifier_alone(tmp_path, saved_models):
    """A base model fine-tuned with 3 outputs whose config.json was edited to 3 token types over weights of 2. Was:
    token_type_embeddings, of the head's new shape, passed as 'the head' and was re-initialised at random, exit 0."""
    from headcut.models import load_model

    folder = _copy(saved_models["plain"], tmp_path)
    config = json.loads((folder / "config.json").read_text())
    assert config["type_vocab_size"] == 2
    config["type_vocab_size"] = 3
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(UserError, match="token_type_embeddings"):
        load_model(folder, num_labels=3)


@pytest.mark.parametrize("kind", ["distilbert", "modernbert"])
def test_a_base_model_s_own_head_is_new_not_a_config_mismatch(tmp_path, kind):
    """A base checkpoint fine-tuned: its task head outside the encoder (DistilBERT's pre_classifier, ModernBERT's
    head.dense and head.norm) is new, as the classifier is. Was: 'model.safetensors lacks pre_classifier.weight, ...,
    which the model config.json describes has; put back the config.json ...'."""
    from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM

    from conftest import TINY
    from headcut.models import load_model
    from test_export import tiny_tokenizer

    tokenizer = tiny_tokenizer(tmp_path / "tok")
    config = AutoConfig.for_model(kind, **{**TINY[kind], "vocab_size": len(tokenizer), "max_position_embeddings": 64})
    base = (AutoModelForMaskedLM if kind == "distilbert" else AutoModel).from_config(config)
    folder = tmp_path / kind
    base.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    loaded = load_model(folder, num_labels=5)
    assert loaded.model.config.num_labels == 5


def test_a_text_the_grader_s_tokenizer_keeps_nothing_of_is_refused_naming_its_line(tmp_path, tiny_grader):
    """Was: evaluate through an exported grader (and bench's grader variants, which grade as Grader.logits does) let
    the tokenizer's NoTokens out as a traceback (exit 1) for a title of combining marks alone; now one sentence
    naming the file's line and the side, exit 2."""
    from headcut.export.bench import grader_variant
    from headcut_grader.data import read_pairs
    from headcut_grader.errors import UserError

    pairs = write(tmp_path, "pairs.tsv", PAIRS_TSV + "bit\t\u0301\u0301\t2\n")
    said = (f"{pairs}, line 4, title: empty text (the grader's tokenizer keeps none of its characters, such as "
            "U+0301); fix that pair or drop it.")
    refused(run("evaluate", "--model", tiny_grader, "--data", pairs), f"error: {said}")
    with pytest.raises(UserError) as err:
        grader_variant("g", tiny_grader, threads=1).logits(read_pairs(pairs))
    assert str(err.value) == said
