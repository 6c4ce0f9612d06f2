"""ONNX Runtime graph optimisation (operator fusion), safe for pruned models.

ORT's BERT fusion builds one `Attention` op per layer with a single global `num_heads`. A pruned model
has a different head count per layer (and stubs where a layer lost all heads), so fusing attention with
the config's head count silently computes something else. We fuse attention only when every layer has
the same head count, and every optimised graph must pass the same parity gate as the plain export.
"""
from __future__ import annotations

import logging
from pathlib import Path


def attention_heads(heads_per_layer: list[int]) -> int | None:
    """The one head count attention fusion may use, or None when layers differ (or some have none)."""
    counts = set(heads_per_layer)
    if len(counts) == 1 and 0 not in counts:
        return counts.pop()
    return None


def optimize_graph(src: str | Path, dst: str | Path, *, hidden_size: int, heads_per_layer: list[int],
                   num_heads: int | None = None, plain_attention: bool = True) -> dict:
    """Fuse LayerNorm/GELU/bias ops (and attention when it is safe) from `src` into `dst`.

    `num_heads` forces attention fusion with that global head count: only for showing that the parity
    gate catches the corruption on an uneven-heads model. `plain_attention` False (relative or rotary
    positions) never fuses attention: ORT's BERT pattern has no place for them. Returns what was fused.
    """
    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model

    heads = num_heads if num_heads is not None else attention_heads(heads_per_layer) if plain_attention else None
    options = FusionOptions("bert")
    options.enable_attention = heads is not None
    options.enable_embed_layer_norm = False  # it expects the unpruned embedding pattern and 3 inputs
    logging.getLogger("onnxruntime.transformers").setLevel(logging.ERROR)  # its fusion chatter is not ours
    model = optimize_model(str(src), model_type="bert", num_heads=heads or 0, hidden_size=hidden_size if heads else 0,
                           optimization_options=options, opt_level=0, use_gpu=False)
    model.save_model_to_file(str(dst))
    return {"attention_fused": heads is not None, "num_heads": heads,
            "fused_ops": model.get_fused_operator_statistics()}
