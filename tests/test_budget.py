"""Budgeted pruning of heads and FFN neurons: joint Fisher scores, the FLOPs plan, mask tuning, artifacts."""
import copy
import json
import dataclasses
import inspect
import os
import re
import typing

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from headcut.arch import (SUPPORTED, flops_per_pair, heads_per_layer, intermediate_size, keep_heads, keep_neurons,
                          layer_parts, mask_shape, neurons_per_layer, unit_flops)
from headcut.batching import collate
from headcut.cli.main import app
from headcut_grader.errors import UserError
from headcut.evaluate.fisher import unit_fisher
from headcut.evaluate.fisher import mask_gradients
from headcut.masking import head_mask, neuron_mask
from headcut.models import LoadedModel, load_model
from headcut.prune.budget import UnitPlan, check_budget, plan_budget
from headcut.prune.tune import _capture, tune_scales
from tests.conftest import tiny_inputs, tiny_model
from tests.test_prune_cli import tiny_grader  # noqa: F401  (fixture)
from tests.test_scan_importance import toy_encoded


def deep(kind="bert", **kw):
    extra = dict(n_layers=3) if kind == "distilbert" else dict(num_hidden_layers=3)
    return tiny_model(kind, initializer_range=0.3, **{**extra, **kw})


# --- scores --------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["bert", "deberta-v2", "modernbert"])
def test_fisher_with_grades_equals_squared_head_mask_gradients(kind):
    model = deep(kind)
    enc = toy_encoded(kind)
    labels = np.arange(len(enc)) % 5
    scores = unit_fisher(model, enc, labels=labels, batch_size=4)
    reference = (mask_gradients(model, enc, labels, batch_size=4) ** 2).sum(0)
    assert np.allclose(scores.heads.numpy(), reference, rtol=1e-6, atol=1e-12)
    assert scores.neurons.shape == (3, 37) and (scores.neurons > 0).all()


def test_teacher_targets_are_the_expected_fisher_per_pair():
    """Against a brute-force loop: each pair alone, each grade y weighted by p(y), (d log p(y) / d mask)^2."""
    model = deep()
    enc = toy_encoded("bert")
    scores = unit_fisher(model, enc, batch_size=3)
    heads = torch.zeros(3, 4, dtype=torch.float64)
    neurons = torch.zeros(3, 37, dtype=torch.float64)
    for i in range(len(enc)):
        batch = collate(enc, [i])
        hm = torch.ones(3, 4, requires_grad=True)
        nm = torch.ones(3, 37, requires_grad=True)
        with head_mask(model, hm), neuron_mask(model, nm):
            logp = torch.log_softmax(model(**batch).logits[0].double(), -1)
        for y in range(5):
            gh, gn = torch.autograd.grad(logp[y], (hm, nm), retain_graph=True)
            heads += logp[y].exp().item() * gh.double() ** 2
            neurons += logp[y].exp().item() * gn.double() ** 2
    assert torch.allclose(scores.heads, heads, rtol=1e-4, atol=1e-10)
    assert torch.allclose(scores.neurons, neurons, rtol=1e-4, atol=1e-10)


def test_fisher_of_a_pruned_model_uses_original_ids():
    model = deep()
    keep_heads(model, [[1, 3], [], [0, 1, 2, 3]])
    keep_neurons(model, [list(range(0, 37, 2)), list(range(37)), []])
    scores = unit_fisher(model, toy_encoded("bert"), batch_size=4)
    assert torch.isneginf(scores.heads[0, [0, 2]]).all() and torch.isneginf(scores.heads[1]).all()
    assert torch.isfinite(scores.heads[0, [1, 3]]).all()
    assert torch.isneginf(scores.neurons[0, 1::2]).all() and torch.isfinite(scores.neurons[0, ::2]).all()
    assert torch.isneginf(scores.neurons[2]).all()


# --- plan ----------------------------------------------------------------------------------------


def fake_scores(seed=0):
    from headcut.evaluate.fisher import UnitScores

    g = torch.Generator().manual_seed(seed)
    return UnitScores(torch.rand(3, 4, generator=g, dtype=torch.float64) * 5,
                      torch.rand(3, 37, generator=g, dtype=torch.float64), "teacher", 10)


@pytest.mark.parametrize("share", [1.0, 0.8, 0.5, 0.2, 0.05])
def test_plan_meets_the_budget_and_is_optimal(share):
    model = deep()
    costs = unit_flops(model, 16)
    full = flops_per_pair(model, 16)
    budget = check_budget(share, costs, full)
    scores = fake_scores()
    plan = plan_budget(scores, costs, budget)
    assert plan.flops(costs) <= budget
    if share == 1.0:
        assert plan.heads_per_layer == [4, 4, 4] and plan.neurons_per_layer == [37, 37, 37]
    value = lambda p: sum(float(scores.heads[l, list(h)].sum()) for l, h in enumerate(p.heads)) + sum(
        float(scores.neurons[l, list(n)].sum()) for l, n in enumerate(p.neurons))
    # exact optimum by brute force over the number of heads (every head costs the same, so do neurons)
    head_order = torch.argsort(scores.heads.flatten(), descending=True)
    neuron_order = torch.argsort(scores.neurons.flatten(), descending=True)
    best = -1.0
    for k in range(13):
        room = budget - costs.fixed - k * costs.per_head[0]
        if room < 0:
            break
        m = min(111, room // costs.per_neuron[0])
        best = max(best, float(scores.heads.flatten()[head_order[:k]].sum()
                               + scores.neurons.flatten()[neuron_order[:m]].sum()))
    assert value(plan) == pytest.approx(best, rel=1e-12)


def test_layer_prior_moves_units_down():
    model = deep()
    costs = unit_flops(model, 16)
    budget = check_budget(0.5, costs, flops_per_pair(model, 16))
    flat = plan_budget(fake_scores(), costs, budget)
    tilted = plan_budget(fake_scores(), costs, budget, layer_prior=2.0)
    kept = lambda p, l: p.heads_per_layer[l] * costs.per_head[l] + p.neurons_per_layer[l] * costs.per_neuron[l]
    assert kept(tilted, 0) > kept(flat, 0) and kept(tilted, 2) < kept(flat, 2)


def test_impossible_budget_is_one_sentence():
    model = deep()
    costs = unit_flops(model, 16)
    full = flops_per_pair(model, 16)
    with pytest.raises(UserError, match="less than the pooler and classifier alone"):
        check_budget(costs.fixed / full / 2, costs, full)
    for bad in (0, -0.5, 1.5, float("nan")):
        with pytest.raises(UserError, match="outside \\(0, 1\\]"):
            check_budget(bad, costs, full)


# --- surgery -------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", SUPPORTED)
def test_budget_surgery_equals_masking_heads_and_neurons(kind):
    model = deep(kind)
    plan = UnitPlan(((0, 3), (), (1, 2, 3)), (tuple(range(0, 37, 3)), (), tuple(range(20))))
    hm = torch.zeros(3, 4)
    nm = torch.zeros(3, 37)
    for l in range(3):
        hm[l, list(plan.heads[l])] = 1
        nm[l, list(plan.neurons[l])] = 1
    inputs = tiny_inputs(kind=kind)
    with torch.no_grad(), head_mask(model, hm), neuron_mask(model, nm):
        masked = model(**inputs).logits
    keep_heads(model, [list(h) for h in plan.heads])
    keep_neurons(model, [list(n) for n in plan.neurons])
    assert heads_per_layer(model) == [2, 0, 3] and neurons_per_layer(model) == [13, 0, 20]
    with torch.no_grad():
        assert (model(**inputs).logits - masked).abs().max() <= 1e-5
    assert flops_per_pair(model, 16) == plan.flops(unit_flops(model, 16))


# --- mask tuning ---------------------------------------------------------------------------------


def sublayer_errors(teacher, student, enc, rows):
    """Relative squared error of every sublayer's LayerNorm input, student vs teacher, on the given rows."""
    batch = collate(enc, rows)
    real = batch["attention_mask"].bool()
    out = []
    for tp, sp in zip(layer_parts(teacher), layer_parts(student)):
        for sub in ("attention", "ffn"):
            t = _capture(teacher, tp, sub, batch, units=False)["norm"][real]
            s = _capture(student, sp, sub, batch, units=False)["norm"][real]
            out.append(float(((s - t) ** 2).sum() / (t ** 2).sum()))
    return out


@pytest.mark.parametrize("kind", ["bert", "distilbert", "modernbert"])  # modernbert: pre-norm targets
def test_mask_tuning_lowers_each_refitted_layers_error_and_never_raises_it(kind):
    teacher = deep(kind)
    student = copy.deepcopy(teacher)
    keep_heads(student, [[0, 1], [2], [0, 1, 3]])
    keep_neurons(student, [list(range(0, 37, 2)), list(range(30)), list(range(0, 37, 3))])
    enc = toy_encoded(kind, n=40)
    untuned = copy.deepcopy(student)
    fits = tune_scales(teacher, student, enc, batch_size=8)
    assert len(fits) == 6 and all(f.error_after <= f.error_before for f in fits)
    assert all(f.error_after < f.error_before for f in fits if f.accepted) and any(f.accepted for f in fits)
    # measured independently on the held-out pairs: the first sublayer's untuned error is the one recorded,
    # and the folded scales (refitted on all pairs) lower it at least as much as the held-out fit did
    held = [i for i in range(len(enc)) if i % 5 == 4]
    before, after = sublayer_errors(teacher, untuned, enc, held), sublayer_errors(teacher, student, enc, held)
    assert before[0] == pytest.approx(fits[0].error_before, rel=1e-4)
    if fits[0].accepted:
        assert after[0] <= fits[0].error_after * (1 + 1e-4) and after[0] < before[0]
    else:  # a fit that did not help on held-out pairs leaves the weights alone
        assert after[0] == pytest.approx(before[0], rel=1e-6)


def test_tuned_scales_are_folded_into_the_weights():
    """No runtime masks: the tuned model has the pruned shapes and reloads as a plain artifact."""
    teacher = deep()
    student = copy.deepcopy(teacher)
    keep_neurons(student, [list(range(10)), list(range(37)), list(range(5))])
    weights = [p.ffn_out.weight.clone() for p in layer_parts(student)]
    fits = tune_scales(teacher, student, toy_encoded("bert"), batch_size=8)
    for p, w, fit in zip(layer_parts(student), weights, [f for f in fits if f.sublayer == "ffn"]):
        ratio = p.ffn_out.weight / w
        assert torch.allclose(ratio, ratio[:1].expand_as(ratio), rtol=1e-4)  # one scale per column
        assert fit.accepted == (not torch.allclose(ratio, torch.ones_like(ratio)))


# --- the command ---------------------------------------------------------------------------------


def run(*args):
    return CliRunner().invoke(app, ["prune", *map(str, args)])


def test_flops_prune_writes_a_smaller_grader_that_reloads_and_exports(tmp_path, tiny_grader):  # noqa: F811
    grader, dev = tiny_grader
    out = tmp_path / "flops50"
    result = run("--model", grader, "--flops", 0.5, "--out", out, "--calibrate", 40, "--bootstrap", 50,
                 "--no-timing")
    assert result.exit_code == 0, result.output
    for text in ("| FFN neurons |", "Budget: 0.5 of the FLOPs", "Without mask tuning", "## Mask tuning"):
        assert text in result.output
    source, pruned = load_model(grader), load_model(out)
    seq = pruned.max_length
    assert flops_per_pair(pruned.model, seq) <= 0.5 * flops_per_pair(source.model, seq)  # counted from the artifact
    assert (out / "kept_per_layer.png").stat().st_size > 1000
    from headcut.synthetic import synthetic_pairs
    from headcut.export.export import FP32_TOLERANCE, export_onnx
    from tests.test_export import _parity

    result = _parity(pruned.model, export_onnx(pruned.model, tmp_path / "m.onnx"), pruned.tokenizer,
                     synthetic_pairs(32))
    assert result.max_abs_diff <= FP32_TOLERANCE and result.agreement == 1.0


def test_an_iterative_flops_prune_meets_its_budget_counted_from_the_artifact(tmp_path, tiny_grader):  # noqa: F811
    grader, _ = tiny_grader
    out = tmp_path / "steps"
    result = run("--model", grader, "--flops", 0.3, "--iterative", 3, "--out", out, "--calibrate", 40,
                 "--bootstrap", 20, "--no-timing")
    assert result.exit_code == 0, result.output
    assert "Reached in 3 steps (shares 0.67, 0.45, 0.30)" in result.output
    source, pruned = load_model(grader), load_model(out)
    full, seq = flops_per_pair(source.model, pruned.max_length), pruned.max_length
    assert flops_per_pair(pruned.model, seq) <= 0.3 * full  # counted from the reloaded artifact
    steps = pruned.meta["prune"]["budget"]["steps"]
    assert [round(s["share"], 2) for s in steps] == [0.67, 0.45, 0.3]
    for before, after in zip(steps, steps[1:]):  # each step only removes: nothing comes back
        assert all(a <= b for a, b in zip(after["heads_per_layer"], before["heads_per_layer"]))
        assert all(a <= b for a, b in zip(after["neurons_per_layer"], before["neurons_per_layer"]))
    assert all(s["plan_flops"] <= s["share"] * full for s in steps)
    assert steps[-1]["plan_flops"] == flops_per_pair(pruned.model, seq)


def test_the_prune_functions_take_numpy_numbers_and_record_plain_ones(tiny_grader):  # noqa: F811
    """Was: prune_to_budget(iterative=np.int64(2)) was refused as '--iterative 2 is outside 0..100'."""
    from headcut.prune import PruneSettings, prune
    from headcut.prune.pipeline import prune_to_budget

    loaded, settings = load_model(tiny_grader[0]), PruneSettings(timing=False, bootstrap=10, calibrate_rows=40)
    result = prune_to_budget(loaded, flops=np.float32(0.5), iterative=np.int64(2), seq_len=np.int32(16),
                             settings=settings)
    assert len(result.record()["budget"]["steps"]) == 2 and type(result.record()["budget"]["seq_len"]) is int
    result = prune(loaded, keep_ratio=np.float64(0.5), iterative=np.int64(2), min_heads=np.int64(1), settings=settings)
    record = result.record()
    assert [type(record[key]) for key in ("keep_ratio", "iterative", "min_heads")] == [float, int, int]
    json.dumps(record)  # what write_artifact records: a numpy number does not serialise


@pytest.mark.parametrize("call, sentence", [
    ({"iterative": 2.0}, "prune iterative is 2.0; it must be a whole number in [0, 100]."),
    ({"iterative": 10 ** 6}, "prune iterative is 1000000; it must be a whole number in [0, 100]."),  # ran for hours
    ({"keep_ratio": "0.5"}, "prune keep_ratio is '0.5'; it must be a number in (0, 1]."),
    ({"layer_prior": float("nan")}, "prune layer_prior is nan; it must be a number in [0, 100]."),
    ({"min_heads": 1.5}, "prune min_heads is 1.5; it must be a whole number of at least 0."),
    ({"budget": True, "flops": "0.5"}, "prune_to_budget flops is '0.5'; it must be a number in (0, 1]."),
    ({"budget": True, "flops": 0.5, "iterative": np.float64(3)},
     "prune_to_budget iterative is 3.0; it must be a whole number in [0, 100]."),
    ({"budget": True, "flops": 0.5, "seq_len": -5}, "prune_to_budget seq_len is -5; it must be a whole number in "
     "[8, 8192]."),
])
def test_the_prune_functions_name_a_numeric_argument_of_the_wrong_type_or_range(call, sentence):
    """Was: Python's TypeErrors ('<' not supported between 'str' and 'int'; slice indices must be integers), a NaN
    layer_prior's 'cannot keep 6 heads, only 0 are available', and prune(iterative=10**6) ran without end."""
    from headcut.prune import prune
    from headcut.prune.pipeline import prune_to_budget

    call = dict(call)
    function = prune_to_budget if call.pop("budget", False) else prune
    call = call if function is prune_to_budget else {"keep_ratio": 0.5, **call}
    with pytest.raises(UserError, match=f"^{re.escape(sentence)}$"):
        function(object(), **call)  # refused before the model is looked at


def test_tune_fit_is_recorded_and_a_bad_one_or_a_bad_pairing_is_one_sentence(tmp_path, tiny_grader):  # noqa: F811
    from headcut.pipeline.recipe import PruneSection
    from headcut.prune.tune import DEFAULT_MODE, MODES

    assert PruneSection().tune_fit == DEFAULT_MODE  # the recipe key's default is the library's
    assert typing.get_args(typing.get_type_hints(PruneSection)["tune_fit"]) == MODES  # and its choices
    grader, _ = tiny_grader
    out = tmp_path / "w"
    result = run("--model", grader, "--flops", 0.5, "--tune-fit", "weights", "--out", out, "--calibrate", 40,
                 "--bootstrap", 20, "--no-timing")
    assert result.exit_code == 0, result.output
    tuning = load_model(out).meta["prune"]["tuning"]
    assert tuning["fit"] == "weights" and {f["mode"] for f in tuning["fits"]} == {"weights"}
    assert "refits of each sublayer's output projection" in result.output
    for args, words in ((["--tune-fit", "ridge"], "--tune-fit 'ridge' is unknown; choose one of scales, weights, best"),
                        (["--drop-layers", "--iterative", 3], "pass one of them")):
        bad = run("--model", grader, "--flops", 0.5, *args, "--out", tmp_path / "x", "--no-timing")
        assert bad.exit_code == 2 and words in bad.output and "Traceback" not in bad.output, bad.output
        assert not (tmp_path / "x").exists()


def test_impossible_flops_budget_exits_2_with_one_sentence(tmp_path, tiny_grader):  # noqa: F811
    grader, _ = tiny_grader
    result = run("--model", grader, "--flops", 0.0001, "--out", tmp_path / "x", "--no-timing")
    assert result.exit_code == 2
    assert "less than the pooler and classifier alone need" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "x").exists()
    both = run("--model", grader, "--flops", 0.5, "--keep-ratio", 0.5, "--out", tmp_path / "y")
    assert both.exit_code == 2 and "exactly one of --keep-ratio" in both.output


def test_int8_grader_of_a_model_with_empty_ffn_and_attention_layers(tmp_path):
    """Every INT8 recipe (incl. keeping the worst FFN layers in fp32) handles a layer with no FFN left."""
    from headcut.synthetic import synthetic_pairs
    from headcut.export import Int8Gate, build_grader
    from tests.test_export import tiny_tokenizer

    tokenizer = tiny_tokenizer(tmp_path / "tok")
    model = deep(vocab_size=len(tokenizer), max_position_embeddings=128)
    keep_heads(model, [[0, 2], [], [1, 2, 3]])
    keep_neurons(model, [list(range(0, 37, 2)), [], list(range(9))])
    loaded = LoadedModel(model, tokenizer, {"grades": [1, 2, 3, 4, 5], "max_length": 64}, "tiny", "0" * 16)
    gate = Int8Gate(min_agreement=0.0, max_spearman_drift=1.0, max_drop=100.0, min_speed_vs_fp32=0.0)
    record = build_grader(loaded, tmp_path / "grader", pairs=synthetic_pairs(120), int8=True, gate=gate)
    assert record["parity"]["fp32"]["max_abs_diff"] <= 1e-4
    assert (tmp_path / "grader" / "model.onnx").exists()


# --- latency budget ------------------------------------------------------------------------------


def linear_costs(model, seq=16):
    """Layer cost tables proportional to FLOPs: the latency plan must then do what the FLOPs plan does."""
    from headcut.prune.latency import LayerCosts

    units = unit_flops(model, seq)
    scale = 1e-6
    widths = list(range(0, 38, 3)) + [37]
    return LayerCosts([h * units.per_head[0] * scale for h in range(5)], widths,
                      [w * units.per_neuron[0] * scale for w in widths], units.fixed * scale, 3, 8, seq, "test", "test")


@pytest.mark.parametrize("share", [0.9, 0.5, 0.2])
def test_latency_plan_fits_its_budget_and_nearly_matches_the_exact_flops_plan(share):
    from headcut.prune.latency import check_latency_budget, plan_latency

    model = deep()
    costs = linear_costs(model)
    scores = fake_scores(1)
    budget_ms = check_latency_budget(share, costs)
    plan = plan_latency(scores, costs, budget_ms)
    assert costs.total(plan.heads_per_layer, plan.neurons_per_layer) <= budget_ms * (1 + 1e-9)
    exact = plan_budget(scores, unit_flops(model, 16),
                        check_budget(share, unit_flops(model, 16), flops_per_pair(model, 16)))
    value = lambda p: sum(float(scores.heads[l, list(h)].sum()) for l, h in enumerate(p.heads)) + sum(
        float(scores.neurons[l, list(n)].sum()) for l, n in enumerate(p.neurons))
    assert value(plan) >= 0.99 * value(exact)


def test_layer_cost_tables_are_monotone_and_cached(tmp_path, monkeypatch):
    from headcut.prune import latency

    model = deep()
    costs = latency.layer_costs(model, batch=4, seq_len=16, cache=tmp_path, seconds=0.02)
    assert len(costs.heads_ms) == 5 and costs.widths[0] == 0 and costs.widths[-1] == 37
    assert costs.heads_ms[0] == 0 and all(a <= b for a, b in zip(costs.heads_ms, costs.heads_ms[1:]))
    assert all(a <= b for a, b in zip(costs.ffn_ms, costs.ffn_ms[1:])) and costs.fixed_ms > 0
    monkeypatch.setattr(latency, "measure_layer_costs", lambda *a, **k: pytest.fail("timed again"))
    assert latency.layer_costs(model, batch=4, seq_len=16, cache=tmp_path) == costs


def encoder_weights_timer(models, inputs, seconds):
    """A timer that cannot flake: a copy's "milliseconds" grow with the encoder weights it keeps, above a
    fixed part (embeddings and classifier) that is small beside the tiny model's layer."""
    encoder_weights_timer.calls += 1
    return [1e-4 * sum(p.numel() for n, p in m.named_parameters() if ".layer." in n) + 0.1 for m in models]


def test_latency_prune_command(tmp_path, tiny_grader, monkeypatch):  # noqa: F811
    """The command plans within the budget it prints. The layer costs come from a deterministic timer: on
    a busy CI machine the tiny model's measured fixed part once reached half the model and refused 0.5
    (the timer itself is tested in test_layer_cost_tables_are_monotone_and_cached)."""
    from headcut.prune import latency

    monkeypatch.setenv("HEADCUT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(latency, "torch_timer", encoder_weights_timer)
    encoder_weights_timer.calls = 0
    grader, _ = tiny_grader
    out = tmp_path / "lat50"
    result = run("--model", grader, "--latency", 0.5, "--batch", 8, "--out", out, "--calibrate", 40,
                 "--bootstrap", 50, "--no-timing")
    assert result.exit_code == 0, result.output
    assert "of the latency measured on torch-fp32 per batch of 8 x 24" in result.output
    summary = load_model(out).meta["prune"]
    assert encoder_weights_timer.calls == 1
    assert summary["budget"]["plan_ms"] <= summary["budget"]["budget_ms"] * (1 + 1e-9)


@pytest.mark.parametrize("variable, under", [("HEADCUT_CACHE", ""), ("HEADCUT_CACHE", "sub"),
                                             ("XDG_CACHE_HOME", "")])
def test_a_cache_folder_that_is_a_file_is_one_sentence_naming_its_variable(tmp_path, tiny_grader, monkeypatch,
                                                                           variable, under):  # noqa: F811
    """Was: prune --latency ended in a FileExistsError (NotADirectoryError under a file) traceback from
    layer_costs' mkdir, after the model loaded; distill in '...teacher-logits-....npy: cannot write there' after the
    teacher graded the whole training set. Now the variable that set the folder is named, and the fix."""
    from headcut.prune.latency import layer_costs
    from headcut_grader.backend_choice import _write_cache
    from headcut_grader.errors import UserError
    from headcut.models import load_model

    blocker = tmp_path / "cache.txt"
    blocker.write_text("query\ttitle\tgrade\n")
    monkeypatch.delenv("HEADCUT_CACHE")
    monkeypatch.setenv(variable, str(blocker / under if under else blocker))
    monkeypatch.setattr("headcut.prune.latency.torch_timer", encoder_weights_timer)
    encoder_weights_timer.calls = 0
    grader, _ = tiny_grader
    said = f"the cache folder ${variable}{'/headcut' if variable == 'XDG_CACHE_HOME' else ''} "
    result = run("--model", grader, "--latency", 0.5, "--batch", 8, "--out", tmp_path / "p", "--no-timing")
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert said in result.output and f"{blocker} is a file, not a folder; set $HEADCUT_CACHE to a folder you can " \
        "write in." in " ".join(result.output.split()), result.output
    assert not (tmp_path / "p").exists() and blocker.read_text() == "query\ttitle\tgrade\n"
    with pytest.raises(UserError, match=f"^{re.escape(str(blocker / 'layer-costs-'))}.*: {re.escape(str(blocker))} "
                                        "is a file, not a folder"):
        layer_costs(load_model(grader).model, batch=2, seq_len=8, cache=blocker)  # a Python caller's own cache
    _write_cache("key", "onnxruntime")  # the runtime's choice of backend: best effort, as before


def _read_only(monkeypatch, folder):
    """os.access says `folder` and what it holds are not writable (the tests run as root, who may write anywhere)."""
    import os

    real = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, *a, **k: False if str(path).startswith(str(folder)) and
                        mode & os.W_OK else real(path, mode, *a, **k))


def test_a_read_only_cache_that_holds_the_table_is_read_and_one_that_misses_names_its_variable(
        tmp_path, tiny_grader, monkeypatch):  # noqa: F811
    """Was: cache_home refused any cache folder it could not write in, before reading it: prune --latency with a
    pre-filled read-only $HEADCUT_CACHE exited 2, and the runtime's cached backend choice was lost (measured again)."""
    from headcut_grader import backend_choice

    cache = tmp_path / "cache"
    monkeypatch.setenv("HEADCUT_CACHE", str(cache))
    monkeypatch.setenv(backend_choice.ENV_CACHE, str(cache))
    monkeypatch.setattr("headcut.prune.latency.torch_timer", encoder_weights_timer)
    encoder_weights_timer.calls = 0
    grader, _ = tiny_grader
    args = ("--model", grader, "--latency", 0.5, "--no-timing")
    assert run(*args, "--batch", 8, "--out", tmp_path / "first").exit_code == 0
    backend_choice._write_cache("key", "openvino")
    _read_only(monkeypatch, cache)
    result = run(*args, "--batch", 8, "--out", tmp_path / "again")
    assert result.exit_code == 0 and encoder_weights_timer.calls == 1, result.output  # the table was read
    assert backend_choice._read_cache() == {"key": "openvino"}
    result = run(*args, "--batch", 4, "--out", tmp_path / "missed")  # another shape: a table to time and write
    assert result.exit_code == 2 and encoder_weights_timer.calls == 1, result.output  # refused before the timing
    assert f"the cache folder $HEADCUT_CACHE {cache}: the folder {cache} is not writable; set $HEADCUT_CACHE to a " \
        "folder you can write in." in " ".join(result.output.split()), result.output


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc, a folder where no file can be made")
def test_a_cache_where_no_file_can_be_made_names_its_variable_before_the_timing(tmp_path, tiny_grader,
                                                                               monkeypatch):  # noqa: F811
    """Was: os.access says yes to root anywhere, so a $HEADCUT_CACHE under /proc passed the check and the table,
    timed first, could not be kept. Now a file is made and removed there before the timing."""
    cache = "/proc/headcut-cache"
    monkeypatch.setenv("HEADCUT_CACHE", cache)
    monkeypatch.setattr("headcut.prune.latency.torch_timer", encoder_weights_timer)
    encoder_weights_timer.calls = 0
    grader, _ = tiny_grader
    result = run("--model", grader, "--latency", 0.5, "--batch", 8, "--out", tmp_path / "p", "--no-timing")
    assert result.exit_code == 2 and encoder_weights_timer.calls == 0, result.output
    assert f"the cache folder $HEADCUT_CACHE {cache}: the folder /proc is not writable; set $HEADCUT_CACHE to a " \
        "folder you can write in." in " ".join(result.output.split()), result.output


def test_a_cache_folder_under_a_broken_link_says_so(tmp_path, tiny_grader, monkeypatch):  # noqa: F811
    """Was: '<link> is a file, not a folder' for a symbolic link to a removed folder."""
    link = tmp_path / "cache"
    link.symlink_to(tmp_path / "gone")
    monkeypatch.setenv("HEADCUT_CACHE", str(link / "headcut"))
    grader, _ = tiny_grader
    result = run("--model", grader, "--latency", 0.5, "--batch", 8, "--out", tmp_path / "p", "--no-timing")
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert f"the cache folder $HEADCUT_CACHE {link / 'headcut'}: its folder {link} is a broken symbolic link to " \
        f"{tmp_path / 'gone'}; set $HEADCUT_CACHE to a folder you can write in." in " ".join(result.output.split())
    assert not (tmp_path / "gone").exists()


def test_latency_prune_on_onnx_int8(tmp_path, tiny_grader, monkeypatch):  # noqa: F811
    monkeypatch.setenv("HEADCUT_CACHE", str(tmp_path / "cache"))
    grader, _ = tiny_grader
    out = tmp_path / "lat50"
    # a real ORT timing: 0.8 leaves room above the tiny model's fixed part (embeddings, classifier) however
    # noisy the machine; test_latency_prune_command covers the planning at 0.5
    result = run("--model", grader, "--latency", 0.8, "--runtime", "onnx-int8", "--batch", 8, "--out", out,
                 "--calibrate", 40, "--bootstrap", 50, "--no-timing")
    assert result.exit_code == 0, result.output
    assert "of the latency measured on onnx-int8 per batch of 8 x 24" in result.output
    budget = load_model(out).meta["prune"]["budget"]
    assert budget["costs"]["runtime"] == "onnx-int8" and "onnxruntime" in budget["costs"]["machine"]
    assert budget["plan_ms"] <= budget["budget_ms"] * (1 + 1e-9)


@pytest.mark.parametrize("args, words", [
    (["--latency", 0.5, "--runtime", "tensorrt"],
     "--runtime 'tensorrt' is unknown; choose one of torch-fp32, onnx-int8"),
    (["--flops", 0.5, "--runtime", "onnx-int8"], "--runtime works with --latency S, not with --flops F"),
])
def test_a_bad_runtime_is_one_sentence(args, words, tmp_path, tiny_grader):  # noqa: F811
    grader, _ = tiny_grader
    result = run("--model", grader, *args, "--out", tmp_path / "out")
    assert result.exit_code == 2 and words in result.output and not (tmp_path / "out").exists()


@pytest.mark.parametrize("int8", [True, False])
def test_layer_costs_on_onnx_runtime_are_their_own_cached_table(int8, tmp_path, monkeypatch):
    """--runtime onnx-int8/onnx-fp32: every one-layer copy (0 heads, 0 neurons included) runs in ORT, and
    the table is cached apart from PyTorch's, keyed by the runtime."""
    from headcut.export.layer_timer import onnx_runtime
    from headcut.prune import latency

    model = deep()
    runtime = onnx_runtime(int8=int8, threads=1)
    costs = latency.layer_costs(model, batch=4, seq_len=16, cache=tmp_path, seconds=0.02, runtime=runtime)
    assert costs.runtime == ("onnx-int8" if int8 else "onnx-fp32") and "onnxruntime" in costs.machine
    assert len(costs.heads_ms) == 5 and costs.widths[-1] == 37 and costs.fixed_ms > 0
    assert all(a <= b for a, b in zip(costs.ffn_ms, costs.ffn_ms[1:]))
    torch_costs = latency.layer_costs(model, batch=4, seq_len=16, cache=tmp_path, seconds=0.02)
    assert torch_costs.runtime == "torch-fp32" and len(list(tmp_path.iterdir())) == 2
    monkeypatch.setattr(latency, "measure_layer_costs", lambda *a, **k: pytest.fail("timed again"))
    assert latency.layer_costs(model, batch=4, seq_len=16, cache=tmp_path, runtime=runtime) == costs


def test_too_few_calibration_pairs_are_one_sentence_and_a_short_file_is_reported(tmp_path, tiny_grader):  # noqa: F811
    from tests.test_prune_cli import write_pairs
    from headcut.synthetic import synthetic_pairs

    grader, _ = tiny_grader
    one = write_pairs(tmp_path / "one.tsv", synthetic_pairs(1, seed=5))
    result = run("--model", grader, "--flops", 0.5, "--data", one, "--out", tmp_path / "x", "--no-timing")
    assert result.exit_code == 2, result.output
    assert "needs at least 5 calibration pairs" in result.output and "holds only 1" in result.output
    assert "Traceback" not in result.output and not (tmp_path / "x").exists()
    twenty = write_pairs(tmp_path / "twenty.tsv", synthetic_pairs(20, seed=5))
    done = run("--model", grader, "--flops", 0.5, "--data", twenty, "--calibrate", 100000, "--out", tmp_path / "y",
               "--no-timing", "--bootstrap", 50)
    assert done.exit_code == 0, done.output
    assert "on 20 calibration pairs from" in done.output and "asked for 100000" in done.output


def quick_costs(model, *, batch, seq_len, seconds=0.5, runtime=None):
    """A valid layer cost table for `model` without timing anything (stands in for `measure_layer_costs`)."""
    from headcut.prune import latency

    runtime = runtime or latency.torch_runtime()
    layers, heads = mask_shape(model)
    width = intermediate_size(model.config)
    return latency.LayerCosts([float(h) for h in range(heads + 1)], [0, width // 2, width], [0.0, 2.0, 4.0], 1.0,
                              layers, batch, seq_len, runtime.name, latency._machine(runtime))


def cached_table(model, cache, monkeypatch):
    """A layer cost table cached in `cache` as the library would: (its path, its JSON)."""
    import json

    from headcut.prune import latency

    monkeypatch.setattr(latency, "measure_layer_costs", quick_costs)
    latency.layer_costs(model, batch=8, seq_len=24, cache=cache)
    (path,) = cache.iterdir()
    return path, json.loads(path.read_text())


DAMAGED_TABLES = [  # (damage to a cached table's JSON, words of the line saying why it was not used)
    (lambda t: {**t, "heads_ms": t["heads_ms"][:2]}, "heads_ms has 2 entries"),
    (lambda t: {**t, "fixed_ms": float("nan")}, "fixed_ms holds nan"),
    (lambda t: {**t, "ffn_ms": [float("nan")] * len(t["ffn_ms"])}, "ffn_ms holds nan"),
    (lambda t: {**t, "heads_ms": [-1.0] + t["heads_ms"][1:]}, "heads_ms holds -1.0"),
    (lambda t: {**t, "ffn_ms": "fast"}, "ffn_ms is not a list"),
    (lambda t: {**t, "widths": t["widths"][:-1], "ffn_ms": t["ffn_ms"][:-1]}, "widths do not rise from 0 to"),
    (lambda t: {**t, "ffn_ms": t["ffn_ms"][:-1]}, "ffn_ms has"),
    (lambda t: {**t, "layers": 1}, "layers is 1"),
    (lambda t: {k: v for k, v in t.items() if k != "machine"}, "no machine field"),
    (lambda t: {**t, "runtime": "onnx-int8"}, "runtime is 'onnx-int8'"),
    (lambda t: {**t, "machine": "another cpu"}, "machine is 'another cpu'"),
    (lambda t: [t], "not a JSON object"),
]


@pytest.mark.parametrize("damage, words", DAMAGED_TABLES)
def test_a_cached_cost_table_that_does_not_fit_the_model_is_timed_again_and_says_why(damage, words, tmp_path,
                                                                                    monkeypatch):
    import json

    from headcut.prune import latency

    model = deep()
    path, table = cached_table(model, tmp_path, monkeypatch)
    path.write_text(json.dumps(damage(table)))
    timed, lines = [], []
    monkeypatch.setattr(latency, "measure_layer_costs", lambda *a, **k: timed.append(1) or quick_costs(*a, **k))
    costs = latency.layer_costs(model, batch=8, seq_len=24, cache=tmp_path, notice=lines.append)
    assert timed == [1] and len(lines) == 1 and str(path) in lines[0] and words in lines[0], lines
    assert costs == quick_costs(model, batch=8, seq_len=24)
    assert json.loads(path.read_text()) == costs.to_dict()  # the new table replaces the damaged one


@pytest.mark.parametrize("damage, words", [DAMAGED_TABLES[0], DAMAGED_TABLES[1]])
def test_latency_prune_times_again_when_the_cached_table_is_damaged(damage, words, tmp_path, tiny_grader,  # noqa: F811
                                                                   monkeypatch):
    """Was: a short table gave an IndexError traceback; a NaN one a plan of 'nan of nan ms' keeping every unit."""
    import json

    monkeypatch.setenv("HEADCUT_CACHE", str(tmp_path / "cache"))
    grader, _ = tiny_grader
    (tmp_path / "cache").mkdir()
    path, table = cached_table(load_model(grader).model, tmp_path / "cache", monkeypatch)
    path.write_text(json.dumps(damage(table)))
    out = tmp_path / "lat50"
    result = run("--model", grader, "--latency", 0.5, "--batch", 8, "--out", out,
                 "--bootstrap", 50, "--no-timing", "--no-tune")
    assert result.exit_code == 0, result.output
    assert f"not using the cached layer cost table {path}" in result.output and words in result.output
    budget = load_model(out).meta["prune"]["budget"]
    assert np.isfinite(budget["plan_ms"]) and budget["plan_ms"] <= budget["budget_ms"] * (1 + 1e-9)
    assert sum(load_model(out).meta["prune"]["plan"]["neurons_per_layer"]) > 0


def nan_scores(kind):
    scores = fake_scores()
    getattr(scores, kind)[1, 2] = float("nan")
    return scores


@pytest.mark.parametrize("kind, unit", [("heads", "head L1H2"), ("neurons", "neuron L1N2")])
def test_nan_unit_scores_are_refused_by_both_budget_plans(kind, unit):
    from headcut.prune.latency import check_latency_budget, plan_latency

    model = deep()
    costs, flops = linear_costs(model), unit_flops(model, 16)
    plans = [lambda s: plan_budget(s, flops, check_budget(0.5, flops, flops_per_pair(model, 16))),
             lambda s: plan_latency(s, costs, check_latency_budget(0.5, costs))]
    for plan in plans:
        with pytest.raises(UserError, match=f"the score of {unit} is not a number"):
            plan(nan_scores(kind))


@pytest.mark.parametrize("budget", [["--latency", 0.5], ["--flops", 0.5]])
def test_nan_fisher_scores_stop_a_budget_prune_in_one_sentence(budget, tmp_path, tiny_grader,  # noqa: F811
                                                               monkeypatch):
    """Was: --latency dropped the NaN neuron silently (exit 0), --flops raised a ValueError traceback."""
    from headcut.prune import pipeline

    monkeypatch.setattr(pipeline, "layer_costs", lambda model, **k: linear_costs(model, seq=24))
    monkeypatch.setattr(pipeline, "score_units", lambda model, *a, **k: nan_scores("neurons"))
    grader, _ = tiny_grader
    result = run("--model", grader, *budget, "--out", tmp_path / "out", "--no-timing")
    assert result.exit_code == 2, (result.output, result.exception)
    assert "the score of neuron L1N2 is not a number (NaN)" in result.output
    assert len(result.output.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


def test_the_one_prune_target_rule_words_flags_and_recipe_keys():
    """One rule for the CLI, prune_to_budget and run recipes (headcut/prune/targets.py)."""
    from headcut.prune.targets import one_target_problem

    assert one_target_problem({"keep_ratio": None, "flops": 0.5, "latency": None}, flags=True) is None
    assert one_target_problem({"keep_ratio": 0.8, "flops": 0.5, "latency": None}, flags=True) == (
        "exactly one of --keep-ratio R (heads only), --flops F or --latency S (heads and FFN neurons)")
    assert one_target_problem({"keep_ratio": None, "flops": None}, flags=False) == (
        "exactly one of keep_ratio (heads only) or flops (heads and FFN neurons)")
    assert one_target_problem({"flops": 0.5, "latency": 0.5}, flags=True) == (
        "exactly one of --flops F or --latency S (heads and FFN neurons)")


@pytest.mark.parametrize("args, flag", [
    (["--keep-ratio", 0.5, "--tune-fit", "weights"], "--tune-fit"), (["--keep-ratio", 0.5, "--no-tune"], "--no-tune"),
    (["--keep-ratio", 0.5, "--calibrate", 100], "--calibrate"), (["--keep-ratio", 0.5, "--seq-len", 24], "--seq-len"),
    (["--keep-ratio", 0.5, "--targets", "grades"], "--targets"), (["--flops", 0.5, "--batch", 8], "--batch"),
    (["--flops", 0.5, "--min-heads", 1], "--min-heads"), (["--latency", 0.5, "--drop-layers"], "--drop-layers"),
])
def test_a_flag_the_chosen_prune_would_ignore_is_refused(args, flag, tmp_path, tiny_grader):  # noqa: F811
    """Each prune-specific flag given to a prune that does not read it: one sentence naming it, exit 2, nothing
    written (it used to be ignored silently)."""
    grader, _ = tiny_grader
    result = run("--model", grader, *args, "--out", tmp_path / "x", "--no-timing")
    assert result.exit_code == 2 and f"{flag} works with" in result.output and f"drop {flag}." in result.output
    assert "Traceback" not in result.output and not (tmp_path / "x").exists()


@pytest.mark.parametrize("flag, value", [("--data", None), ("--score-rows", 64), ("--iterative", 2)])
def test_a_scoring_flag_beside_a_score_file_is_refused(flag, value, tmp_path, tiny_grader):  # noqa: F811
    """--keep-ratio with --scores ranks heads by the file: --data and --score-rows (which it used to ignore
    silently) and --iterative are one sentence, exit 2, nothing written."""
    from headcut.evaluate.importance import write_scores

    grader, dev = tiny_grader
    path = tmp_path / "importance.json"
    write_scores(path, {"fisher": torch.arange(12.0).view(3, 4)}, model_info={}, data_info={})
    result = run("--model", grader, "--keep-ratio", 0.5, "--scores", path, flag, *([dev] if value is None else [value]),
                 "--out", tmp_path / "x", "--no-timing")
    assert result.exit_code == 2 and f"{flag} is read only when the prune scores heads itself" in result.output
    assert f"drop {flag} or --scores." in result.output and not (tmp_path / "x").exists()


def test_the_cli_and_run_recipes_read_one_declaration_of_what_each_prune_reads():
    """Every prune setting the declaration names is a `headcut prune` flag, and every [prune] key a keep_ratio
    run refuses comes from it (prune/targets.py)."""
    from headcut.cli.prune import prune as command
    from headcut.pipeline.recipe import SAMPLE_SIZES, PruneSection, _ignored_prune_keys
    from headcut.prune.targets import READ_BY, SCORING

    params = set(inspect.signature(command).parameters)
    assert set(READ_BY) | set(SCORING) <= params
    keys = {f.name for f in dataclasses.fields(PruneSection)}
    changed = PruneSection(keep_ratio=0.5, tune=False, tune_fit="weights", iterative=3, drop_layers=True, score_rows=9,
                           calibrate=9)
    refused = {p.split()[1] for p in _ignored_prune_keys(changed, {}, lambda *paths: "")}
    assert refused == {k for k in keys - set(SAMPLE_SIZES)
                       if k in SCORING or (k in READ_BY and "keep_ratio" not in READ_BY[k])}
    assert refused == {"tune", "tune_fit", "iterative", "drop_layers"}


def test_tune_fit_with_no_tune_is_refused(tmp_path, tiny_grader):  # noqa: F811
    grader, _ = tiny_grader
    result = run("--model", grader, "--flops", 0.5, "--no-tune", "--tune-fit", "best", "--out", tmp_path / "x")
    assert result.exit_code == 2 and "--no-tune turns tuning off; drop one of them" in result.output


def test_latency_seconds_with_no_timing_is_refused(tmp_path, tiny_grader):  # noqa: F811
    """Was: exit 0, --latency-seconds read only by the timing --no-timing skips."""
    grader, _ = tiny_grader
    result = run("--model", grader, "--flops", 0.5, "--no-timing", "--latency-seconds", 30, "--bootstrap", 20,
                 "--out", tmp_path / "x")
    assert result.exit_code == 2, result.output
    assert ("--latency-seconds sets how long each model is timed, and --no-timing turns timing off; drop one of "
            "them.") in " ".join(result.output.split())
    assert not (tmp_path / "x").exists()


def test_a_pruning_argument_s_range_is_declared_once_for_the_library_the_flag_and_the_recipe():
    """prune's numeric arguments: the library's check, `headcut prune`'s flag and a run recipe's [prune] key read one
    declared range (were three literals that agreed by hand); --batch's default is the declared LATENCY_BATCH, and
    --help shows it."""
    import dataclasses

    from typer.main import get_command

    from headcut.cli.main import app
    from headcut.pipeline.recipe import PruneSection
    from headcut.prune_arguments import ARGUMENTS, LATENCY_BATCH, argument_range

    recipe = {f.name: f.metadata.get("range") for f in dataclasses.fields(PruneSection)}
    for name in ("keep_ratio", "flops", "layer_prior", "iterative"):
        assert recipe[name] is argument_range(name)
    flags = {p.name: p for p in get_command(app).commands["prune"].params}
    flag_of = {"latency_batch": "batch", "calibrate_rows": "calibrate"}  # the flags named otherwise
    for name in ARGUMENTS:
        assert f"({argument_range(name).describe()})." in flags[flag_of.get(name, name)].help, name
    assert flags["batch"].default == LATENCY_BATCH


def test_prune_s_latency_batch_takes_the_batch_range_headcut_bench_reads(tmp_path):
    """Was: latency_batch declared its own 1..4096 while every other batch size (headcut bench --batch-sizes, which
    times the same kind of batch, was narrowed to it for memory) stops at MAX_BATCH, so `headcut prune --latency 0.5
    --batch 2000 --seq-len 8` was accepted. Now it reads headcut_grader.ranges.BATCH, and one past MAX_BATCH is
    refused before any model loads."""
    from headcut.prune_arguments import argument_range
    from headcut_grader.ranges import BATCH, MAX_BATCH

    assert argument_range("latency_batch") is BATCH
    for batch in (MAX_BATCH + 1, 2000):
        result = run("--model", tmp_path / "nowhere", "--latency", 0.5, "--batch", batch, "--seq-len", 8,
                     "--out", tmp_path / "pruned")
        assert result.exit_code == 2, result.output
        assert f"--batch {batch} is out of range; it must be in [1, {MAX_BATCH}]." in result.output


def test_prune_s_seq_len_takes_the_sequence_length_range_headcut_bench_reads(tmp_path):
    """Was: prune's seq_len (--seq-len, the length --latency times a batch at and --flops counts at) declared its own
    1..8192 while `headcut bench --seq-lens`, timing the same kind of batch, and a model's max_length (prune's default
    length) start at 8, so `headcut prune --latency 0.5 --seq-len 4` was accepted where `headcut bench --seq-lens 4`
    is refused. Now the three read headcut_grader.ranges.SEQ_LEN, and 4 is refused before any model loads, by the
    command and by prune_to_budget and measure_latency."""
    import dataclasses

    from headcut.export.bench_settings import BenchSettings
    from headcut.prune.measure import measure_latency
    from headcut.prune.pipeline import prune_to_budget
    from headcut.prune_arguments import argument_range
    from headcut.training import TrainingRecipe
    from headcut_grader.ranges import SEQ_LEN

    declared = [argument_range("seq_len"), *(f.metadata["range"] for f in dataclasses.fields(BenchSettings)
                                             if f.name == "seq_lens"),
                *(f.metadata["range"] for f in dataclasses.fields(TrainingRecipe) if f.name == "max_length")]
    assert len(declared) == 3 and all(valid is SEQ_LEN for valid in declared)
    result = run("--model", tmp_path / "nowhere", "--latency", 0.5, "--seq-len", 4, "--out", tmp_path / "pruned")
    assert result.exit_code == 2, result.output
    assert "--seq-len 4 is out of range; it must be in [8, 8192]." in result.output
    with pytest.raises(UserError, match=r"^prune_to_budget seq_len is 4; it must be a whole number in \[8, 8192\]"):
        prune_to_budget(None, latency=0.5, seq_len=4)
    with pytest.raises(UserError, match=r"^measure_latency seq_len is 4; it must be a whole number in \[8, 8192\]"):
        measure_latency([tiny_model("bert")], seq_len=4)


@pytest.mark.parametrize("value, said", [("5", "'5' is not a number"), ([3], "[3] is not a number"),
                                         (True, "True is not a number"),
                                         (2.5, "2.5 is not a whole number")])
def test_a_settings_field_of_the_wrong_type_is_one_sentence_naming_the_key(value, said):
    """Was: PruneSettings(score_rows='5') raised Python's "'<' not supported between 'str' and 'int'", and a list or
    a fraction where a count belongs was taken; the field is named as the Python caller wrote it."""
    from headcut.prune import PruneSettings

    sentence = f"PruneSettings(score_rows={value!r}): {said}; it must be at least 1."
    with pytest.raises(UserError, match=re.escape(sentence)):
        PruneSettings(score_rows=value)
