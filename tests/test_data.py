"""Reading pairs: formats, presets, label maps, and one clear error per kind of bad input."""
import json
import os
import re
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from headcut.cli.main import app
from headcut_grader.data import iter_pairs, parse_label_map, read_pairs
from headcut_grader.errors import UserError
from headcut.splits import split_by_query
from headcut.synthetic import synthetic_pairs
from headcut_grader.errors import UserError
from tests.conftest import HOMEDEPOT, QBQTC


def write(tmp_path, name, text, mode="w"):
    path = tmp_path / name
    if mode == "wb":
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def test_reads_every_format_to_the_same_pairs(tmp_path):
    rows = [("drill", "cordless drill", 5), ("paint", "red lamp", 1)]
    tsv = write(tmp_path, "a.tsv", "query\ttitle\tgrade\n" + "".join(f"{q}\t{t}\t{g}\n" for q, t, g in rows))
    csv_ = write(tmp_path, "a.csv", "query,title,grade\n" + "".join(f'{q},"{t}",{g}\n' for q, t, g in rows))
    jsonl = write(tmp_path, "a.jsonl",
                  "".join(json.dumps({"query": q, "title": t, "grade": g}) + "\n" for q, t, g in rows))
    arr = write(tmp_path, "a.json", json.dumps([{"query": q, "title": t, "grade": g} for q, t, g in rows]))
    got = [read_pairs(p) for p in (tsv, csv_, jsonl, arr)]
    for pairs in got:
        assert pairs.queries == ["drill", "paint"]
        assert pairs.titles == ["cordless drill", "red lamp"]
        assert pairs.labels == [4, 0]  # labels are 0-based class indices of grades 1..5
    assert len({p.fingerprint for p in got}) == 1


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\x85"])
def test_json_lines_with_an_unescaped_line_separator_in_a_text_are_read_as_written(tmp_path, separator):
    """JSON may hold U+2028, U+2029 and U+0085 unescaped in a string (json.dumps(ensure_ascii=False) writes them so);
    was: each JSON line was split again where str.splitlines splits, and the row refused as 'invalid JSON
    (Unterminated string)'. A line still ends at LF, CRLF or a lone CR, as before."""
    title = f"cordless{separator}drill"
    rows = [{"query": "drill", "title": title, "grade": 5}, {"query": "paint", "title": "red lamp", "grade": 1}]
    text = json.dumps(rows[0], ensure_ascii=False) + "\r\n" + json.dumps(rows[1], ensure_ascii=False) + "\r"
    pairs = read_pairs(write(tmp_path, "a.jsonl", text + '{"query": "x", "title": ""}\n'), limit=2)
    assert pairs.titles == [title, "red lamp"] and pairs.labels == [4, 0]
    with pytest.raises(UserError, match="line 3, column 'title': empty text"):
        read_pairs(tmp_path / "a.jsonl")


@pytest.mark.parametrize("name", ["a.jsonl", "a.json"])
def test_json_gold_in_a_later_row_than_the_first_is_refused_not_dropped(tmp_path, name):
    """A JSON row's keys are its own: was, a file whose first row had no grade was read as ungraded, and the grades of
    every later row went unread (`headcut grade` wrote no true_grade column, nothing said). The sentence gives the
    fixes that read such a file (a null grade is refused as empty, so it is not one)."""
    rows = [{"query": "drill", "title": "cordless drill"}, {"query": "paint", "title": "red lamp", "grade": 1}]
    text = json.dumps(rows) if name.endswith(".json") else "".join(json.dumps(row) + "\n" for row in rows)
    with pytest.raises(UserError, match=re.escape(
            f"{tmp_path / name}, line 2 has a gold column 'grade', which line 1 (the first row, whose keys are the "
            "file's columns) lacks, so no row's 'grade' would be read; give each row without one its 'grade' (null "
            "is refused as empty), move the graded rows to a file of their own, or drop 'grade' from every row to "
            "read the file without gold.")):
        read_pairs(write(tmp_path, name, text), require_labels=False)
    assert read_pairs(tmp_path / name, texts_only=True).titles == ["cordless drill", "red lamp"]
    del rows[1]["grade"]  # the fix it names: no gold in any row
    text = json.dumps(rows) if name.endswith(".json") else "".join(json.dumps(row) + "\n" for row in rows)
    assert read_pairs(write(tmp_path, name, text), require_labels=False).labels is None


def test_a_chunk_ends_at_its_rows_or_its_characters_and_the_next_resumes_there(tmp_path):
    titles = ["t" * n for n in (5, 30, 5, 5, 40, 5)]
    path = write(tmp_path, "a.tsv", "query\ttitle\n" + "".join(f"q\t{t}\n" for t in titles))
    chunks = list(iter_pairs(path, chunk_rows=3, chunk_chars=30, require_labels=False))
    assert [len(c.pairs.titles[-1]) for c in chunks] == [30, 40, 5]  # 6 + 31, 6 + 6 + 41 characters, the rest
    assert [len(c.pairs) for c in chunks] == [2, 3, 1]
    resumed = next(iter_pairs(path, chunk_rows=None, chunk_chars=None, require_labels=False, start=chunks[0].position))
    assert resumed.pairs.titles == titles[2:]
    assert read_pairs(path, require_labels=False, limit=None).titles == titles  # one chunk, whatever the characters


# VmHWM, not ru_maxrss: Linux keeps ru_maxrss across exec, so a child of pytest would report pytest's peak
READ_PEAK_SCRIPT = """
import sys
from headcut_grader.data import iter_pairs
rows = sum(len(chunk.pairs) for chunk in iter_pairs(sys.argv[1], chunk_rows=1000))
print(rows, next(line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM:")))
"""


def read_peak_mib(path) -> tuple[int, float]:
    done = subprocess.run([sys.executable, "-c", READ_PEAK_SCRIPT, str(path)], capture_output=True, text=True,
                          timeout=600, env=os.environ)
    assert done.returncode == 0, done.stderr
    rows, peak = done.stdout.split()
    return int(rows), int(peak) / 1024


def test_a_json_array_is_read_item_by_item_in_bounded_memory(tmp_path):
    """An 8 MB and a 40 MB array on one line each. json.loads of the whole file peaked at 62 and 139 MiB (+76 MiB
    for the 32 MB more); read item by item, like JSON lines, both peak at ~50 MiB."""
    row = json.dumps({"query": "cordless drill", "title": "drill " * 60, "grade": 3})
    peaks = {}
    for rows in (20_000, 100_000):
        path = tmp_path / f"pairs{rows}.json"
        path.write_text("[" + ", ".join([row] * rows) + "]", encoding="utf-8")
        read, peaks[rows] = read_peak_mib(path)
        assert read == rows
    print(f"\npeak RSS: {peaks[20_000]:.0f} MiB at 8 MB, {peaks[100_000]:.0f} MiB at 40 MB")
    assert peaks[100_000] - peaks[20_000] < 8, peaks


def test_a_json_array_resumes_after_any_chunk_and_names_its_errors_as_json_does(tmp_path, monkeypatch):
    """Blocks of 7 bytes cut items, numbers, escapes and characters everywhere: the rows, the resumed rows and
    the line and column of a syntax error are what json.loads of the whole file gives."""
    import headcut_grader.json_array as json_array

    monkeypatch.setattr(json_array, "BLOCK_BYTES", 7)
    rows = [{"query": f"q\u00e9\U0001F600 {i}", "title": "t \\ \"x\" \U0001F600", "grade": [1, 3, 5, 2.0][i % 4],
             "x": [True, None, -1.5e-3]} for i in range(20)]
    path = write(tmp_path, "a.json", "\ufeff [" + ",\n ".join(json.dumps(r) for r in rows) + "]\n")
    assert read_pairs(path).queries == [r["query"] for r in rows]
    chunks = list(iter_pairs(path, chunk_rows=3))
    for chunk in chunks:
        resumed = [q for c in iter_pairs(path, chunk_rows=3, start=chunk.position) for q in c.pairs.queries]
        assert resumed == [r["query"] for r in rows][chunk.position.line:]
    for text in ('[{"query": "a", "title": "b", "grade": 3},\n {"query": "c" "title": "d"}]',
                 '[{"query": "a", "title": "b", "grade": 3}, {"query": tru}]',
                 '[{"query": "a", "title": "b", "grade": 3}] x',
                 '[{"query": "a", "title": "b\n"}]', '[{"query": "a", "title": "b'):
        with pytest.raises(json.JSONDecodeError) as expected:
            json.loads(text)
        with pytest.raises(UserError, match=f"line {expected.value.lineno}, column {expected.value.colno}: "
                                            f"invalid JSON \\({expected.value.msg}"):
            read_pairs(write(tmp_path, "bad.json", text))


@pytest.mark.parametrize("name", ["pairs.jsonl", "pairs.json"])
def test_one_json_object_over_several_lines_is_said_to_be_one_not_a_line_to_fix(tmp_path, name):
    """Was: 'line 1, column 2: invalid JSON (Expecting property name enclosed in double quotes); fix that line' for a
    pretty-printed request body of `serve` (json.dump(indent=2)): valid JSON, whose line 1, '{', has nothing to fix."""
    body = {"pairs": [{"query": "drill", "title": "cordless drill"}]}
    with pytest.raises(UserError, match=re.escape(f"{name}, line 1: a JSON object goes on past the end of the line, "
                                                  "and JSON lines hold one whole object per line")):
        read_pairs(write(tmp_path, name, json.dumps(body, indent=2)))
    # a later line cut short is still that line's to fix
    with pytest.raises(UserError, match=r"line 2, column 16: invalid JSON \(Unterminated string"):
        read_pairs(write(tmp_path, name, '{"query": "a", "title": "b", "grade": 3}\n{"query": "c", "ti'))


def test_custom_columns_and_label_maps(tmp_path):
    path = write(tmp_path, "b.csv", "q,doc,rel\nx,y,2\nx,z,0\n")
    pairs = read_pairs(path, query_col="q", title_col="doc", label_col="rel", label_map=parse_label_map("0:1,1:3,2:5"))
    assert [pairs.grades[i] for i in pairs.labels] == [5, 1]
    scores = write(tmp_path, "c.tsv", "query\ttitle\tscore\na\tb\t2.5\na\tc\t1.49\n")
    pairs = read_pairs(scores, label_col="score", label_map="round")
    assert [pairs.grades[i] for i in pairs.labels] == [3, 1]  # round half up


def test_query_groups_and_split_keep_queries_together():
    pairs = synthetic_pairs(300, seed=3)
    a, b = split_by_query(pairs, 0.3, seed=1)
    assert len(a) + len(b) == 300
    assert not set(a.queries) & set(b.queries)
    assert sum(len(g) for g in pairs.query_groups()) == 300


def test_synthetic_is_deterministic_and_graded_by_overlap():
    a, b = synthetic_pairs(200, seed=0), synthetic_pairs(200, seed=0)
    assert a.fingerprint == b.fingerprint
    assert set(a.labels) == {0, 1, 2, 3, 4}
    for q, t, label in zip(a.queries, a.titles, a.labels):
        shared = len(set(q.split()) & set(t.split()))
        if label == 4:
            assert shared >= 3  # grade 5: type, attribute and colour all match
        if label == 0:
            assert shared == 0 or q.split()[-1] not in t


BAD = {
    "missing": (None, "no such file"),
    "empty.tsv": ("", "is empty"),
    "nocol.tsv": ("query\ttitle\tlabel\na\tb\t3\n", "no label column 'grade'"),
    "ragged.tsv": ("query\ttitle\tgrade\na\tb\t3\nc\td\n", "line 3: 2 fields where the header has 3"),
    # a short row: was '1 fields ...; fix the row (a stray tab?)', the cause a long row's
    "short.tsv": ("query\ttitle\tgrade\na\tb\t3\nc\n", "line 3: 1 field where the header has 3; fix the row (a "
                  "missing tab?)."),
    "short.csv": ("query,title,grade\na,b,3\nc\n", "line 3: 1 field where the header has 3; fix the row (a missing "
                  "comma?)."),
    # a separator ending the header line (a spreadsheet's export): was 'line 2: 3 fields where the header has 4; fix
    # the row', a row that is right
    "header_tab.tsv": ("query\ttitle\tgrade\t\na\tb\t3\n", "line 1: the header ends in an unnamed column that "
                       "line 2 does not have; delete the tab at the end of the header line."),
    "header_commas.csv": ("query,title,grade,,\na,b,3\n", "line 1: the header ends in 2 unnamed columns that line 2 "
                          "does not have; delete the 2 commas at the end of the header line."),
    "row_tab.tsv": ("query\ttitle\tgrade\na\tb\t3\t\n", "line 2: 4 fields where the header has 3; fix the row"),
    # was: the csv module's "do you need to open the file in universal-newline mode?"
    "cr.tsv": ("query\ttitle\tgrade\ra\tb\t3\rc\td\t2\r", "line 1: a carriage return (CR) without a line feed (LF)"),
    "cr.csv": ("query,title,grade\na,b,3\nc,d\r,2\n", "line 3: a carriage return (CR) without a line feed (LF)"),
    "emptyq.tsv": ("query\ttitle\tgrade\na\tb\t3\n \td\t2\n", "line 3, column 'query': empty text"),
    "emptyt.jsonl": ('{"query": "a", "title": "", "grade": 3}\n', "line 1, column 'title': empty text"),
    "invisible.tsv": ("query\ttitle\tgrade\na\tb\t3\nc\t\u00ad \u200b\t2\n",
                      "line 3, column 'title': empty text (only invisible characters, such as U+00AD)"),
    "range.tsv": ("query\ttitle\tgrade\na\tb\t3\nc\td\t7\n",
                  "line 3, column 'grade': grade 7 is not one of the grades"),
    "word.tsv": ("query\ttitle\tgrade\na\tb\thigh\n", "line 2, column 'grade': label 'high' is not a number"),
    "badjson.jsonl": ('{"query": "a", "title": "b", "grade": 3}\n{"query": \n', "line 2, column"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_input_names_file_and_line(tmp_path, name):
    text, expected = BAD[name]
    path = tmp_path / name if text is None else write(tmp_path, name, text)
    with pytest.raises(UserError) as err:
        read_pairs(path)
    assert expected in str(err.value)
    assert str(path) in str(err.value)


@pytest.mark.parametrize("name", ["a.tsv", "a.json"])
def test_a_pairs_file_this_user_may_not_read_is_one_sentence(tmp_path, monkeypatch, name):
    """Was: a PermissionError traceback from read_pairs, grade_file and `headcut evaluate --data` (another user's
    file, chmod 600). The tests run as root, whom permission bits do not stop: open refuses the file here."""
    import builtins
    import errno
    import pwd

    import headcut_grader.validation as validation

    path = write(tmp_path, name, "query\ttitle\na\tb\n")

    def refusing(file, *args, **kwargs):
        if str(file) == str(path):
            raise PermissionError(errno.EACCES, "Permission denied", str(file))
        return builtins.open(file, *args, **kwargs)

    monkeypatch.setattr(validation, "open", refusing, raising=False)
    with pytest.raises(UserError, match=f"^{re.escape(str(path))} cannot be read \\(Permission denied\\); let this "
                                        "user read it \\(chmod a\\+r\\) or pass another file\\.$"):
        read_pairs(path, require_labels=False)
    # another user's file: this user's chmod would fail (was: told to chmod a+r all the same)
    monkeypatch.setattr(os, "geteuid", lambda: 4242)  # the tests' root, as a user who does not own the file
    with pytest.raises(UserError) as err:
        read_pairs(path, require_labels=False)
    owner = pwd.getpwuid(path.stat().st_uid)  # whoever runs the tests (root, uid 0 in CI)
    assert str(err.value) == (f"{path} cannot be read (Permission denied); {path} belongs to another user "
                              f"({owner.pw_name}, uid {owner.pw_uid}), so only they can change its mode: ask them to "
                              "let this user read it, or pass another file.")


@pytest.mark.parametrize("name, text, said", [
    ("a.json", "[]", "no rows: the file is an empty JSON array; pass pairs as objects in it"),
    ("a.json", "[ \n ]\n", "no rows: the file is an empty JSON array; pass pairs as objects in it"),
    ("a.tsv", "query\ttitle\n", "no data rows; the file holds a header at most")])
def test_a_file_without_rows_is_said_as_its_format_has_them(tmp_path, name, text, said):
    """Was, for an empty JSON array: 'the file holds a header at most', which a JSON file has none of."""
    path = write(tmp_path, name, text)
    with pytest.raises(UserError, match=f"^{re.escape(f'{path}: {said}.')}$"):
        read_pairs(path, require_labels=False)


def test_a_pairs_file_named_dash_is_not_standard_input_and_says_so(tmp_path, monkeypatch):
    """Was: '-: no such file; check the path', to someone piping pairs in as other tools take them."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match=r"^- would be standard input: inputs are read from files \(pairs in "
                                        r"chunks, and again to resume\); save it to a file and pass its path\.$"):
        read_pairs("-")
    write(tmp_path, "-", "query\ttitle\na\tb\n")  # a file of that name is read as any other
    assert read_pairs("-", fmt="tsv", require_labels=False).titles == ["b"]


def test_non_utf8_names_line_and_column(tmp_path):
    path = write(tmp_path, "latin.tsv", "query\ttitle\tgrade\ncaf\xe9\tx\t3\n".encode("latin-1"), mode="wb")
    with pytest.raises(UserError, match=r"line 2, byte column 4: not UTF-8 \(byte 0xe9\)"):
        read_pairs(path)


def test_cli_bad_input_exits_2_with_one_sentence(tmp_path):
    path = write(tmp_path, "ragged.tsv", BAD["ragged.tsv"][0])
    result = CliRunner().invoke(app, ["evaluate", "--model", "minilm-l6", "--data", str(path)])
    assert result.exit_code == 2
    assert "line 3: 2 fields" in result.output
    assert "Traceback" not in result.output


def test_label_map_text_errors_name_the_argument_or_the_flag():
    """Was: --label-map for a Python caller of parse_label_map too, who has no such flag."""
    with pytest.raises(UserError, match=r"^label_map item 'zero' is not RAW:GRADE; write e\.g\. label_map=0:1,1:3,2:5 "
                                        r"or label_map=round\.$"):
        parse_label_map("zero")
    with pytest.raises(UserError, match=r"^label_map maps '0' twice"):
        parse_label_map("0:1,0:2")
    with pytest.raises(UserError, match=r"^--label-map item 'zero' is not RAW:GRADE; write e\.g\. --label-map "
                                        r"0:1,1:3,2:5 or --label-map round\.$"):
        parse_label_map("zero", names="flags")


def test_real_homedepot_and_qbqtc_presets():
    if not (HOMEDEPOT / "dev.tsv").exists():
        pytest.skip(f"real data absent: {HOMEDEPOT}")
    dev = read_pairs(HOMEDEPOT / "dev.tsv", preset="homedepot")
    assert len(dev) == 10886
    assert max(len(g) for g in dev.query_groups()) > 1
    qb = read_pairs(QBQTC / "dev.json", preset="qbqtc")
    assert len(qb) == 1300
    assert set(qb.grades[i] for i in qb.labels) == {1, 3, 5}


@pytest.mark.parametrize("preset,header,row,gold,fits", [
    ("qbqtc", "query\ttitle\tgrade", "drill\tcordless drill\t4", "grade", "homedepot"),
    ("homedepot", "query\ttitle\tlabel", "drill\tcordless drill\t2", "label", "qbqtc"),
])
@pytest.mark.parametrize("keys,said,fix", [({}, "--preset", "--label-col"),
                                          ("data.", "key 'data.preset'", "--set data.label_col=NAME")])
def test_a_preset_whose_gold_column_the_file_lacks_is_refused_when_it_holds_another(tmp_path, preset, header, row,
                                                                                    gold, fits, keys, said, fix):
    """Was: where gold is optional (grade, scan), --preset qbqtc on a file with a 'grade' column read no gold:
    graded without true_grade, exit 0, the file's gold silently dropped."""
    path = write(tmp_path, "pairs.tsv", f"{header}\n{row}\n")
    with pytest.raises(UserError) as caught:
        read_pairs(path, preset=preset, require_labels=False, keys=keys, names="flags")
    text = str(caught.value)
    for word in (str(path), f"{said} '{preset}'", f"'{gold}'", f"{fits}", fix):
        assert word in text, (word, text)
    wanted = "'relevant' or 'label'" if preset == "qbqtc" else "'grade'"
    assert f"no column {wanted}" in text
    assert read_pairs(path, preset=fits).labels is not None  # the preset it names reads that gold
    assert read_pairs(path, preset=preset, texts_only=True).labels is None  # a caller that reads no gold is not refused


def test_a_preset_on_a_file_without_any_gold_reads_its_texts(tmp_path):
    path = write(tmp_path, "pairs.tsv", "query\ttitle\tnote\ndrill\tcordless drill\tx\n")
    assert read_pairs(path, preset="qbqtc", require_labels=False).labels is None


@pytest.mark.parametrize("option,keys,said", [("query_col", {}, "--query-col"), ("title_col", {}, "--title-col"),
                                               ("label_col", {}, "--label-col"), ("label_col", None, "label_col"),
                                               ("title_col", "data.", "data.title_col"),
                                               ("query_col", {"query_col": "--seg-col"}, "--seg-col")])
def test_an_empty_column_name_is_refused_naming_its_flag(tmp_path, option, keys, said):
    """Was: '' read as no column given, so the preset's column was read in its place, exit 0."""
    path = tmp_path / "pairs.tsv"
    path.write_text("query\ttitle\tgrade\ndrill\tcordless drill\t3\n")
    from headcut_grader.errors import UserError

    with pytest.raises(UserError, match=f"{said} is empty") as caught:
        read_pairs(path, keys=keys, names="arguments" if keys is None else "flags", **{option: " "})
    assert "leave it out" in str(caught.value)


@pytest.mark.parametrize("options, said", [
    ({"label_col": "title"}, "--label-col names column 'title', which holds the titles; name the gold column, or "
                             "leave --label-col out."),
    ({"label_col": "query", "require_labels": False}, "--label-col names column 'query', which holds the queries; "
                                                      "name the gold column, or leave --label-col out."),
    ({"query_col": "grade", "title_col": "query"}, "--query-col names column 'grade', which holds the gold; name "
                                                   "the queries' own column.")])
def test_a_gold_column_that_is_also_the_queries_or_titles_is_refused(tmp_path, options, said):
    """Was: the titles read as grades too, and refused row by row as "label 'cordless drill' is not a number; pass
    --label-map", a fix that does not fit; --query-col grade graded the grades as queries."""
    path = write(tmp_path, "pairs.tsv", "query\ttitle\tgrade\ndrill\tcordless drill\t3\n")
    with pytest.raises(UserError, match=f"^{re.escape(said)}$"):
        read_pairs(path, names="flags", **options)


def _visible(message: str, escaped: str) -> None:
    assert message.isprintable(), repr(message)  # no zero-width, tab or NUL character printed as itself
    assert escaped in message, (escaped, message)


@pytest.mark.parametrize("name,escaped", [("grade\u200b", r"'grade\u200b'"), ("grade\t", r"'grade\t'"),
                                          ("grade\x00", r"'grade\x00'")])
def test_a_column_name_that_does_not_print_is_quoted_with_escapes(tmp_path, name, escaped):
    """Was: "no label column 'grade' (columns: query, title, grade)" for a header holding 'grade\u200b': the two
    names looked the same. Each message that quotes a column name writes what does not print as Python escapes."""
    row = {"query": "drill", "title": "cordless drill", name: "4"}
    path = write(tmp_path, "pairs.jsonl", json.dumps(row) + "\n")  # JSON keys may hold any character
    with pytest.raises(UserError) as caught:
        read_pairs(path)
    _visible(str(caught.value), f"(columns: 'query', 'title', {escaped})")
    with pytest.raises(UserError) as caught:  # a flag that names it, where the file has the plain name
        read_pairs(write(tmp_path, "plain.tsv", "query\ttitle\tgrade\ndrill\tcordless drill\t4\n"), label_col=name)
    _visible(str(caught.value), f"no label column {escaped}")
    with pytest.raises(UserError) as caught:  # a row's value, in the column the flag names
        read_pairs(write(tmp_path, "bad.jsonl", json.dumps({**row, name: "x"}) + "\n"), label_col=name)
    _visible(str(caught.value), f"line 1, column {escaped}")
    with pytest.raises(UserError) as caught:
        read_pairs(write(tmp_path, "twice.jsonl", f'{{"query": "a", "title": "b", {json.dumps(name)}: 1, '
                                                  f'{json.dumps(name)}: 2}}\n'))
    _visible(str(caught.value), f"key {escaped} twice")
    with pytest.raises(UserError) as caught:
        read_pairs(path, query_col=name, title_col=name)
    _visible(str(caught.value), f"both name column {escaped}")


def test_a_header_with_a_zero_width_space_is_told_apart_from_the_plain_name(tmp_path):
    path = write(tmp_path, "pairs.tsv", "query\u200b\ttitle\tgrade\ndrill\tcordless drill\t4\n")
    with pytest.raises(UserError) as caught:
        read_pairs(path)
    _visible(str(caught.value), r"no column 'query' (columns: 'query\u200b', 'title', 'grade')")
    preset = write(tmp_path, "preset.tsv", "query\ttitle\tgrade\u200b\ndrill\tcordless drill\t4\n")
    assert read_pairs(preset, preset="qbqtc", require_labels=False).labels is None  # not a gold column's name


@pytest.mark.parametrize("name, text, options, fix", [
    ("pairs.tsv", "deck over\tdeck coating\t5\nrain head\tshower trim\t4\n", {},
     "its first line looks like data ('5' is a number), and the first line must be the header: add one above it "
     "naming the columns (query, title and the gold column)."),
    ("pairs.csv", "query\ttitle\tgrade\ndrill\tcordless drill\t4\n", {},
     "its header holds tabs, so it was read as one column: name the file .tsv."),
    ("pairs.tsv", "query,title,grade\ndrill,cordless drill,4\n", {},
     "its header holds commas, so it was read as one column: name the file .csv."),
    # a CSV of semicolons (a spreadsheet's, in some languages): was "name it with query_col=NAME" (the whole line)
    ("pairs.csv", "query;title;grade\ndrill;cordless drill;4\n", {}, "no column 'query' (columns: "
     "'query;title;grade'); its header is split by semicolons (a spreadsheet's CSV in some languages), which neither "
     "CSV nor TSV splits by: save it with commas (.csv) or tabs (.tsv)."),
    ("pairs.txt", "query|title|grade\ndrill|cordless drill|4\n", {},
     "its header is split by vertical bars, which neither CSV nor TSV splits by: save it with commas (.csv) or tabs "
     "(.tsv)."),
    # a header with a year for a column: was 'its first line looks like data ('2023' is a number)'
    ("pairs.tsv", "query\tproduct\tgrade\t2023\ndrill\tcordless drill\t4\t1\n", {"names": "flags"},
     "no column 'title' (columns: 'query', 'product', 'grade', '2023'); name it with --title-col."),
    ("pairs.tsv", "search\tproduct\tgrade\t2023\ndrill\tcordless drill\t4\t1\n", {"names": "flags"},
     "name it with --query-col."),  # the gold column alone tells the header
    ("pairs.tsv", "Query\ttitle\tgrade\ndrill\tcordless drill\t4\n", {"names": "flags"},
     "column 'Query' differs in case only (names are case-sensitive): name it with --query-col Query."),
    ("pairs.jsonl", '{"query": "drill", "title": "cordless drill", "Grade": 4}\n', {"keys": "data."},
     "column 'Grade' differs in case only (names are case-sensitive): name it with --set data.label_col=Grade."),
    ("pairs.tsv", "query\ttitle\tScore\ndrill\tcordless drill\t0.5\n", {"task": "score"},
     "column 'Score' differs in case only (names are case-sensitive): name it with label_col=Score."),
    # a name holding a character no shell types: was "name it with --query-col" (2026)
    ("pairs.tsv", "query\x00\ttitle\tgrade\ndrill\tcordless drill\t4\n", {"names": "flags"},
     "column 'query\\x00' holds an invisible character (U+0000, NUL): delete it from the column's name in the file."),
    ("pairs.tsv", "title\t\ufeffquery\tgrade\ncordless drill\tdrill\t4\n", {"names": "flags"},
     "column '\\ufeffquery' holds an invisible character (U+FEFF, a byte-order mark, BOM): delete it from the "
     "column's name in the file."),
    ("pairs.jsonl", '{"query": "drill", "title": "cordless drill", "Gra\\u200bde": 4}\n', {"names": "flags"},
     "column 'Gra\\u200bde' holds an invisible character (U+200B, zero width space): delete it from the column's "
     "name in the file."),
    # a request body of `serve` saved as a file: was "name it with --query-col", which reads a list as a query
    *[(name, '{"pairs": [{"query": "drill", "title": "cordless drill"}]}\n', {"names": "flags"},
       "its one key 'pairs' holds a list (a request body of `serve`?): write each pair as an object of its own, one "
       "per line (JSON lines) or in a JSON array.") for name in ("pairs.jsonl", "pairs.json")],
])
def test_a_missing_column_names_the_fix_that_fits_the_header(tmp_path, name, text, options, fix):
    """Was 'name it with --query-col' for each: a file without a header (naming a column by a data cell would read
    that row as the header and drop it), a TSV named .csv or a CSV named .tsv (one column holding the separators),
    a column named in another case."""
    path = write(tmp_path, name, text)
    with pytest.raises(UserError) as caught:
        read_pairs(path, **options)
    assert str(caught.value).endswith(fix), str(caught.value)
    assert path.read_text() == text


@pytest.mark.parametrize("names,label_map,label_col,round_", [
    ("arguments", "label_map", "label_col=NAME", "label_map=round"),
    ("flags", "--label-map", "--label-col", "--label-map round"),
    ("keys", "--set data.label_map", "--set data.label_col=NAME", None)])
def test_read_pairs_names_its_options_as_its_caller_wrote_them(tmp_path, names, label_map, label_col, round_):
    """Was: read_pairs(path, label_map={'x': 9}) said '--label-map maps ...', and a label it could not read 'pass
    --label-map', to a Python caller (and to a run recipe, which has no label map): a flag they never passed."""
    path = tmp_path / "pairs.tsv"
    path.write_text("query\ttitle\tgrade\ttext\ndrill\tcordless drill\t2.5\tx\n")

    def refused(**kwargs):
        with pytest.raises(UserError) as caught:
            read_pairs(path, names=names, **kwargs)
        message = str(caught.value)
        assert names == "flags" or "--label" not in message.replace("--set data.label", ""), message
        return message

    assert refused(label_map={"x": 9}).startswith(f"{label_map} maps 'x' to 9")
    assert refused(label_map={"3": 3}).endswith(f"extend {label_map}." if names != "keys" else "drop it.")
    assert refused(label_col="text").endswith(f"pass {label_map} to map it to a grade." if names != "keys"
                                              else "or drop the row.")
    assert refused().endswith(f"pass {round_} to round scores." if round_ else "drop it.")
    assert f"name it with {label_col}." in refused(label_col="nope")


@pytest.mark.parametrize("names,keys,said", [("arguments", None, "label_col=NAME"), ("flags", None, "--label-col"),
                                             ("keys", "data.", "--set data.label_col=NAME")])
def test_pairs_without_gold_name_the_gold_column_as_their_reader_was_called(tmp_path, names, keys, said):
    """Was: read_pairs(path, require_labels=False).label_array() said 'pass a file with a grade column
    (--label-col)' to a Python caller and a recipe, a flag they never had."""
    path = tmp_path / "pairs.tsv"
    path.write_text("query\ttitle\ndrill\tcordless drill\n")
    pairs = read_pairs(path, require_labels=False, names=names, keys=keys)
    for gold, column in ((pairs.label_array, "a grade column"), (pairs.score_array, "a numeric score column")):
        with pytest.raises(UserError) as caught:
            gold()
        assert str(caught.value).endswith(f"pass a file with {column} ({said})."), str(caught.value)
    assert pairs.subset([0]).sample(1).gold_option == said


@pytest.mark.parametrize("options,said", [({}, "(rows)"), ({"names": "flags"}, "(--limit)"),
                                          ({"keys": ""}, "(the recipe's train_rows or dev_rows)")])
def test_a_synthetic_draw_too_large_names_the_rows_as_its_caller_wrote_them(options, said):
    """Was: '(--limit, or a recipe's rows)' to every caller, a Python read_spec(rows=...) caller too."""
    from headcut.data_spec import read_spec

    with pytest.raises(UserError) as caught:
        read_spec("synthetic", rows=1_000_001, **options)
    assert f"1,000,001 pairs asked for {said}; the synthetic set" in str(caught.value), str(caught.value)


@pytest.mark.parametrize("label_map", ["rnd", "0:1,1:3", 3, ["round"]])
def test_a_label_map_that_is_no_map_and_not_round_is_refused_saying_what_is_accepted(tmp_path, label_map):
    """Was: any text but 'round' (a typo, 'rnd'; the --label-map text form) was read as no map at all, silently."""
    path = tmp_path / "p.tsv"
    path.write_text("query\ttitle\tgrade\na\tb\t2.5\n")
    with pytest.raises(UserError, match=rf"^label_map is {re.escape(repr(label_map))}; pass a dict of raw label -> "
                                        r"grade \(e\.g\. .*\), 'round' to round float scores to the nearest grade, or "
                                        r"None\.$"):
        read_pairs(path, label_map=label_map)
    assert list(read_pairs(path, label_map="round").labels) == [2]  # round half up: 2.5 -> grade 3, label 2


def test_a_sample_of_a_file_holds_one_chunk_at_a_time_and_draws_the_rows_sample_draws(tmp_path, monkeypatch):
    """Was: read_spec(rows=N) (every --limit, a recipe's train_rows) read the whole file into memory and then drew N
    of its rows: a 500-pair probe of a file of a million rows held all of them (about 250 MB more). The rows drawn are
    the same; every row is still checked (a bad grade outside the sample is refused)."""
    import headcut.data_spec as data_spec
    from headcut_grader.pairs import Pairs

    rows = "".join(f"q{i // 3}\ttitle {i}\t{1 + i % 5}\n" for i in range(50))
    path = write(tmp_path, "pairs.tsv", "query\ttitle\tgrade\n" + rows)
    whole = read_pairs(path)
    largest = [0]
    built = Pairs.__post_init__

    def counted(self):
        largest[0] = max(largest[0], len(self.queries))
        built(self)

    monkeypatch.setattr(Pairs, "__post_init__", counted)
    monkeypatch.setattr(data_spec, "SAMPLE_CHUNK", 7, raising=False)
    for seed in (0, 3):
        sample = data_spec.read_spec(str(path), rows=5, seed=seed)
        expected = whole.sample(5, seed=seed)
        assert sample == expected and sample.lines == expected.lines and sample.fingerprint == expected.fingerprint
    assert largest[0] == 7  # one chunk of rows, never the file's 50
    assert data_spec.read_spec(str(path), rows=60) == whole  # a sample of more rows than the file holds: every row
    write(tmp_path, "pairs.tsv", "query\ttitle\tgrade\n" + rows + "q\tt\t9\n")
    with pytest.raises(UserError, match=r"pairs.tsv, line 52, column 'grade'"):
        data_spec.read_spec(str(path), rows=5)
