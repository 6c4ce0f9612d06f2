"""A short `training.train` run on a tiny model, for tests/test_training_distributed.py.

    python tests/two_process_train.py OUT                     # one process
    accelerate launch --multi_gpu --num_processes 2 tests/two_process_train.py OUT
    accelerate launch ... tests/two_process_train.py OUT nan  # the second process's loss turns NaN at its 3rd batch

Dropout is off, so a run's trajectory depends only on the batches: two processes that split each batch
must end where one process does. An extra module (like distill's hidden-state projections) is trained
alongside, to check that its gradients are averaged too. The main process writes OUT/final.pt.
"""
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import tiny_model  # noqa: E402

from headcut.batching import Encoded  # noqa: E402
from headcut.training import LoopSettings, train  # noqa: E402


def main(out: Path, nan: bool = False) -> None:
    from accelerate import PartialState

    from headcut_grader.errors import UserError

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = tiny_model("bert", attn="eager", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    projection = torch.nn.Linear(model.config.hidden_size, 8)
    start = {k: v.clone() for k, v in projection.state_dict().items()}
    rng = np.random.default_rng(0)
    n = 61  # with batch 7: uneven shards (4 + 3 rows) and a short last batch
    ids = [[2, *rng.integers(5, 90, size=int(rng.integers(3, 12))).tolist(), 3] for _ in range(n)]
    encoded = Encoded(ids, [[0] * len(x) for x in ids], 0)
    labels = torch.as_tensor(rng.integers(0, 5, n))

    calls = []

    def loss_fn(m, batch, rows):
        result = m(**batch, output_hidden_states=True)
        cls = result.hidden_states[-1][:, 0]
        loss = F.cross_entropy(result.logits, labels[rows]) + (projection(cls) - 1).pow(2).mean()
        calls.append(1)
        return loss * float("nan") if nan and PartialState().process_index == 1 and len(calls) == 3 else loss

    settings = LoopSettings(epochs=2, batch_size=7, learning_rate=3e-3, warmup_ratio=0.2, eval_every=5,
                            checkpoint_every=1000, seed=0)
    try:
        state = train(model, encoded, settings=settings, loss_fn=loss_fn, evaluate_fn=lambda m: {"spearman": 0.0},
                      work_dir=out / "work", save_best=lambda m, metrics: None, extra_modules=[projection])
    except UserError as e:  # every process says it stopped, and at which step
        (out / f"stopped-{PartialState().process_index}.txt").write_text(f"{len(calls)} {e}")
        return
    if PartialState().is_main_process:
        torch.save({"model": model.state_dict(), "projection": projection.state_dict(), "projection_start": start,
                    "steps": state.step, "examples": state.examples}, out / "final.pt")


if __name__ == "__main__":
    main(Path(sys.argv[1]), nan=sys.argv[2:] == ["nan"])
