"""Surgery, artifacts and measurements on tiny random models of every supported architecture."""
import json

import pytest
import torch

from headcut.arch import heads_per_layer, layer_parts
from headcut.masking import head_mask
from headcut.models import LoadedModel, load_model, resolve_source
from headcut.prune import (HeadPlan, PruneResult, PruneSettings, apply_plan, flops_per_pair, iterative_plan,
                           measure_latency, plan_heads, prune, pruned_copy, step_ratios, write_artifact)
from tests.conftest import TINY, need_minilm, tiny_inputs, tiny_model

KINDS = list(TINY)
# 3 layers, uneven heads and an empty middle layer
PLAN = HeadPlan(((0, 2, 3), (), (1,)), 4)


def deep(kind, **kw):
    """A 3-layer tiny model whose heads matter (large weights), so masking changes the logits visibly."""
    layers = {"n_layers": 3} if kind == "distilbert" else {"num_hidden_layers": 3}
    return tiny_model(kind, initializer_range=0.4, **layers, **kw)


def value_norm_scores(model):
    """An intrinsic per-head score (norm of its value rows) that survives slicing: for exact iterative checks."""
    out = torch.full((len(layer_parts(model)), 4), float("-inf"))
    for p in layer_parts(model):
        for j, h in enumerate(p.head_ids):
            out[p.index, h] = p.value.weight[j * p.head_size:(j + 1) * p.head_size].norm()
    return out


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_pruned_logits_equal_masked_full_model(kind, attn):
    model = deep(kind, attn=attn)
    inputs = tiny_inputs(kind=kind)
    with torch.no_grad():
        full = model(**inputs).logits
        with head_mask(model, PLAN.mask()):
            masked = model(**inputs).logits
        pruned = pruned_copy(LoadedModel(model, None), PLAN).model
        sliced = pruned(**inputs).logits
    assert heads_per_layer(pruned) == [3, 0, 1] and heads_per_layer(model) == [4, 4, 4]
    assert (full - masked).abs().max() > 1e-2  # the removed heads matter, so the check below can fail
    assert (sliced - masked).abs().max() <= 1e-5


def test_apply_plan_refuses_pruned_models_and_wrong_shapes():
    model = deep("bert")
    apply_plan(model, PLAN)
    with pytest.raises(ValueError, match="needs an unpruned model"):
        apply_plan(model, PLAN)
    with pytest.raises(ValueError, match="plan is for 2x4 heads"):
        apply_plan(deep("bert"), HeadPlan(((0,), (1,)), 4))


@pytest.fixture(scope="module")
def tokenizer():
    need_minilm()
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(resolve_source("minilm-l6"))


@pytest.mark.parametrize("kind", KINDS)
def test_artifact_round_trips_with_report(tmp_path, tokenizer, kind):
    source = LoadedModel(deep(kind, attn="sdpa", vocab_size=30522), tokenizer,
                         {"grades": [1, 2, 3, 4, 5], "max_length": 32, "kind": "finetune", "dev_metrics": {"x": 1}},
                         str(tmp_path / "src"), "abc")
    pruned = pruned_copy(source, PLAN)
    result = PruneResult(
        pruned, source, request={"keep_ratio": 0.33, "layer_prior": 1.0, "min_heads": 0, "iterative": 0},
        plan={"num_heads": 4, "total": 12, "kept": 4, "heads_per_layer": PLAN.heads_per_layer, **PLAN.to_dict()},
        scores={"method": "test"}, speed={"seq_len": 9, "params": {"before": 10, "after": 8},
                                          "flops": {"before": 10, "after": 5}, "ideal_speedup": 2.0})
    out = write_artifact(result, tmp_path / "out")
    again = load_model(out, attn_implementation="sdpa")
    inputs = tiny_inputs(kind=kind)
    with torch.no_grad():
        assert torch.equal(again.model(**inputs).logits, pruned.model(**inputs).logits)
    assert heads_per_layer(again.model) == [3, 0, 1]
    meta = json.loads((out / "headcut.json").read_text())
    assert meta["kind"] == "prune" and meta["source"]["weights_hash"] == "abc" and "dev_metrics" not in meta
    assert meta["prune"]["plan"]["keep"] == [[0, 2, 3], [], [1]] and meta["max_length"] == 32
    assert (out / "kept_per_layer.png").stat().st_size > 1000
    assert "| heads | 3 | 0 | 1 |" in (out / "report.md").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temp folders left behind


def test_iterative_with_fixed_scores_equals_one_shot():
    model = deep("bert")
    seen = []
    plan, pruned = iterative_plan(model, value_norm_scores, 0.5, steps=3, layer_prior=0.0,
                                  progress=lambda step, p: seen.append(p.num_kept))
    assert seen == [round(r * 12) for r in step_ratios(0.5, 3)] == [10, 8, 6]
    assert plan == plan_heads(value_norm_scores(model), 0.5, layer_prior=0.0)
    assert heads_per_layer(pruned) == plan.heads_per_layer and heads_per_layer(model) == [4, 4, 4]
    inputs = tiny_inputs()
    with torch.no_grad(), head_mask(model, plan.mask()):
        assert (model(**inputs).logits - pruned(**inputs).logits).abs().max() <= 1e-5


def test_flops_count_matrix_multiplies_per_head():
    model = deep("bert")
    n, d, inter, heads, labels = 10, 32, 37, 4, 5
    attention = 2 * n * d * d * 4 + 2 * n * n * d * 2  # q, k, v, out; q.k and weights x values
    ffn = 2 * n * d * inter * 2
    head = 2 * d * d + 2 * d * labels  # pooler + classifier on one token
    assert flops_per_pair(model, n) == 3 * (attention + ffn) + head
    apply_plan(model, PLAN)  # 3 + 0 + 1 heads of 4: attention costs 4/12 of before
    assert flops_per_pair(model, n) == attention * 4 // heads + 3 * ffn + head


def test_latency_is_measured_for_each_model_and_batch():
    small = pruned_copy(LoadedModel(deep("bert"), None), PLAN).model
    rows = measure_latency([deep("bert"), small], seq_len=8, batch_sizes=(1, 4), min_seconds=0.05, min_runs=3)
    assert [[r["batch_size"] for r in m] for m in rows] == [[1, 4], [1, 4]]
    assert all(r["ms"] > 0 and r["runs"] >= 3 and r["pairs_per_second"] > 0 for m in rows for r in m)


def test_prune_pipeline_on_synthetic_pairs(tokenizer):
    from headcut.synthetic import synthetic_pairs

    loaded = LoadedModel(deep("bert", attn="sdpa", vocab_size=30522), tokenizer, {"max_length": 32})
    pairs = synthetic_pairs(60, seed=1)
    events = []
    result = prune(loaded, keep_ratio=0.5, layer_prior=1.0, data=pairs, method="fisher", eval_data=pairs,
                   settings=PruneSettings(timing=False, bootstrap=50),
                   progress=lambda stage, n, total: events.append((stage, total)))
    pruned, summary = result.pruned, result.record()
    assert summary["plan"]["kept"] == 6 and sum(heads_per_layer(pruned.model)) == 6
    assert {("scoring", 60), ("grading", 120)} == set(events)  # stage totals: both models grade the 60 pairs
    quality = summary["quality"]
    assert quality["before"]["n"] == 60 and 0 <= quality["paired"]["agreement"]["value"] <= 1
    delta = quality["after"]["loss"] - quality["before"]["loss"]
    assert quality["paired"]["loss"]["delta"] == pytest.approx(delta, abs=1e-9)
    assert summary["speed"]["ideal_speedup"] > 1 and "latency" not in summary["speed"]
    assert heads_per_layer(loaded.model) == [4, 4, 4]  # the source is untouched


def test_a_model_pruned_in_its_ffn_only_is_already_pruned():
    """Was: only layers and heads were counted, so an FFN-only pruned model was pruned again as if whole."""
    from headcut.arch import keep_neurons
    from headcut.models import LoadedModel
    from headcut.prune.scores import check_unpruned
    from headcut_grader.errors import UserError

    model = tiny_model("bert")
    width, layers = model.config.intermediate_size, model.config.num_hidden_layers
    check_unpruned(LoadedModel(model, None, {}, "whole"))
    keep_neurons(model, [list(range(width // 2))] * layers)
    with pytest.raises(UserError, match=rf"^loaded=cut is already pruned \(\[{width // 2}, .*\] FFN neurons per "
                                        rf"layer of {width}\)"):
        check_unpruned(LoadedModel(model, None, {}, "cut"))
