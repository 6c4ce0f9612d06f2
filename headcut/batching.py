"""Tokenising pairs, dynamic padding and length buckets: shared by evaluation, training, distillation and export."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from headcut.arch import takes_token_types, usable_positions
from headcut_grader.data import Pairs
from headcut_grader.errors import UserError, fix_verb, lead_of, setting
from headcut_grader.tokens import empty_side, no_tokens_problem
from headcut.evaluate_arguments import checked_arguments
from headcut.model_arguments import check_model, check_tokenizer

DEFAULT_MAX_LENGTH = 128  # for models that record no token limit (plain Hugging Face folders)
RECORDED = "headcut_max_length"  # attribute load_model sets on a model: the token limit it was trained at


def max_length_of(model, max_length: int | None = None) -> int:
    """`max_length` when given, else the token limit `model` was trained at (its artifact's max_length),
    else DEFAULT_MAX_LENGTH or the model's positions where it has fewer. A model trained at 64 tokens is judged
    at 64, not at a library default, and a default is never one the model refuses."""
    if max_length is not None:
        return int(max_length)
    return int(getattr(model, RECORDED, None) or default_max_length(getattr(model, "config", None)))


def default_max_length(config) -> int:
    """The length a model of `config` is read at where nothing records one: DEFAULT_MAX_LENGTH, or its positions
    where it has fewer."""
    return min(DEFAULT_MAX_LENGTH, usable_positions(config) or DEFAULT_MAX_LENGTH)


@dataclass
class Encoded:
    """Token ids of every pair (unpadded), plus whether the model takes token type ids."""

    input_ids: list[list[int]]
    token_type_ids: list[list[int]] | None
    pad_id: int

    def __len__(self):
        return len(self.input_ids)

    def lengths(self) -> np.ndarray:
        return np.fromiter((len(x) for x in self.input_ids), dtype=np.int64, count=len(self.input_ids))


def check_max_length(model, max_length: int, *, flag: str = "check_max_length max_length", where: str = "",
                     whose: str = "the model's") -> None:
    """Refuse inputs longer than the model has position embeddings for (an index error deep in torch or ONNX).
    The sentence leads with `flag`, the flag or recipe key that set `max_length`; `where`: the recipe it was read
    from (its file and --set values), so a recipe's check names the value's source; `whose`: which model."""
    positions = usable_positions(getattr(model, "config", None))
    if positions is None or max_length <= positions:
        return
    raise UserError(f"{lead_of(where)}{setting(flag, max_length)} is more than {whose} {positions} "
                    f"positions; {fix_verb(flag)} {setting(flag, positions)} or less.")


def encode(tokenizer, pairs: Pairs, *, max_length: int | None = None, model=None) -> Encoded:
    """Tokenise query/title pairs as one sentence pair each. Pairs over `max_length` lose tokens from
    whichever side is longer at each step ('longest_first'), so a long query is cut as well as a title."""
    check_tokenizer(tokenizer, "encode tokenizer")
    if model is not None:
        check_model(model, "encode model")
    (max_length,) = checked_arguments("encode", max_length=max_length)
    max_length = max_length_of(model, max_length)
    if model is not None:
        check_max_length(model, max_length, flag="encode max_length")
    enc = tokenizer(pairs.queries, pairs.titles, truncation="longest_first", max_length=max_length)
    _refuse_tokenless(enc, pairs)
    use_types = "token_type_ids" in enc and (model is None or takes_token_types(model))
    return Encoded(enc["input_ids"], enc["token_type_ids"] if use_types else None, tokenizer.pad_token_id or 0)


def _refuse_tokenless(enc, pairs: Pairs) -> None:
    """The first pair one of whose texts the tokenizer reduces to no tokens (combining marks alone, U+FFFD), said as
    the grader says it: trained or judged on, it would be an empty text. A fast tokenizer's sequence ids tell it."""
    for i, encoding in enumerate(getattr(enc, "encodings", None) or ()):  # slow tokenizers and dicts keep none
        if side := empty_side(encoding.sequence_ids):
            problem = no_tokens_problem(pairs.queries[i] if side == "query" else pairs.titles[i], whose="the model's")
            raise UserError(f"{pairs.where(i)}, {side}: {problem}; fix that pair or drop it.")


def collate(encoded: Encoded, rows) -> dict[str, torch.Tensor]:
    """Pad the given rows to their longest member (dynamic padding)."""
    width = max(len(encoded.input_ids[i]) for i in rows)
    ids = torch.full((len(rows), width), encoded.pad_id, dtype=torch.long)
    attn = torch.zeros((len(rows), width), dtype=torch.long)
    types = torch.zeros((len(rows), width), dtype=torch.long) if encoded.token_type_ids is not None else None
    for j, i in enumerate(rows):
        n = len(encoded.input_ids[i])
        ids[j, :n] = torch.tensor(encoded.input_ids[i])
        attn[j, :n] = 1
        if types is not None:
            types[j, :n] = torch.tensor(encoded.token_type_ids[i])
    batch = {"input_ids": ids, "attention_mask": attn}
    if types is not None:
        batch["token_type_ids"] = types
    return batch


def length_batches(encoded: Encoded, batch_size: int) -> list[np.ndarray]:
    """Rows grouped so each batch holds pairs of similar length (less padding, ~1.7x faster here)."""
    (batch_size,) = checked_arguments("length_batches", batch_size=batch_size)
    order = np.argsort(encoded.lengths(), kind="stable")
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
