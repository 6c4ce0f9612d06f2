"""The whole `headcut finetune` and `headcut distill` commands under `accelerate launch --num_processes 2`,
for tests/test_training_distributed.py. ROOT holds base/, teacher/, finetune.yaml and distill.yaml.

    accelerate launch --multi_gpu --num_processes 2 tests/two_process_commands.py ROOT

Each command runs once straight through, and once interrupted (the library call with stop_after_steps,
as a kill would) then resumed by the command, which publishes the artifact.
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from headcut.cli.main import app  # noqa: E402
from headcut.distill import DistillRecipe, distill  # noqa: E402
from headcut.finetune import FinetuneRecipe, finetune  # noqa: E402
from headcut.recipes import load_recipe  # noqa: E402


def command(*args: str) -> None:
    app(list(args), standalone_mode=False)


def main(root: Path) -> None:
    torch.set_num_threads(1)
    recipe = str(root / "finetune.yaml")
    command("finetune", recipe, "--out", str(root / "straight"))
    finetune(load_recipe(FinetuneRecipe, recipe, kind="finetune"), root / "resumed", stop_after_steps=5)
    command("finetune", recipe, "--out", str(root / "resumed"))
    recipe = str(root / "distill.yaml")
    distill(load_recipe(DistillRecipe, recipe, kind="distill"), root / "student", stop_after_steps=5)
    command("distill", recipe, "--out", str(root / "student"))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
