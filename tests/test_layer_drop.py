"""Whole encoder layers as units of a FLOPs prune: the layer mask, exact layer removal in plans and artifacts,
and the measured search that chooses which layers to drop (headcut/prune/layers.py)."""
import copy
import json
import re

import pytest
import torch
from typer.testing import CliRunner

from headcut.arch import flops_per_pair, intermediate_size, keep_layers, layer_ids, layer_parts, mask_shape, unit_flops
from headcut.batching import collate
from headcut.cli.main import app
from headcut.evaluate.fisher import UnitScores, unit_fisher
from headcut.evaluate.predict import predict_logits
from headcut.masking import head_mask, layer_mask, neuron_mask
from headcut import prune_arguments
from headcut.models import LoadedModel, load_model, outline, save_cross_encoder, save_model
from headcut.prune.budget import UnitPlan, plan_budget
from headcut.prune.layers import choose_layer_drops, plan_divergence
from headcut.prune.plan import HeadPlan
from headcut.prune.surgery import apply_plan, apply_unit_plan
from headcut.synthetic import synthetic_pairs
from headcut_grader.errors import UserError
from tests.conftest import TINY, tiny_inputs, tiny_model
from tests.test_export import _parity, tiny_tokenizer
from tests.test_prune_cli import tiny_grader  # noqa: F401  (fixture)
from tests.test_scan_importance import toy_encoded

KINDS = list(TINY)


def deep(kind, layers=3, **kw):
    """A tiny model whose layers matter (large weights), so skipping one changes the logits visibly."""
    extra = {"n_layers": layers} if kind == "distilbert" else {"num_hidden_layers": layers}
    return tiny_model(kind, **{"initializer_range": 0.4, **extra, **kw})


def random_scores(model, seed=0):
    g = torch.Generator().manual_seed(seed)
    layers, heads = mask_shape(model)
    return UnitScores(torch.rand(layers, heads, generator=g, dtype=torch.float64),
                      torch.rand(layers, intermediate_size(model.config), generator=g, dtype=torch.float64),
                      "teacher", 0)


# --- the layer mask is layer removal --------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("keep", [[0, 1], [0, 2], [1, 2]], ids=["last", "middle", "first"])
def test_removing_layers_equals_skipping_them(kind, keep, one_thread):
    model = deep(kind)
    inputs = tiny_inputs(kind=kind)
    cut = copy.deepcopy(model)
    keep_layers(cut, keep)
    with torch.no_grad():
        full = model(**inputs).logits
        with layer_mask(model, [i in keep for i in range(3)]):
            skipped = model(**inputs).logits
        removed = cut(**inputs).logits
    assert layer_ids(cut) == keep and len(layer_ids(model)) == 3
    assert (full - skipped).abs().max() > 1e-2  # the layer matters, so the check below can fail
    assert (removed - skipped).abs().max() <= 1e-5


@pytest.mark.parametrize("kind", KINDS)
def test_plan_surgery_equals_the_plans_masks(kind, one_thread):
    """Heads, neurons and a middle layer cut together, as a budget plan cuts them."""
    model = deep(kind)
    inputs = tiny_inputs(kind=kind)
    plan = UnitPlan(((0, 2), (), (1, 3)), ((1, 5, 30), (), ()), layers=(0, 2))  # the last layer keeps no neurons
    cut = copy.deepcopy(model)
    apply_unit_plan(cut, plan)
    heads, neurons, layers = plan.masks(4, intermediate_size(model.config))
    with torch.no_grad(), head_mask(model, heads), neuron_mask(model, neurons), layer_mask(model, layers):
        masked = model(**inputs).logits
    assert (cut(**inputs).logits - masked).abs().max() <= 1e-5
    assert layer_ids(cut) == [0, 2]


def test_layer_mask_refuses_a_wrong_shape_and_a_float_mask_has_gradients():
    model = deep("bert")
    with pytest.raises(ValueError, match=r"layer mask has shape \(2,\), model needs \(3,\)"):
        with layer_mask(model, [1, 0]):
            pass
    keep = torch.ones(3, requires_grad=True)
    with layer_mask(model, keep):
        model(**tiny_inputs()).logits.sum().backward()
    assert keep.grad is not None and keep.grad.abs().min() > 0


def test_a_plan_that_keeps_units_in_a_dropped_layer_is_refused():
    with pytest.raises(ValueError, match=r"drops layers \[1\] but keeps units in them"):
        UnitPlan(((0,), (1,)), ((), ()), layers=(0,))


# --- artifacts with removed layers ----------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_a_plan_with_dropped_layers_saves_reloads_and_costs_what_it_planned(kind, tmp_path, one_thread):
    tokenizer = tiny_tokenizer(tmp_path / "tok")
    model = deep(kind, vocab_size=max(99, len(tokenizer)), max_position_embeddings=128)
    costs, full = unit_flops(model, 16), flops_per_pair(model, 16)
    budget = int(0.5 * full)
    plan = plan_budget(random_scores(model), costs, budget, layers=[1, 2])  # the first layer dropped
    cut = copy.deepcopy(model)
    apply_unit_plan(cut, plan)
    saved = save_model(LoadedModel(cut, tokenizer, {"grades": [1, 2, 3, 4, 5], "max_length": 16}), tmp_path / "p")
    again = load_model(saved, attn_implementation="eager").model  # strict
    inputs = tiny_inputs(kind=kind)
    with torch.no_grad():
        assert torch.equal(again(**inputs).logits, cut(**inputs).logits)
    assert layer_ids(again) == [1, 2] and again.config.num_hidden_layers == 2
    assert flops_per_pair(again, 16) == plan.flops(costs) <= budget  # counted from the artifact
    assert plan.flops(costs) > 0.4 * full  # the freed FLOPs went to the other layers' units


def test_records_without_layer_ids_mean_every_layer(tmp_path):
    tokenizer = tiny_tokenizer(tmp_path / "tok")
    model = deep("bert", vocab_size=max(99, len(tokenizer)))
    saved = save_model(LoadedModel(model, tokenizer, {"grades": [1, 2, 3, 4, 5]}), tmp_path / "p")
    config = json.loads((saved / "config.json").read_text())
    assert config["headcut_shape"]["layer_ids"] == [0, 1, 2]
    del config["headcut_shape"]["layer_ids"]
    (saved / "config.json").write_text(json.dumps(config))
    meta = json.loads((saved / "headcut.json").read_text())
    del meta["shape_hash"]  # as saved before headcut.json recorded the shape's hash (and layer ids)
    (saved / "headcut.json").write_text(json.dumps(meta))
    assert layer_ids(load_model(saved).model) == [0, 1, 2]


def _old_folder(tmp_path, model, tokenizer, plan_record):
    """A pruned folder with headcut.json's prune record, as saved before headcut.json recorded shape_hash."""
    meta = {"grades": [1, 2, 3, 4, 5], "prune": {"plan": plan_record}}
    saved = save_model(LoadedModel(model, tokenizer, meta), tmp_path / "p")
    meta = json.loads((saved / "headcut.json").read_text())
    del meta["shape_hash"]
    (saved / "headcut.json").write_text(json.dumps(meta))
    return saved


@pytest.mark.parametrize("plan, ids, said", [
    (UnitPlan(((0, 1, 3), (), (2,), (0, 1, 2, 3)), ((1, 5), (), (2,), (3, 4)), layers=(0, 2, 3)), [0, 2, 7],
     "layer_ids is [0, 2, 7], but headcut.json's prune record kept layers [0, 2, 3] of the 4 of the model it was"),
    (UnitPlan(((0, 1, 3), (), (2,), (0, 1, 2, 3)), ((1, 5), (), (2,), (3, 4)), layers=(0, 2, 3)), [0, 1, 3],
     "layer_ids is [0, 1, 3], but headcut.json's prune record kept layers [0, 2, 3]"),
    (HeadPlan(((0, 1), (2,), (0, 1, 2, 3)), 4), [0, 1, 5],
     "layer_ids is [0, 1, 5], but headcut.json's prune record kept layers [0, 1, 2] of the 3"),
    (HeadPlan(((0, 1), (2,), (0, 1, 2, 3)), 4), [0, 1],
     "layer_ids has 2 entries, but num_hidden_layers is 3, one entry a layer"),
], ids=["past-the-source", "another-kept-layer", "heads-plan", "count"])
def test_layer_ids_edited_in_a_folder_without_a_shape_hash_are_refused(tmp_path, plan, ids, said):
    """Was: a folder saved before headcut.json recorded shape_hash loaded an edited layer_ids that kept its count and
    order (one past the 4 layers it was pruned from, too) with exit 0, labelling every later mask, score and plan
    wrongly; now checked against headcut.json's prune record (its plan lists every layer of the source), in one
    sentence naming config.json's key."""
    tokenizer = tiny_tokenizer(tmp_path / "tok")
    model = deep("bert", layers=len(plan.heads_per_layer), vocab_size=max(99, len(tokenizer)))
    (apply_unit_plan if isinstance(plan, UnitPlan) else apply_plan)(model, plan)
    saved = _old_folder(tmp_path, model, tokenizer, {"heads_per_layer": plan.heads_per_layer, **plan.to_dict()})
    assert layer_ids(load_model(saved).model) == layer_ids(model)  # as saved: loads
    config = json.loads((saved / "config.json").read_text())
    config["headcut_shape"]["layer_ids"] = ids
    (saved / "config.json").write_text(json.dumps(config))
    for read in (load_model, outline):
        with pytest.raises(UserError, match=re.escape(f"{saved / 'config.json'}: headcut_shape.{said}")):
            read(saved)


@pytest.mark.parametrize("kind", ["bert", "modernbert"])
def test_a_layer_removed_pruned_model_exports_with_parity(kind, tmp_path, one_thread):
    tokenizer = tiny_tokenizer(tmp_path / "tok")
    model = deep(kind, layers=4, attn="sdpa", vocab_size=max(99, len(tokenizer)), max_position_embeddings=128,
                 initializer_range=0.2)
    plan = UnitPlan(((0, 1, 3), (), (2,), (0, 1, 2, 3)), (tuple(range(20)), (), tuple(range(37)), (3, 4)),
                    layers=(0, 2, 3))
    apply_unit_plan(model, plan)
    saved = save_model(LoadedModel(model, tokenizer, {"grades": [1, 2, 3, 4, 5], "max_length": 64}), tmp_path / "p")
    loaded = load_model(saved, attn_implementation="sdpa")
    from headcut.export import FP32_TOLERANCE, export_onnx

    result = _parity(loaded.model, export_onnx(loaded.model, tmp_path / "m.onnx"), loaded.tokenizer,
                     synthetic_pairs(48))
    assert result.max_abs_diff <= FP32_TOLERANCE and result.agreement == 1.0


def test_a_cross_encoder_twin_keeps_the_removed_layers_removed(tmp_path):
    """widen writes the kept layers at full width: plain transformers reads it and scores as headcut does."""
    from transformers import AutoModelForSequenceClassification

    tokenizer = tiny_tokenizer(tmp_path / "tok")
    model = deep("bert", num_labels=1, vocab_size=max(99, len(tokenizer)))
    apply_unit_plan(model, UnitPlan(((0, 2), (), (1,)), ((4, 9), (), tuple(range(37))), layers=(0, 2)))
    loaded = LoadedModel(model, tokenizer, {"task": "score", "activation": "sigmoid", "max_length": 16})
    save_cross_encoder(loaded, tmp_path / "ce")
    plain = AutoModelForSequenceClassification.from_pretrained(tmp_path / "ce").eval()
    inputs = tiny_inputs()
    with torch.no_grad():
        assert (plain(**inputs).logits - model(**inputs).logits).abs().max() <= 1e-5
    assert plain.config.num_hidden_layers == 2


@pytest.mark.parametrize("names,said", [("arguments", "drop_layers=False"), ("keys", "prune.drop_layers=false"),
                                        ("flags", "--no-drop-layers")])
def test_a_cross_encoder_of_modernbert_without_its_first_layer_is_refused(tmp_path, names, said):
    """Was: 'prune it without dropping layers (--no-drop-layers)' to a Python caller too."""
    tokenizer = tiny_tokenizer(tmp_path / "tok")
    model = deep("modernbert", num_labels=1, vocab_size=max(99, len(tokenizer)))
    keep_layers(model, [1, 2])
    loaded = LoadedModel(model, tokenizer, {"task": "score", "activation": "sigmoid"})
    with pytest.raises(UserError, match="lost the encoder layers below its layer 1") as caught:
        save_cross_encoder(loaded, tmp_path / "ce", **({} if names == "arguments" else
                                                        {"keep_layers_said":
                                                         prune_arguments.named("no_drop_layers", names)}))
    assert f"prune it without dropping layers ({said}) to write" in str(caught.value)


@pytest.mark.parametrize("names,said", [("arguments", "drop_layers=False"), ("keys", "prune.drop_layers=false"),
                                        ("flags", "--no-drop-layers")])
def test_how_each_caller_keeps_layers_is_spelled_in_the_prune_table_alone(names, said):
    """Was: arch/surgery.py's KEEP_LAYERS, a second spelling table beside prune_arguments.SPELLED (which spells
    no_tune the same way). Now its callers pass prune_arguments.named's spelling to save_cross_encoder, which passes it
    to widen; save_cross_encoder's default, a Python caller's, is checked against the table (models uses no pruner's
    declarations)."""
    import inspect

    from headcut.arch import surgery
    from headcut.prune_arguments import named

    assert named("no_drop_layers", names) == said
    assert inspect.signature(save_cross_encoder).parameters["keep_layers_said"].default == named("no_drop_layers")
    assert not any(isinstance(value, dict) and set(value) & {"arguments", "keys", "flags"}
                   for value in vars(surgery).values())


# --- the search -----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind,seed,share", [("bert", 0, 0.3), ("bert", 2, 0.5), ("deberta-v2", 0, 0.3),
                                             ("bert", 1, 0.5)])
def test_the_search_never_returns_a_plan_further_from_the_model_than_all_layers(kind, seed, share, one_thread):
    model = deep(kind, layers=4, initializer_range=0.3, seed=seed)
    enc = toy_encoded(kind, n=40)
    scores = unit_fisher(model, enc, batch_size=8)
    costs, budget = unit_flops(model, 12), int(share * flops_per_pair(model, 12))
    search = choose_layer_drops(model, scores, costs, budget, enc, batch_size=16)
    everything = plan_budget(scores, costs, budget)
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())  # masks only, all removed
    logits = predict_logits(model, None, None, encoded=enc)
    assert search.baseline == pytest.approx(plan_divergence(model, everything, enc, logits), rel=1e-6)
    assert search.divergence == pytest.approx(plan_divergence(model, search.plan, enc, logits), rel=1e-6)
    assert search.divergence <= search.baseline
    assert search.plan.flops(costs) <= budget and not any(search.plan.heads[i] for i in search.dropped)
    first_round = [t for t in search.trials if t.round == 1]
    assert sorted(t.layer for t in first_round) == [0, 1, 2, 3]
    if search.dropped:  # every kept drop beat the best candidate of its round and the plan before it
        assert search.divergence == min(t.divergence for t in search.trials if t.round == len(search.dropped))
    else:
        assert search.plan == everything and min(t.divergence for t in first_round) >= search.baseline


def test_the_search_drops_a_layer_on_a_model_where_that_pays(one_thread):
    """Seeded: on this tiny BERT at 0.3 of its FLOPs, dropping the first layer brings the plan closer."""
    model = deep("bert", layers=4, initializer_range=0.3, seed=0)
    enc = toy_encoded("bert", n=40)
    costs = unit_flops(model, 12)
    search = choose_layer_drops(model, unit_fisher(model, enc, batch_size=8), costs,
                                int(0.3 * flops_per_pair(model, 12)), enc, batch_size=16)
    assert search.dropped == [0] and search.divergence < 0.5 * search.baseline
    assert search.to_dict()["kept"] == [1, 2, 3] and len(search.to_dict()["trials"]) == 4 + 3


# --- the prune and its command --------------------------------------------------------------------


def run(*args):
    return CliRunner().invoke(app, ["prune", *map(str, args)])


def test_flops_prune_with_drop_layers_records_the_search_and_reloads(tmp_path, tiny_grader):  # noqa: F811
    grader, _ = tiny_grader
    out = tmp_path / "drop"
    result = run("--model", grader, "--flops", 0.3, "--drop-layers", "--out", out, "--calibrate", 40,
                 "--bootstrap", 50, "--no-timing")
    assert result.exit_code == 0, result.output
    assert "Layer search on 40 calibration pairs" in result.output
    pruned = load_model(out)
    record = pruned.meta["prune"]
    search, budget = record["budget"]["layer_search"], record["budget"]
    assert search["dropped"]  # seeded: this tiny grader at 0.3 of its FLOPs loses a layer
    assert record["drop_layers"] is True and record["plan"]["layers"] == search["kept"]
    assert layer_ids(pruned.model) == search["kept"]
    assert search["divergence"] <= search["divergence_all_layers"]
    assert flops_per_pair(pruned.model, budget["seq_len"]) == budget["plan_flops"] <= budget["budget_flops"]
    for dropped in search["dropped"]:
        assert f"{dropped} (dropped)" in result.output
    refused = run("--model", out, "--flops", 0.5, "--out", tmp_path / "again", "--no-timing")
    assert refused.exit_code == 2 and "is already pruned (it kept layers" in refused.output


def test_drop_layers_needs_flops(tmp_path, tiny_grader):  # noqa: F811
    grader, _ = tiny_grader
    result = run("--model", grader, "--latency", 0.5, "--drop-layers", "--out", tmp_path / "x")
    assert result.exit_code == 2 and "--drop-layers works with --flops F, not with --latency S" in result.output
    assert "Traceback" not in result.output


def test_tuning_fits_each_kept_layer_to_its_own_original(one_thread):
    """With the first layer removed, the student's layer 0 is the teacher's layer 1: tuning matches them."""
    from headcut.prune.tune import _capture, tune_scales

    teacher = deep("bert", initializer_range=0.3)
    student = copy.deepcopy(teacher)
    apply_unit_plan(student, UnitPlan(((), (0, 1, 3), (0, 1, 2, 3)), ((), tuple(range(0, 37, 2)), tuple(range(30))),
                                      layers=(1, 2)))
    enc = toy_encoded("bert", n=40)
    batch = collate(enc, [i for i in range(len(enc)) if i % 5 == 4])  # the held-out pairs the fits report on
    real = batch["attention_mask"].bool()
    target = _capture(teacher, layer_parts(teacher)[1], "attention", batch, units=False)["norm"][real]
    now = _capture(student, layer_parts(student)[0], "attention", batch, units=False)["norm"][real]
    fits = tune_scales(teacher, student, enc, batch_size=8)
    assert [(f.layer, f.sublayer) for f in fits] == [(0, "attention"), (0, "ffn"), (1, "attention"), (1, "ffn")]
    assert fits[0].error_before == pytest.approx(float(((now - target) ** 2).sum() / (target ** 2).sum()), rel=1e-4)
    assert all(f.error_after <= f.error_before for f in fits)


@pytest.mark.parametrize("search, share", [("as searched", 0.3), ("middle layer forced", 0.5)])
def test_layer_drops_stand_only_when_tuned_they_beat_every_layer_kept(search, share, tiny_grader,  # noqa: F811
                                                                       monkeypatch):
    """The search judges masked, untuned plans; tuning repairs thinned layers better than missing ones, so
    drops that looked best masked can be far worse once tuned. So with tuning,
    --drop-layers is never further from the unpruned model on the held-out calibration pairs than the same prune
    over all layers. Seen failing with the check removed: seeded, the forced drop of layer 1 at 0.5 is further
    from the unpruned model tuned (0.55) than all layers (0.50)."""
    import headcut.prune.pipeline as pipeline
    from headcut.batching import encode
    from headcut.prune import PruneSettings, prune_to_budget
    from headcut.prune.layers import LayerSearch, held_out_divergence
    from headcut_grader.data import read_pairs

    grader, dev = tiny_grader
    loaded, pairs = load_model(grader), read_pairs(dev)
    if search == "middle layer forced":
        def forced(teacher, scores, costs, budget, encoded, **_):
            plan = plan_budget(scores, costs, budget, layers=[0, 2])
            return LayerSearch(plan, 1.0, 0.5, [], len(encoded))

        monkeypatch.setattr(pipeline, "choose_layer_drops", forced)
    settings = PruneSettings(calibrate_rows=40, timing=False, bootstrap=20)
    dropped, kept = (prune_to_budget(loaded, flops=share, data=pairs, drop_layers=drop, settings=settings)
                     for drop in (True, False))
    calibration = encode(loaded.tokenizer, pairs.sample(40, seed=settings.seed + 1), max_length=24, model=loaded.model)
    reference = predict_logits(loaded.model, None, None, encoded=calibration)
    with_drops, every_layer = (held_out_divergence(r.pruned.model, calibration, reference) for r in (dropped, kept))
    assert with_drops <= every_layer + 1e-9
    record = dropped.budget["layer_search"]
    if record.get("tuned"):
        assert record["tuned"]["all_layers"] == pytest.approx(every_layer, rel=1e-4)
        assert record["dropped"] == (record["proposed"] if record["tuned"]["with_drops"] < every_layer else [])
    else:
        assert not record["dropped"]
