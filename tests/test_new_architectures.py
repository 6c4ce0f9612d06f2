"""DeBERTa-v2/v3 and ModernBERT end to end on tiny random configs: exact stubs and surgery, FLOPs of relative
positions, local windows and GLU pairs, a --flops 0.5 artifact that reloads and exports with parity, students,
the INT8 gate, and configs headcut refuses. (Masking, scans and tuning on them: the tests parametrised over
conftest.TINY and KINDS.)"""
from __future__ import annotations

import json
import re

import pytest
import torch
from typer.testing import CliRunner

from conftest import tiny_inputs, tiny_model
from headcut.arch import (encoder_layers, flops_per_pair, heads_per_layer, keep_heads, keep_neurons, layer_parts,
                          neurons_per_layer, unit_flops)
from headcut.cli.main import app
from headcut.synthetic import synthetic_pairs
from headcut.masking import head_mask, neuron_mask
from headcut.models import LoadedModel, load_model, save_model
from test_distill import tiny_tokenizer  # 97 words (test_export's gives 5 tokens under transformers 5)
from test_prune_cli import write_pairs

NEW = ["deberta-v2", "modernbert"]
pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: see conftest.one_thread
# every variant whose head slicing differs: DeBERTa's own relative-position projections (not shared with
# key/query) for both terms or one; ModernBERT with the biases its default config leaves out (the stubs keep them)
VARIANTS = {
    "deberta-v2 shared keys": ("deberta-v2", {}),
    "deberta-v2 own position projections": ("deberta-v2", dict(share_att_key=False)),
    "deberta-v2 c2p only, linear buckets": ("deberta-v2", dict(share_att_key=False, pos_att_type=["c2p"],
                                                              position_buckets=-1)),
    "modernbert": ("modernbert", {}),
    "modernbert with biases": ("modernbert", dict(attention_bias=True, mlp_bias=True, norm_bias=True)),
}
HEADS = [[0, 3], [], [1, 2, 3]]  # uneven, a 0-head middle layer
NEURONS = [list(range(0, 37, 3)), list(range(20)), []]  # uneven widths, a 0-neuron last layer


def deep(kind, **overrides):
    return tiny_model(kind, **{"initializer_range": 0.3, "num_hidden_layers": 3, **overrides})


def masks():
    hm, nm = torch.zeros(3, 4), torch.zeros(3, 37)
    for layer in range(3):
        hm[layer, HEADS[layer]] = 1
        nm[layer, NEURONS[layer]] = 1
    return hm, nm


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_surgery_equals_masking_with_a_0_head_and_a_0_neuron_layer(variant):
    kind, overrides = VARIANTS[variant]
    model = deep(kind, **overrides)
    inputs = tiny_inputs(kind=kind, length=13)  # longer than ModernBERT's 8-token local window
    hm, nm = masks()
    with torch.no_grad():
        full = model(**inputs).logits
        with head_mask(model, hm), neuron_mask(model, nm):
            masked = model(**inputs).logits
        keep_heads(model, HEADS)
        keep_neurons(model, NEURONS)
        sliced = model(**inputs).logits
    assert heads_per_layer(model) == [2, 0, 3] and neurons_per_layer(model) == [13, 20, 0]
    assert (full - masked).abs().max() > 1e-2  # the cut units matter, so the check below can fail
    assert (sliced - masked).abs().max() <= 1e-5


def test_modernbert_0_head_and_0_neuron_stubs_add_the_output_bias_to_the_residual():
    """Pre-norm: a layer is x + attn(norm(x)), then y + mlp(norm(y)); with no units each sublayer adds its
    output projection's bias and nothing else (no norm on the residual, unlike BERT's LayerNorm(x + b))."""
    model = deep("modernbert", attention_bias=True, mlp_bias=True)
    layer = encoder_layers(model)[1]
    x = torch.randn(2, 5, 32, generator=torch.Generator().manual_seed(0))
    cos_sin = model.model.rotary_emb(x, torch.arange(5)[None], layer.attention_type)
    attention_bias, mlp_bias = layer.attn.Wo.bias.detach().clone(), layer.mlp.Wo.bias.detach().clone()
    with torch.no_grad():
        keep_heads(model, [list(range(4)), [], list(range(4))])
        keep_neurons(model, [list(range(37)), [], list(range(37))])
        got = layer(x, attention_mask=None, position_embeddings=cos_sin)
    torch.testing.assert_close(got, x + attention_bias + mlp_bias, rtol=0, atol=1e-6)


def test_modernbert_flops_count_the_local_window_and_both_glu_rows():
    model = deep("modernbert")  # layers: global, local (window 8 = 4 each side), global
    n, d, size, inter, labels = 13, 32, 8, 37, 5
    keys_local = sum(min(i + 4, n - 1) - max(i - 4, 0) + 1 for i in range(n))
    assert keys_local < n * n
    per_head = [2 * n * d * size * 3 + 2 * keys * size * 2 + 2 * n * size * d for keys in (n * n, keys_local, n * n)]
    per_neuron = 2 * n * d * 2 + 2 * n * d  # two rows of Wi (value and gate), one column of Wo
    costs = unit_flops(model, n)
    assert costs.per_head == per_head and costs.per_neuron == [per_neuron] * 3
    assert costs.fixed == 2 * d * d + 2 * d * labels  # the head's dense and the classifier, on one token
    assert flops_per_pair(model, n) == sum(4 * h for h in per_head) + 3 * inter * per_neuron + costs.fixed


def test_deberta_flops_count_both_disentangled_terms_per_head():
    model = deep("deberta-v2")  # 8 log buckets: 16 relative positions; c2p and p2c
    n, d, size, inter, labels, span = 10, 32, 8, 37, 5, 16
    plain = 2 * n * d * size * 3 + 2 * n * n * size * 2 + 2 * n * size * d
    relative = 2 * (2 * span * d * size + 2 * n * span * size)  # project the positions, score every query/key on them
    costs = unit_flops(model, n)
    assert costs.per_head == [plain + relative] * 3 and costs.per_neuron == [2 * n * d * 2] * 3
    assert flops_per_pair(model, n) == 3 * 4 * (plain + relative) + 3 * inter * 4 * n * d + 2 * d * d + 2 * d * labels


@pytest.fixture(scope="module", params=NEW)
def grader(request, tmp_path_factory):
    """A saved 3-layer grader of the architecture whose headcut.json names its dev data, as finetune writes it."""
    root = tmp_path_factory.mktemp(request.param)
    tokenizer = tiny_tokenizer()
    dev = write_pairs(root / "dev.tsv", synthetic_pairs(60, seed=2))
    model = deep(request.param, vocab_size=len(tokenizer), initializer_range=0.4)
    meta = {"kind": "finetune", "grades": [1, 2, 3, 4, 5], "max_length": 24,
            "dev_data": {"path": str(dev), "preset": None}}
    return save_model(LoadedModel(model, tokenizer, meta), root / "grader")


def test_flops_half_prune_meets_its_budget_reloads_strictly_and_exports_with_parity(grader, tmp_path, one_thread):
    from headcut.export.export import FP32_TOLERANCE, export_onnx
    from test_export import _parity

    out = tmp_path / "flops50"
    result = CliRunner().invoke(app, ["prune", "--model", str(grader), "--flops", "0.5", "--out", str(out),
                                      "--calibrate", "40", "--bootstrap", "20", "--no-timing"])
    assert result.exit_code == 0, result.output
    assert "## Mask tuning" in result.output
    source, pruned = load_model(grader), load_model(out)  # strict: every saved tensor has its place, and only those
    seq = pruned.max_length
    assert flops_per_pair(pruned.model, seq) <= 0.5 * flops_per_pair(source.model, seq)  # counted from the artifact
    assert sum(heads_per_layer(pruned.model)) < 12 and sum(neurons_per_layer(pruned.model)) < 3 * 37
    recorded = json.loads((out / "config.json").read_text())["headcut_shape"]
    assert recorded["heads_per_layer"] == heads_per_layer(pruned.model)
    parity = _parity(pruned.model, export_onnx(pruned.model, tmp_path / "m.onnx"), pruned.tokenizer,
                     synthetic_pairs(32), max_length=seq)
    assert parity.max_abs_diff <= FP32_TOLERANCE and parity.agreement == 1.0


def test_int8_gate_runs_on_a_pruned_grader(grader, tmp_path, one_thread):
    from headcut.export import Int8Gate, build_grader
    from headcut.export.quantize import CHOICES

    loaded = load_model(grader)
    keep_heads(loaded.model, HEADS)
    keep_neurons(loaded.model, NEURONS)
    loose = Int8Gate(min_agreement=0.0, max_spearman_drift=1.0, max_drop=100.0, min_speed_vs_fp32=0.0)
    record = build_grader(loaded, tmp_path / "int8", pairs=synthetic_pairs(60, seed=3), int8=True, gate=loose,
                          choices=(CHOICES[1], CHOICES[-1]), threads=1)
    assert record["precision"] == "int8" and record["parity"]["fp32"]["max_abs_diff"] <= 1e-4
    assert [t["choice"] for t in record["int8"]["trials"]] == [CHOICES[1].name, CHOICES[-1].name]
    assert record["int8"]["chosen"]["passes"] and record["int8"]["chosen"]["batch_drift"] <= 0.01


def test_bottom_k_and_pruned_students_build_from_the_teacher(grader, tmp_path):
    from headcut.distill import DistillRecipe, build_student
    from headcut.recipes import from_dict

    teacher = load_model(grader, attn_implementation="eager")
    recipe = from_dict(DistillRecipe, dict(teacher=str(grader), student="bottom-k", keep_layers=2,
                                           train_data="synthetic"))
    student = build_student(recipe, teacher).loaded
    inputs = tiny_inputs(kind=teacher.model.config.model_type, length=13)
    with torch.no_grad():
        t = teacher.model(**inputs, output_hidden_states=True).hidden_states
        s = student.model(**inputs, output_hidden_states=True).hidden_states
    assert len(s) == 3
    torch.testing.assert_close(s[1], t[1])  # the first layer's output is the teacher's
    save_model(student, tmp_path / "bottom")  # a 2-layer config that reloads (ModernBERT: its layer types cut too)
    again = load_model(tmp_path / "bottom")
    assert len(encoder_layers(again.model)) == 2
    with torch.no_grad():
        torch.testing.assert_close(again.model(**inputs).logits, student.model(**inputs).logits)

    cut = load_model(grader)
    keep_heads(cut.model, HEADS)
    keep_neurons(cut.model, NEURONS)
    save_model(cut, tmp_path / "pruned", meta={"kind": "prune", "source": {"path": str(grader)}})
    pruned = build_student(from_dict(DistillRecipe, dict(student="pruned", student_model=str(tmp_path / "pruned"),
                                                         train_data="synthetic")), teacher)
    assert pruned.layer_map == [0, 1, 2] and [p.head_ids for p in layer_parts(pruned.loaded.model)] == HEADS


BAD_CONFIGS = {
    "modernbert": (dict(classifier_pooling="mean"), "classifier_pooling 'mean'"),
    "deberta-v2": (dict(conv_kernel_size=3), "conv_kernel_size 3"),
}


@pytest.mark.parametrize("kind", NEW)
def test_a_config_field_headcut_cannot_cut_exits_2_with_one_sentence(kind, tmp_path):
    overrides, named = BAD_CONFIGS[kind]
    tokenizer = tiny_tokenizer()
    model = tiny_model(kind, vocab_size=len(tokenizer), **overrides)
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    result = CliRunner().invoke(app, ["prune", "--model", str(tmp_path / "model"), "--keep-ratio", "0.5",
                                      "--data", str(write_pairs(tmp_path / "d.tsv", synthetic_pairs(20))),
                                      "--out", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert named in result.output and "Traceback" not in result.output
    assert len([line for line in result.output.strip().splitlines() if line.strip()]) == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("kind", NEW)
def test_attention_weights_of_every_kept_head_for_entropy_probes_and_distillation(kind):
    """DeBERTa returns its attention weights only when asked (they were None, so entropy scores, probes and
    the attention loss had nothing to read)."""
    from headcut.evaluate.attention import attention_weights

    model = deep(kind)
    keep_heads(model, HEADS)
    inputs = tiny_inputs(kind=kind)
    weights, logits = attention_weights(model, inputs)
    assert [None if w is None else tuple(w.shape) for w in weights] == [(3, 2, 9, 9), None, (3, 3, 9, 9)]
    padded = inputs["attention_mask"][0] == 0
    for w in (weights[0], weights[2]):
        torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:-1]))
        assert w[0][:, ~padded][:, :, padded].abs().max() < 1e-6  # real tokens put no weight on padding
    with torch.no_grad():
        torch.testing.assert_close(logits, model(**inputs).logits)


def test_ort_optimised_graph_fuses_no_attention_and_keeps_parity(tmp_path):
    """ORT's BERT attention fusion has no place for relative or rotary positions: --optimize fuses only the
    norms and GELUs of these models, even where every layer has the same head count (ModernBERT here; DeBERTa
    takes the same `plain_attention` path)."""
    from headcut.arch import architecture
    from headcut.export.export import FP32_TOLERANCE, export_onnx
    from headcut.export.optimize import optimize_graph
    from test_export import _parity

    model = tiny_model("modernbert", attn="sdpa", initializer_range=0.3)
    info = optimize_graph(export_onnx(model, tmp_path / "m.onnx"), tmp_path / "o.onnx", hidden_size=32,
                          heads_per_layer=heads_per_layer(model), plain_attention=architecture(model).plain_attention)
    assert info["attention_fused"] is False and info["fused_ops"]["SkipLayerNormalization"] > 0
    assert _parity(model, tmp_path / "o.onnx").max_abs_diff <= FP32_TOLERANCE


def encoder_weights_timer(models, inputs, seconds):
    """Deterministic "milliseconds" (as test_budget's): a one-layer copy costs its encoder weights over a fixed part."""
    return [1e-4 * sum(p.numel() for n, p in m.named_parameters() if re.search(r"\.layers?\.\d", n)) + 0.1
            for m in models]


def test_latency_half_prune_plans_within_its_budget(grader, tmp_path, monkeypatch, one_thread):
    """--latency times one-layer copies cut to every head count and a grid of FFN widths (ModernBERT's copy
    keeps its first layer's type); the plan's milliseconds stay within the budget it prints."""
    from headcut.prune import latency

    monkeypatch.setenv("HEADCUT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(latency, "torch_timer", encoder_weights_timer)
    out = tmp_path / "lat50"
    result = CliRunner().invoke(app, ["prune", "--model", str(grader), "--latency", "0.5", "--batch", "8", "--out",
                                      str(out), "--calibrate", "40", "--bootstrap", "20", "--no-timing"])
    assert result.exit_code == 0, result.output
    summary = load_model(out).meta["prune"]
    assert summary["budget"]["plan_ms"] <= summary["budget"]["budget_ms"] * (1 + 1e-9)
    assert sum(heads_per_layer(load_model(out).model)) < 12


def test_eager_deberta_scoring_passes_hold_bounded_attention_scores_whatever_the_batch_size(monkeypatch):
    """DeBERTa has only eager attention, whose forward builds each layer's (rows, heads, L, L) scores whole: predict,
    the ablation scan, the mask-gradient (Fisher) pass, mask tuning, the head refit and the export parity gate's
    PyTorch reference, and export's grading with the model's graph (which builds the same scores) and its INT8 gate's
    mixed batches (batch_dependence), cut --batch-size batches so one layer's scores (every layer's, where a backward
    keeps them) stay within MAX_HELD_SCORES, with the same logits, gradients and tuned weights (tune, refit, the gate,
    the graph's grading and batch_dependence's mixed batches were: whole batches)."""
    import copy

    import numpy as np

    import headcut.evaluate.attention as attention
    import headcut.export.export as export
    from headcut.batching import Encoded
    from headcut.evaluate.ablation import ablation_logits
    from headcut.evaluate.fisher import mask_gradients
    from headcut.evaluate.predict import predict_logits
    from headcut.export.quantize import batch_dependence
    from headcut.prune.refit import refit_head
    from headcut.prune.tune import tune_scales

    model = tiny_model("deberta-v2")
    rng = np.random.default_rng(0)
    ids = [list(rng.integers(5, 99, size=n)) for n in rng.integers(6, 13, size=10)]
    encoded = Encoded(ids, [[0] * len(x) for x in ids], pad_id=0)
    labels = rng.integers(0, 5, size=10)
    grades = tuple(range(1, model.config.num_labels + 1))

    def fitted(fit) -> list:  # a pruned copy's weights after `fit`
        student = copy.deepcopy(model)
        keep_heads(student, [[0, 1], [1, 2, 3]])
        fit(student)
        return [v.numpy() for v in student.state_dict().values()]

    class TenPairs:  # what gate_batches reads of its pairs; `encode` gives `encoded`
        __len__, sample = (lambda self: 10), (lambda self, rows, seed: self)

    monkeypatch.setattr(export, "encode", lambda *args, **kwargs: encoded)

    def as_graph(batch: dict):  # a graph exported from `model` builds the same scores
        return export.reference_logits(model, [batch])[0]

    def gate_pairs() -> list[dict]:  # the gate's batches of real pairs (its random shapes are fixed and small)
        return export.gate_batches(model, None, TenPairs(), max_length=12, batch_size=10)[:-len(export.RANDOM_SHAPES)]

    passes = {"predict": lambda: [predict_logits(model, None, None, batch_size=10, encoded=encoded)],
              "ablation": lambda: ablation_logits(model, encoded, batch_size=10),
              "fisher": lambda: [mask_gradients(model, encoded, labels, batch_size=10)],
              "tune": lambda: fitted(lambda student: tune_scales(model, student, encoded, batch_size=10, mode="best")),
              "refit": lambda: fitted(lambda student: refit_head(model, student, encoded, batch_size=10)),
              "gate": lambda: [np.concatenate(export.reference_logits(model, gate_pairs()))],
              "graph": lambda: [export.onnx_logits(as_graph, encoded, batch_size=10, model=model)],
              "int8 batch": lambda: [np.array(batch_dependence(as_graph, encoded, grades, rows=10, batch_size=10,
                                                               model=model))]}
    whole = {name: run() for name, run in passes.items()}
    seen = []  # (rows, tokens) entering every layer
    for part in layer_parts(model):
        part.layer.register_forward_pre_hook(
            lambda m, args, kwargs: seen.append((args[0] if args else kwargs["hidden_states"]).shape[:2]),
            with_kwargs=True)
    heads, layers = model.config.num_attention_heads, model.config.num_hidden_layers
    cap = 2 * heads * 12 ** 2  # one layer's scores of two 12-token pairs
    monkeypatch.setattr(attention, "MAX_HELD_SCORES", cap)
    for name, run in passes.items():
        seen.clear()
        for a, b in zip(whole[name], run()):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=name)
        held = layers * heads if name == "fisher" else heads  # the backward keeps every layer's scores
        assert max(rows * held * length ** 2 for rows, length in seen) <= cap, name
        assert max(rows for rows, _ in seen) < 10, name
