"""What each head does, read from its attention on the data (no masking, no labels).

Per head, over the content tokens (not [CLS]/[SEP]/padding) of every pair:
- `previous` / `next`: share of tokens whose strongest attention goes to the previous / next token;
- `noop`: mean attention mass on [CLS] and [SEP] (a head "parked" there does little);
- `term_match`: mean mass from a token to identical tokens in the other text (query <-> title), over
  tokens that have such a twin;
- `boundary_f1`: the head links token t to t+1 (same word) when t's strongest attention is t+1; F1 of
  those links against the tokenizer's words (a WordPiece `##` piece or a SentencePiece piece without
  `▁` continues its word), or against a given word segmentation of the titles (`segmented_inputs`, for
  Chinese, where the uncased WordPiece splits every CJK character into its own piece and marks no `##`).
  A head that always looks at the next token links everything and scores low.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from headcut.arch import layer_parts, mask_shape
from headcut.batching import Encoded, collate, encode
from headcut_grader.data import Pairs
from headcut_grader.errors import UserError, quoted
from headcut.evaluate.attention import attention_batches, attention_weights

PROBES = ("previous", "next", "noop", "term_match", "boundary_f1")
# why a probe can measure no head on some data (its scores NaN throughout), as best_head's callers say it; and why
# the boundary probe has no union of heads (best_union)
UNMEASURED = {"term_match": "no pair repeats a token of its query in its title, so no head can match terms",
              "boundary_f1": "no word of a title spans two tokens, so there is no within-word link to find",
              "boundary_union": "no head links a token to the next token of its word, so no union of heads finds "
                                "a within-word link"}


@dataclass
class ProbeInputs:
    encoded: Encoded
    special_ids: set[int]
    sep_id: int
    continues: list[list[bool]] | None  # continues[i][t]: token t+1 is in the same word as token t
    tokens: list[list[str]] | None = None
    # only these t may count as t -> t+1 links (None: every pair of neighbours)
    candidates: list[list[bool]] | None = None


def probe_inputs(tokenizer, pairs: Pairs, *, max_length: int | None = None, model=None) -> ProbeInputs:
    """Token ids plus the reference word segmentation of each pair, from the tokenizer's pieces."""
    encoded = encode(tokenizer, pairs, max_length=max_length, model=model)
    tokens = [tokenizer.convert_ids_to_tokens(ids) for ids in encoded.input_ids]
    sentencepiece = any(t.startswith("▁") for row in tokens[:50] for t in row)
    if sentencepiece:
        continues = [[not nxt.startswith("▁") for nxt in row[1:]] + [False] for row in tokens]
    else:
        continues = [[nxt.startswith("##") for nxt in row[1:]] + [False] for row in tokens]
    # [UNK] stands for real text (most CJK characters in MiniLM's vocabulary), so it is content, not a no-op target
    special = set(tokenizer.all_special_ids) - {tokenizer.unk_token_id}
    return ProbeInputs(encoded, special, tokenizer.sep_token_id, continues, tokens)


def _word_of_char(title: str, words: list[str], where: str, said: str = "title_words") -> list[int]:
    """Word index of every character of `title` (-1 for whitespace), given words that spell it; `said`: what the
    caller calls those words (title_words, --seg-col)."""
    spelled = "".join(words)
    word_ids = [w for w, word in enumerate(words) for _ in word]
    out, j = [], 0
    for ch in title:
        if ch.isspace():
            out.append(-1)
            continue
        if j >= len(spelled) or spelled[j].casefold() != ch.casefold():
            raise UserError(f"{where}: the {said} words {quoted(' '.join(words))} do not spell the title "
                            f"{quoted(title)}; give the title's words separated by spaces.")
        out.append(word_ids[j])
        j += 1
    if j != len(spelled):
        raise UserError(f"{where}: the {said} words {quoted(' '.join(words))} are longer than the title "
                        f"{quoted(title)}.")
    return out


def segmented_inputs(tokenizer, pairs: Pairs, title_words: list[str], *, max_length: int | None = None,
                     model=None, said: str = "title_words") -> ProbeInputs:
    """Probe inputs whose word boundaries come from `title_words` (per pair, the title's words separated
    by spaces) instead of the tokenizer: title pieces t, t+1 are one word when the last character of t
    and the first of t+1 lie in the same word (pieces map to characters through the tokenizer's offsets).
    Only title neighbours are link candidates; the query has no reference segmentation. `said`: what the caller
    calls `title_words` in a refusal (scan's title_words, headcut probe's --seg-col)."""
    inputs = probe_inputs(tokenizer, pairs, max_length=max_length, model=model)
    continues, candidates = [], []
    for i, (ids, title, words) in enumerate(zip(inputs.encoded.input_ids, pairs.titles, title_words)):
        word_of = _word_of_char(title, str(words).split(), pairs.where(i), said)
        alone = tokenizer(title, add_special_tokens=False, return_offsets_mapping=True)
        start = ids.index(inputs.sep_id) + 1 if inputs.sep_id in ids else len(ids)
        while start < len(ids) and ids[start] == inputs.sep_id:  # RoBERTa separates the texts with </s></s>
            start += 1
        n = 0  # title pieces present in the pair (truncation may cut the end)
        while start + n < len(ids) and n < len(alone.input_ids) and ids[start + n] == alone.input_ids[n]:
            n += 1
        cont, cand = [False] * len(ids), [False] * len(ids)
        spans = alone["offset_mapping"]
        for t in range(n - 1):
            cand[start + t] = True
            cont[start + t] = word_of[spans[t][1] - 1] == word_of[spans[t + 1][0]]
        continues.append(cont)
        candidates.append(cand)
    return ProbeInputs(inputs.encoded, inputs.special_ids, inputs.sep_id, continues, inputs.tokens, candidates)


def _segments(ids: torch.Tensor, sep_id: int) -> torch.Tensor:
    """0 for the query, >= 1 for the title: how many [SEP]s come before each position."""
    is_sep = (ids == sep_id).long()
    return torch.cumsum(is_sep, 1) - is_sep


def _row_flags(flags: list[list[bool]], rows, like: torch.Tensor) -> torch.Tensor:
    """Per-token flags of the batch's pairs as a (batch, tokens) bool tensor shaped like `like`."""
    out = torch.zeros_like(like)
    for j, i in enumerate(rows):
        out[j, : len(flags[i])] = torch.tensor(flags[i], dtype=torch.bool, device=like.device)
    return out


@dataclass
class _Tally:
    """What probe_heads keeps between passes: per-head sums and the link table, never a pass's maps."""
    sums: dict[str, np.ndarray]
    present: np.ndarray
    counts: dict[str, int] = field(default_factory=lambda: {"tokens": 0, "twins": 0})
    link_preds: list[np.ndarray] = field(default_factory=list)  # per pass: (layers, width, candidates)
    link_true: list[np.ndarray] = field(default_factory=list)


@torch.inference_mode()
def probe_heads(model, inputs: ProbeInputs, *, batch_size: int = 32, progress=None) -> dict:
    """Probe scores `(layers, heads)` for each name in PROBES (NaN where a pruned layer lacks the head, and for
    every head where the data gives the probe nothing to measure: UNMEASURED),
    plus the best single boundary head and the greedy best union of heads ("boundary_union"). Passes of
    `batch_size` pairs at most (default: evaluate_arguments.PROBE_BATCH_SIZE), fewer where their attention maps
    would pass MAX_HELD_SCORES (`attention_batches`)."""
    layers, width = mask_shape(model)
    tally = _Tally({name: np.zeros((layers, width)) for name in ("previous", "next", "noop", "term_match")},
                   np.zeros((layers, width), dtype=bool))
    for rows in attention_batches(model, inputs.encoded, batch_size):
        _probe_pass(model, inputs, rows, tally)
        if progress:
            progress(len(rows))
    counts = tally.counts
    out = {name: tally.sums[name] / max(counts["tokens"], 1) for name in ("previous", "next", "noop")}
    # a mean over no twin is no number: 0 for every head made L0H0 the "best" term-matching head
    out["term_match"] = tally.sums["term_match"] / counts["twins"] if counts["twins"] else _unmeasured(tally)
    out["content_tokens"], out["twin_tokens"] = counts["tokens"], counts["twins"]
    if any(len(true) for true in tally.link_true):  # none where every title is one token (titles 'x', 'y')
        preds, truth = np.concatenate(tally.link_preds, axis=2), np.concatenate(tally.link_true)
        if truth.any():
            out.update(_boundary(preds, truth, tally.present))
        else:  # no word of two tokens: no link to find, so no F1 (was 0 for every head, and L0H0 "best")
            out.update(boundary_f1=_unmeasured(tally), boundary_links=0, boundary_candidates=int(len(truth)))
    for name in PROBES:
        if name in out:
            out[name] = np.where(tally.present, out[name], np.nan)
    return out


def _unmeasured(tally: _Tally) -> np.ndarray:
    return np.full(tally.present.shape, np.nan)


def best_head(probes: dict, name: str) -> tuple[int, int, float] | None:
    """(layer, head, score) of the head that scores above every other on probe `name`; None where none does: the
    probe measured no head (NaN throughout: see UNMEASURED), or two or more heads share the top score (every head
    alike, each head's boundary_f1 0, say; unmeasured says which)."""
    values = np.asarray(probes[name], dtype=float)
    top = _top(values) if np.isfinite(values).any() else []
    if len(top) != 1:
        return None
    layer, head = top[0]
    return layer, head, float(values[layer, head])


def _top(values: np.ndarray) -> list[tuple[int, int]]:
    """The (layer, head) of every measured head that has the top score, in order."""
    measured = np.where(np.isfinite(values), values, -np.inf)
    return [(int(layer), int(head)) for layer, head in np.argwhere(measured == measured.max())]


def best_union(probes: dict) -> dict | None:
    """The greedy union of boundary heads ({"heads": [[layer, head], ...], "f1": F1}); None where the probe found
    none: no boundary links to find (UNMEASURED["boundary_f1"]), or no head linking any within-word pair
    (UNMEASURED["boundary_union"]: its F1 NaN, where 'F1 0.000' over no heads read as a measured union)."""
    union = probes.get("boundary_union")
    return union if union and union["heads"] else None


def unmeasured(name: str, probes: dict | None = None) -> str:
    """Why probe `name` has no best head (best_head None), as `headcut probe` and the scan report say it: every head
    of `probes` scores alike, some share the top score (each named), or the probe measured none (UNMEASURED's
    reason)."""
    values = np.asarray(probes[name], dtype=float) if probes and name in probes else np.full(1, np.nan)
    top = _top(values) if np.isfinite(values).any() else []
    if len(top) > 1 and len(top) == np.isfinite(values).sum():
        return f"every head scores {values[top[0]]:.3f}, so no head is better than another"
    if len(top) > 1:
        heads = [f"L{layer}H{head}" for layer, head in top]
        listed = ", ".join(heads[:-1]) + f" and {heads[-1]}"
        return f"{listed} share the top score {values[top[0]]:.3f}, so no head is better than the others"
    return UNMEASURED.get(name, "no head measured")


def _probe_pass(model, inputs: ProbeInputs, rows, tally: _Tally) -> None:
    """Add one pass's rows to `tally`. A function of its own so the pass's maps die when it returns: as loop
    variables they would live on through the next pass's forward and double its peak."""
    device = next(model.parameters()).device
    batch = {k: v.to(device) for k, v in collate(inputs.encoded, rows).items()}
    ids = batch["input_ids"]
    real = batch["attention_mask"].bool()
    special = torch.zeros_like(real)
    for s in inputs.special_ids:
        special |= ids == s
    content = real & ~special
    seg = _segments(ids, inputs.sep_id)
    pos = torch.arange(ids.shape[1], device=device)
    twin = (ids[:, :, None] == ids[:, None, :]) & (seg[:, :, None] != seg[:, None, :])
    twin &= content[:, :, None] & content[:, None, :]
    has_twin = twin.any(-1)
    # candidates for a within-word link: t and t+1 both content tokens of the same text
    cand = torch.zeros_like(content)
    cand[:, :-1] = content[:, :-1] & content[:, 1:] & (seg[:, :-1] == seg[:, 1:])
    if inputs.candidates is not None:
        cand &= _row_flags(inputs.candidates, rows, content)
    if inputs.continues is not None:
        tally.link_true.append(_row_flags(inputs.continues, rows, content)[cand].cpu().numpy())
    maps, _ = attention_weights(model, batch)
    sums, head_ids = tally.sums, [p.head_ids for p in layer_parts(model)]
    links = np.zeros((*tally.present.shape, int(cand.sum())), dtype=bool)
    for layer, a in enumerate(maps):
        if a is None:
            continue
        h = head_ids[layer]
        tally.present[layer, h] = True
        a = a.float()
        top = a.argmax(-1)  # (batch, heads, queries)
        q = content[:, None, :].expand_as(top)
        sums["previous"][layer, h] += ((top == pos - 1) & q).sum((0, 2)).cpu().numpy()
        sums["next"][layer, h] += ((top == pos + 1) & q).sum((0, 2)).cpu().numpy()
        sums["noop"][layer, h] += ((a * special[:, None, None, :]).sum(-1) * q).sum((0, 2)).cpu().numpy()
        mass = (a * twin[:, None]).sum(-1)
        sums["term_match"][layer, h] += (mass * has_twin[:, None]).sum((0, 2)).cpu().numpy()
        links[layer, h] = (top == pos + 1).permute(1, 0, 2)[:, cand].cpu().numpy()  # (heads, candidates)
    tally.link_preds.append(links)
    tally.counts["tokens"] += int(content.sum())
    tally.counts["twins"] += int(has_twin.sum())


def _f1(pred: np.ndarray, truth: np.ndarray) -> np.ndarray:
    tp = (pred & truth).sum(-1)
    fp = (pred & ~truth).sum(-1)
    fn = (~pred & truth).sum(-1)
    return np.where(tp > 0, 2 * tp / np.maximum(2 * tp + fp + fn, 1), 0.0)


def _boundary(preds: np.ndarray, truth: np.ndarray, present: np.ndarray, *, max_union: int = 6) -> dict:
    """Per-head F1 of within-word links, and a greedy union (a link if any chosen head links)."""
    f1 = _f1(preds, truth)
    flat = preds.reshape(-1, preds.shape[-1])
    order = [i for i in np.argsort(-f1.flatten()) if present.flatten()[i]]
    chosen, best = [], 0.0
    union = np.zeros(preds.shape[-1], dtype=bool)
    for _ in range(max_union):
        gains = [(float(_f1(union | flat[i], truth)), i) for i in order if i not in chosen]
        if not gains:
            break
        score, pick = max(gains)
        if score <= best:
            break
        chosen.append(pick)
        best = score
        union |= flat[pick]
    width = preds.shape[1]
    return {
        "boundary_f1": f1,
        # no head links a within-word pair: no union to score (best_union None, UNMEASURED says why)
        "boundary_union": {"heads": [[int(i) // width, int(i) % width] for i in chosen],
                           "f1": best if chosen else float("nan")},
        "boundary_links": int(truth.sum()),
        "boundary_candidates": int(len(truth)),
    }


def example_attention(model, inputs: ProbeInputs, index: int) -> tuple[list[torch.Tensor | None], list[str]]:
    """Attention maps `(heads, tokens, tokens)` per layer for one pair, and its tokens (for the figure grid)."""
    batch = collate(inputs.encoded, [index])
    batch = {k: v.to(next(model.parameters()).device) for k, v in batch.items()}
    maps, _ = attention_weights(model, batch)
    tokens = inputs.tokens[index] if inputs.tokens else [str(i) for i in inputs.encoded.input_ids[index]]
    return [None if a is None else a[0].float().cpu() for a in maps], tokens
