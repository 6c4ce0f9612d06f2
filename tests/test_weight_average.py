"""ema_decay: training evaluates, chooses and saves an exponential moving average of the weights
(training.WeightAverage), leaves the trained weights untouched, and resumes the average exactly."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from headcut.batching import Encoded
from headcut.training import LoopSettings, train
from tests.conftest import tiny_model
from tests.test_finetune import tiny_base, tiny_recipe  # noqa: F401 (tiny_base is a fixture)


def test_the_saved_model_is_the_average_of_the_weights_each_step_made(tmp_path):
    torch.manual_seed(0)
    model = tiny_model("bert", attn="eager", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    rng = np.random.default_rng(0)
    ids = [[2, *rng.integers(5, 90, size=6).tolist(), 3] for _ in range(40)]
    labels = torch.as_tensor(rng.integers(0, 5, 40))
    seen, saved, evaluations = [], [], []

    def weights(m):
        return {n: p.detach().clone() for n, p in m.named_parameters()}

    def loss_fn(m, batch, rows):
        seen.append(weights(m))  # the weights before this step's update
        return F.cross_entropy(m(**batch).logits, labels[rows])

    def evaluate_fn(m):
        evaluations.append(1)
        return {"spearman": float(len(evaluations))}  # every evaluation is the best so far: each is saved

    settings = LoopSettings(epochs=1, batch_size=8, learning_rate=5e-3, eval_every=1, checkpoint_every=100,
                            ema_decay=0.9)
    state = train(model, Encoded(ids, [[0] * 8] * 40, 0), settings=settings, loss_fn=loss_fn, evaluate_fn=evaluate_fn,
                  work_dir=tmp_path, save_best=lambda m, metrics: saved.append(weights(m)))
    steps = [*seen[1:], weights(model)]  # the weights after each step: the model holds its own again at the end
    assert state.step == len(steps) == 5
    expected = seen[0]
    for n, after in enumerate(steps, start=1):
        decay = min(0.9, (1 + n) / (10 + n))
        expected = {k: decay * expected[k] + (1 - decay) * after[k] for k in expected}
    for name, value in expected.items():
        assert torch.allclose(saved[-1][name], value, atol=1e-6), name
    assert max((saved[-1][k] - steps[-1][k]).abs().max() for k in expected) > 1e-4  # not the last step's weights


def test_a_run_with_an_average_resumes_exactly(tmp_path, tiny_base):  # noqa: F811
    from headcut.finetune import finetune

    recipe = tiny_recipe(tiny_base, ema_decay=0.9)
    straight = finetune(recipe, tmp_path / "straight")
    finetune(recipe, tmp_path / "resumed", stop_after_steps=7)
    resumed = finetune(recipe, tmp_path / "resumed")
    for key in ("accuracy", "spearman", "loss"):
        assert resumed["dev_metrics"][key] == pytest.approx(straight["dev_metrics"][key], abs=1e-6)
