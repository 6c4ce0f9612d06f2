"""The one scoring seam (headcut/evaluate/criteria.py): a criterion registered in one place is used by
`headcut scan`, `prune --keep-ratio` and `prune --flops`; a heads-only criterion cannot plan a FLOPs budget."""
import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from headcut.arch import flops_per_pair, unit_flops
from headcut.cli.main import app
from headcut.evaluate import criteria
from headcut.evaluate.fisher import UnitScores
from headcut.models import load_model
from headcut.prune.budget import check_budget, plan_budget
from tests.test_prune_cli import tiny_grader  # noqa: F401  (fixture)


def by_position(data):
    """A tiny criterion: later layers and higher ids are more important; neurons the same way."""
    layers, heads = criteria.mask_shape(data.model)
    head_scores = np.add.outer(10.0 * np.arange(layers), np.arange(heads))
    inter = data.model.config.intermediate_size
    neurons = np.add.outer(1000.0 * np.arange(layers), np.arange(inter)) if data.neurons else None
    return head_scores, neurons


@pytest.fixture
def registered(monkeypatch):
    """Register `position` for this test only (a test may run beside others in one process)."""
    monkeypatch.setitem(criteria.CRITERIA, "position", criteria.Criterion(
        "position", "upper units first", by_position, neurons=True))
    return by_position


def cli(*args):
    return CliRunner().invoke(app, [*map(str, args)])


def test_a_registered_criterion_serves_scan_and_the_budget_prune(registered, tiny_grader, tmp_path):  # noqa: F811
    grader, dev = tiny_grader
    scan = cli("scan", "--model", grader, "--data", dev, "--method", "position,kl", "--experiments", "none",
               "--no-probes", "--out", tmp_path / "scan")
    assert scan.exit_code == 0, scan.output
    written = json.loads((tmp_path / "scan" / "importance.json").read_text())["methods"]["position"]["scores"]
    assert written == np.add.outer(10.0 * np.arange(3), np.arange(4)).tolist()

    out = tmp_path / "flops"
    pruned = cli("prune", "--model", grader, "--flops", 0.5, "--method", "position", "--no-tune", "--no-timing",
                 "--out", out)
    assert pruned.exit_code == 0, pruned.output
    record = json.loads((out / "headcut.json").read_text())["prune"]
    assert record["scores"]["method"] == "position" and record["scores"]["targets"] is None
    source = load_model(grader)
    seq = record["budget"]["seq_len"]
    costs = unit_flops(source.model, seq)
    expected_scores = UnitScores(*(torch.as_tensor(t, dtype=torch.float64)
                                   for t in by_position(criteria.ScoringData(source.model, None, None, neurons=True))),
                                 None, 0, method="position")
    expected = plan_budget(expected_scores, costs, check_budget(0.5, costs, flops_per_pair(source.model, seq)))
    assert record["plan"]["heads"] == [list(h) for h in expected.heads]
    assert record["plan"]["neurons"] == [list(n) for n in expected.neurons]
    assert expected.heads_per_layer[-1] >= expected.heads_per_layer[0]  # the criterion, not Fisher, chose


def test_keep_ratio_prune_ranks_heads_by_a_registered_criterion(registered, tiny_grader, tmp_path):  # noqa: F811
    grader, _ = tiny_grader
    result = cli("prune", "--model", grader, "--keep-ratio", 0.5, "--method", "position", "--no-timing",
                 "--out", tmp_path / "half")
    assert result.exit_code == 0, result.output
    plan = json.loads((tmp_path / "half" / "headcut.json").read_text())["prune"]["plan"]
    assert sorted((layer, head) for layer, heads in enumerate(plan["keep"]) for head in heads) == [
        (1, 2), (1, 3), (2, 0), (2, 1), (2, 2), (2, 3)]  # the six of largest 10 * layer + head


def test_a_heads_only_criterion_cannot_plan_a_flops_budget(tiny_grader, tmp_path):  # noqa: F811
    grader, _ = tiny_grader
    result = cli("prune", "--model", grader, "--flops", 0.5, "--method", "kl", "--out", tmp_path / "x")
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "--method kl scores heads only, and --flops/--latency plan heads and FFN neurons; use fisher" in \
        result.output.replace("\n", " ")
    unknown = cli("prune", "--model", grader, "--flops", 0.5, "--method", "magic", "--out", tmp_path / "y")
    assert unknown.exit_code == 2 and "--method 'magic' is unknown; choose one of: ablation, kl" in unknown.output


def test_a_nan_from_any_criterion_is_one_sentence_before_planning(monkeypatch, tiny_grader, tmp_path):  # noqa: F811
    """The finite check lives in the seam: every criterion gets it, on both prune paths (and --latency's plan)."""
    def nan_unit(data):
        heads, neurons = by_position(data)
        (neurons if data.neurons else heads)[1, 2] = np.nan
        return heads, neurons

    monkeypatch.setitem(criteria.CRITERIA, "broken", criteria.Criterion("broken", "a NaN", nan_unit, neurons=True))
    grader, _ = tiny_grader
    for budget, unit in ((["--flops", 0.5], "neuron L1N2"), (["--keep-ratio", 0.5], "head L1H2")):
        result = cli("prune", "--model", grader, *budget, "--method", "broken", "--no-timing", "--out", tmp_path / "x")
        assert result.exit_code == 2, result.output
        assert f"broken scores: the score of {unit} is not a number (NaN)" in result.output.replace("\n", " ")
        assert not (tmp_path / "x").exists()


def test_scan_and_the_budget_prune_share_one_fisher(tiny_grader):  # noqa: F811
    """The scan's fisher (gold grades) and `prune --flops --targets grades` read the same mask-gradient pass."""
    from headcut.batching import encode
    from headcut.evaluate.criteria import ScoringData, criterion, head_importance
    from headcut.evaluate.importance import gold
    from headcut_grader.data import read_pairs

    grader, dev = tiny_grader
    loaded = load_model(grader)
    pairs = read_pairs(dev)
    scan_fisher = head_importance(loaded.model, loaded.tokenizer, pairs, method="fisher", batch_size=16)
    data = ScoringData(loaded.model, encode(loaded.tokenizer, pairs, model=loaded.model), gold(pairs),
                       targets="grades", neurons=True, batch_size=16)
    budget_fisher = criterion("fisher", neurons=True).score(data)
    assert torch.allclose(budget_fisher.heads.float(), scan_fisher, rtol=1e-6)
    assert budget_fisher.targets == "grades" and budget_fisher.neurons.shape == (3, 37)
    # without grades, the scan's fisher is the budget prune's default: the model's own expected Fisher
    from headcut.evaluate.fisher import unit_fisher
    from headcut_grader.data import Pairs

    unlabelled = Pairs(pairs.queries, pairs.titles, None)
    scan_teacher = head_importance(loaded.model, loaded.tokenizer, unlabelled, method="fisher", batch_size=16)
    expected = unit_fisher(loaded.model, encode(loaded.tokenizer, pairs, model=loaded.model), batch_size=16).heads
    assert torch.allclose(expected.float(), scan_teacher, rtol=1e-6)
    assert not torch.allclose(scan_teacher, scan_fisher, rtol=1e-2)  # gold and the model's own targets differ


@pytest.mark.parametrize("command", ["scan", "prune"])
def test_help_names_every_built_in_criterion(command):
    """The help text lists the criteria by hand (the registry needs torch, --help does not): it must name each one."""
    text = " ".join(CliRunner().invoke(app, [command, "--help"], terminal_width=400).output.split())
    missing = [name for name in criteria.CRITERIA if name not in text]
    assert not missing, f"headcut {command} --help does not name {missing}"
