"""The online teacher's pass of one distillation step, its attention maps bounded.

With an attention loss the teacher runs in eager attention and returns every layer's (B, H, T, T) maps; held for
the whole batch they would grow with batch x heads x T^2 x layers. So the teacher runs on consecutive pieces of the
batch whose maps (all its layers, at the batch's padded length) hold at most MAX_HELD_SCORES (the cap the probes
use), and of each piece keeps only what `attention_kl` reads: the head-averaged map of each layer the student is
matched to, (B, 1, T, T), None for the others. Logits and hidden states are the pieces' joined; the loss equals
the unsplit pass's within float tolerance (attention_kl averages heads first, so averaging earlier changes nothing).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from headcut.arch import heads_per_layer
from headcut.evaluate.attention import row_pieces


@dataclass
class TeacherOutput:
    """What the step's losses read of the teacher: logits (B, C), `output_hidden_states` or None, and attentions in
    `output_attentions`' order (layers without heads left out), None for a layer no student layer is matched to."""

    logits: torch.Tensor
    hidden_states: tuple | None
    attentions: tuple | None


@torch.no_grad()
def online_teacher(model, batch: dict, *, hidden: bool, attention_layers: set[int] | None) -> TeacherOutput:
    """The teacher's output on `batch`; `attention_layers` (teacher layer ids) asks for their attention maps."""
    if not attention_layers:
        out = model(**batch, output_hidden_states=hidden)
        return TeacherOutput(out.logits, out.hidden_states if hidden else None, None)
    with_heads = [layer for layer, n in enumerate(heads_per_layer(model)) if n]  # output_attentions' entries
    rows, length = batch["input_ids"].shape
    pieces = []
    for piece in row_pieces(model, rows, length, layers_held=True):
        out = model(**{k: v[piece] for k, v in batch.items()}, output_hidden_states=hidden, output_attentions=True)
        maps = [a.float().mean(1, keepdim=True) if layer in attention_layers else None
                for layer, a in zip(with_heads, out.attentions)]
        pieces.append(TeacherOutput(out.logits, out.hidden_states if hidden else None, tuple(maps)))
        del out  # the piece's full maps go before the next piece makes its own
    return TeacherOutput(torch.cat([p.logits for p in pieces]), _joined([p.hidden_states for p in pieces]),
                         _joined([p.attentions for p in pieces]))


def _joined(pieces: list[tuple | None]) -> tuple | None:
    """Per entry, the pieces' tensors joined along the batch (None stays None)."""
    if pieces[0] is None:
        return None
    return tuple(None if parts[0] is None else torch.cat(parts) for parts in zip(*pieces))
