"""Exact single-head ablation: the logits of the model with one head masked, for every head.

The naive scan runs the whole data set once per head (72 passes for MiniLM). The fast scan gives the
same numbers with less work (headcut/evaluate/partial_forward.py): per batch it runs the unmasked model
once and keeps each layer's attention sums; a mask in layer l then changes nothing below l, changes layer
l by one known term (so layer l costs only its FFN), and the last layer is computed at the [CLS] position
only, the one the classifier reads. The copies of a batch with each head of a layer masked are stacked
into one batch.
Both return `(num_layers, num_heads, pairs, classes)` logits; heads a pruned layer no longer has are NaN.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable

import numpy as np
import torch

from headcut.arch import layer_parts, mask_shape
from headcut.batching import Encoded, collate
from headcut.evaluate.attention import eager, rows_within, scoring_batches
from headcut.evaluate.partial_forward import (capture_attention, classify_first_token, finish_layer,
                                              last_layer_first_token, run_layers, without_heads)
from headcut.evaluate.predict import predict_logits
from headcut.masking import head_mask


def _device(model):
    return next(model.parameters()).device


@contextmanager
def first_token_only(model):
    """Run the last layer's feed-forward on the first ([CLS]) position only, the one the classifier reads.

    Exact for that position: the FFN acts row by row, and its (batch, 1, hidden) output broadcasts
    against the residual; the other rows become meaningless and are never read. Saves ~2/3 of the last
    layer, which every masked copy runs.
    """
    last = layer_parts(model)[-1]
    if last.ffn_in is None:  # a 0-neuron FFN stub: nothing to save
        yield
        return

    def first_row(module, args):
        return (args[0][:, :1], *args[1:])

    handle = last.ffn_in.register_forward_pre_hook(first_row)
    try:
        yield
    finally:
        handle.remove()


def _copies(model, n: int, length: int, max_rows: int) -> int:
    """Masked copies of an n-row batch per stacked forward: `max_rows` rows at most, and for an eager-attention model
    no more rows than keep one layer's attention scores within MAX_HELD_SCORES (`rows_within`)."""
    if eager(model):
        max_rows = min(max_rows, rows_within(model, length, layers_held=False))
    return max(1, max_rows // n)


def _empty(model, n: int) -> np.ndarray:
    layers, heads = mask_shape(model)
    return np.full((layers, heads, n, model.config.num_labels), np.nan, dtype=np.float32)


@torch.inference_mode()
def ablation_logits(
    model,
    encoded: Encoded,
    *,
    batch_size: int = 64,
    max_rows: int = 768,
    share: tuple[int, int] = (0, 1),
    progress: Callable[[int], None] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(base logits `(pairs, classes)`, logits with head (l, h) masked `(layers, heads, pairs, classes)`).

    `max_rows` caps the stacked batch (copies x pairs) of one forward: more is faster up to memory/cache limits.
    `share=(rank, processes)` runs only every processes-th masked forward (the rest stay NaN for
    `merge_shares`); the forwards are the same ones a single process runs, so the merged logits are identical.
    """
    rank, processes = share
    forward = 0
    model.eval()
    device = _device(model)
    base = np.zeros((len(encoded), model.config.num_labels), dtype=np.float32)
    out = _empty(model, len(encoded))
    parts = layer_parts(model)
    last = len(parts) - 1
    for rows in scoring_batches(model, encoded, batch_size, layers_held=False):
        batch = {k: v.to(device) for k, v in collate(encoded, rows).items()}
        with first_token_only(model), capture_attention(model) as (heads_out, pre_norm):
            logits = model(**batch).logits
        base[rows] = logits.float().cpu().numpy()
        n = len(rows)
        per_forward = _copies(model, n, batch["input_ids"].shape[1], max_rows)
        for part in parts:
            layer = part.index
            for first in range(0, part.num_heads, per_forward):
                forward += 1
                if (forward - 1) % processes != rank:
                    continue
                heads = part.head_ids[first:first + per_forward]
                copies = len(heads)
                stacked = {k: v.repeat(copies, 1) for k, v in batch.items()}
                # the last layer is needed at the first position only, the one the classifier reads
                cut = slice(None, 1) if layer == last else slice(None)
                hidden = finish_layer(model, part, without_heads(part, heads_out[layer][:, cut],
                                                                 pre_norm[layer][:, cut], heads))
                if layer < last:
                    hidden = run_layers(model, hidden, stacked, layer + 1, last)
                    hidden = last_layer_first_token(model, hidden, stacked["attention_mask"])
                masked = classify_first_token(model, hidden, stacked).float().cpu().numpy()
                for j, h in enumerate(heads):
                    out[layer, h, rows] = masked[j * n:(j + 1) * n]
        if progress:
            progress(n)
    return base, out


def merge_shares(parts: list[np.ndarray]) -> np.ndarray:
    """The `ablation_logits` of all processes as one: each entry comes from the process that computed it."""
    out = parts[0].copy()
    for part in parts[1:]:
        out = np.where(np.isnan(out), part, out)
    return out


def process_state():
    """accelerate's PartialState: this process's rank among those of `accelerate launch` (one when run plainly).

    `cpu` where no GPU is: accelerate then joins the processes over gloo (CPU-only `accelerate launch
    --multi_gpu --num_processes N`, or torchrun), instead of silently running each as a lone process."""
    import torch
    from accelerate import PartialState

    from headcut.process_group import close_at_exit

    state = PartialState(cpu=not torch.cuda.is_available())
    close_at_exit()
    return state


def distributed_ablation_logits(model, encoded: Encoded, *, batch_size: int = 64, max_rows: int = 768,
                                progress: Callable[[int], None] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """`ablation_logits` with the masked forwards split across the processes of `accelerate launch`,
    gathered so every process gets the full result; a plain single process runs `ablation_logits`."""
    state = process_state()
    if state.num_processes == 1:
        return ablation_logits(model, encoded, batch_size=batch_size, max_rows=max_rows, progress=progress)
    from accelerate.utils import gather_object

    base, part = ablation_logits(model, encoded, batch_size=batch_size, max_rows=max_rows, progress=progress,
                                 share=(state.process_index, state.num_processes))
    return base, merge_shares(gather_object([part]))


def naive_ablation_logits(model, encoded: Encoded, *, batch_size: int = 64,
                          progress=None) -> tuple[np.ndarray, np.ndarray]:
    """The reference: one full pass over the data per head, the same batches as the fast scan."""
    base = predict_logits(model, None, None, batch_size=batch_size, encoded=encoded)
    out = _empty(model, len(encoded))
    shape = mask_shape(model)
    for p in layer_parts(model):
        layer = p.index
        for h in p.head_ids:
            mask = torch.ones(shape)
            mask[layer, h] = 0
            with head_mask(model, mask):
                out[layer, h] = predict_logits(model, None, None, batch_size=batch_size, encoded=encoded)
        if progress:
            progress(layer)
    return base, out


@torch.inference_mode()
def masked_logits(model, encoded: Encoded, masks: torch.Tensor, *, batch_size: int = 64, max_rows: int = 768,
                  progress=None) -> np.ndarray:
    """Logits under each of several full head masks `(masks, layers, heads)` -> `(masks, pairs, classes)`.

    The masks share forwards by stacking masked copies of a batch (a per-example mask).
    """
    model.eval()
    device = _device(model)
    masks = masks.to(device=device, dtype=torch.float32)
    out = np.zeros((len(masks), len(encoded), model.config.num_labels), dtype=np.float32)
    for rows in scoring_batches(model, encoded, batch_size, layers_held=False):
        batch = {k: v.to(device) for k, v in collate(encoded, rows).items()}
        n = len(rows)
        per_forward = _copies(model, n, batch["input_ids"].shape[1], max_rows)
        for first in range(0, len(masks), per_forward):
            chunk = masks[first:first + per_forward]
            # (copies, layers, heads) -> (layers, copies * n, heads): copy j owns rows j*n..(j+1)*n
            per_example = chunk.repeat_interleave(n, dim=0).permute(1, 0, 2).contiguous()
            stacked = {k: v.repeat(len(chunk), 1) for k, v in batch.items()}
            with head_mask(model, per_example), first_token_only(model):
                logits = model(**stacked).logits.float().cpu().numpy()
            for j in range(len(chunk)):
                out[first + j, rows] = logits[j * n:(j + 1) * n]
        if progress:
            progress(n)
    return out
