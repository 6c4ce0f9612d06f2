"""A grader folder is copied between machines: the runtime checks what grader.json says against the files and
the graph, and every lie is one sentence naming the file and the fix, exit 2, before any pair is graded."""
from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from conftest import ROOT
from headcut.cli.main import app
from headcut.export.quantize import CHOICE_NAMES
from test_export import make_tiny_grader


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    return make_tiny_grader(tmp_path_factory.mktemp("grader"))[0]


def _edit(key, value):
    def harm(folder):
        record = json.loads((folder / "grader.json").read_text())
        record[key] = value
        (folder / "grader.json").write_text(json.dumps(record))
    return harm


def _edits(**changes):
    def harm(folder):
        for key, value in changes.items():
            _edit(key, value)(folder)
    return harm


def _model_file(**changes):
    def harm(folder):
        record = json.loads((folder / "grader.json").read_text())
        record["model_file"].update(changes)
        (folder / "grader.json").write_text(json.dumps(record))
    return harm


def _model_file_is_the_tokenizer(folder):  # its name, size and sha256: the checks of files pass
    record = json.loads((folder / "grader.json").read_text())
    record["model_file"] = record["tokenizer_file"]
    (folder / "grader.json").write_text(json.dumps(record))


def _flip_a_byte(folder):
    data = bytearray((folder / "model.onnx").read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, other bytes
    (folder / "model.onnx").write_bytes(bytes(data))


def _another_graders_graph(folder):
    other = folder.parent / "other"
    shutil.copytree(folder, other)
    _model_file(name="../other/model.onnx")(folder)


def _tokenizer_vocab(change):
    def harm(folder):
        data = json.loads((folder / "tokenizer.json").read_text())
        change(data["model"]["vocab"])
        (folder / "tokenizer.json").write_text(json.dumps(data))
    return harm


def _swap_two_words(vocab):
    """Another model's tokenizer of the same size: two words' ids swapped, which graded on silently."""
    first, second = list(vocab)[10:12]
    vocab[first], vocab[second] = vocab[second], vocab[first]


def _more_words(vocab):
    for i in range(60):
        vocab[f"extra{i}"] = len(vocab)


def _unrecorded_tokenizer(folder):
    """A folder exported before grader.json recorded its tokenizer, given another model's larger tokenizer."""
    record = json.loads((folder / "grader.json").read_text())
    del record["tokenizer_file"]
    (folder / "grader.json").write_text(json.dumps(record))
    _tokenizer_vocab(_more_words)(folder)


LIES = [
    (_edit("grades", [1, 2, 3]), '\'label_map\' is {"0": 1, "1": 2, "2": 3, "3": 4, "4": 5}, but the runtime grades'),
    (_edits(grades=[1, 2, 3], label_map={"0": 1, "1": 2, "2": 3}), "names 3 outputs (task grades) but the graph has 5"),
    (_edit("grades", ["1", "2", "3", "4", "5"]), "'grades' is"),
    (_edit("max_length", -4), "'max_length' is -4"),
    (_edit("pad_id", "0"), '\'pad_id\' is "0", not a whole number'),
    (_flip_a_byte, "is not the file grader.json records"),
    (_another_graders_graph, "outside the grader folder"),
    (_model_file(name="/etc/passwd"), "outside the grader folder"),
    (_model_file_is_the_tokenizer, "grader.json: model_file names 'tokenizer.json', not an ONNX graph (.onnx); "
                                   "grader.json was edited or the folder mixes files of two exports, so re-export"),
    # was: a size or sha256 of the wrong type, or an empty sha256, turned the check of the file off, exit 0
    (_model_file(sha256=""), 'and sha256 "", not its size and a sha256 prefix of 16 to 64 hex digits'),
    (_model_file(sha256=None), "and sha256 null, not its size"),
    (_model_file(sha256="1CCF"), 'and sha256 "1CCF", not its size'),
    (_model_file(bytes="big"), 'model_file records bytes "big"'),
    (_edit("input_names", ["input_ids", "attention_mask", "position_ids"]), "input_names"),
    (_edit("input_names", "input_ids"), "'input_names' is \"input_ids\", not a list"),  # was: graded, exit 0
    # the keys other-language clients read (docs/deployment.md) must say what the runtime does
    (_edit("label_map", {"0": 1, "1": 2, "2": 3, "3": 4, "4": 7}), "'label_map' is"),
    (_edit("truncation", "only_second"), '\'truncation\' is "only_second"'),
    (_edit("output_name", "scores"), '\'output_name\' is "scores"'),
    # another model's tokenizer.json: was graded on silently (same vocabulary size) or an ONNX Runtime traceback
    (_tokenizer_vocab(_swap_two_words), "tokenizer.json is not the file grader.json records"),
    (_tokenizer_vocab(_more_words), "tokenizer.json is not the file grader.json records"),
    (_unrecorded_tokenizer, "tokenizer.json has 157 tokens, more than the graph's embeddings hold"),
    (_edit("tokenizer_file", {"name": "tokenizer.json"}), "tokenizer_file records bytes null"),
    # was: any level but "disabled" ran the graph fully optimised, not the level its parity gate checked, exit 0
    (_edit("graph_optimization", "basic"), '\'graph_optimization\' is "basic", not one of all, disabled'),
    # sections headcut bench reads: was a traceback there ('str' object has no attribute 'get'), exit 1
    (_edit("int8", "yes"), '\'int8\' is "yes", not an object'),
    (_edit("int8", {"chosen": 3}), "'int8.chosen' is 3, not an object naming the recipe chosen ('choice')"),
    (_edit("int8_rejected", []), "'int8_rejected' is [], not an object"),
    # was: graded and reported as INT8 (grader.json's word alone), exit 0
    (_edit("precision", "int8"), '\'precision\' is "int8", but model.onnx holds no quantized (INT8) operations'),
]


@pytest.mark.parametrize("harm,words", LIES)
def test_a_grader_folder_that_lies_is_refused_by_grade_and_evaluate(exported, tmp_path, harm, words):
    folder = tmp_path / "grader"
    shutil.copytree(exported, folder)
    harm(folder)
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("query\ttitle\tgrade\ndrill\tcordless drill\t3\nhammer\tclaw hammer\t2\n")
    runtime = subprocess.run([sys.executable, "-m", "headcut_grader", "grade", str(folder), str(pairs), "--out",
                              str(tmp_path / "out.tsv")], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert runtime.returncode == 2, runtime.stderr
    assert words in runtime.stderr and "Traceback" not in runtime.stderr, runtime.stderr
    assert len(runtime.stderr.strip().splitlines()) == 1 and not (tmp_path / "out.tsv").exists()
    toolkit = CliRunner().invoke(app, ["evaluate", "--model", str(folder), "--data", str(pairs)])
    assert toolkit.exit_code == 2 and words in toolkit.output, toolkit.output


def test_serve_refuses_a_lying_folder_before_it_listens(exported, tmp_path):
    """Was: `headcut-grader serve` started and then failed every request."""
    folder = tmp_path / "grader"
    shutil.copytree(exported, folder)
    _edits(grades=[1, 2, 3], label_map={"0": 1, "1": 2, "2": 3})(folder)
    with socket.socket() as s:  # a free port, so a server that wrongly starts would listen, not clash
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = subprocess.run([sys.executable, "-m", "headcut_grader", "serve", str(folder), "--port", str(port)],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 2 and "names 3 outputs (task grades) but the graph has 5" in done.stderr, done.stderr


def _int8_grader(tmp_path, name):
    """A tiny grader whose INT8 graph is the recipe `name` (checked: grader.json records that recipe)."""
    from headcut.export.quantize import CHOICES

    folder = make_tiny_grader(tmp_path, int8=True, choices=tuple(c for c in CHOICES if c.name == name))[0]
    assert json.loads((folder / "grader.json").read_text())["int8"]["chosen"]["choice"] == name
    return folder


@pytest.mark.parametrize("name", CHOICE_NAMES)
def test_a_grader_of_every_int8_recipe_opens_as_int8(tmp_path, name):
    """Was: a per-row-int8 grader (MatMulNBits, the one quantized op it holds) was refused as 'precision is int8,
    but model.onnx holds no quantized (INT8) operations'."""
    from headcut_grader import Grader

    assert Grader(_int8_grader(tmp_path, name)).precision == "int8"


@pytest.mark.parametrize("name", CHOICE_NAMES)
def test_an_int8_graph_recorded_as_fp32_is_refused(tmp_path, name):
    """Was: Grader(folder).precision said fp32 for the INT8 graph it ran, with nothing refused."""
    from headcut_grader import Grader
    from headcut_grader.errors import UserError

    folder = _int8_grader(tmp_path, name)
    _edit("precision", "fp32")(folder)
    with pytest.raises(UserError, match=r"grader.json: 'precision' is \"fp32\", but model.onnx holds quantized "
                                        r"\(INT8\) operations; grader.json was edited or the folder mixes"):
        Grader(folder)


def test_opening_a_grader_reads_its_graph_once(exported, monkeypatch):
    """Was: model.onnx was read whole to check its sha256 and again to look for quantized ops (1.45 s per 400 MB)."""
    import builtins

    from headcut_grader import Grader

    graph, reads, real = (exported / "model.onnx").resolve(), [], builtins.open
    monkeypatch.setattr(builtins, "open", lambda file, *a, **k: reads.append(file) or real(file, *a, **k))
    assert Grader(exported).precision == "fp32"
    assert [f for f in reads if isinstance(f, (str, type(graph))) and str(f) == str(graph)] == [graph]


def test_a_marker_across_two_chunks_of_the_hashed_read_is_found(tmp_path):
    import hashlib

    from headcut_grader.files import hash_and_find

    path = tmp_path / "graph.onnx"
    body = b"x" * ((1 << 20) - 5) + b"MatMulNBits" + b"y" * 9
    path.write_bytes(body)
    assert hash_and_find(path, (b"QLinear", b"MatMulNBits")) == (hashlib.sha256(body).hexdigest(), True)
    assert hash_and_find(path, (b"QGemm",)) == (hashlib.sha256(body).hexdigest(), False)
    assert hash_and_find(path) == (hashlib.sha256(body).hexdigest(), False)


@pytest.mark.parametrize("name", ["grader.json", "tokenizer.json", "model.onnx"])
def test_a_grader_file_this_user_may_not_read_is_one_sentence_saying_so(exported, monkeypatch, name):
    """Was: a tokenizer.json or model.onnx that this user may not read (another user's, chmod 600) ended in a
    PermissionError traceback, and such a grader.json was called 'damaged or incomplete (not valid JSON: [Errno 13]
    ...)' with 're-export the grader'. The tests run as root, whom permission bits do not stop: open refuses here."""
    import builtins
    import errno
    import os
    import pwd
    from pathlib import Path

    import headcut_grader.files as files
    import headcut_grader.validation as validation
    from headcut_grader import Grader
    from headcut_grader.errors import UserError

    def refusing(path, *args, **kwargs):
        if Path(path).name == name:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return builtins.open(path, *args, **kwargs)

    for module in (files, validation):
        monkeypatch.setattr(module, "open", refusing, raising=False)
    with pytest.raises(UserError, match=f"{name} cannot be read \\(Permission denied\\); let this user read it"):
        Grader(exported)
    monkeypatch.setattr(os, "geteuid", lambda: 4242)  # the tests' root, as a user who does not own the file
    owner = pwd.getpwuid((Path(exported) / name).stat().st_uid)  # whoever runs the tests (root, uid 0 in CI)
    with pytest.raises(UserError, match=f"{name} cannot be read \\(Permission denied\\); .*{name} belongs to another "
                                        f"user \\({owner.pw_name}, uid {owner.pw_uid}\\), so only they can change its "
                                        "mode: ask them to let this user read it, or copy the grader folder again\\.$"):
        Grader(exported)


def test_a_folder_in_place_of_grader_json_is_not_called_invalid_json(exported, tmp_path):
    """Was: 'grader.json is damaged or incomplete (not valid JSON: [Errno 21] Is a directory: ...)'."""
    from headcut_grader import Grader
    from headcut_grader.errors import UserError

    folder = tmp_path / "grader"
    shutil.copytree(exported, folder)
    (folder / "grader.json").unlink()
    (folder / "grader.json").mkdir()
    with pytest.raises(UserError, match=r"grader.json cannot be read \(Is a directory\); copy the grader folder again "
                                        r"or re-export it\.$"):
        Grader(folder)


@pytest.mark.parametrize("name", ["model.onnx", "tokenizer.json"])
def test_a_grader_file_linked_from_outside_the_folder_is_said_to_be_a_link(exported, tmp_path, name):
    """A folder whose model.onnx is a symbolic link (git-annex, DVC, a shared cache). Was: "model_file 'model.onnx' is
    outside the grader folder" (of a name that is in it) and, for the tokenizer, "must hold its own graphs"."""
    from headcut_grader import Grader
    from headcut_grader.errors import UserError

    folder, store = tmp_path / "grader", tmp_path / "store"
    shutil.copytree(exported, folder)
    store.mkdir()
    (folder / name).rename(store / name)
    (folder / name).symlink_to(store / name)
    with pytest.raises(UserError, match=f"^{folder / name} is a symbolic link to {store / name}, outside the grader "
                                        "folder, which must hold its own files: put the file itself in place of the "
                                        "link.$"):
        Grader(folder)
