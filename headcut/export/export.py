"""PyTorch grader -> ONNX, and the parity gate every exported graph must pass before it is written.

The TorchScript exporter (`dynamo=False`) is chosen explicitly: torch >= 2.9 defaults to the dynamo
exporter, which traces transformers' mask code differently per release; the TorchScript path at opset 17
exports full, pruned (uneven heads, 0-head stubs, narrowed FFNs) and distilled BERTs with exact parity.
Attention is exported fused, one ORT MultiHeadAttention op per layer with that layer's head count (fuse.py).
"""
from __future__ import annotations

import warnings
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from headcut.arch import architecture, takes_token_types, usable_positions
from headcut.batching import collate, encode, length_batches
from headcut.evaluate.attention import scoring_batches
from headcut.model_arguments import check_model
from headcut_grader.data import Pairs
from headcut_grader.errors import UserError
from headcut.export.fuse import fused_attention

FP32_TOLERANCE = 1e-4  # max |logit difference| an fp32 graph may show against PyTorch
# Shapes the random part of the gate covers: single pairs, odd lengths, a full batch at full length.
RANDOM_SHAPES = ((1, 8), (3, 17), (8, 64), (2, 128))
# Real pairs per batch of the gate: a shape it covers (headcut_grader's Grader runs 32 by default), not a memory
# choice (an eager model's batches are cut by scoring_batches).
GATE_BATCH_SIZE = 32


class ParityError(UserError):
    """An exported (or optimised) graph disagrees with the model it came from."""


class GateError(ParityError):
    """No reduced-precision graph (INT8, bf16) passes the agreement gate; the fp32 graph still would."""


@dataclass
class Parity:
    """How closely an ONNX graph reproduces a reference on the same inputs."""

    max_abs_diff: float
    agreement: float  # share of rows with the same argmax
    rows: int
    shapes: list[list[int]] = field(default_factory=list)

    def passes(self, tolerance: float = FP32_TOLERANCE) -> bool:
        return self.max_abs_diff <= tolerance and self.agreement == 1.0

    def as_dict(self) -> dict:
        return {"max_abs_diff": self.max_abs_diff, "argmax_agreement": self.agreement, "rows": self.rows,
                "shapes": self.shapes}


class _LogitsOnly(torch.nn.Module):
    """ONNX graphs need tensors out, not a ModelOutput; token_type_ids are optional (DistilBERT has none)."""

    def __init__(self, model, set_mask=None):
        super().__init__()
        self.model = model
        self.set_mask = set_mask  # fused attention reads the padding mask from here

    def forward(self, input_ids, attention_mask, token_type_ids=None):
        if self.set_mask is not None:
            self.set_mask(attention_mask)
        kwargs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None:
            kwargs["token_type_ids"] = token_type_ids
        return self.model(**kwargs).logits


def input_names(model) -> list[str]:
    names = ["input_ids", "attention_mask"]
    if takes_token_types(model) and getattr(model.config, "type_vocab_size", 0) > 0:
        names.append("token_type_ids")
    return names


@torch.no_grad()
def export_onnx(model, path: str | Path, *, opset: int = 17, fuse: bool = True) -> Path:
    """Write `model` as an ONNX graph with dynamic batch and sequence axes; returns the path.

    `fuse` exports each layer's attention as one ORT MultiHeadAttention op (fuse.py); False traces it op by
    op, as transformers computes it (the graph ORT's own optimiser works on). Attention with relative or
    rotary positions (DeBERTa, ModernBERT) has no such op and is always traced op by op."""
    check_model(model, "export_onnx model")
    fuse = fuse and architecture(model).plain_attention
    was_training = model.training
    try:
        with (fused_attention(model) if fuse else nullcontext()) as set_mask:
            # eval() on the wrapper too: torch.onnx.export restores the wrapper's mode when it is done, and a
            # new module is in training mode, which used to leave `model` with dropout on after every export
            return _export(_LogitsOnly(model, set_mask).eval(), model, Path(path), opset)
    finally:
        model.train(was_training)


def _export(wrapper: _LogitsOnly, model, path: Path, opset: int) -> Path:
    model.eval()
    names = input_names(model)
    # Length 16 > any special-token count, batch 2 > 1: neither axis gets specialised to a constant.
    dummy = {n: torch.ones(2, 16, dtype=torch.long) for n in names}
    if "token_type_ids" in dummy:
        dummy["token_type_ids"].zero_()  # RoBERTa has a single token type
    dynamic = {n: {0: "batch", 1: "sequence"} for n in names}
    dynamic["logits"] = {0: "batch"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer warnings about Python control flow the gate checks anyway
        torch.onnx.export(
            wrapper,
            tuple(dummy[n] for n in names),
            str(path),
            dynamo=False,
            opset_version=opset,
            input_names=names,
            output_names=["logits"],
            dynamic_axes=dynamic,
            do_constant_folding=True,
        )
    return path


def session(path: str | Path, *, threads: int = 1, optimize: bool = True):
    """An ONNX Runtime CPU session. `optimize` is ORT's own session-level optimisation (its default, and what
    the grader runtime uses), so the parity gate checks the graph exactly as it will run."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                     else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    opts.log_severity_level = 3
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def run_session(sess, batch: dict) -> np.ndarray:
    """Logits of one batch (numpy or torch int tensors), feeding only the inputs the graph declares. `sess` is an
    ONNX Runtime session or any `run(batch) -> logits` (an OpenVINO graph's, say)."""
    if callable(sess):
        return sess(batch)
    wanted = [i.name for i in sess.get_inputs()]
    feed = {k: np.asarray(batch[k], dtype=np.int64) for k in wanted}
    return sess.run(["logits"], feed)[0]


def onnx_logits(sess, encoded, *, batch_size: int = 64, model=None, progress=None) -> np.ndarray:
    """Logits of every encoded pair, in input order (length-sorted batches, like predict_logits). `model`: the one
    the graph was exported from; a graph of an eager-attention model (DeBERTa) builds the same (batch, heads, L, L)
    scores, so its batches are cut like the model's own scoring passes (`scoring_batches`)."""
    out = None
    batches = length_batches(encoded, batch_size) if model is None else \
        scoring_batches(model, encoded, batch_size, layers_held=False)
    for rows in batches:
        got = run_session(sess, collate(encoded, rows))
        if out is None:
            out = np.zeros((len(encoded), got.shape[-1]), dtype=np.float32)
        out[rows] = got
        if progress:
            progress(len(rows))
    return out if out is not None else np.zeros((0, 0), dtype=np.float32)


def gate_batches(model, tokenizer, pairs: Pairs | None, *, max_length: int, rows: int = 256,
                 batch_size: int = GATE_BATCH_SIZE, seed: int = 0) -> list[dict]:
    """Inputs for the parity gate: real pairs in length-sorted batches, then random ids of several shapes."""
    names = input_names(model)
    batches = []
    if pairs is not None and len(pairs):
        encoded = encode(tokenizer, pairs.sample(rows, seed=seed), max_length=max_length, model=model)
        for idx in scoring_batches(model, encoded, batch_size, layers_held=False):
            batch = collate(encoded, idx)
            batches.append({k: v for k, v in batch.items() if k in names})
    g = torch.Generator().manual_seed(seed)
    vocab = model.config.vocab_size
    longest = min(max_length, usable_positions(model.config) or max_length)
    for b, n in RANDOM_SHAPES:
        n = min(n, longest)
        ids = torch.randint(1, vocab, (b, n), generator=g)
        mask = torch.ones(b, n, dtype=torch.long)
        mask[0, n // 2:] = 0  # a padded row, so the attention mask path is exercised
        batch = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in names:
            types = torch.zeros(b, n, dtype=torch.long)
            types[:, n // 3:] = int(model.config.type_vocab_size > 1)
            batch["token_type_ids"] = types
        batches.append(batch)
    return batches


@torch.no_grad()
def reference_logits(model, batches: list[dict]) -> list[np.ndarray]:
    model.eval()
    return [model(**batch).logits.float().numpy() for batch in batches]


def parity(reference: list[np.ndarray], sess, batches: list[dict]) -> Parity:
    """Compare a session's logits with reference logits on the same batches."""
    worst, same, total = 0.0, 0, 0
    for ref, batch in zip(reference, batches):
        got = run_session(sess, batch)
        worst = max(worst, float(np.max(np.abs(got - ref))))
        same += int(np.sum(got.argmax(1) == ref.argmax(1)))
        total += len(ref)
    shapes = sorted({tuple(np.asarray(b["input_ids"]).shape) for b in batches})
    return Parity(worst, same / max(total, 1), total, [list(s) for s in shapes])


def check_parity(result: Parity, *, what: str, tolerance: float = FP32_TOLERANCE) -> Parity:
    """Raise ParityError (fail loudly) unless `result` is within tolerance with 100% argmax agreement."""
    if not result.passes(tolerance):
        raise ParityError(
            f"{what} fails the parity gate: max |logit difference| {result.max_abs_diff:.2e} "
            f"(limit {tolerance:.0e}), argmax agreement {result.agreement:.2%} (need 100%) over {result.rows} rows; "
            "the graph is not written - report the model type and shapes, or export without that option."
        )
    return result
