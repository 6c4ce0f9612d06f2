"""ONNX export: parity on every architecture and on pruned shapes, the gate failing loudly, safe fusion."""
from __future__ import annotations

import json
import sys
import types

import headcut

import numpy as np
import onnx
import pytest
import torch

from conftest import HOMEDEPOT, need_homedepot, need_minilm, tiny_model
from headcut.arch import heads_per_layer, keep_heads, keep_layers, keep_neurons, layer_parts
from headcut_grader.data import read_pairs
from headcut.synthetic import synthetic_pairs
from headcut_grader.errors import UserError
from headcut.export import FP32_TOLERANCE, Int8Gate, ParityError, build_grader, check_parity, export_onnx, parity
from headcut.export.export import gate_batches, input_names, reference_logits, session
from headcut.export.optimize import optimize_graph
from headcut.export.quantize import (FFN_OUT, Int8Choice, Int8Trial, fastest_passing, fp32_nodes, outlier_scores,
                                    quantize_int8, resolve)
from headcut.models import LoadedModel, load_model, save_model

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def tiny_tokenizer(folder):
    """A WordPiece tokenizer over the synthetic data's words (so tiny models see real-looking ids)."""
    from transformers import BertTokenizerFast

    from tokenizers.pre_tokenizers import BertPreTokenizer

    pairs = synthetic_pairs(400)
    split = BertPreTokenizer().pre_tokenize_str  # words as the tokenizer splits them ("gal." is "gal", ".")
    words = sorted({w for text in pairs.queries + pairs.titles for w, _ in split(text.lower())})
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join(SPECIAL + words) + "\n")
    return BertTokenizerFast(str(folder / "vocab.txt"))  # positional: transformers 5 ignores vocab_file=


def test_the_tiny_tokenizer_knows_the_synthetic_words(tmp_path):
    """Was: built with vocab_file=, which transformers 5 ignores: 5 tokens, every word [UNK] in tiny-model tests."""
    tok = tiny_tokenizer(tmp_path)
    pairs = synthetic_pairs(400)  # the pairs its vocabulary was made from
    ids = tok(pairs.queries, pairs.titles)["input_ids"]
    assert len(tok) > 50 and tok.unk_token_id not in {i for row in ids for i in row}


# a gate no INT8 graph passes, within every limit's range (an out-of-range one is refused before any work)
IMPOSSIBLE_GATE = Int8Gate(min_speed_vs_fp32=1e9)


def make_tiny_grader(tmp_path, *, int8: bool = False, keep=None, gate=None, **build):
    """A grader folder from a tiny pruned BERT (uneven heads, a 0-head layer) and its tokenizer."""
    tokenizer = tiny_tokenizer(tmp_path / "tok")
    model = tiny_model("bert", vocab_size=len(tokenizer), max_position_embeddings=128, initializer_range=0.2)
    keep_heads(model, keep if keep is not None else [[0, 2], []])
    loaded = LoadedModel(model, tokenizer, {"grades": [1, 2, 3, 4, 5], "max_length": 64}, "tiny", "0" * 16)
    gate = gate or Int8Gate(min_agreement=0.0, max_spearman_drift=1.0, max_drop=100.0, min_speed_vs_fp32=0.0)
    record = build_grader(loaded, tmp_path / "grader", pairs=synthetic_pairs(120), int8=int8, gate=gate, **build)
    return tmp_path / "grader", loaded, record


def _parity(model, path, tokenizer=None, pairs=None, max_length=64):
    batches = gate_batches(model, tokenizer, pairs, max_length=max_length)
    return parity(reference_logits(model, batches), session(path), batches)


@pytest.mark.parametrize("kind", ["bert", "distilbert", "roberta", "electra", "deberta-v2", "modernbert"])
def test_fp32_parity_every_architecture(tmp_path, kind):
    model = tiny_model(kind, attn="sdpa")
    result = _parity(model, export_onnx(model, tmp_path / "m.onnx"))
    assert result.max_abs_diff <= FP32_TOLERANCE and result.agreement == 1.0
    assert [1, 8] in result.shapes and [8, 62 if kind == "roberta" else 64] in result.shapes  # dynamic axes


@pytest.mark.parametrize("kind", ["bert", "distilbert", "roberta", "electra"])
def test_fused_attention_is_one_op_per_layer_with_its_own_heads_and_honours_padding(tmp_path, kind):
    layers = {"n_layers": 3} if kind == "distilbert" else {"num_hidden_layers": 3}
    model = tiny_model(kind, attn="sdpa", initializer_range=0.5, **layers)  # peaky attention: padding shows
    keep_heads(model, [[0, 2], [], [0, 1, 3]])
    graph = onnx.load(str(export_onnx(model, tmp_path / "m.onnx"))).graph
    fused = [n for n in graph.node if n.op_type == "MultiHeadAttention"]
    assert [next(a.i for a in n.attribute if a.name == "num_heads") for n in fused] == [2, 3]
    assert not [n for n in graph.node if n.op_type == "Softmax"]  # no attention left op by op
    names = input_names(model)
    g = torch.Generator().manual_seed(0)
    batches = []
    for batch, seq in ((4, 12), (7, 30)):
        mask = (torch.arange(seq)[None, :] < torch.randint(2, seq + 1, (batch,), generator=g)[:, None]).long()
        ids = torch.randint(5, model.config.vocab_size, (batch, seq), generator=g) * mask
        batches.append({k: v for k, v in {"input_ids": ids, "attention_mask": mask,
                                          "token_type_ids": torch.zeros_like(ids)}.items() if k in names})
    result = parity(reference_logits(model, batches), session(tmp_path / "m.onnx"), batches)
    assert result.max_abs_diff <= FP32_TOLERANCE and result.agreement == 1.0
    ignored = [{**b, "attention_mask": torch.ones_like(b["attention_mask"])} for b in batches]
    # ignoring padding moved logits by 3.1-8.7 here (seeded): a graph that drops the mask cannot pass
    assert parity(reference_logits(model, ignored), session(tmp_path / "m.onnx"), batches).max_abs_diff > 1.0


def test_pruned_and_distilled_shapes_export_after_save_and_load(tmp_path):
    tokenizer = tiny_tokenizer(tmp_path / "tok")
    model = tiny_model("bert", num_hidden_layers=3, vocab_size=len(tokenizer), initializer_range=0.2)
    keep_heads(model, [[1, 3], [], [0, 1, 2]])  # uneven heads and a layer with none
    keep_neurons(model, [list(range(20)), list(range(37)), list(range(5))])  # narrowed FFNs
    keep_layers(model, [0, 1])  # a shallower (distilled-student-like) model
    save_model(LoadedModel(model, tokenizer, {}, "tiny", ""), tmp_path / "pruned")
    loaded = load_model(tmp_path / "pruned", attn_implementation="sdpa")
    assert heads_per_layer(loaded.model) == [2, 0]
    result = _parity(loaded.model, export_onnx(loaded.model, tmp_path / "m.onnx"), loaded.tokenizer,
                     synthetic_pairs(64))
    assert result.max_abs_diff <= FP32_TOLERANCE and result.agreement == 1.0
    assert result.rows == 64 + 14  # real pairs + the random shapes


def test_gate_fails_loudly_on_a_different_graph(tmp_path):
    model, other = tiny_model("bert", seed=0), tiny_model("bert", seed=1)
    batches = gate_batches(model, None, None, max_length=32)
    bad = parity(reference_logits(model, batches), session(export_onnx(other, tmp_path / "o.onnx")), batches)
    assert bad.max_abs_diff > 1e-3
    with pytest.raises(ParityError, match="fails the parity gate"):
        check_parity(bad, what="the test graph")


def test_global_head_count_fusion_is_caught_on_uneven_heads(tmp_path):
    # initializer_range=0.5 makes attention peaky, so regrouping heads changes the output visibly
    model = tiny_model("bert", initializer_range=0.5)
    full_path = export_onnx(model, tmp_path / "full.onnx", fuse=False)  # the op-by-op graph ORT's fusion reads
    info = optimize_graph(full_path, tmp_path / "full.opt.onnx", hidden_size=32, heads_per_layer=[4, 4])
    assert info["attention_fused"] and info["fused_ops"]["Attention"] == 2
    assert _parity(model, tmp_path / "full.opt.onnx").max_abs_diff <= FP32_TOLERANCE

    keep_heads(model, [[0, 2], [1, 2, 3]])
    path = export_onnx(model, tmp_path / "uneven.onnx", fuse=False)
    optimize_graph(path, tmp_path / "forced.onnx", hidden_size=32, heads_per_layer=[2, 3], num_heads=4)
    with pytest.raises(ParityError):
        check_parity(_parity(model, tmp_path / "forced.onnx"), what="attention fused with 4 heads")
    info = optimize_graph(path, tmp_path / "safe.onnx", hidden_size=32, heads_per_layer=[2, 3])
    assert not info["attention_fused"] and info["fused_ops"]["SkipLayerNormalization"] > 0
    assert _parity(model, tmp_path / "safe.onnx").max_abs_diff <= FP32_TOLERANCE


def test_an_optimised_graph_that_fails_parity_names_the_callers_way_out(tmp_path, monkeypatch):
    """Was: 'the ORT-optimised graph (drop --optimize) fails the parity gate' from build_grader(optimize=True) too,
    naming a flag a Python caller does not have; now optimize=False there, and `headcut export` still says
    --optimize."""
    from typer.testing import CliRunner

    from headcut.cli.main import app
    import headcut.export.build as build

    def other_graph(fp32, out, **_):  # another model's graph: outputs far from the exported model's
        other = tiny_model("bert", vocab_size=len(tiny_tokenizer(tmp_path / "tok")), max_position_embeddings=128,
                           initializer_range=0.2, seed=1)
        export_onnx(other, out)
        return {"attention_fused": False}

    monkeypatch.setattr(build, "optimize_graph", other_graph)
    with pytest.raises(ParityError, match=r"^the ORT-optimised graph \(pass optimize=False\) fails the parity gate"):
        make_tiny_grader(tmp_path, optimize=True)
    _, loaded, _ = make_tiny_grader(tmp_path / "plain")
    model = save_model(loaded, tmp_path / "model")
    result = CliRunner().invoke(app, ["export", str(model), "--out", str(tmp_path / "cli"), "--optimize"])
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert "the ORT-optimised graph (drop --optimize) fails the parity gate" in " ".join(result.output.split())


def test_build_grader_folder_and_refusals(tmp_path):
    folder, loaded, record = make_tiny_grader(tmp_path, int8=True, optimize=True)
    assert sorted(p.name for p in folder.glob("*.onnx")) == ["model.onnx"]  # no leftovers
    assert {"grader.json", "README.md", "tokenizer.json"} <= {p.name for p in folder.iterdir()}
    saved = json.loads((folder / "grader.json").read_text())
    assert (saved["precision"] == "int8" and saved["max_length"] == 64
            and saved["headcut_version"] == headcut.__version__)
    assert saved["input_names"] == ["input_ids", "attention_mask", "token_type_ids"]
    assert saved["source"]["heads_per_layer"] == [2, 0]
    assert saved["parity"]["fp32"]["max_abs_diff"] <= FP32_TOLERANCE
    assert saved["optimized"]["attention_fused"] is False  # uneven heads: attention left unfused
    assert len(saved["int8"]["trials"]) == 5 and saved["int8"]["chosen"]["passes"]
    assert saved["accuracy"]["data"]["rows"] == 120
    assert "INT8" in (folder / "README.md").read_text()
    with pytest.raises(UserError, match="not empty"):
        build_grader(loaded, folder)
    with pytest.raises(UserError, match="^int8=True needs labelled pairs"):
        build_grader(loaded, tmp_path / "x", int8=True)
    with pytest.raises(ParityError, match="no INT8 recipe passes"):
        build_grader(loaded, tmp_path / "strict", pairs=synthetic_pairs(60), int8=True,
                     gate=IMPOSSIBLE_GATE)
    assert not (tmp_path / "strict").exists()  # nothing written when a gate fails


def test_auto_with_no_int8_recipe_passing_ships_fp32_and_records_the_trials_that_chose_it(tmp_path):
    """Was: precision='auto' shipped fp32 when no INT8 recipe passed and recorded nothing of the INT8 graphs it timed
    (grader.json "int8": null), so a run's report could not show the timings that chose fp32."""
    from headcut.export.card import runtime_record

    folder, _, record = make_tiny_grader(tmp_path, precision="auto", gate=IMPOSSIBLE_GATE)
    saved = json.loads((folder / "grader.json").read_text())
    assert saved["precision"] == "fp32" and saved["int8"] is None
    rejected = saved["int8_rejected"]
    assert rejected["chosen"] is None and len(rejected["trials"]) == 5
    assert not any(t["passes"] for t in rejected["trials"])
    shipped = runtime_record(saved, "onnxruntime", "the only graph")["graphs"]["onnxruntime"]
    assert shipped["chosen"] == "fp32" and [c["graph"] for c in shipped["candidates"]][0] == "fp32"
    assert [c["ms"] for c in shipped["candidates"][1:]] == [1000 * t["seconds"] for t in rejected["trials"]]


class FailsToImport:
    """A meta path finder under which importing module `name` raises the RuntimeError a broken install raises."""

    def __init__(self, name: str):
        self.name = name

    def find_spec(self, name, path=None, target=None):
        if name == self.name:
            raise RuntimeError("no CPU plugin\nmore")


@pytest.mark.parametrize("openvino", ["missing", "broken"])
def test_headcut_export_auto_without_a_usable_openvino_exports_onnx_runtime_alone_and_says_why(tmp_path, monkeypatch,
                                                                                               openvino):
    """Was: the fallback lived in the run's checks alone, so `headcut export --backend auto` without OpenVINO was
    refused ('an OpenVINO export needs the openvino package') and with one whose import failed ended in its
    traceback. The export library decides it (runtimes.export_backend): ONNX Runtime's graph alone, grader.json's
    backend onnxruntime, and the command says why; bf16, which needs OpenVINO, is refused saying so."""
    from typer.testing import CliRunner

    from headcut.cli.main import app
    from headcut.export import build
    from headcut.export.runtimes import ExportBackend, export_backend

    tokenizer = tiny_tokenizer(tmp_path / "tok")
    model = tiny_model("bert", vocab_size=len(tokenizer), max_position_embeddings=128)
    loaded = LoadedModel(model, tokenizer, {"grades": [1, 2, 3, 4, 5], "max_length": 64}, "tiny", "0" * 16)
    folder = save_model(loaded, tmp_path / "model")

    monkeypatch.delitem(sys.modules, "openvino", raising=False)
    if openvino == "missing":
        monkeypatch.setitem(sys.modules, "openvino", None)
    else:
        monkeypatch.setattr(sys, "meta_path", [FailsToImport("openvino"), *sys.meta_path])
    monkeypatch.setitem(sys.modules, "nncf", types.ModuleType("nncf"))  # NNCF usable: OpenVINO alone is said
    said = ("OpenVINO is not installed here" if openvino == "missing" else
            "OpenVINO fails to import here (RuntimeError: no CPU plugin)")
    assert export_backend("auto", "fp32") == ExportBackend("onnxruntime", f"backend=auto: {said}, so ONNX Runtime "
                                                                          "alone (pip install 'headcut[openvino]' for "
                                                                          "both)")
    decided = []
    monkeypatch.setattr(build, "export_backend", lambda *args, **kwargs: decided.append(args) or
                        export_backend(*args, **kwargs))
    result = CliRunner().invoke(app, ["export", str(folder), "--out", str(tmp_path / "grader"), "--backend", "auto"])
    assert result.exit_code == 0, result.output
    assert f"--backend auto: {said}, so ONNX Runtime alone (pip install 'headcut[openvino]' for both)" in \
        result.output.splitlines()
    # decided once per headcut export: its check before the model loads is the choice build_grader builds
    assert decided == [("auto", "fp32")]
    saved = json.loads((tmp_path / "grader" / "grader.json").read_text())
    assert saved["backend"] == "onnxruntime" and saved["openvino"] is None
    # the reason the command printed is the export's own, decided once and recorded beside backend
    assert saved["backend_alone"] == (f"--backend auto: {said}, so ONNX Runtime alone (pip install "
                                      "'headcut[openvino]' for both)")
    decided.clear()
    build.build_grader(loaded, tmp_path / "again", backend="auto")
    assert decided == [("auto", "fp32")]
    with pytest.raises(UserError) as caught:  # a choice made for another export is not built
        build.build_grader(loaded, tmp_path / "other", backend="onnxruntime", choice=build.choose_export("auto", None))
    assert str(caught.value) == ("build_grader choice was made for backend='auto', precision=None, int8=False, and "
                                 "this call asks for backend='onnxruntime', precision=None, int8=False; pass "
                                 "choose_export(...) of this call's, or no choice.")
    assert not (tmp_path / "other").exists()
    refused = CliRunner().invoke(app, ["export", str(folder), "--out", str(tmp_path / "bf16"), "--backend", "auto",
                                       "--precision", "bf16"])
    assert refused.exit_code == 2 and refused.output == (f"error: --precision bf16 needs OpenVINO, and {said}; pip "
                                                         "install 'headcut[openvino]', or choose another precision.\n")


def test_a_choice_made_for_the_same_precision_spelled_otherwise_is_built():
    """Was: build_grader compared its choice's raw arguments with the call's, so choose_export("onnxruntime",
    "int8") passed to build_grader(int8=True) (the same precision, spelled otherwise) was refused. The precisions
    asked for are compared; a call whose int8=True and precision disagree is still refused."""
    from headcut.export import build

    choice = build.choose_export("onnxruntime", "int8")
    assert build.checked_choice(choice, "onnxruntime", None, int8=True, names="arguments") is choice
    assert build.checked_choice(build.choose_export("onnxruntime", None, int8=True), "onnxruntime", "int8",
                                int8=False, names="arguments").precisions == ("int8", None)
    with pytest.raises(UserError, match="^int8=True and precision=fp32 disagree; pass one of them.$"):
        build.checked_choice(build.choose_export("onnxruntime", "fp32"), "onnxruntime", "fp32", int8=True,
                             names="arguments")
    with pytest.raises(UserError, match="^build_grader choice was made for backend='onnxruntime', precision='int8'"):
        build.checked_choice(choice, "onnxruntime", "fp32", int8=False, names="arguments")

@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_auto_at_fp32_or_bf16_builds_openvino_s_graph_without_nncf(monkeypatch, precision):
    """NNCF judges OpenVINO's INT8 graphs alone. Was: backend auto counted it as needed at every precision, so with
    OpenVINO usable and NNCF missing an fp32 export dropped the OpenVINO graph, and bf16 was refused '--precision
    bf16 needs OpenVINO, and NNCF (which judges OpenVINO's INT8 graphs) is not installed here'."""
    from headcut.export.build import choose_export
    from headcut.export.runtimes import ExportBackend, export_backend

    monkeypatch.setitem(sys.modules, "openvino", types.ModuleType("openvino"))
    monkeypatch.setitem(sys.modules, "nncf", None)
    assert export_backend("auto", precision) == ExportBackend("auto")
    assert choose_export("auto", precision, int8=False, names="flags").precisions == ("fp32", precision)
    for needs_nncf in ("int8", "auto"):
        assert export_backend("auto", needs_nncf, names="flags") == ExportBackend(
            "onnxruntime", "--backend auto: NNCF (which judges OpenVINO's INT8 graphs) is not installed here, so ONNX "
                           "Runtime alone (pip install 'headcut[openvino]' for both)")
    monkeypatch.setitem(sys.modules, "openvino", None)  # bf16 names what it needs alone
    with pytest.raises(UserError) as caught:
        choose_export("auto", "bf16", int8=False, names="flags")
    assert str(caught.value) == ("--precision bf16 needs OpenVINO, and OpenVINO is not installed here; pip install "
                                 "'headcut[openvino]', or choose another precision.")


@pytest.mark.parametrize("part, state", [("openvino", "missing"), ("openvino", "broken"), ("nncf", "broken")])
def test_an_openvino_export_without_a_usable_openvino_or_nncf_says_why_and_what_to_install(tmp_path, monkeypatch,
                                                                                            part, state):
    """Was: `headcut export --backend openvino` where OpenVINO's import failed (or NNCF's, for its INT8 graphs) ended
    in that error's traceback, and a missing OpenVINO was told the runtime's extra (pip install
    'headcut-grader[openvino]'), which brings no NNCF. Now one sentence: what needs it, why it cannot be used here,
    and the export's extra."""
    from typer.testing import CliRunner

    from headcut.cli.main import app
    from headcut.export.build_openvino import check_request

    for name in ("openvino", "nncf"):
        monkeypatch.delitem(sys.modules, name, raising=False)
        if name != part:  # the other one usable
            monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    if state == "missing":
        monkeypatch.setitem(sys.modules, part, None)
    else:
        monkeypatch.setattr(sys, "meta_path", [FailsToImport(part), *sys.meta_path])
    why = "is not installed here" if state == "missing" else "fails to import here (RuntimeError: no CPU plugin)"
    if part == "nncf":
        with pytest.raises(UserError) as caught:
            check_request("int8", labelled=True, names="flags")
        assert str(caught.value) == (f"--precision int8 on OpenVINO needs NNCF, which {why}; run: pip install "
                                     "'headcut[openvino]'.") and caught.value.about == ("precision",)
        return
    tokenizer = tiny_tokenizer(tmp_path / "tok")
    model = tiny_model("bert", vocab_size=len(tokenizer), max_position_embeddings=128)
    loaded = LoadedModel(model, tokenizer, {"grades": [1, 2, 3, 4, 5], "max_length": 64}, "tiny", "0" * 16)
    folder = save_model(loaded, tmp_path / "model")
    result = CliRunner().invoke(app, ["export", str(folder), "--out", str(tmp_path / "grader"), "--backend",
                                      "openvino"])
    assert result.exit_code == 2 and result.output == (f"error: an OpenVINO export needs the openvino package, which "
                                                       f"{why}; run: pip install 'headcut[openvino]'.\n")
    assert not (tmp_path / "grader").exists()


def test_the_fp32_graph_s_time_is_the_one_the_int8_choice_measured(tmp_path):
    """Was: grader.json kept the ONNX Runtime fp32 graph's time only inside each INT8 trial's speed_vs_fp32, so the
    report's timings derived it (the first trial's seconds x speed_vs_fp32). The INT8 choice records "fp32_seconds",
    as OpenVINO's choice does, and the report reads it; a grader.json written before is derived as before; the
    torch-free runtime reads a folder with the key."""
    import copy

    from headcut.export.card import runtime_record
    from headcut_grader.grader import Grader, record_problem

    folder, _, _ = make_tiny_grader(tmp_path, precision="auto")
    saved = json.loads((folder / "grader.json").read_text())
    int8 = saved["int8"]
    assert int8["fp32_seconds"] > 0
    assert all(t["speed_vs_fp32"] == pytest.approx(int8["fp32_seconds"] / t["seconds"]) for t in int8["trials"])

    def fp32_candidate(record: dict) -> dict:
        return runtime_record(record, "onnxruntime", "the only graph")["graphs"]["onnxruntime"]["candidates"][0]

    assert fp32_candidate(saved) == {"graph": "fp32", "ms": 1000 * int8["fp32_seconds"], "passes": None}
    recorded = copy.deepcopy(saved)
    recorded["int8"]["fp32_seconds"] = 7.0  # read as recorded, not worked back from the trials
    assert fp32_candidate(recorded)["ms"] == 7000.0
    older = copy.deepcopy(saved)
    del older["int8"]["fp32_seconds"]
    first = int8["trials"][0]
    assert fp32_candidate(older)["ms"] == pytest.approx(1000 * first["seconds"] * first["speed_vs_fp32"])
    assert record_problem(saved) is None
    assert Grader(folder).grade([("cordless drill", "Acme 20-volt cordless drill")]).grades.shape == (1,)


def test_headcut_export_prints_the_int8_trials_auto_rejected(tmp_path):
    """Was: `headcut export --precision auto` printed the INT8 trials only when one was chosen, so where none passed
    the gate and fp32 shipped it said nothing of the graphs it timed and why they failed; now it prints them."""
    from headcut.cli.export import format_record

    folder, _, _ = make_tiny_grader(tmp_path, precision="auto", gate=IMPOSSIBLE_GATE)
    printed = format_record(json.loads((folder / "grader.json").read_text())).splitlines()
    trials = json.loads((folder / "grader.json").read_text())["int8_rejected"]["trials"]
    assert any(line.startswith("INT8 recipe") for line in printed)
    for trial in trials:
        row = next(line for line in printed if line.startswith(trial["choice"] + " "))
        assert row.endswith(f"{trial['speed_vs_fp32']:>6.2f}x  -")
    assert "chosen: fp32 (no INT8 recipe passed the gate)" in printed


def test_the_fastest_passing_int8_recipe_is_chosen_not_the_fastest():
    gate = Int8Gate()  # the default gate: agreement >= 97%, |Spearman drift| <= 0.005, >= 1.15x the fp32 graph

    def trial(name, agreement, seconds, drift=0.0):  # the fp32 graph takes 0.02 s
        t = Int8Trial(name, agreement, drift, 0.0, 0.01, seconds, speed_vs_default=0.010 / seconds,
                      speed_vs_fp32=0.020 / seconds)
        t.passes = gate.passes(t)
        return t

    trials = [trial("default", 0.90, 0.010), trial("fast-but-off", 0.96, 0.006), trial("drifts", 0.99, 0.007, 0.01),
              trial("right", 0.98, 0.0095), trial("slower-right", 0.99, 0.0105), trial("too-slow", 1.0, 0.02),
              trial("slower-than-default-int8", 0.99, 0.014)]  # 0.71x the default INT8, 1.43x fp32: still worth it
    assert [t.passes for t in trials] == [False, False, False, True, True, False, True]
    assert fastest_passing(trials).choice == "right"
    assert fastest_passing(trials[:3]) is None


def test_build_grader_keeps_the_fastest_int8_graph_that_passes_a_discriminating_gate(tmp_path, monkeypatch):
    _, _, loose = make_tiny_grader(tmp_path / "loose", int8=True)
    trials = loose["int8"]["trials"]
    drifts = sorted({round(abs(t["spearman_drift"]), 6) for t in trials})
    assert len(drifts) > 1, "every INT8 recipe drifts alike here: no gate on drift can tell them apart"
    limit = (drifts[0] + drifts[-1]) / 2  # some recipes pass, some fail
    failing = {t["choice"] for t in trials if abs(t["spearman_drift"]) > limit}
    # Timings made up so that every failing graph is faster than every passing one: choosing the fastest
    # graph, or the fastest that passes, now give different answers.
    seconds = [(0.001 if t["choice"] in failing else 0.01) * (1 + i) for i, t in enumerate(trials)] + [1.0]  # fp32
    monkeypatch.setattr("headcut.export.build.round_robin", lambda runs, batch, **_: [[s] * 10 for s in seconds])
    gate = Int8Gate(min_agreement=0.0, max_spearman_drift=limit, max_drop=100.0, min_speed_vs_fp32=0.0)
    record = make_tiny_grader(tmp_path / "strict", int8=True, gate=gate)[2]["int8"]
    assert [t["passes"] for t in record["trials"]] == [t["choice"] not in failing for t in trials]
    assert 0 < len(failing) < len(trials)
    assert record["chosen"]["choice"] == next(t["choice"] for t in trials if t["choice"] not in failing)


@pytest.mark.parametrize("kind", ["bert", "distilbert"])
def test_outlier_calibration_keeps_the_right_ffn_projection_in_fp32(tmp_path, kind):
    model = tiny_model(kind, num_hidden_layers=3)
    layer = layer_parts(model)[1]
    with torch.no_grad():  # one huge input channel into layer 1's FFN down-projection = an outlier
        layer.ffn_in.weight[3] *= 300.0
    batches = gate_batches(model, None, None, max_length=32)
    scores = outlier_scores(model, batches)
    assert int(np.argmax(scores)) == 1 and scores[1] > 3 * max(scores[0], scores[2])
    choice = resolve(Int8Choice("t", per_channel=True, outlier_ffn=1), model, batches)
    path = export_onnx(model, tmp_path / "m.onnx")
    kept = fp32_nodes(path, choice)
    assert len(kept) == 1 and "layer.1/" in kept[0] and ("output/dense" in kept[0] or "lin2" in kept[0])
    assert len(fp32_nodes(path, Int8Choice("all", keep_fp32=(FFN_OUT,)))) == 3  # attention output untouched
    quantized = session(quantize_int8(path, tmp_path / "q.onnx", calibration=batches, choice=choice))
    assert parity(reference_logits(model, batches), quantized, batches).max_abs_diff < 0.05


@pytest.mark.real
def test_pruned_minilm_exports_with_parity_on_real_pairs(tmp_path):
    need_minilm()
    need_homedepot()
    loaded = load_model("minilm-l6", num_labels=5)
    keep = [list(range(12)), [0, 3, 5], [], list(range(0, 12, 2)), [1], list(range(9))]
    keep_heads(loaded.model, keep)
    save_model(loaded, tmp_path / "pruned")
    loaded = load_model(tmp_path / "pruned")
    pairs = read_pairs(HOMEDEPOT / "dev.tsv", preset="homedepot").sample(96, seed=3)
    result = _parity(loaded.model, export_onnx(loaded.model, tmp_path / "m.onnx"), loaded.tokenizer, pairs, 128)
    assert result.max_abs_diff <= FP32_TOLERANCE and result.agreement == 1.0
    assert result.rows == 96 + 14


@pytest.mark.parametrize("kind", ["bert", "roberta", "distilbert"])
def test_gate_inputs_reach_the_longest_input_the_architecture_takes(kind):
    from headcut.arch import usable_positions

    model = tiny_model(kind, max_position_embeddings=32)
    batches = gate_batches(model, None, None, max_length=128)
    longest = max(b["input_ids"].shape[1] for b in batches)
    assert longest == usable_positions(model.config) == (30 if kind == "roberta" else 32)
    reference_logits(model, batches)  # every gate input fits the position embeddings


@pytest.mark.parametrize("fuse", [True, False])
def test_export_leaves_the_model_in_the_mode_it_found(tmp_path, fuse):
    """torch.onnx.export restores its wrapper's mode; a new wrapper is in training mode, which once switched
    the model's dropout on after every export (logits 0.03 off on MiniLM until someone called eval())."""
    model = tiny_model("bert")
    export_onnx(model, tmp_path / "m.onnx", fuse=fuse)
    assert not model.training and not any(m.training for m in model.modules())
    model.train()
    export_onnx(model, tmp_path / "t.onnx", fuse=fuse)
    assert model.training


@pytest.mark.real
@pytest.mark.slow
def test_int8_gate_refuses_grades_that_depend_on_the_batch(quick_teacher, tmp_path):
    """Per-batch activation scales (ORT's dynamic quantisation) move a pair's grade with its neighbours, and
    the gate refuses them; every shipped recipe grades a pair alone exactly as inside a mixed batch."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from headcut.batching import encode
    from headcut.export.quantize import CHOICES, batch_dependence

    loaded = load_model(quick_teacher)
    pairs = read_pairs(HOMEDEPOT / "dev.tsv", preset="homedepot").sample(300, seed=5)
    encoded = encode(loaded.tokenizer, pairs, max_length=64, model=loaded.model)
    fp32 = export_onnx(loaded.model, tmp_path / "fp32.onnx")
    dynamic = tmp_path / "dynamic.onnx"
    quantize_dynamic(str(fp32), str(dynamic), weight_type=QuantType.QInt8, per_channel=True)
    changes, drift = batch_dependence(session(dynamic), encoded, pairs.grades, rows=128)
    # measured: 14 of 600 dev grades changed, up to 0.38 expected grade; 0.05 is far above float rounding
    assert drift > 0.05, f"dynamic INT8 moved an expected grade by only {drift:.4f} between batches"
    loose = Int8Gate(min_agreement=0.0, max_spearman_drift=1.0, max_drop=100.0, min_speed_vs_fp32=0.0)
    trial = Int8Trial("dynamic", 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, batch_changes=changes, batch_drift=drift)
    assert not loose.passes(trial)
    calibration = gate_batches(loaded.model, loaded.tokenizer, pairs, max_length=64)[:4]
    for choice in (CHOICES[0], CHOICES[-1]):  # fixed scales, per-row scales
        graph = quantize_int8(fp32, tmp_path / f"{choice.name}.onnx", calibration=calibration, choice=choice)
        changes, drift = batch_dependence(session(graph), encoded, pairs.grades, rows=128)
        assert changes == 0 and drift <= 1e-4, f"{choice.name}: {changes} grades changed, drift {drift:.4f}"


def test_an_int8_grader_grades_a_pair_alone_as_in_any_batch(tmp_path):
    """The runtime, on an INT8 grader the export shipped: grades one pair at a time equal grades in shuffled
    batches of 32 (mixed lengths, padded to the longest)."""
    from headcut_grader import Grader

    folder, _, record = make_tiny_grader(tmp_path, int8=True)
    assert record["precision"] == "int8"
    pairs = synthetic_pairs(96, seed=21)
    order = np.random.default_rng(0).permutation(len(pairs))
    shuffled = [(pairs.queries[i], pairs.titles[i]) for i in order]
    alone = Grader(folder, batch_size=1).grade(shuffled)
    batched = Grader(folder, batch_size=32).grade(shuffled)
    assert alone.grades.tolist() == batched.grades.tolist()
    assert np.max(np.abs(alone.expected - batched.expected)) <= 1e-5


@pytest.mark.parametrize("names", ["arguments", "keys", "flags"])
def test_an_export_names_its_settings_as_its_caller_wrote_them(tmp_path, names):
    """Was: build_grader(loaded, out, int8=True) said '--int8 needs labelled pairs; pass --data FILE', and a
    failed gate 'export without --int8, or relax --min-agreement/...', to a Python caller and to a run recipe (in
    its report's note) alike: flags neither passed."""
    from headcut.export.build import choose_export

    tokenizer = tiny_tokenizer(tmp_path / "tok")
    model = tiny_model("bert", vocab_size=len(tokenizer), max_position_embeddings=128, initializer_range=0.2)
    loaded = LoadedModel(model, tokenizer, {"grades": [1, 2, 3, 4, 5], "max_length": 64}, "tiny", "0" * 16)

    def refused(error=UserError, **kwargs):
        with pytest.raises(error) as caught:
            build_grader(loaded, tmp_path / "out", **kwargs, **({} if names == "arguments" else {"names": names}))
        message = str(caught.value)
        assert names == "flags" or "--" not in message, message
        return message

    int8, precision, data, more = {
        "arguments": ("int8=True", "precision=", "pairs=read_pairs(FILE)", "pass more pairs, or"),
        "keys": ("export.precision=int8", "export.precision=", "FILE", "pass more pairs (a larger export.rows), or"),
        "flags": ("--int8", "--precision ", "--data FILE", "pass more pairs (a larger --limit), or")}[names]
    assert refused(int8=True).startswith(f"{int8} needs labelled pairs") and f"pass {data}." in refused(int8=True)
    assert refused(precision="auto").startswith(f"{precision}auto ships the fastest precision")
    assert f"judges {precision}int8 against fp32 (it needs at least 20); {more} {precision}fp32." in refused(
        pairs=synthetic_pairs(5), precision="int8")
    with pytest.raises(UserError, match=f"^{int8} and {precision}bf16 disagree"):
        choose_export("onnxruntime", "bf16", int8=True, **({} if names == "arguments" else {"names": names}))
    from headcut.export.gate import gate_fix

    gate = IMPOSSIBLE_GATE
    assert refused(ParityError, pairs=synthetic_pairs(60), int8=True, gate=gate).endswith(
        f"; {gate_fix(names, int8=True)}.")
    relax = {"arguments": "relax gate.min_agreement/gate.max_spearman_drift/gate.max_drop",
             "keys": "relax export.min_agreement/export.max_spearman_drift/export.max_drop",
             "flags": "relax --min-agreement/--max-spearman-drift/--max-drop"}[names]
    assert gate_fix(names, int8=False) == f"export {precision}fp32, or {relax}"


@pytest.mark.parametrize("kwargs, words", [
    ({"threads": "2"}, "threads is '2'; it must be a whole number in [1, 256]."),
    ({"threads": 0}, "threads is 0; it must be a whole number in [1, 256]."),
    ({"opset": float("nan")}, "opset is nan; it must be a whole number in [14, 20]."),
    ({"opset": 9}, "opset is 9; it must be a whole number in [14, 20]."),
    ({"optimize": "no"}, "optimize is 'no'; pass True or False."),
    ({"int8": "no"}, "int8 is 'no'; pass True or False."),
    ({"max_length": "64"}, "max_length is '64'; it must be a whole number in [8, 8192]."),
    ({"max_length": -5}, "max_length is -5; it must be a whole number in [8, 8192]."),
    ({"max_length": 0}, "max_length is 0; it must be a whole number in [8, 8192]."),
    ({"gate": {"max_drop": 1}}, "gate is {'max_drop': 1}; pass a headcut.export.Int8Gate(...)."),
    ({"gate": Int8Gate(max_drop=float("nan"))},
     "Int8Gate(max_drop=nan): nan is not a finite number; it must be in [0, 100]."),
    ({"pairs": [("drill", "cordless drill")]}, "pairs is [('drill', 'cordless drill')]; pass headcut_grader.data."
                                               "read_pairs(FILE) or None."),
])
def test_build_grader_from_python_checks_its_arguments_before_any_work(tmp_path, kwargs, words):
    """Was: threads='2' pybind11's TypeError, opset=nan torch's UnsupportedOperatorError, pairs=[...] an
    AttributeError, and threads=0, optimize='no', gate={...} and a nan gate exported a grader anyway."""
    tokenizer = tiny_tokenizer(tmp_path / "tok")
    model = tiny_model("bert", vocab_size=len(tokenizer), max_position_embeddings=128)
    loaded = LoadedModel(model, tokenizer, {"grades": [1, 2, 3, 4, 5], "max_length": 64}, "tiny", "0" * 16)
    with pytest.raises(UserError) as caught:
        build_grader(loaded, tmp_path / "out", **kwargs)
    assert str(caught.value).startswith(words), str(caught.value)
    assert not (tmp_path / "out").exists()
