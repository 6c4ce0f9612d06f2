"""Head and FFN-neuron masks as forward pre-hooks (transformers 5 ignores `head_mask`).

A head mask is a `(num_layers, num_heads)` float tensor indexed by the ORIGINAL head ids (the unpruned
model's numbering, also in a pruned model; columns of heads a layer no longer has are ignored), 1 = keep,
0 = drop; fractional values scale a head's output, and gradients flow to the mask (gradient/Fisher
importance). A `(num_layers, batch, num_heads)` mask gives every example in the batch its own mask (many
ablations in one forward, or per-example mask gradients). Neuron masks are the same with FFN neurons:
`(num_layers, intermediate_size)` or `(num_layers, batch, intermediate_size)`, original neuron ids.
Masking a unit equals slicing it out of the weights (`arch.keep_heads`, `arch.keep_neurons`) up to float
rounding: the tests bound the difference by 1e-5 (the sliced matmul sums fewer terms).
A layer mask is a `(num_layers,)` tensor over the layers the model has: a skipped layer (0) passes its input
hidden state on unchanged, as `arch.keep_layers` without it computes.
"""
from __future__ import annotations

from contextlib import contextmanager

import torch

from headcut.arch import architecture, encoder_layers, intermediate_size, layer_parts, mask_shape


def _scale_hook(mask_row: torch.Tensor, ids: list[int], group: int):
    """Multiply the last dimension of the hooked input, in blocks of `group`, by mask_row[..., ids]."""
    index = torch.tensor(ids, device=mask_row.device)

    def hook(module, args):
        (x, *rest) = args
        m = mask_row.index_select(-1, index).to(x.dtype)
        count = len(ids)
        m = m.view(1, 1, count, 1) if m.dim() == 1 else m.view(m.shape[0], 1, count, 1)  # per-example: (batch, units)
        shape = x.shape
        x = (x.reshape(shape[0], -1, count, group) * m).view(shape)
        return (x, *rest)

    return hook


def _check(mask: torch.Tensor, expected: tuple[int, int], what: str) -> None:
    if mask.dim() not in (2, 3) or mask.shape[0] != expected[0] or mask.shape[-1] != expected[1]:
        raise ValueError(f"{what} mask has shape {tuple(mask.shape)}, model needs {expected} "
                         f"(or ({expected[0]}, batch, {expected[1]}))")


@contextmanager
def head_mask(model, mask: torch.Tensor):
    """Apply a head mask for the duration of the block.

    mask: (num_layers, num_heads) or (num_layers, batch, num_heads), original head ids; 1 = keep.
    Layers without heads are skipped.
    """
    _check(mask, mask_shape(model), "head")
    handles = []
    try:
        for p in layer_parts(model):
            if p.out is not None:
                handles.append(p.out.register_forward_pre_hook(_scale_hook(mask[p.index], p.head_ids, p.head_size)))
        yield
    finally:
        for h in handles:
            h.remove()


@contextmanager
def neuron_mask(model, mask: torch.Tensor):
    """Mask FFN neurons for the block: (num_layers, intermediate_size) or (num_layers, batch,
    intermediate_size), original neuron ids; 1 = keep. Layers without neurons are skipped."""
    _check(mask, (mask_shape(model)[0], intermediate_size(model.config)), "neuron")
    handles = []
    try:
        for p in layer_parts(model):
            if p.ffn_out is not None:
                handles.append(p.ffn_out.register_forward_pre_hook(_scale_hook(mask[p.index], p.neuron_ids, 1)))
        yield
    finally:
        for h in handles:
            h.remove()


def _skip_hook(keep: torch.Tensor, returns_tuple: bool):
    """Replace the layer's output h' by keep * h' + (1 - keep) * h, h its input hidden state: exactly h' at 1,
    exactly h at 0 (for finite values)."""

    def hook(module, args, kwargs, output):
        hidden = args[0] if args else kwargs["hidden_states"]
        out = output[0] if returns_tuple else output
        m = keep.to(out.dtype)
        mixed = m * out + (1 - m) * hidden
        return (mixed, *output[1:]) if returns_tuple else mixed

    return hook


@contextmanager
def layer_mask(model, keep):
    """Skip whole encoder layers for the block: `keep` is a (num_layers,) bool or float sequence over the layers
    the model has, 1 = keep, 0 = skip (the layer passes its input hidden state on, in the format the
    architecture's layer returns); a fractional value mixes the layer's output with its input, and gradients
    flow to a float mask. Skipped layers still run (the hook replaces their output)."""
    keep = torch.as_tensor(keep, dtype=torch.float32) if not torch.is_tensor(keep) else keep.float()
    layers = encoder_layers(model)
    if keep.shape != (len(layers),):
        raise ValueError(f"layer mask has shape {tuple(keep.shape)}, model needs ({len(layers)},)")
    returns_tuple = architecture(model).layer_returns_tuple
    handles = []
    try:
        for i, layer in enumerate(layers):
            handles.append(layer.register_forward_hook(_skip_hook(keep[i], returns_tuple), with_kwargs=True))
        yield
    finally:
        for h in handles:
            h.remove()


def ones_mask(model, *, requires_grad: bool = False) -> torch.Tensor:
    """A keep-everything (num_layers, num_heads) mask."""
    return torch.ones(mask_shape(model), requires_grad=requires_grad)


def ones_neuron_mask(model, *, requires_grad: bool = False) -> torch.Tensor:
    """A keep-everything (num_layers, intermediate_size) neuron mask."""
    return torch.ones(mask_shape(model)[0], intermediate_size(model.config), requires_grad=requires_grad)
