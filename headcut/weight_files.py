"""What a model folder's weights file holds, read before any weight is: the shards a safetensors index names,
and how many tensors and numbers the weights hold (from safetensors headers), so a config.json that describes
a larger model than its weights is refused before that model is built in memory."""
from __future__ import annotations

import math
from pathlib import Path

from headcut_grader.errors import UserError

AGAIN = "copy or download the model folder again"
PUT_BACK = f"put back the config.json saved with these weights, or {AGAIN}"


def shard_files(index: Path, weight_map) -> list[Path]:
    """The shard files of a safetensors index (its `weight_map`: parameter name -> file name in the folder)."""
    if not isinstance(weight_map, dict) or not weight_map:
        raise UserError(f"{index}: 'weight_map' must be an object of parameter names to shard files; {AGAIN}.")
    names = sorted(set(weight_map.values()), key=str)
    for name in names:
        if not isinstance(name, str) or not name or Path(name).name != name:
            raise UserError(f"{index}: 'weight_map' names the shard {name!r:.60}, which is not a file name in the "
                            f"folder; {AGAIN}.")
    return [index.parent / name for name in names]


def stored_counts(files: list[Path]) -> tuple[int, int]:
    """(tensors, numbers) the safetensors `files` hold, from their headers' shapes (no tensor is read)."""
    from safetensors import safe_open

    tensors = numbers = 0
    for path in files:
        with safe_open(str(path), framework="pt") as data:
            shapes = [data.get_slice(key).get_shape() for key in data.keys()]
        tensors, numbers = tensors + len(shapes), numbers + sum(math.prod(s) for s in shapes)
    return tensors, numbers


def check_sizes(config_file: Path, sizes: dict, tensors: int, numbers: int) -> None:
    """Each size config.json gives (`sizes`: key -> value; num_hidden_layers at most one layer a stored tensor,
    the others at most the numbers stored), so building the model's outline stays within the file's own size."""
    for key, value in sizes.items():
        most = tensors if key == "num_hidden_layers" else numbers
        if isinstance(value, int) and value > most:
            what = "tensors" if key == "num_hidden_layers" else "numbers"
            raise UserError(f"{config_file}: {key} is {value:,}, more than the {most:,} {what} its weights hold; "
                            f"{PUT_BACK}.")


def check_weights_cover(config_file: Path, model, numbers: int) -> None:
    """The encoder `model` (built on the meta device from `config_file`) has no more weights than its weights
    file holds (`numbers`): its classification head and pooler may be new, every other weight comes from the
    file. A config of another model (a vocabulary of 10^9) would otherwise be allocated before the load fails."""
    base = getattr(model, model.base_model_prefix, model)
    body = sum(p.numel() for name, p in base.named_parameters() if not name.startswith("pooler."))
    if body > numbers:
        raise UserError(f"{config_file} describes an encoder of {body:,} weights, but its weights hold only "
                        f"{numbers:,}; {PUT_BACK}.")
