"""Head and FFN-neuron masks as forward pre-hooks (transformers 5 ignores `head_mask`).

A head mask is a `(num_layers, num_heads)` float tensor, 1 = keep, 0 = drop; fractional values scale
a head's output, and gradients flow to the mask (gradient/Fisher importance). A `(num_layers, batch,
num_heads)` mask gives every example in the batch its own mask (many ablations in one forward).
Masking a head is exactly equal to slicing it out of the weights (see `arch.keep_heads`).
"""
from __future__ import annotations

from contextlib import contextmanager

import torch

from headcut.arch import layer_parts, mask_shape


def _head_hook(mask_row: torch.Tensor, num_heads: int, head_size: int):
    def hook(module, args):
        (x, *rest) = args
        m = mask_row[..., :num_heads].to(x.dtype)
        if m.dim() == 1:
            m = m.view(1, 1, num_heads, 1)
        else:  # per-example masks: (batch, heads)
            m = m.view(m.shape[0], 1, num_heads, 1)
        shape = x.shape
        x = (x.view(*shape[:-1], num_heads, head_size) * m).view(shape)
        return (x, *rest)

    return hook


@contextmanager
def head_mask(model, mask: torch.Tensor):
    """Apply a head mask for the duration of the block.

    mask: (num_layers, num_heads) or (num_layers, batch, num_heads); 1 = keep. In a pruned model
    layer l uses its first `heads_l` columns. Layers without heads are skipped.
    """
    expected = mask_shape(model)
    parts = layer_parts(model)
    if mask.shape[0] != expected[0] or mask.shape[-1] < max(1, max((p.num_heads for p in parts), default=1)):
        raise ValueError(f"head mask has shape {tuple(mask.shape)}, model needs {expected}")
    handles = []
    try:
        for p in parts:
            if p.out is None:
                continue
            row = mask[p.index]
            handles.append(p.out.register_forward_pre_hook(_head_hook(row, p.num_heads, p.head_size)))
        yield
    finally:
        for h in handles:
            h.remove()


@contextmanager
def neuron_mask(model, masks: list[torch.Tensor]):
    """Mask FFN neurons: masks[l] has one entry per intermediate neuron of layer l, 1 = keep."""
    handles = []
    try:
        for p, m in zip(layer_parts(model), masks):
            def hook(module, args, m=m):
                (x, *rest) = args
                return (x * m.to(x.dtype), *rest)

            handles.append(p.ffn_out.register_forward_pre_hook(hook))
        yield
    finally:
        for h in handles:
            h.remove()


def ones_mask(model, *, requires_grad: bool = False) -> torch.Tensor:
    """A keep-everything (num_layers, num_heads) mask."""
    return torch.ones(mask_shape(model), requires_grad=requires_grad)
