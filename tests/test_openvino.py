"""The OpenVINO backend: graders equal PyTorch on it, `auto` picks by measurement, and bad folders are refused."""
from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import sys

import numpy as np
import pytest
import torch

from conftest import HOMEDEPOT, ROOT, BrokenImport, tiny_model
from headcut.arch import keep_heads, keep_neurons, takes_token_types
from headcut_grader.data import read_pairs
from headcut.synthetic import synthetic_pairs
from headcut_grader.errors import UserError
from headcut.export import build_grader
from headcut.export.build import choose_export
from headcut.export.export import FP32_TOLERANCE, RANDOM_SHAPES
from headcut.export.openvino import OV_INT8_CHOICES
from headcut.models import LoadedModel
from headcut_grader import Grader
from headcut_grader.backend_choice import ENV_CACHE
from headcut_grader.machine import bf16_native
from headcut_grader.timing import Cpu
from test_export import make_tiny_grader, tiny_tokenizer

pytest.importorskip("openvino")


def tiny_loaded(tmp_path, kind: str, *, prune: bool = False) -> LoadedModel:
    tokenizer = tiny_tokenizer(tmp_path / "tok")
    model = tiny_model(kind, vocab_size=len(tokenizer), initializer_range=0.2, max_position_embeddings=128)
    if prune:  # uneven heads, a 0-head layer, and a 0-neuron layer: every stub OpenVINO must run
        keep_heads(model, [[0, 2, 3], []])
        keep_neurons(model, [[], list(range(0, 37, 2))])
    return LoadedModel(model, tokenizer, {"grades": [1, 2, 3, 4, 5], "max_length": 64}, "tiny", "0" * 16)


@torch.no_grad()
def pytorch_logits(loaded: LoadedModel, pairs) -> np.ndarray:
    enc = loaded.tokenizer(pairs.queries, pairs.titles, truncation="longest_first", max_length=64, padding=True,
                           return_tensors="pt")
    if not takes_token_types(loaded.model):
        enc.pop("token_type_ids", None)
    return loaded.model.eval()(**enc).logits.numpy()


@pytest.mark.parametrize("kind,prune", [("bert", False), ("distilbert", False), ("bert", True), ("deberta-v2", True),
                                       ("modernbert", True)],
                         ids=["bert", "distilbert", "pruned-bert-0-head-0-neuron", "pruned-deberta-v2-0-head-0-neuron",
                              "pruned-modernbert-0-head-0-neuron"])
def test_openvino_grader_equals_pytorch(tmp_path, kind, prune, one_thread):
    loaded = tiny_loaded(tmp_path, kind, prune=prune)
    pairs = synthetic_pairs(60, seed=4)
    record = build_grader(loaded, tmp_path / "grader", pairs=pairs, backend="openvino", threads=1)
    assert record["openvino"]["precision"] == "fp32" and record["backend"] == "openvino"
    assert record["openvino"]["parity"]["fp32"]["max_abs_diff"] <= FP32_TOLERANCE
    grader = Grader(tmp_path / "grader", backend="openvino")
    assert grader.backend.name == "openvino"
    got = grader.logits(pairs)
    want = pytorch_logits(loaded, pairs)
    assert np.max(np.abs(got - want)) <= FP32_TOLERANCE
    assert (got.argmax(1) == want.argmax(1)).all()
    # the portable ONNX Runtime graph ships beside it and grades the same
    same = Grader(tmp_path / "grader", backend="onnxruntime").grade(pairs).grades
    assert (same == grader.grade(pairs).grades).all()


def test_nncf_draws_no_progress_bars_while_int8_graphs_are_judged(tmp_path, capfd, one_thread):
    """Was: NNCF's progress bars ('Statistics collection ━━━') leaked into `headcut run`'s and `headcut export`'s
    output while OpenVINO INT8 graphs were judged (its log level does not reach them); now nothing is printed."""
    pytest.importorskip("nncf")
    from headcut.export.export import export_onnx, gate_batches
    from headcut.export.openvino import convert, quantize_int8

    loaded = tiny_loaded(tmp_path, "bert")
    batches = gate_batches(loaded.model, loaded.tokenizer, synthetic_pairs(40, seed=2), max_length=64)
    fp32_model = convert(export_onnx(loaded.model, tmp_path / "plain.onnx", fuse=False))
    capfd.readouterr()
    assert quantize_int8(fp32_model, batches[: len(batches) - len(RANDOM_SHAPES)], OV_INT8_CHOICES[0]) is not None
    printed = capfd.readouterr()
    assert "Statistics collection" not in printed.out + printed.err and "━" not in printed.out + printed.err, printed


def test_int8_is_judged_by_the_gate_and_what_ships_is_what_was_judged(tmp_path, one_thread):
    folder, loaded, record = make_tiny_grader(tmp_path, backend="openvino", precision="int8")
    ov = record["openvino"]
    assert ov["precision"] in ("int8", "int8-bf16") and ov["choice"]["chosen"].startswith("int8")
    chosen = next(t for t in ov["choice"]["trials"] if t["choice"] == ov["choice"]["chosen"])
    # the graph written is the one the gate judged: its agreement with PyTorch is the recorded one
    pairs = synthetic_pairs(120)
    got = Grader(folder, backend="openvino").logits(pairs)
    fp32 = pytorch_logits(loaded, pairs)
    assert np.mean(got.argmax(1) == fp32.argmax(1)) == pytest.approx(chosen["agreement"], abs=0.02)
    assert 0 < np.max(np.abs(got - fp32)) < 1.0  # quantised (not the fp32 graph), and close


def test_bf16_only_where_the_cpu_has_it(tmp_path, one_thread):
    assert bf16_native(Cpu("Xeon", frozenset({"avx512f", "amx_bf16"})))
    assert bf16_native(Cpu("EPYC 9004", frozenset({"avx512f", "avx512_bf16"})))
    assert not bf16_native(Cpu("EPYC", frozenset({"avx2", "fma"})))
    if bf16_native():
        folder, _, record = make_tiny_grader(tmp_path, backend="openvino", precision="bf16")
        assert record["openvino"]["precision"] == "bf16"
    else:
        with pytest.raises(UserError, match="neither AMX nor AVX512_BF16"):
            make_tiny_grader(tmp_path, backend="openvino", precision="bf16")
        assert not (tmp_path / "grader").exists()


@pytest.mark.skipif(not bf16_native(), reason="the CPU has neither AMX nor AVX512_BF16")
def test_a_bf16_grader_reports_bf16_on_a_cpu_that_has_it(tmp_path, one_thread):
    """Was: fp32, always: the runtime looked for 'bf16' in str(OpenVINO's Type), which reads <Type: 'bfloat16'>."""
    folder, _, record = make_tiny_grader(tmp_path, backend="openvino", precision="bf16")
    grader = Grader(folder, backend="openvino")
    assert grader.precision == record["openvino"]["precision"] == "bf16"


def test_auto_uses_the_export_ranking_on_the_same_cpu_and_measures_once_on_another(tmp_path, monkeypatch,
                                                                                   one_thread):
    monkeypatch.setenv(ENV_CACHE, str(tmp_path / "cache"))
    folder, _, record = make_tiny_grader(tmp_path, backend="auto", precision="fp32")
    assert set(record["speed"]["seconds"]) == {"onnxruntime", "openvino"}
    grader = Grader(folder)
    assert grader.backend.name == record["speed"]["fastest"] and "when exported" in grader.backend_reason
    slower = min(record["speed"]["seconds"], key=lambda n: -record["speed"]["seconds"][n])
    path = folder / "grader.json"
    told = json.loads(path.read_text())
    told["speed"]["seconds"][slower] = 0.0  # the record now ranks the other graph first: auto must follow it
    path.write_text(json.dumps(told))
    assert Grader(folder).backend.name == slower
    told["speed"]["cpu"]["key"] = "another-cpu"  # measured elsewhere: time here once, then reuse the answer
    path.write_text(json.dumps(told))
    first = Grader(folder)
    assert "timed now" in first.backend_reason and (tmp_path / "cache" / "backend-choice.json").exists()
    again = Grader(folder)
    assert "cached" in again.backend_reason and again.backend.name == first.backend.name


def test_a_folder_exported_for_one_backend_asks_for_that_one(tmp_path, one_thread):
    folder = make_tiny_grader(tmp_path, backend="openvino")[0]
    assert Grader(folder).backend.name == "openvino"
    plain = make_tiny_grader(tmp_path / "plain")[0]
    assert Grader(plain).backend.name == "onnxruntime"
    with pytest.raises(UserError, match="has no openvino graph"):
        Grader(plain, backend="openvino")


def test_precision_requests_are_checked_before_any_work():
    assert choose_export("openvino", "int8", int8=False).precisions == ("fp32", "int8")
    assert choose_export("auto", "int8", int8=False).precisions == ("int8", "int8")
    assert choose_export("onnxruntime", None, int8=True).precisions == ("int8", None)
    for backend, precision, words in [("onnxruntime", "bf16", "fp32 or int8"), ("tensorrt", None, "not one of"),
                                      ("openvino", "fp16", "not one of")]:
        with pytest.raises(UserError, match=words):
            choose_export(backend, precision, int8=False)


def _cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "headcut", *map(str, args)], capture_output=True, text=True,
                          cwd=ROOT, timeout=300, env=env)


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    """A tiny grader with both graphs (fp32), shared by the bad-input cases, which copy it before harming it."""
    return make_tiny_grader(tmp_path_factory.mktemp("both"), backend="auto")[0]


def _copy(both, tmp_path):
    return shutil.copytree(both, tmp_path / "copy")


def _truncate_bin(folder):
    path = folder / "openvino" / "model.bin"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _swap_xml(folder):  # an IR from another export whose record was left as it was
    record = json.loads((folder / "grader.json").read_text())
    record["openvino"]["files"]["xml"]["name"] = "grader.json"
    (folder / "grader.json").write_text(json.dumps(record))


def _xml_is_the_onnx(folder):  # was: refused as 'model.onnx holds quantized (INT8) operations'
    record = json.loads((folder / "grader.json").read_text())
    record["openvino"]["files"]["xml"] = record["model_file"]  # its name, size and sha256: the checks of files pass
    (folder / "grader.json").write_text(json.dumps(record))


def _bin_is_the_xml(folder):
    record = json.loads((folder / "grader.json").read_text())
    record["openvino"]["files"]["bin"] = record["openvino"]["files"]["xml"]
    (folder / "grader.json").write_text(json.dumps(record))


def _outside(folder):
    record = json.loads((folder / "grader.json").read_text())
    record["openvino"]["files"]["bin"]["name"] = "../../../etc/passwd"
    (folder / "grader.json").write_text(json.dumps(record))


def _inputs_lie(folder):
    record = json.loads((folder / "grader.json").read_text())
    record["input_names"] = ["input_ids", "attention_mask", "position_ids"]
    (folder / "grader.json").write_text(json.dumps(record))


def _grades_lie(folder):
    record = json.loads((folder / "grader.json").read_text())
    record.update(grades=[1, 2, 3], label_map={"0": 1, "1": 2, "2": 3})
    (folder / "grader.json").write_text(json.dumps(record))


def _precision_lies(folder):  # was: an fp32 IR graded and reported as INT8, exit 0
    record = json.loads((folder / "grader.json").read_text())
    record["openvino"]["precision"] = "int8"
    (folder / "grader.json").write_text(json.dumps(record))


def _bf16_lies(precision, hint):  # was: graded with one, reported as the other, exit 0
    def harm(folder):
        record = json.loads((folder / "grader.json").read_text())
        record["openvino"].update(precision=precision, inference_precision=hint)
        (folder / "grader.json").write_text(json.dumps(record))
    return harm


def _max_length_lies(folder):  # OpenVINO grades past the 128 positions (zeros); ONNX Runtime's graph fails there
    record = json.loads((folder / "grader.json").read_text())
    record["max_length"] = 300
    (folder / "grader.json").write_text(json.dumps(record))


@pytest.mark.parametrize("harm,words", [
    (_truncate_bin, "is not the file grader.json records"),
    (_swap_xml, "is not the file grader.json records"),
    (_outside, "outside the grader folder"),
    (_xml_is_the_onnx, "grader.json: openvino.files.xml names 'model.onnx', not an OpenVINO IR .xml file (with its "
                       "weights, a .bin, under openvino.files.bin); grader.json was edited or the folder mixes files "
                       "of two exports, so re-export the grader."),
    (_bin_is_the_xml, "grader.json: openvino.files.bin names 'openvino/model.xml', not an OpenVINO IR's weights, the "
                      ".bin beside its .xml;"),
    (_inputs_lie, "are not grader.json's input_names"),
    (_grades_lie, "names 3 outputs (task grades) but the graph has 5"),
    (_max_length_lies, "'max_length' is 300, but the graph has position embeddings for at most 128 tokens"),
    (_precision_lies, "'openvino.precision' is \"int8\", but model.xml holds no quantized (INT8) operations"),
    (_bf16_lies("bf16", "fp32"), "'openvino.precision' is \"bf16\", but 'openvino.inference_precision' is \"fp32\""),
    (_bf16_lies("fp32", "bf16"), "'openvino.precision' is \"fp32\", but 'openvino.inference_precision' is \"bf16\""),
    (_bf16_lies("bf16", "bf16"), "'openvino.precision' is \"bf16\", but 'openvino.choice' records that the export "
                                 "chose the fp32 graph (bf16 is a compile setting the IR files do not hold)"),
])
def test_grader_folders_that_lie_are_refused_with_one_sentence(both, tmp_path, harm, words):
    folder = _copy(both, tmp_path)
    harm(folder)
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("query\ttitle\ndrill\tcordless drill\n")
    done = _cli("grade", folder, pairs, "--out", tmp_path / "out.tsv", "--backend", "openvino")
    assert done.returncode == 2, done.stderr
    assert words in done.stderr and "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out.tsv").exists()


def test_a_precision_that_lies_is_refused_before_the_graph_compiles(both, tmp_path, monkeypatch):
    """Was: the IR was compiled for the CPU (seconds for a large graph) before its precision was checked."""
    import openvino

    folder = _copy(both, tmp_path)
    _precision_lies(folder)
    compiled = []
    real = openvino.Core.compile_model
    monkeypatch.setattr(openvino.Core, "compile_model", lambda *a, **k: compiled.append(1) or real(*a, **k))
    with pytest.raises(UserError, match="'openvino.precision' is \"int8\", but model.xml holds no quantized"):
        Grader(folder, backend="openvino")
    assert compiled == []


def test_without_openvino_installed_the_export_and_runtime_say_how_to_get_it(both, tmp_path):
    blocker = tmp_path / "block"
    blocker.mkdir()
    # what importing a package that is not there raises (an ImportError of another kind is one failing to load)
    (blocker / "openvino.py").write_text("raise ModuleNotFoundError('blocked for this test', name='openvino')\n")
    env = {**__import__("os").environ}
    env["PYTHONPATH"] = f"{blocker}:{env.get('PYTHONPATH', '')}"
    done = _cli("export", "minilm-l6", "--out", tmp_path / "g", "--backend", "openvino", env=env)
    # the export's extra, which brings NNCF for its INT8 graphs too
    assert done.returncode == 2 and "pip install 'headcut[openvino]'" in done.stderr, done.stderr
    assert not (tmp_path / "g").exists()
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("query\ttitle\ndrill\tcordless drill\n")
    done = _cli("grade", both, pairs, "--out", tmp_path / "o.tsv", "--backend", "openvino", env=env)
    assert done.returncode == 2 and "headcut-grader[openvino]" in done.stderr, done.stderr
    assert "(or pick --backend onnxruntime)" in done.stderr, done.stderr
    # auto falls back to the portable ONNX Runtime graph
    done = _cli("grade", both, pairs, "--out", tmp_path / "o.tsv", env=env)
    assert done.returncode == 0 and "onnxruntime" in done.stdout, done.stderr


BROKEN_OPENVINO = [OSError("libopenvino.so.2540: cannot open shared object file: No such file or directory\nmore"),
                   AttributeError("module 'numpy' has no attribute 'bool8'"), RuntimeError("no CPU plugin"),
                   ImportError("libtbb.so.12: cannot open shared object file")]


@pytest.mark.parametrize("error", BROKEN_OPENVINO, ids=lambda e: type(e).__name__)
def test_an_openvino_that_fails_to_import_is_said_in_one_sentence(both, monkeypatch, error):
    """An openvino installed but failing to import: --backend openvino (grade, serve, Grader) ended in its traceback
    (an ImportError said 'pip install', though it was installed), and --backend auto's choice too. Now one sentence
    names the package, its error and the fix; auto takes the ONNX Runtime graph and its reason says why."""
    from headcut_grader.backends import open_backend, graphs

    said = f"{type(error).__name__}: {str(error).splitlines()[0]}"
    monkeypatch.delitem(sys.modules, "openvino", raising=False)
    monkeypatch.setattr(sys, "meta_path", [BrokenImport("openvino", error), *sys.meta_path])
    with pytest.raises(UserError) as e:
        Grader(both, backend="openvino", names="flags")
    assert str(e.value) == (f"the OpenVINO backend needs the openvino package, and openvino fails to import here "
                            f"({said}); reinstall it: pip install --force-reinstall openvino (or pick --backend "
                            "onnxruntime).")
    grader = Grader(both)
    assert "openvino" in graphs(grader.record) and grader.backend.name == "onnxruntime"
    assert grader.backend_reason == (f"the only graph whose runtime imports here: openvino fails to import here "
                                     f"({said}); reinstall it: pip install --force-reinstall openvino")
    with pytest.raises(UserError, match=r"\(or pass backend='onnxruntime'\)\.$"):
        open_backend("openvino", both, grader.record, threads=1)


def test_bench_says_which_graph_it_skipped_and_why(both, monkeypatch):
    """Was: headcut bench --grader skipped a grader's graph whose runtime fails to import (or is not installed)
    without a word, where grade notes it; grader_backends now says which runtime and why, in grade's words."""
    from headcut.export.bench import grader_backends, skipped_said
    from headcut_grader.optional import forget_broken

    monkeypatch.delitem(sys.modules, "openvino", raising=False)
    monkeypatch.setattr(sys, "meta_path", [BrokenImport("openvino", OSError("gone")), *sys.meta_path])
    usable, skipped = grader_backends(both)
    assert usable == ["onnxruntime"] and skipped == {"openvino": "fails to import here (OSError: gone)"}
    assert skipped_said("openvino", skipped["openvino"]) == ("openvino fails to import here (OSError: gone); reinstall "
                                                             "it: pip install --force-reinstall openvino")
    forget_broken()
    monkeypatch.setitem(sys.modules, "openvino", None)
    assert grader_backends(both) == (["onnxruntime"], {"openvino": "is not installed here"})
    assert skipped_said("openvino", "is not installed here") == ("openvino is not installed here; run: pip install "
                                                                 "'headcut-grader[openvino]'")


def test_grade_and_serve_with_an_openvino_that_fails_to_import_exit_2(both, tmp_path, monkeypatch):
    """`headcut-grader grade --backend openvino` in a process whose openvino raises OSError on import: exit 2 and the
    one sentence, no traceback (was: the OSError's traceback, exit 1); with auto it grades with ONNX Runtime and a
    note says why; `headcut serve` likewise, why on its first line."""
    import os

    import uvicorn
    from typer.testing import CliRunner

    from headcut.cli.main import app
    from headcut_grader.serve import ENV_SETTINGS
    from headcut_grader.serve_metrics import ENV_MULTIPROC

    blocker = tmp_path / "block"
    blocker.mkdir()
    (blocker / "openvino.py").write_text("raise OSError('libopenvino.so.2540: cannot open shared object file')\n")
    env = {**os.environ, "PYTHONPATH": f"{blocker}:{os.environ.get('PYTHONPATH', '')}"}
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("query\ttitle\ndrill\tcordless drill\n")
    out = tmp_path / "o.tsv"
    command = [sys.executable, "-m", "headcut_grader", "grade", str(both), str(pairs), "--out", str(out)]
    done = subprocess.run([*command, "--backend", "openvino"], capture_output=True, text=True, cwd=ROOT, env=env,
                          timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr == ("error: the OpenVINO backend needs the openvino package, and openvino fails to import here "
                           "(OSError: libopenvino.so.2540: cannot open shared object file); reinstall it: pip install "
                           "--force-reinstall openvino (or pick --backend onnxruntime).\n")
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert done.returncode == 0 and "onnxruntime" in done.stdout, done.stderr
    assert done.stderr.endswith("note: the grader's openvino graph was skipped: openvino fails to import here "
                                "(OSError: libopenvino.so.2540: cannot open shared object file); reinstall it: pip "
                                "install --force-reinstall openvino.\n"), done.stderr

    monkeypatch.delitem(sys.modules, "openvino", raising=False)
    monkeypatch.setattr(sys, "meta_path", [BrokenImport("openvino", OSError("gone")), *sys.meta_path])
    monkeypatch.setattr(uvicorn, "run", lambda *args, **kwargs: None)  # started, then stopped at once
    for name in (ENV_SETTINGS, ENV_MULTIPROC):  # the command sets them for its workers; put back after
        monkeypatch.setenv(name, "")
    monkeypatch.setattr(signal, "signal", lambda *args: None)  # nor may it keep its SIGTERM handler in pytest
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    result = CliRunner().invoke(app, ["serve", str(both), "--port", port, "--backend", "openvino"])
    assert result.exit_code == 2 and "openvino fails to import here (OSError: gone); reinstall it" in result.output
    result = CliRunner().invoke(app, ["serve", str(both), "--port", port])
    assert result.exit_code == 0 and ("with onnxruntime" in result.output and "openvino fails to import here "
                                      "(OSError: gone); reinstall it: pip install --force-reinstall openvino"
                                      in " ".join(result.output.split())), result.output


def test_a_python_caller_without_openvino_is_told_its_backend_argument(both, monkeypatch):
    """Was: `(or pick --backend onnxruntime)` for Grader(folder, backend="openvino"), a Python call with no flags;
    a missing graph said `pick another --backend`."""
    from headcut_grader import backends

    monkeypatch.setattr(backends, "optional_module", lambda name: None)  # openvino not installed
    with pytest.raises(UserError, match=r"^the OpenVINO backend needs the openvino package; run: pip install "
                                        r"'headcut-grader\[openvino\]' \(or pass backend='onnxruntime'\)\.$"):
        Grader(both, backend="openvino")
    with pytest.raises(UserError, match=r"has no openvino graph .* or pick another backend\.$"):
        backends.open_backend("openvino", both, {"precision": "fp32", "model_file": {}}, threads=1)


def test_bad_backend_and_precision_flags_exit_2_before_loading(tmp_path):
    for args, words in [(("--backend", "tensorrt"), "--backend tensorrt"), (("--precision", "fp8"), "--precision fp8"),
                        (("--int8", "--precision", "bf16"), "disagree")]:
        done = _cli("export", "minilm-l6", "--out", tmp_path / "g", *args)
        assert done.returncode == 2 and words in done.stderr, done.stderr
        assert not (tmp_path / "g").exists()


@pytest.mark.real
@pytest.mark.slow
def test_real_minilm_teacher_keeps_its_grades_in_every_openvino_int8_recipe(quick_teacher, tmp_path):
    """The packaged MiniLM, fine-tuned on Home Depot: the OpenVINO fp32 graph equals PyTorch and every NNCF
    recipe keeps the fp32 graph's grades. The gates, timing and choice around them are tested on tiny
    graders above (timing five real graphs twice took half of this test's 150 s and proved nothing more)."""
    from headcut.batching import encode
    from headcut.evaluate.metrics import agreement
    from headcut.export.export import export_onnx, gate_batches, onnx_logits, parity, reference_logits
    from headcut.export.openvino import compiled_runner, convert, quantize_int8
    from headcut.models import load_model

    loaded = load_model(quick_teacher)
    pairs = read_pairs(HOMEDEPOT / "dev.tsv", preset="homedepot").sample(300, seed=11)
    batches = gate_batches(loaded.model, loaded.tokenizer, pairs, max_length=loaded.max_length)
    fp32_model = convert(export_onnx(loaded.model, tmp_path / "plain.onnx", fuse=False))
    fp32_run = compiled_runner(fp32_model, inference_precision="fp32", threads=2)
    assert parity(reference_logits(loaded.model, batches), fp32_run, batches).max_abs_diff <= FP32_TOLERANCE
    encoded = encode(loaded.tokenizer, pairs, max_length=loaded.max_length, model=loaded.model)
    fp32_logits = onnx_logits(fp32_run, encoded)
    calibration = batches[: len(batches) - len(RANDOM_SHAPES)]  # the real pairs only, as build_grader calibrates
    for choice in OV_INT8_CHOICES:
        int8_run = compiled_runner(quantize_int8(fp32_model, calibration, choice), inference_precision="fp32",
                                   threads=2)
        # measured here: 95.3-97.5% of the fp32 graph's grades kept by every NNCF recipe on 400-1,000 dev
        # pairs; on 300 pairs one share has a sampling sd of about 1.1 points, so 94% stays clear of noise
        assert agreement(onnx_logits(int8_run, encoded), fp32_logits) >= 0.94, choice.name


@pytest.mark.slow
def test_serve_answers_the_same_grades_on_both_backends(both):
    httpx = pytest.importorskip("httpx")
    from headcut.export.server_load import running_server

    pairs = synthetic_pairs(24, seed=12)
    body = {"pairs": [{"query": q, "title": t} for q, t in zip(pairs.queries, pairs.titles)]}
    answers = {}
    for backend in ("onnxruntime", "openvino"):
        with running_server(both, workers=1, threads=1, args=("--backend", backend), cwd=ROOT) as url:
            health = httpx.get(url + "/healthz", timeout=10).json()
            assert health["backend"] == backend and health["precision"] == "fp32"
            answers[backend] = httpx.post(url + "/grade", json=body, timeout=30).json()["results"]
    assert [r["grade"] for r in answers["openvino"]] == [r["grade"] for r in answers["onnxruntime"]]
    assert np.allclose([r["expected_grade"] for r in answers["openvino"]],
                       [r["expected_grade"] for r in answers["onnxruntime"]], atol=1e-4)
    assert [r["grade"] for r in answers["openvino"]] == Grader(both, backend="openvino").grade(pairs).grades.tolist()


def test_a_score_grader_on_openvino_equals_pytorch_and_its_int8_gate_judges_ranking(tmp_path, one_thread):
    """A one-score reranker (sigmoid, like a CrossEncoder; a 0-head layer): the OpenVINO fp32 graph scores as PyTorch,
    and NNCF INT8 graphs are judged on within-query pair order against the fp32 graph, as the ONNX INT8 gate is."""
    from headcut.data_spec import as_scores
    from headcut.evaluate.ranking import ranking_agreement
    from headcut.export.quantize import Int8Gate
    from headcut_grader.grader import Scores
    from headcut_grader.tasks import score_values

    tokenizer = tiny_tokenizer(tmp_path / "tok")
    model = tiny_model("bert", num_labels=1, vocab_size=len(tokenizer), max_position_embeddings=128,
                       initializer_range=0.2)
    keep_heads(model, [[0, 2], []])
    loaded = LoadedModel(model, tokenizer, {"task": "score", "activation": "sigmoid", "max_length": 64}, "tiny",
                         "0" * 16)
    pairs = as_scores(synthetic_pairs(120))
    lenient = Int8Gate(min_agreement=0.0, max_spearman_drift=1.0, max_drop=100.0, min_speed_vs_fp32=0.0)
    record = build_grader(loaded, tmp_path / "grader", pairs=pairs, backend="openvino", precision="int8", gate=lenient,
                          threads=1)
    ov = record["openvino"]
    assert record["task"] == "score" and ov["parity"]["fp32"]["max_abs_diff"] <= FP32_TOLERANCE
    fp32 = Grader(tmp_path / "grader", backend="onnxruntime").grade(pairs)  # the fp32 ONNX graph shipped beside it
    want = score_values(pytorch_logits(loaded, pairs), "sigmoid")
    assert isinstance(fp32, Scores) and np.abs(fp32.scores - want).max() <= FP32_TOLERANCE
    assert np.ptp(want) > 1e-3  # scores differ between pairs, so the checks can fail
    assert ov["precision"] in ("int8", "int8-bf16") and ov["choice"]["chosen"].startswith("int8")
    chosen = next(t for t in ov["choice"]["trials"] if t["choice"] == ov["choice"]["chosen"])
    got = Grader(tmp_path / "grader", backend="openvino").grade(pairs)
    assert isinstance(got, Scores)
    terms = ranking_agreement(got.scores, want, pairs.query_groups())
    assert chosen["agreement"] == pytest.approx(np.nansum(terms["same"]) / np.nansum(terms["pairs"]), abs=0.01)
    assert chosen["accuracy_drop"] != chosen["agreement"]  # judged on pair accuracy vs the gold, not grades
    strict = Int8Gate(min_agreement=1.0, max_spearman_drift=0.0, max_drop=0.0, min_speed_vs_fp32=100.0)
    folder = tmp_path / "strict"
    from headcut.export.export import GateError

    with pytest.raises(GateError, match="no OpenVINO int8 graph passes the gate"):
        build_grader(loaded, folder, pairs=pairs, backend="openvino", precision="int8", gate=strict, threads=1)


def test_an_openvino_score_grader_in_fp32_equals_pytorch_within_1e4(tmp_path, one_thread):
    from headcut.data_spec import as_scores
    from headcut_grader.tasks import score_values

    tokenizer = tiny_tokenizer(tmp_path / "tok")
    model = tiny_model("bert", num_labels=1, vocab_size=len(tokenizer), max_position_embeddings=128,
                       initializer_range=0.2)
    loaded = LoadedModel(model, tokenizer, {"task": "score", "activation": "identity", "max_length": 64}, "t", "0" * 16)
    pairs = as_scores(synthetic_pairs(60, seed=4))
    build_grader(loaded, tmp_path / "grader", pairs=pairs, backend="openvino", threads=1)
    got = Grader(tmp_path / "grader", backend="openvino").grade(pairs).scores
    want = score_values(pytorch_logits(loaded, pairs), "identity")
    assert np.ptp(want) > 1e-3 and np.abs(got - want).max() <= 1e-4


def test_a_resume_on_the_other_backend_names_the_backend_that_continues_it(both, tmp_path):
    """Was: 'the interrupted run used another grader; resume with the same GRADER_DIR' to a resume of that same folder
    on its other graph (another --backend); and a run of --backend auto could not be resumed by the runtime auto had
    chosen (the state's 'auto' refused --backend openvino, while auto may choose otherwise on the next run)."""
    from test_grade_file import grade, stopped_at_row_100

    source = stopped_at_row_100(both, tmp_path, "--backend", "onnxruntime")
    resumed = grade(both, source, "--out", tmp_path / "o.tsv", "--chunk-rows", "100", "--resume",
                    "--backend", "openvino")
    assert resumed.exit_code == 2 and resumed.output.endswith(
        "the interrupted run graded with this grader's onnxruntime graph, and this run with its openvino one; resume "
        "with --backend onnxruntime, or run without --resume and with --overwrite.\n"), resumed.output
    auto = tmp_path / "auto"
    auto.mkdir()
    source = stopped_at_row_100(both, auto)  # --backend auto
    chosen = Grader(both).backend.name
    resumed = grade(both, source, "--out", auto / "o.tsv", "--chunk-rows", "100", "--resume", "--backend", chosen)
    assert resumed.exit_code == 0 and "100 of them by the interrupted run" in resumed.output, resumed.output
    whole = grade(both, source, "--out", auto / "whole.tsv", "--chunk-rows", "100", "--backend", chosen)
    assert whole.exit_code == 0 and (auto / "o.tsv").read_bytes() == (auto / "whole.tsv").read_bytes()


def test_opening_the_openvino_graph_looks_for_openvino_once(both, monkeypatch):
    """Was: open_backend looked for the openvino package, then the opener's openvino_core looked for it again."""
    from headcut_grader import backends

    looked = []
    real = backends.optional_module
    monkeypatch.setattr(backends, "optional_module", lambda name: looked.append(name) or real(name))
    assert Grader(both, backend="openvino").backend.name == "openvino"
    assert looked == ["openvino"]
