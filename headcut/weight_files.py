"""What a model folder's weights file holds, read before any weight is: the shards a safetensors index names."""
from __future__ import annotations

from pathlib import Path

from headcut_grader.errors import UserError

AGAIN = "copy or download the model folder again"


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
