"""A model folder's files as read before and while its model is built: which file holds the weights, the shards
a safetensors index names, how many tensors and numbers they hold (from safetensors headers, so a config.json that
describes a larger model than its weights is refused before that model is built in memory), the weights' hash, the
folder's JSON files, and one sentence naming the file for a library's error while any of them is read."""
from __future__ import annotations

import hashlib
import json
import math
import pickle
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from headcut_grader.errors import UserError, caller, named, setting
from headcut_grader.files import file_hash
from headcut_grader.ranges import checked_bool
from headcut_grader.readers import bounded_int, unique_keys
from headcut_grader.validation import read_small_text

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


def header_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """Each tensor's name and shape in the safetensors file `path`, from its header (no tensor is read)."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as data:
        return {key: tuple(data.get_slice(key).get_shape()) for key in data.keys()}


def stored_counts(files: list[Path]) -> tuple[int, int]:
    """(tensors, numbers) the safetensors `files` hold, from their headers' shapes (no tensor is read)."""
    tensors = numbers = 0
    for path in files:
        shapes = list(header_shapes(path).values())
        tensors, numbers = tensors + len(shapes), numbers + sum(math.prod(s) for s in shapes)
    return tensors, numbers


# the output layer's bias in every architecture of the table (a linear classifier, or a head ending in out_proj)
HEAD_BIASES = ("classifier.bias", "classifier.out_proj.bias")


def stored_outputs(weights: Path) -> int | None:
    """How many outputs the classifier saved in `weights` has, from the file's header (no tensor is read); None
    where it cannot tell (a pickle, an index of shards, no or several output layers)."""
    if weights.suffix != ".safetensors":
        return None
    with broken_file(weights):
        shapes = header_shapes(weights)
    heads = [shape for key, shape in shapes.items()
             if any(key == name or key.endswith(f".{name}") for name in HEAD_BIASES)]  # not pre_classifier
    return heads[0][0] if len(heads) == 1 and len(heads[0]) == 1 else None


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


WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")  # the order load_model reads


def weights_file(path: str | Path) -> Path | None:
    """The file holding a model folder's weights (what load_model would read), or None when it has none."""
    return next((Path(path) / n for n in WEIGHT_FILES if (Path(path) / n).exists()), None)


def find_weights(path: Path, *, allow_pickle: bool, flag: str = "find_weights path") -> Path:
    allow_pickle = checked_bool(allow_pickle, "allow_pickle")  # a truthy 'no' must not load code-running pickles
    for name in WEIGHT_FILES[:2]:
        if (path / name).exists():
            return path / name
    if (path / WEIGHT_FILES[2]).exists():
        if not allow_pickle:
            raise UserError(f"{setting(flag, path)} holds only pickle weights (pytorch_model.bin), which can run code "
                            f"when loaded; {_pickle_fix(flag)}.")
        return path / "pytorch_model.bin"
    raise UserError(f"{setting(flag, path)}: no weights (model.safetensors) in the folder.")


def _pickle_fix(flag: str) -> str:
    """What lets pickle weights load, for whoever named the folder by `flag` (errors.caller): a command's flag (or
    "", its positional argument) has --allow-pickle beside it, a Python call (`load_model source`) allow_pickle=True;
    a recipe's key (model, teacher.path, --set teacher.path) has no such key."""
    names = caller(flag)
    if names == "keys":
        return "convert them to safetensors (a recipe loads safetensors only)"
    said = named("allow_pickle", names, section="", spelled={"arguments": {"allow_pickle": "allow_pickle=True"}})
    return f"convert them to safetensors or pass {said} if you trust the source"


def read_state(weights: Path) -> dict:
    """A state dict from safetensors (one file or an index of shards) or, when allowed, a pickle."""
    if weights.suffix == ".bin":
        return _read_pickle_state(weights)
    return {k: v for shard in weight_shards(weights) for k, v in load_file(str(shard)).items()}


def weights_counts(weights: Path) -> tuple[int, int]:
    """(tensors, numbers) the weights hold: from safetensors headers, or a pickle's state (read here in full)."""
    if weights.suffix == ".bin":
        state = _read_pickle_state(weights)
        return len(state), sum(v.numel() for v in state.values())
    return stored_counts(weight_shards(weights))


def weights_hash(weights: Path) -> str:
    """What identifies the weights (the cache of a teacher's logits, a score file's model): the file's hash, or for
    an index the hashes of it and every shard (fine-tunes of one base save the same index). Hashed once per process
    while the files stay as they were (a distill recipe's check of a pruned student's recorded teacher, then the
    teacher's load, read a large teacher's weights once, not twice)."""
    files = [weights, *weight_shards(weights)] if weights.name.endswith(".index.json") else [weights]
    return _hash_of(tuple(files), tuple(_stamp(f) for f in files))


def tensors_hash(weights: Path) -> str:
    """What the weights hold, whichever files hold them: each tensor's name, dtype, shape and numbers (`state_hash`),
    so a model.safetensors re-saved in shards (save_pretrained(max_shard_size=...)) or as pytorch_model.bin hashes
    the same, which the files' own hashes (weights_hash) do not. Hashed once per process while the files stay as
    they were; tensors are read one at a time."""
    files = [weights, *weight_shards(weights)] if weights.name.endswith(".index.json") else [weights]
    return _tensors_hash_of(tuple(files), tuple(_stamp(f) for f in files))


def state_hash(state: dict) -> str:
    """tensors_hash of the tensors `state` holds by name (a model's state dict), as a weights file of them hashes."""
    return _combined(_tensor_digest(name, tensor) for name, tensor in state.items())


def _tensor_digest(name: str, tensor: torch.Tensor) -> tuple[str, str]:
    flat = tensor.detach().cpu().contiguous().reshape(-1)
    digest = hashlib.sha256(f"{name}\0{flat.dtype}\0{tuple(tensor.shape)}\0".encode())
    digest.update(flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b"")
    return name, digest.hexdigest()


def _combined(digests) -> str:
    """One hash of (name, digest) pairs, in name order (files and shards list tensors in their own orders)."""
    text = "".join(f"{name}\0{digest}\0" for name, digest in sorted(digests))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@lru_cache(maxsize=64)
def _tensors_hash_of(files: tuple[Path, ...], stamps: tuple) -> str:
    """tensors_hash of the weights `files` (an index first, then its shards) as they were at `stamps`."""
    from safetensors import safe_open

    if files[0].suffix == ".bin":
        return state_hash(_read_pickle_state(files[0]))
    digests = []
    for shard in files[1:] or files:
        with safe_open(str(shard), framework="pt") as data:
            digests += [_tensor_digest(key, data.get_tensor(key)) for key in data.keys()]
    return _combined(digests)


def _stamp(path: Path) -> tuple:
    """What changes whenever a file's content may have: its inode, size and modification and change times (a file
    replaced, or rewritten in place, even with its old modification time put back)."""
    stat = path.stat()
    return stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns


@lru_cache(maxsize=64)
def _hash_of(files: tuple[Path, ...], stamps: tuple) -> str:
    """weights_hash of `files` as they were at `stamps` (the key that tells a changed file apart)."""
    if len(files) == 1:
        return file_hash(files[0])
    return hashlib.sha256("".join(file_hash(f, length=64) for f in files).encode()).hexdigest()[:16]


def weight_shards(weights: Path) -> list[Path]:
    """The files holding the weights: a safetensors index's shards, else the file itself."""
    if weights.name.endswith(".index.json"):
        return shard_files(weights, read_json_file(weights).get("weight_map"))
    return [weights]


def _read_pickle_state(weights: Path) -> dict:
    """A pytorch_model.bin loaded weights-only, refused unless it holds tensors by parameter name."""
    try:
        state = torch.load(weights, map_location="cpu", weights_only=True)
    except OSError:
        raise  # unreadable: `broken_file` names it
    except Exception:  # noqa: BLE001  any other failure means the file holds something else (torch's text runs long)
        state = None
    if not isinstance(state, dict) or not all(isinstance(k, str) and torch.is_tensor(v) for k, v in state.items()):
        raise UserError(f"{weights} is not a PyTorch state dict (tensors by parameter name, as "
                        "torch.save(model.state_dict()) writes); replace it with the model's weights saved that "
                        "way, or as model.safetensors.")
    return state


def read_json_file(path: Path) -> dict:
    """A JSON object from a model folder's file, or a UserError naming the file."""
    data = read_json_value(path)
    if not isinstance(data, dict):
        raise UserError(f"{path} is damaged or incomplete (a JSON object was expected); copy or download the "
                        "model folder again.")
    return data


def read_json_value(path: Path):
    """The JSON value of a model folder's file (an object or a list), or a UserError naming the file."""
    try:
        return json.loads(read_small_text(path, what="model folder's file"),
                          object_pairs_hook=unique_keys(f"{path}: an object"), parse_int=bounded_int)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise UserError(f"{path} is damaged or incomplete (not valid JSON: {e}); copy or download the model "
                        "folder again.") from None


READ_ERRORS = (OSError, ValueError, RuntimeError, EOFError, KeyError, SafetensorError, pickle.UnpicklingError)


@contextmanager
def broken_file(path: Path, *, label: str | None = None, errors: tuple = READ_ERRORS,
                fix: str = "copy or download the model folder again"):
    """Turn a library's error while reading `path` into one sentence that names it and `fix`."""
    try:
        yield
    except UserError:
        raise
    except errors as e:
        raise UserError(f"{label or path} is damaged or incomplete ({_reason(e)}); {fix}.") from None


def _reason(error: Exception, limit: int = 200) -> str:
    """A library error's first line, or its first sentence when the line runs long; never cut mid-sentence."""
    lines = str(error).strip().splitlines() or [""]
    line = lines[0]
    if line.endswith(":") and len(lines) > 1 and len(line) + len(lines[1]) < limit:  # "field 'x':\n  why"
        line = f"{line} {lines[1].strip()}"
    first = line.split(". ")[0].rstrip(".") + "."
    if len(line) > limit:
        line = first if len(first) <= limit else ""
    return line or type(error).__name__
