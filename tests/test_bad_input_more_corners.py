"""Bad input a later sweep found: one sentence naming the flag, argument, file or request and the fix, exit code 2
from a command (UserError from Python), no traceback, nothing written."""
from __future__ import annotations

import re

import pytest

from test_bad_input import refused, run, tiny_grader, write  # noqa: F401  (tiny_grader: a fixture)
from test_serve import server  # noqa: F401  (a fixture)

PAIRS_TSV = "query\ttitle\tgrade\ndrill\tcordless drill\t4\npaint\tred lamp\t1\n"


@pytest.mark.parametrize("command", ["grade", "evaluate", "export", "bench", "finetune", "run"])
@pytest.mark.parametrize("under", [False, True])
def test_an_out_on_a_loop_of_links_is_a_sentence_not_a_traceback(tmp_path, tiny_grader, command, under,
                                                                 monkeypatch):
    """--out a link that points at itself through another (or a path under one): Path.resolve raised
    RuntimeError('Symlink loop ...') as a traceback from every command that writes."""
    pairs = write(tmp_path, "pairs.tsv", PAIRS_TSV)
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    out = tmp_path / "a" / "out.tsv" if under else tmp_path / "a"
    args = {"grade": ["grade", tiny_grader, pairs], "evaluate": ["evaluate", "--model", tiny_grader, "--data", pairs],
            "export": ["export", tiny_grader], "bench": ["bench", "--model", tiny_grader, "--data", pairs],
            "finetune": ["finetune", "minilm_synthetic_cpu"], "run": ["run", "quickstart"]}[command]
    refused(run(*args, "--out", out), f"--out {out}", "loop of symbolic links")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "pairs.tsv"]


def test_a_python_out_on_a_loop_of_links_names_the_argument(tmp_path):
    from headcut_grader.errors import UserError
    from headcut_grader.files import check_out_dir, check_out_file

    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    for check in (check_out_dir, check_out_file):
        with pytest.raises(UserError, match=r"^out=.*loop: a loop of symbolic links"):
            check(tmp_path / "loop", overwrite=False)


@pytest.mark.parametrize("kwargs, words", [
    ({"n": 0}, "synthetic_pairs n is 0; it must be a whole number in [1, 1000000]"),
    ({"n": -5}, "synthetic_pairs n is -5"),
    ({"n": 2.5}, "synthetic_pairs n is 2.5"),
    ({"n": "100"}, "synthetic_pairs n is '100'"),
    ({"n": True}, "synthetic_pairs n is True"),
    ({"n": 10 ** 12}, "synthetic_pairs n is 1000000000000"),  # was made in memory: ~130 GB
    ({"n": 5, "seed": -1}, "synthetic_pairs seed is -1; it must be a whole number in [0, 999999999999999999]."),
    # was: taken, a draw no synthetic:SEED can name (SEEDS, the spec's range, is now the argument's too)
    ({"n": 5, "seed": 10**18}, "synthetic_pairs seed is 1000000000000000000; it must be a whole number in [0, "
                               "999999999999999999]."),
    ({"n": 5, "seed": 1.5}, "synthetic_pairs seed is 1.5"),
    ({"n": 5, "seed": "1"}, "synthetic_pairs seed is '1'"),
])
def test_synthetic_pairs_checks_its_count_and_seed_before_making_any(kwargs, words):
    """synthetic_pairs(0) and (-5) gave no pairs, 2.5 three, '100' and a seed of '1' or 1.5 a draw no spec can
    name, and 10**12 filled memory for hours: each is now one sentence naming the argument."""
    from headcut.synthetic import synthetic_pairs
    from headcut_grader.errors import UserError

    with pytest.raises(UserError, match="^" + re.escape(words)):
        synthetic_pairs(**kwargs)


@pytest.mark.parametrize("kwargs, words", [
    ({"limit": 0}, "read_pairs limit is 0; it must be a whole number in [1, "),  # read every row
    ({"limit": -1}, "read_pairs limit is -1"),
    ({"limit": 2.5}, "read_pairs limit is 2.5"),
    ({"limit": "1"}, "read_pairs limit is '1'"),
    # was read as iter_pairs' chunk_rows, unbounded: now one chunk's bound (ranges.CHUNK_ROWS), in its own name
    ({"limit": 10_000_001}, "read_pairs limit is 10000001; it must be a whole number in [1, 10000000]."),
    ({"grades": "12345"}, "read_pairs grades is '12345'; pass two or more different whole numbers"),  # TypeError
    ({"grades": None}, "read_pairs grades is None"),  # AttributeError
    ({"grades": (4,)}, "read_pairs grades is (4,)"),
    ({"grades": (1, 1, 2)}, "read_pairs grades is (1, 1, 2)"),
    ({"grades": (1.5, 4)}, "read_pairs grades is (1.5, 4)"),
    ({"task": "rank"}, "read_pairs task is 'rank'; pass one of: grades, score"),  # read as grades
    ({"require_labels": "no"}, "read_pairs require_labels is 'no'; pass True or False"),  # read as True
    ({"texts_only": 1}, "read_pairs texts_only is 1"),
    ({"query_col": 0}, "read_pairs query_col is 0; pass a column's name as text, or None"),  # read 'query'
    ({"label_col": ["grade"]}, "read_pairs label_col is ['grade']"),
])
def test_read_pairs_checks_its_arguments_before_reading(tmp_path, kwargs, words):
    """A Python caller's read_pairs(limit=0) read the whole file, task='rank' read grades, query_col=0 the preset's
    column, grades='12345' raised TypeError: each is now one sentence naming the argument."""
    from headcut_grader.data import iter_pairs, read_pairs
    from headcut_grader.errors import UserError

    path = write(tmp_path, "pairs.tsv", PAIRS_TSV)
    with pytest.raises(UserError, match="^" + re.escape(words)):
        read_pairs(path, **kwargs)
    if "limit" not in kwargs:
        with pytest.raises(UserError, match="^" + re.escape(words.replace("read_pairs", "iter_pairs"))):
            next(iter_pairs(path, chunk_rows=10, **kwargs))
    with pytest.raises(UserError, match="^iter_pairs chunk_rows is 0"):
        next(iter_pairs(path, chunk_rows=0))
    with pytest.raises(UserError, match=r"^iter_pairs chunk_rows is 10000001; it must be a whole number in \[1, 1"):
        next(iter_pairs(path, chunk_rows=10_000_001))


@pytest.mark.parametrize("start, words", [
    (b"\x1f\x8b\x08\x00", "the file is gzip-compressed: decompress it (gunzip) and pass that"),
    (b"PK\x03\x04\x14\x00\xff", "the file is a zip archive: extract it and pass that"),
    (b"\xff\xfeq\x00u\x00", "the file is UTF-16 text: re-save it as UTF-8 and pass that"),
    (b"q\xffuery", "re-save the file as UTF-8"),
])
@pytest.mark.parametrize("suffix", [".tsv", ".json", ".yaml"])
def test_a_compressed_or_utf16_file_says_what_it_is_not_only_that_it_is_not_utf8(tmp_path, start, words, suffix):
    """A gzip file named .tsv was told 're-save the file as UTF-8', which no re-saving of a compressed file does: its
    first bytes say what it is, in pairs files (lines and JSON arrays) and recipes alike."""
    from headcut.finetune import FinetuneRecipe
    from headcut.recipes import load_recipe
    from headcut_grader.data import read_pairs
    from headcut_grader.errors import UserError

    path = write(tmp_path, "data" + suffix, start + b"\x00\x80\xfe\n")
    with pytest.raises(UserError, match=re.escape(f"; {words}.")):
        load_recipe(FinetuneRecipe, path) if suffix == ".yaml" else read_pairs(path)


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be"])
def test_a_recipe_in_utf16_without_a_byte_order_mark_is_said_to_be_one(tmp_path, encoding):
    """Was: 'r.yaml, line 1, column 2: invalid YAML (character 0x0000 is not allowed); fix the file.'"""
    from headcut.finetune import FinetuneRecipe
    from headcut.recipes import load_recipe
    from headcut_grader.errors import UserError

    path = write(tmp_path, "r.yaml", "epochs: 1\n".encode(encoding))
    with pytest.raises(UserError, match=re.escape(f"{path} is UTF-16 text without a byte-order mark") + ".*UTF-8"):
        load_recipe(FinetuneRecipe, path)


@pytest.mark.parametrize("name, start, words", [
    ("pairs.tsv.gz", b"\x1f\x8b\x08\x00", "pairs.tsv.gz: the file is gzip-compressed: decompress it (gunzip) and pass"),
    ("pairs.csv.zst", b"\x28\xb5\x2f\xfd", "pairs.csv.zst: the file is zstd-compressed: decompress it (unzstd)"),
    ("pairs.xlsx", b"PK\x03\x04\x14\x00", "pairs.xlsx is a spreadsheet, which is not read; save it as CSV (UTF-8)"),
])
def test_a_compressed_file_or_a_spreadsheet_by_its_suffix_is_said_to_be_one(tmp_path, name, start, words):
    """Was: 'pairs.tsv.gz: cannot tell the format from the suffix '.gz'; name the file .tsv, ...', and renamed so it
    was then told it is gzip-compressed; a spreadsheet was told to be renamed .csv. Both by `headcut evaluate`."""
    from headcut_grader.data import read_pairs
    from headcut_grader.errors import UserError

    path = write(tmp_path, name, start + b"\x00\x80\xfe\n")
    with pytest.raises(UserError, match=re.escape(str(tmp_path / words))):
        read_pairs(path)
    refused(run("evaluate", "-m", "minilm-l6", "-d", path), words)


@pytest.mark.parametrize("encoding, words", [
    ("utf-16-le", "is UTF-16 text without a byte-order mark"), ("utf-16-be", "is UTF-16 text without a byte-order"),
    ("utf-32-le", "is UTF-32 text without a byte-order mark"), ("utf-32-be", "is UTF-32 text without a byte-order"),
    ("utf-32", "the file is UTF-32 text"),  # with its byte-order mark: was 'UTF-16 text'
])
@pytest.mark.parametrize("suffix", [".tsv", ".jsonl", ".json"])
def test_a_utf16_or_utf32_file_without_a_byte_order_mark_is_said_to_be_one(tmp_path, encoding, words, suffix):
    """UTF-16 without a BOM reads as UTF-8 with a NUL beside each letter: a TSV was told its column 'q\\x00u\\x00...'
    holds an invisible NUL and to delete it from the column's name; a Latin letter in a row said 'not UTF-8 (byte
    0xf3)'. Both name the encoding and say to re-save the file as UTF-8."""
    from headcut_grader.data import read_pairs
    from headcut_grader.errors import UserError

    text = {".tsv": "query\ttitle\tgrade\ndrill\tSimpsón drill\t3\n",
            ".jsonl": '{"query": "drill", "title": "Simpsón drill", "grade": 3}\n',
            ".json": '[{"query": "drill", "title": "Simpsón drill", "grade": 3}]\n'}[suffix]
    path = write(tmp_path, "pairs" + suffix, text.encode(encoding))
    with pytest.raises(UserError, match=re.escape(words) + ".*re-save it as UTF-8 and pass that"):
        read_pairs(path)
    assert len(read_pairs(write(tmp_path, "plain" + suffix, text))) == 1


@pytest.mark.parametrize("encoding", ["gzip", "br", "deflate"])
def test_serve_refuses_a_compressed_body_by_its_content_encoding(server, encoding):
    """A client that gzips its JSON body (Content-Encoding: gzip) was told the body 'is not UTF-8', as if its text
    were wrong: the header says why, and the answer says to send it uncompressed."""
    import gzip

    import httpx

    body = gzip.compress(b'{"pairs": [{"query": "drill", "title": "cordless drill"}]}')
    headers = {"content-type": "application/json", "content-encoding": encoding}
    reply = httpx.post(server[0] + "/grade", content=body, headers=headers, timeout=30)
    assert reply.status_code == 415, reply.text
    assert reply.json()["error"] == (f"request body has Content-Encoding {encoding}, which this server does not "
                                     "decode: send the JSON uncompressed, without a Content-Encoding header.")
    plain = {"content-type": "application/json", "content-encoding": "identity"}
    assert httpx.post(server[0] + "/grade", content=gzip.decompress(body), headers=plain, timeout=30).status_code == 200


@pytest.mark.parametrize("task, cell, words", [
    ("grades", "3_0", "label '3_0' is not a number"),  # was grade 30 (Python's digit grouping)
    ("grades", "1_2e-1", "label '1_2e-1' is not a number"),
    ("score", "1_5", "score '1_5' is not a number;"),  # was the score 15
    ("score", "0.2_5", "score '0.2_5' is not a number;"),
    ("score", "high", "score 'high' is not a number;"),  # was "is not a finite number", as for nan
    ("score", "nan", "score 'nan' is not a finite number;"),
])
def test_a_label_with_an_underscore_is_not_read_as_python_digit_grouping(tmp_path, task, cell, words):
    """float('1_5') is 15: a cell '1_5' (a typo, a joined '1' and '5') was read as grade or score 15 or 30, not
    refused. A score cell of text was told it "is not a finite number", as nan is: it is no number at all."""
    from headcut_grader.data import read_pairs
    from headcut_grader.errors import UserError

    column = "score" if task == "score" else "grade"
    path = write(tmp_path, "pairs.tsv", f"query\ttitle\t{column}\ndrill\tcordless drill\t{cell}\n")
    with pytest.raises(UserError, match=re.escape(f"line 2, column '{column}': {words}")):
        read_pairs(path, task=task, grades=tuple(range(1, 31)))
    assert len(read_pairs(write(tmp_path, "ok.tsv", f"query\ttitle\t{column}\nd\tt\t 3.0e0\n"), task=task)) == 1


@pytest.mark.parametrize("kind, words", [
    ("loop", "a loop of symbolic links; remove the link or name another path"),
    ("broken", "a broken symbolic link to {target}; point the link at an existing path or name another"),
])
def test_an_input_on_a_loop_of_links_or_a_broken_link_says_so(tmp_path, tiny_grader, kind, words):
    """--data, --model, a recipe's data key or a score file that is a loop of links or a link to nothing was
    'no such file; check the path', though the path is there: the link is what to fix."""
    from headcut.models import resolve_source
    from headcut.evaluate.importance import read_scores
    from headcut_grader.data import read_pairs
    from headcut_grader.errors import UserError
    from headcut_grader.grader import read_record

    link, target = tmp_path / "link", tmp_path / "gone"
    link.symlink_to(link if kind == "loop" else target)
    said = words.format(target=target)
    refused(run("evaluate", "--model", tiny_grader, "--data", link), f"{link}: {said}")
    refused(run("evaluate", "--model", link, "--data", write(tmp_path, "p.tsv", PAIRS_TSV)), f"{link}: {said}")
    refused(run("finetune", "minilm_synthetic_cpu", "--set", f"train_data={link}", "--out", tmp_path / "o"),
            f"train_data={link}: {said}")
    recipe = tmp_path / "r.yaml"
    recipe.symlink_to(recipe if kind == "loop" else target)
    refused(run("finetune", recipe, "--out", tmp_path / "o"), f"error: {recipe}: {said.format(target=target)}")
    for call in (read_pairs, read_record, resolve_source, read_scores):
        with pytest.raises(UserError, match=re.escape(said)):
            call(link)


def refused_by_every_reader(tmp_path, grader, pairs, model, said: str) -> None:
    """--data, --model, a recipe's data key, a recipe path and every Python reader refuse `pairs` / `model` (paths
    with the same thing wrong on their way) with `said` after the path."""
    from headcut.evaluate.importance import read_scores
    from headcut.models import resolve_source
    from headcut_grader.data import read_pairs
    from headcut_grader.errors import UserError
    from headcut_grader.grader import read_record

    recipe = pairs.with_name("r.yaml")
    refused(run("evaluate", "--model", grader, "--data", pairs), f"{pairs}: {said}")
    refused(run("evaluate", "--model", model, "--data", write(tmp_path, "p.tsv", PAIRS_TSV)), f"{model}: {said}")
    refused(run("finetune", "minilm_synthetic_cpu", "--set", f"train_data={pairs}", "--out", tmp_path / "o"),
            f"train_data={pairs}: {said}")
    refused(run("finetune", recipe, "--out", tmp_path / "o"), f"error: {recipe}: {said}")
    for call in (read_pairs, read_record, resolve_source, read_scores):
        with pytest.raises(UserError, match=re.escape(f"{model}: {said}")):
            call(model)


def test_an_input_under_a_broken_link_to_a_folder_names_that_link(tmp_path, tiny_grader):
    """A path whose folder on the way is a symbolic link to nothing (gone/p.tsv, gone -> a removed folder) was 'no
    such file; check the path' (--data, a recipe's data key, --model: 'no such folder'), though the link is what
    to fix; now each input names that link and its target, as a broken link at the path's end is named."""
    folder, target = tmp_path / "data", tmp_path / "removed"
    folder.symlink_to(target)
    said = (f"its folder {folder} is a broken symbolic link to {target}; point that link at an existing folder or "
            "name another path")
    pairs, model = folder / "p.tsv", folder / "model"
    refused_by_every_reader(tmp_path, tiny_grader, pairs, model, said)
    nested = tmp_path / "real"
    (nested / "sub").mkdir(parents=True)
    (nested / "sub" / "link").symlink_to(target)
    refused(run("evaluate", "--model", tiny_grader, "--data", nested / "sub" / "link" / "p.tsv"),
            f"its folder {nested / 'sub' / 'link'} is a broken symbolic link to {target};")


def test_a_path_through_a_file_says_that_file_is_no_folder(tmp_path, tiny_grader):
    """afile/p.tsv, afile a file: the system says 'Not a directory', and --data, a recipe's data key and every
    Python reader said 'no such file; check the path' (--model: 'no such folder', a recipe: 'neither a YAML file
    nor a built-in name', write_json: 'cannot write there (File exists)'); now each names the file in the way."""
    from headcut.pipeline import load_pipeline
    from headcut.pipeline.checks import check_inputs, run_parts
    from headcut_grader.errors import UserError
    from headcut_grader.files import write_json

    blocker = write(tmp_path, "afile", "keep me\n")
    said = f"{blocker} is a file, not a folder; name a path inside a folder"
    pairs, model = blocker / "p.tsv", blocker / "sub" / "model"
    refused_by_every_reader(tmp_path, tiny_grader, pairs, model, said + ".")
    with pytest.raises(UserError, match=re.escape(f"--set data.test={pairs}: {said}.")):
        check_inputs(run_parts(load_pipeline("quickstart", overrides=[f"data.test={pairs}"])))
    with pytest.raises(UserError, match=re.escape(f"{pairs}: {said}.")):
        write_json(pairs, {})
    assert blocker.read_text() == "keep me\n"


OUT_COMMANDS = {
    "grade": ["grade", "{grader}", "{pairs}"], "evaluate": ["evaluate", "--model", "{grader}", "--data", "{pairs}"],
    "export": ["export", "{grader}"], "bench": ["bench", "--model", "{grader}", "--data", "{pairs}"],
    "scan": ["scan", "--model", "{grader}", "--data", "{pairs}"],
    "cross-encoder": ["cross-encoder", "--model", "{grader}"],
    "prune": ["prune", "--model", "{grader}", "--keep-ratio", "0.5", "--data", "{pairs}"],
    "finetune": ["finetune", "minilm_synthetic_cpu"], "distill": ["distill", "distill/minilm_synthetic_cpu"],
    "run": ["run", "quickstart"]}


@pytest.mark.parametrize("command", list(OUT_COMMANDS))
def test_an_out_under_a_broken_link_names_that_link_before_any_work(tmp_path, tiny_grader, command):
    """--out gone/out.tsv, gone a symbolic link to a removed folder: evaluate worked, then said 'cannot write there
    (File exists); check the folder's permissions', and run made the link's target and ran, though the link is what
    to fix; every command's --out (file or folder) now names the link and its target before any work, as an input
    under one does."""
    pairs = write(tmp_path, "pairs.tsv", PAIRS_TSV)
    folder, target = tmp_path / "gone", tmp_path / "removed"
    folder.symlink_to(target)
    out = folder / "out.tsv"
    args = [a.format(grader=tiny_grader, pairs=pairs) for a in OUT_COMMANDS[command]]
    refused(run(*args, "--out", out), f"--out {out}: its folder {folder} is a broken symbolic link to {target}; "
                                      "point that link at an existing folder or name another path.")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gone", "pairs.tsv"]


def test_a_python_write_under_a_broken_link_names_that_link(tmp_path):
    """write_json and atomic_dir, which a library caller may call without a check first, said 'cannot write there
    (File exists)' for a path under a link to nothing."""
    from headcut_grader.errors import UserError
    from headcut_grader.files import atomic_dir, write_json

    (tmp_path / "gone").symlink_to(tmp_path / "removed")
    said = f"its folder {tmp_path / 'gone'} is a broken symbolic link to {tmp_path / 'removed'}"
    with pytest.raises(UserError, match=re.escape(f"{tmp_path / 'gone' / 'a.json'}: {said}")):
        write_json(tmp_path / "gone" / "a.json", {})
    with pytest.raises(UserError, match=re.escape(f"out={tmp_path / 'gone' / 'sub' / 'o'}: {said}")):
        with atomic_dir(tmp_path / "gone" / "sub" / "o"):
            pass


@pytest.mark.parametrize("kind, text", [(int, "1_000"), (int, "５"), (int, "１０"), (float, "0.5_0"), (float, "０.5")])
def test_a_number_flag_refuses_python_only_spellings(kind, text):
    """int('1_000') is 1000 and int('５') (full-width) 5: a flag typed with digit grouping or another script's
    digits ran on a number nobody typed, where a label cell '1_5' is refused."""
    from headcut.cli.bench import _ints
    from headcut_grader.cli.common import BadValue, bounded
    from headcut_grader.errors import UserError
    from headcut_grader.ranges import Range

    refusal = bounded(kind, Range(0, None), "--flag")(text)
    noun = "whole number" if kind is int else "number"
    assert isinstance(refusal, BadValue) and refusal.sentence.startswith(f"--flag '{text}' is not a {noun}; ")
    assert bounded(kind, Range(0, None), "--flag")(" 10 ") == 10
    if kind is int:
        with pytest.raises(UserError, match=re.escape(f"--seq-lens '8,{text}' is not a comma-separated list")):
            _ints(f"8,{text}", "--seq-lens", Range(1, None), "32,64")


@pytest.mark.parametrize("flag, text, example", [("--seq-lens", "8.0", "--seq-lens 32,64,128"),
                                                 ("--batch-sizes", "1,x", "--batch-sizes 1,8,32")])
def test_a_bench_grid_that_is_no_list_of_whole_numbers_is_shown_a_list_the_flag_takes(tmp_path, flag, text, example):
    """Was: "--seq-lens '8.0' is not a comma-separated list of numbers; write e.g. --seq-lens 1,8,32": 8.0 is a
    number, and 1 is below the 8 tokens --seq-lens takes, so the example was refused in turn."""
    result = run("bench", "--model", "m", "--data", "synthetic", "--out", tmp_path / "b", flag, text)
    refused(result, f"{flag} '{text}' is not a comma-separated list of whole numbers; write e.g. {example}.")
    assert not (tmp_path / "b").exists()


def test_limit_with_digit_grouping_is_refused_before_work(tmp_path, tiny_grader):
    pairs = write(tmp_path, "pairs.tsv", PAIRS_TSV)
    refused(run("evaluate", "--model", tiny_grader, "--data", pairs, "--limit", "1_000", "--out", tmp_path / "o"),
            "--limit '1_000' is not a whole number")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("args, said", [
    (["export", "m", "--out", "g", "--precision", "int8", "--precision", "fp32"],
     "--precision is given twice, as 'int8' and as 'fp32'; pass it once"),
    (["export", "m", "-o", "g", "--out=h"], "--out is given twice, as 'g' and as 'h'"),
    (["export", "m", "-o", "g", "-oh"], "--out is given twice, as 'g' and as 'h'"),  # was read as h: -oh unseen
    (["evaluate", "-m", "m", "--data", "a.tsv", "-d", "b.tsv"], "--data is given twice, as 'a.tsv' and as 'b.tsv'"),
    (["grade", "g", "pairs.tsv", "--out", "o.tsv", "--batch-size", "8", "--batch-size", "16"],
     "--batch-size is given twice, as '8' and as '16'"),
    (["serve", "g", "--port", "8000", "--port", "8001"], "--port is given twice, as '8000' and as '8001'"),
    (["prune", "-m", "m", "--keep-ratio", "0.5", "--out", "p", "--tune", "--no-tune"],
     "--tune and --no-tune are both given; pass one of them"),
])
def test_an_option_given_twice_with_different_values_is_refused_not_read_as_the_last(tmp_path, monkeypatch, args,
                                                                                      said):
    """Was: click kept the last value in silence, so `export ... --precision int8 ... --precision fp32` (a command
    line edited by appending) wrote an fp32 grader, exit 0. Each command names its own --help."""
    from typer.testing import CliRunner

    from headcut_grader.cli.main import app as grader_app

    monkeypatch.chdir(tmp_path)
    runtime = (lambda *a: CliRunner().invoke(grader_app, list(a)),) if args[0] in ("grade", "serve") else ()
    for invoke in (run, *runtime):
        refused(invoke(*args), said, f"{args[0]} --help")
    assert not any(tmp_path.iterdir())


def test_an_option_given_twice_with_one_value_or_a_repeatable_one_is_read(tmp_path, tiny_grader):
    pairs = write(tmp_path, "pairs.tsv", PAIRS_TSV)
    out = tmp_path / "o.tsv"
    done = run("grade", tiny_grader, pairs, "--out", out, "-o", out, "--overwrite", "--overwrite")
    assert done.exit_code == 0, done.output
    # -m: repeatable
    refused(run("bench", "-m", "a", "-m", "b", "--data", pairs, "--out", pairs), "would replace the input")
    refused(run("finetune", "minilm_homedepot_cpu", "--set", "epochs=1", "--set", "batch_size=8", "--train", pairs,
                "--out", pairs), "--out", "would replace the input")  # --set: repeatable


def test_an_output_given_twice_as_a_file_and_a_link_to_it_is_two_values(tmp_path, monkeypatch, tiny_grader):
    """An output is compared as written: `--out a.tsv --out b.tsv`, b.tsv a link to a.tsv, is two values. Was: read
    as one (the link followed), click kept b.tsv, and with --overwrite the write replaced the link itself. An input
    given as a file and a link to it is still one value."""
    from typer.testing import CliRunner

    from headcut_grader.cli.main import app as grader_app

    monkeypatch.chdir(tmp_path)
    write(tmp_path, "pairs.tsv", PAIRS_TSV)
    (tmp_path / "a.tsv").write_text("old\n")
    (tmp_path / "b.tsv").symlink_to("a.tsv")
    (tmp_path / "link.tsv").symlink_to("pairs.tsv")
    for invoke in (run, lambda *a: CliRunner().invoke(grader_app, [str(x) for x in a])):
        refused(invoke("grade", tiny_grader, "pairs.tsv", "--out", "a.tsv", "--out", "b.tsv", "--overwrite"),
                "--out is given twice, as 'a.tsv' and as 'b.tsv'")
        assert (tmp_path / "b.tsv").is_symlink() and (tmp_path / "a.tsv").read_text() == "old\n"
    refused(run("evaluate", "-m", "m", "--data", "./pairs.tsv", "-d", "./link.tsv", "--limit", "0"),
            "--limit 0")  # read as one --data: the range check speaks, not the given-twice one


def test_one_path_given_twice_in_two_spellings_is_read_and_two_paths_are_refused(tmp_path, monkeypatch, tiny_grader):
    """Was: `grade ... --out o.tsv --out ./o.tsv` was refused as two values, though both name one file; in both
    CLIs. A text option's paths (--data) are one value where both are written as paths to one file on disk."""
    from typer.testing import CliRunner

    from headcut_grader.cli.main import app as grader_app

    monkeypatch.chdir(tmp_path)
    (tmp_path / "in").mkdir()
    (tmp_path / "out").mkdir()
    write(tmp_path, "in/pairs.tsv", PAIRS_TSV)
    for invoke in (run, lambda *a: CliRunner().invoke(grader_app, [str(x) for x in a])):
        done = invoke("grade", tiny_grader, "in/pairs.tsv", "--out", "o.tsv", "-o", "./o.tsv", "--overwrite")
        assert done.exit_code == 0, done.output
        assert (tmp_path / "o.tsv").is_file()
        done = invoke("grade", tiny_grader, "in/pairs.tsv", "--out", "out/g.tsv", "-o", tmp_path / "in/../out/g.tsv")
        assert done.exit_code == 0, done.output
        (tmp_path / "out/g.tsv").unlink()
        refused(invoke("grade", tiny_grader, "in/pairs.tsv", "--out", "in/g.tsv", "-o", "out/g.tsv"),
                "--out is given twice, as 'in/g.tsv' and as 'out/g.tsv'")
        assert not (tmp_path / "out/g.tsv").exists() and not (tmp_path / "in/g.tsv").exists()
    refused(run("evaluate", "-m", "m", "--data", "in/pairs.tsv", "-d", "./in/pairs.tsv", "--limit", "0"),
            "--limit 0")  # read as one --data: the range check speaks, not the given-twice one
    refused(run("evaluate", "-m", "m", "--data", "in/pairs.tsv", "-d", "./in/other.tsv"),
            "--data is given twice, as 'in/pairs.tsv' and as './in/other.tsv'")


@pytest.fixture(scope="module")
def long_and_short_models(tmp_path_factory):
    """Two tiny BERT artifacts of one tokenizer: 128 positions and 64."""
    from conftest import tiny_model
    from headcut.models import LoadedModel, save_model
    from test_export import tiny_tokenizer

    root = tmp_path_factory.mktemp("long-and-short")
    tokenizer = tiny_tokenizer(root / "tok")
    return [save_model(LoadedModel(tiny_model("bert", vocab_size=len(tokenizer), max_position_embeddings=positions),
                                   tokenizer, {"grades": [1, 2, 3, 4, 5]}, "tiny", ""), root / f"m{positions}")
            for positions in (128, 64)]


def test_a_length_past_one_models_positions_names_that_model_before_any_loads(tmp_path, long_and_short_models,
                                                                              monkeypatch):
    """Was: 'bench --model LONG --model SHORT --seq-lens 8,96' loaded and measured LONG, then said '--seq-lens 96 is
    more than the model's 64 positions' (which model?); 'evaluate --max-length 96 --against SHORT' said the same of
    --against. Now the sentence names the model's flag and folder, and bench and evaluate say it before any model
    loads (evaluate said it once --model was loaded, and --against's once --data was read too)."""
    import headcut.models
    from headcut.evaluate.report import open_scorer
    from headcut_grader.errors import UserError

    def no_load(*args, **kwargs):
        raise AssertionError("a model was loaded before the range check")

    monkeypatch.setattr(headcut.models, "load_model", no_load)
    long, short = long_and_short_models
    data = write(tmp_path, "pairs.tsv", PAIRS_TSV)
    refused(run("evaluate", "--model", long, "--against", short, "--data", data, "--max-length", "96"),
            f"--max-length 96 is more than --against {short}'s 64 positions; pass --max-length 64 or less.")
    refused(run("evaluate", "--model", short, "--data", data, "--max-length", "96"),
            f"--max-length 96 is more than --model {short}'s 64 positions")
    with pytest.raises(UserError, match=re.escape(f"open_scorer max_length=96 is more than open_scorer name={short}'s "
                                                  "64 positions; set open_scorer max_length=64 or less.")):
        open_scorer(str(short), max_length=96)
    refused(run("bench", "--model", long, "--model", short, "--data", data, "--out", tmp_path / "b", "--seq-lens",
                "8,96", "--batch-sizes", "1"),
            f"--seq-lens 96 is more than --model {short}'s 64 positions; pass --seq-lens 64 or less.")
    assert not (tmp_path / "b").exists()


def test_a_config_json_edited_to_other_outputs_is_named_as_the_file_to_put_back(tmp_path, long_and_short_models):
    """Was: config.json's id2label cut to 3 labels, beside headcut.json's 5 grades and weights of 5 outputs, said
    "headcut.json records 5 grades, but ... config.json has 3 outputs; fix 'task' or 'grades' in headcut.json": the
    one file that was right. The classifier in the weights (its header) now says which file disagrees."""
    import json
    import shutil

    from headcut.models import load_model
    from headcut_grader.errors import UserError

    folder = shutil.copytree(long_and_short_models[1], tmp_path / "edited")
    config = json.loads((folder / "config.json").read_text())
    config["id2label"] = {str(i): f"grade {i + 1}" for i in range(3)}
    config["label2id"] = {f"grade {i + 1}": i for i in range(3)}
    (folder / "config.json").write_text(json.dumps(config))
    words = (f"{folder / 'config.json'} gives the classifier 3 outputs, but {folder / 'headcut.json'} and the "
             f"classifier in {folder / 'model.safetensors'} have 5; put back the config.json saved with these weights, "
             "or copy or download the model folder again.")
    with pytest.raises(UserError, match="^" + re.escape(words) + "$"):
        load_model(folder)
    refused(run("evaluate", "--model", folder, "--data", write(tmp_path, "pairs.tsv", PAIRS_TSV)), words)


@pytest.mark.parametrize("kind", ["bert", "roberta", "electra", "distilbert", "deberta-v2", "modernbert"])
def test_the_stored_outputs_are_read_from_the_header_of_every_architecture(tmp_path, kind):
    from safetensors.torch import save_file

    from conftest import tiny_model
    from headcut.weight_files import stored_outputs

    path = tmp_path / "model.safetensors"
    save_file({k: v.contiguous() for k, v in tiny_model(kind, num_labels=3).state_dict().items()}, str(path))
    assert stored_outputs(path) == 3
    assert stored_outputs(tmp_path / "pytorch_model.bin") is None


def _pruned_pair(tmp_path, tokenizer, meta_of=lambda plan: {}):
    """Two tiny pruned BERT artifacts of one config and one unit plan (a layer dropped), of other weights."""
    from conftest import tiny_model
    from headcut.models import LoadedModel, save_model
    from headcut.prune.budget import UnitPlan
    from headcut.prune.surgery import apply_unit_plan

    plan = UnitPlan(((0, 1, 3), (), (2,), (0, 1, 2, 3)), ((1, 5), (), (2,), (3, 4)), layers=(0, 2, 3))
    folders = []
    for seed in (0, 1):
        model = tiny_model("bert", seed=seed, num_hidden_layers=4, vocab_size=len(tokenizer),
                           max_position_embeddings=64)
        apply_unit_plan(model, plan)
        meta = {"grades": [1, 2, 3, 4, 5], **meta_of(plan)}
        folders.append(save_model(LoadedModel(model, tokenizer, meta, "tiny", ""), tmp_path / f"p{seed}"))
    return folders


@pytest.mark.parametrize("pruned", [False, True], ids=["whole", "pruned"])
def test_weights_of_another_model_of_the_same_config_are_not_the_ones_headcut_json_was_saved_with(
        tmp_path, long_and_short_models, pruned):
    """Was: headcut.json's weights_hash was never compared with the weights, so a model.safetensors copied in from
    another model of the same config (every shape agreeing) loaded, and export wrote a grader of it, exit 0."""
    import shutil

    from conftest import tiny_model
    from headcut.models import LoadedModel, load_model, save_model
    from headcut_grader.errors import UserError

    tokenizer = load_model(long_and_short_models[1]).tokenizer
    if pruned:
        source, other = _pruned_pair(tmp_path, tokenizer)
    else:
        source = long_and_short_models[1]
        model = tiny_model("bert", seed=1, vocab_size=len(tokenizer), max_position_embeddings=64)
        other = save_model(LoadedModel(model, tokenizer, {"grades": [1, 2, 3, 4, 5]}, "tiny", ""), tmp_path / "o")
    folder = shutil.copytree(source, tmp_path / "copied")
    shutil.copy(other / "model.safetensors", folder / "model.safetensors")
    words = (f"{folder / 'model.safetensors'} is not the weights {folder / 'headcut.json'} was saved with (its "
             "tensors_hash is \"")
    fix = "put back the model.safetensors saved with the model, or copy or download the model folder again."
    with pytest.raises(UserError, match="^" + re.escape(words) + ".*" + re.escape(fix) + "$"):
        load_model(folder)
    refused(run("export", folder, "--out", tmp_path / "g"), words, fix)
    assert not (tmp_path / "g").exists()
    assert load_model(source).weights_hash  # the folder as saved loads


def _convert_weights(model, folder, form):
    """Replace `folder`'s model.safetensors with `model`'s weights in `form`: shards and their index as
    save_pretrained(max_shard_size=...) writes them, one file as it writes it, or a pickle."""
    import shutil

    import torch

    (folder / "model.safetensors").unlink()
    if form == "pickle":
        torch.save(model.state_dict(), folder / "pytorch_model.bin")
        return
    saved = folder.parent / f"{folder.name}-saved"
    model.save_pretrained(saved, **({"max_shard_size": "40KB"} if form == "shards" else {}))
    weights = [f for f in saved.iterdir() if f.name.startswith("model") and f.name != "model.safetensors" or
               form != "shards" and f.name == "model.safetensors"]
    assert len(weights) > 2 if form == "shards" else len(weights) == 1
    for f in weights:
        shutil.copy(f, folder / f.name)


@pytest.mark.parametrize("form", ["shards", "single", "pickle"])
@pytest.mark.parametrize("pruned", [False, True], ids=["whole", "pruned"])
def test_converted_weights_are_compared_with_headcut_json_by_their_tensors(tmp_path, long_and_short_models, form,
                                                                          pruned):
    """Was: only a single model.safetensors was compared with headcut.json's weights_hash (a hash of that file's
    bytes), so shards (or a pickle) converted from another model of the same config loaded, exit 0. headcut.json
    records tensors_hash (each tensor's name and content): the same model converted loads, another is refused."""
    import shutil

    from conftest import tiny_model
    from headcut.models import LoadedModel, load_model, save_model
    from headcut_grader.errors import UserError

    tokenizer = load_model(long_and_short_models[1]).tokenizer
    if pruned:
        source, other = _pruned_pair(tmp_path, tokenizer)
    else:
        model = tiny_model("bert", seed=1, vocab_size=len(tokenizer), max_position_embeddings=64)
        other = save_model(LoadedModel(model, tokenizer, {"grades": [1, 2, 3, 4, 5]}, "tiny", ""), tmp_path / "o")
        source = long_and_short_models[1]
    allow = form == "pickle"
    same, copied = (shutil.copytree(source, tmp_path / name) for name in ("same", "copied"))
    _convert_weights(load_model(source).model, same, form)
    assert load_model(same, allow_pickle=allow).weights_hash  # the same tensors in other files: loads
    _convert_weights(load_model(other).model, copied, form)
    weights = {"shards": "model.safetensors.index.json", "single": "model.safetensors", "pickle": "pytorch_model.bin"}
    name = weights[form]
    words = f"{copied / name} is not the weights {copied / 'headcut.json'} was saved with (its tensors_hash is \""
    shards = " and the shards it names" if form == "shards" else ""
    fix = f"put back the {name}{shards} saved with the model, or copy or download the model folder again."
    with pytest.raises(UserError, match="^" + re.escape(words) + ".*" + re.escape(fix) + "$"):
        load_model(copied, allow_pickle=allow)
    refused(run("export", copied, "--out", tmp_path / "g", *(["--allow-pickle"] if allow else [])), words, fix)
    assert not (tmp_path / "g").exists()


@pytest.mark.parametrize("pruned, form", [(False, "pickle"), (True, "shards"), (True, "pickle")],
                         ids=["whole-pickle", "pruned-shards", "pruned-pickle"])
def test_converted_weights_are_read_once_to_check_their_tensors(tmp_path, monkeypatch, long_and_short_models,
                                                                pruned, form):
    """Was: headcut.json's tensors_hash was checked by reading the weights files again after the load had read them
    (a pickle's tensors read by its check, by transformers and for the hash). The tensors the load read are hashed.
    Whole-model safetensors are read by transformers alone: their hash reads the files."""
    import shutil

    from headcut import models
    from headcut.models import load_model
    from headcut.weight_files import tensors_hash, weights_file, weights_hash

    tokenizer = load_model(long_and_short_models[1]).tokenizer
    source = _pruned_pair(tmp_path, tokenizer)[0] if pruned else long_and_short_models[1]
    folder = shutil.copytree(source, tmp_path / "converted")
    _convert_weights(load_model(source).model, folder, form)
    reads = []
    monkeypatch.setattr(models, "tensors_hash", lambda weights: reads.append(weights.name) or tensors_hash(weights))
    assert load_model(folder, allow_pickle=form == "pickle").weights_hash == weights_hash(weights_file(folder))
    assert reads == []  # the files are not read again for their tensors' hash

def test_a_headcut_json_without_tensors_hash_still_loads_converted_weights(tmp_path, long_and_short_models):
    """A folder saved before headcut.json recorded tensors_hash keeps loading: its weights_hash is of a file no
    longer there once the weights are sharded, so they are not compared; its own model.safetensors still is."""
    import json
    import shutil

    from headcut.models import load_model

    folder = shutil.copytree(long_and_short_models[1], tmp_path / "old")
    meta = json.loads((folder / "headcut.json").read_text())
    meta.pop("tensors_hash", None)
    (folder / "headcut.json").write_text(json.dumps(meta))
    assert load_model(folder).weights_hash == meta["weights_hash"]
    _convert_weights(load_model(folder).model, folder, "shards")
    assert load_model(folder).weights_hash


@pytest.mark.parametrize("edit, words", [
    (lambda m: m.update(prune="x"), "'prune' is \"x\", not an object"),
    (lambda m: m["prune"].update(plan=[1]), "'prune.plan' is [1], not an object"),
    (lambda m: m["prune"]["plan"].update(heads_per_layer="3,0,1,4"),
     "'prune.plan.heads_per_layer' is \"3,0,1,4\", not a list of whole numbers >= 0, one a layer"),
    (lambda m: m["prune"]["plan"].update(heads_per_layer=[4, 4, 4, 4]),
     "'prune.plan.heads_per_layer' is [4, 4, 4, 4], so layers [0, 2, 3] keep [4, 4, 4], but "),
    (lambda m: m["prune"]["plan"].update(heads_per_layer=[3, 1, 0, 4]),
     "'prune.plan.heads_per_layer' is [3, 1, 0, 4], so layers [0, 2, 3] keep [3, 0, 4], but "),
    (lambda m: m["prune"]["plan"].update(neurons_per_layer=[2, 0, 1]),
     "'prune.plan.neurons_per_layer' is [2, 0, 1], not a list of whole numbers >= 0, one for each of the 4 layers"),
    (lambda m: m["prune"]["plan"].update(neurons_per_layer=[2, 0, 9, 2]),
     "'prune.plan.neurons_per_layer' is [2, 0, 9, 2], so layers [0, 2, 3] keep [2, 9, 2], but "),
    (lambda m: m["prune"]["plan"].update(layers=[0, 9]),
     "'prune.plan.layers' is [0, 9], not a list of different layer numbers in order, each below the 4"),
    (lambda m: m["prune"]["plan"].update(heads=[[0, 1, 2], [], [2], [0, 1, 2, 3]]),
     "'prune.plan.heads' keeps heads [0, 1, 2] in layer 0, but "),
    (lambda m: m["prune"]["plan"].update(neurons=[[1, 5], [], [2], [3, 5]]),
     "'prune.plan.neurons' keeps neurons [3, 5] in layer 3, but "),
    (lambda m: m["prune"]["plan"].update(keep=[[0, 1, 3], [], [1], [0, 1, 2, 3]]),
     "'prune.plan.keep' keeps heads [1] in layer 2, but "),
    (lambda m: m["prune"]["plan"].update(heads=[[0, 0, 1], [], [2], [0, 1, 2, 3]]),
     "'prune.plan.heads' is [[0, 0, 1], [], [2], [0, 1, 2, 3]], not a list of different ids >= 0 for each of the 4 "
     "layers"),
], ids=["prune", "plan", "counts-kind", "heads-full", "heads-moved", "neurons-kind", "neurons", "layers-kind",
        "head-ids", "neuron-ids", "keep-ids", "ids-kind"])
def test_headcut_json_s_prune_record_is_checked_against_the_shape(tmp_path, long_and_short_models, edit, words):
    """Was: only the prune record's kept layers were compared with headcut_shape, so 'prune': "x", or a plan of
    other head or neuron counts (or, of the same counts, other ids) than the folder's shape, loaded, and export and
    scan ran on it, exit 0."""
    import json

    from headcut.models import load_model, outline
    from headcut_grader.errors import UserError

    tokenizer = load_model(long_and_short_models[1]).tokenizer
    folder, _ = _pruned_pair(tmp_path, tokenizer, lambda plan: {"prune": {"plan": {
        "num_heads": 4, **plan.to_dict()}}})
    assert len(load_model(folder).model.bert.encoder.layer) == 3  # as saved: loads
    meta = json.loads((folder / "headcut.json").read_text())
    edit(meta)
    (folder / "headcut.json").write_text(json.dumps(meta))
    said = f"{folder / 'headcut.json'}: {words}"
    fix = "put back the headcut.json saved with the model, or copy or download the model folder again."
    for read in (load_model, outline):
        with pytest.raises(UserError, match="^" + re.escape(said) + ".*" + re.escape(fix) + "$"):
            read(folder)
    refused(run("export", folder, "--out", tmp_path / "g"), said, fix)
    refused(run("scan", "--model", folder, "--data", "synthetic", "--limit", "8", "--out", tmp_path / "s"), said)
    assert not (tmp_path / "g").exists() and not (tmp_path / "s").exists()


@pytest.mark.parametrize("text, words", [
    ("[{\"path\": \"\", \"type\": ", "modules.json is damaged or incomplete (not valid JSON: "),
    ("{\"path\": \"\"}", "modules.json is {\"path\": \"\"}, not a list of modules"),
    ("[{\"path\": \"\", \"type\": 3}]", "modules.json is [{\"path\": \"\", \"type\": 3}], not a list of modules"),
    ("[{\"path\": \"\"}]", "modules.json is [{\"path\": \"\"}], not a list of modules, each an object with its 'path' "
                           "and 'type'"),  # no 'name': CrossEncoder reads it in a folder it saved alone
], ids=["not-json", "object", "type-number", "no-type"])
def test_a_modules_json_sentence_transformers_cannot_read_is_refused(tmp_path, long_and_short_models, text, words):
    """Was: a folder's modules.json was only checked to exist, so one that was no JSON (or no list of modules) loaded
    in headcut, exit 0, while sentence-transformers' CrossEncoder(folder) fails on it."""
    import shutil

    from headcut.models import load_model, outline
    from headcut_grader.errors import UserError

    folder = shutil.copytree(long_and_short_models[1], tmp_path / "m")
    modules = folder / "modules.json"
    modules.write_text('[{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}]')
    load_model(folder)  # a list of modules: loads
    modules.write_text(text)
    for read in (load_model, outline):
        with pytest.raises(UserError, match="^" + re.escape(f"{folder / words}")):
            read(folder)
    refused(run("evaluate", "--model", folder, "--data", write(tmp_path, "pairs.tsv", PAIRS_TSV)),
            f"{folder / words}", "copy or download the model folder again.")


def test_a_modules_json_needs_module_names_only_in_a_folder_cross_encoder_saved(tmp_path, long_and_short_models):
    """Was: every module's 'name' was required in any folder, though CrossEncoder reads modules.json's names only in
    a folder it saved (config_sentence_transformers.json's model_type CrossEncoder): another family's folder whose
    modules lacked names was refused. It loads; a module without its 'type' is still refused there."""
    import shutil

    from headcut.models import load_model
    from headcut_grader.errors import UserError

    folder = shutil.copytree(long_and_short_models[1], tmp_path / "m")
    (folder / "config_sentence_transformers.json").unlink(missing_ok=True)
    modules = folder / "modules.json"
    modules.write_text('[{"path": "", "type": "sentence_transformers.models.Transformer"}]')
    assert load_model(folder).model is not None
    modules.write_text('[{"path": ""}]')
    words = f"{modules} is [{{\"path\": \"\"}}], not a list of modules, each an object with its 'path' and 'type' ("
    with pytest.raises(UserError, match="^" + re.escape(words)):
        load_model(folder)
    modules.write_text('[{"path": "", "type": "sentence_transformers.models.Transformer"}]')
    (folder / "config_sentence_transformers.json").write_text('{"model_type": "CrossEncoder"}')
    with pytest.raises(UserError, match="each an object with its 'name', 'path' and 'type' "):
        load_model(folder)  # CrossEncoder's own folder: it reads the names
