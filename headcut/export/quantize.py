"""INT8 dynamic quantisation of the unfused fp32 graph, and the measurements that pick how.

Default dynamic quantisation (every MatMul/Gemm/Gather, one scale per tensor) changed ~9% of a MiniLM
teacher's grades while accuracy looked unchanged, so each way of quantising is judged on what users feel:
agreement with its own fp32 graph, Spearman drift, accuracy drop, and speed next to the default's.
"""
from __future__ import annotations

import logging
import re
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Int8Choice:
    """One way to quantise. `keep_fp32` lists name patterns of weight nodes left in fp32."""

    name: str
    per_channel: bool = False
    op_types: tuple[str, ...] | None = None  # None: everything ORT can quantise (incl. embedding Gathers)
    keep_fp32: tuple[str, ...] = ()


# Cheapest first. Embeddings (Gather) and the pooler/classifier (Gemm) are a sliver of the compute but
# their per-tensor scales are coarse; the FFN down-projection sees GELU outliers; the last layer feeds
# the classifier directly.
CHOICES = (
    Int8Choice("default"),
    Int8Choice("per-channel", per_channel=True),
    Int8Choice("matmul-per-channel", per_channel=True, op_types=("MatMul",)),
    Int8Choice("matmul-per-channel-last-fp32", per_channel=True, op_types=("MatMul",), keep_fp32=("last",)),
    Int8Choice("matmul-per-channel-ffn-out-fp32", per_channel=True, op_types=("MatMul",),
               keep_fp32=("output/dense",)),
)
CHOICE_NAMES = tuple(c.name for c in CHOICES)


def _layer_index(name: str) -> int | None:
    found = re.search(r"layer\.(\d+)/", name)
    return int(found.group(1)) if found else None


def fp32_nodes(onnx_path: str | Path, choice: Int8Choice) -> list[str]:
    """Names of weight MatMul/Gemm nodes the choice keeps in fp32 ('last' = every node of the last layer)."""
    import onnx

    graph = onnx.load(str(onnx_path), load_external_data=False).graph
    weights = {init.name for init in graph.initializer}
    nodes = [n for n in graph.node if n.op_type in ("MatMul", "Gemm") and any(i in weights for i in n.input)]
    last = max((i for i in (_layer_index(n.name) for n in nodes) if i is not None), default=None)
    keep = []
    for node in nodes:
        for pattern in choice.keep_fp32:
            if (pattern == "last" and last is not None and _layer_index(node.name) == last) or (
                pattern != "last" and pattern in node.name
            ):
                keep.append(node.name)
                break
    return keep


def quantize_int8(src: str | Path, dst: str | Path, choice: Int8Choice = CHOICES[0]) -> Path:
    """Write the dynamic INT8 version of the fp32 graph `src` to `dst`, as `choice` says."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # ORT logs a pre-processing hint on the root logger at every call
    try:
        quantize_dynamic(
            str(src),
            str(dst),
            weight_type=QuantType.QInt8,
            per_channel=choice.per_channel,
            op_types_to_quantize=list(choice.op_types) if choice.op_types else None,
            nodes_to_exclude=fp32_nodes(src, choice),
        )
    finally:
        root.setLevel(level)
    return Path(dst)


@dataclass
class Int8Trial:
    choice: str
    agreement: float  # with the fp32 graph, on the --data pairs
    spearman_drift: float  # int8 Spearman - fp32 Spearman
    accuracy_drop: float  # fp32 accuracy - int8 accuracy, in points
    max_abs_diff: float
    seconds: float  # median per batch of the timing shape
    speed_vs_default: float  # default seconds / these seconds (1.0 = as fast)
    passes: bool = False

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Int8Gate:
    min_agreement: float = 0.97
    max_spearman_drift: float = 0.005
    max_drop: float = 1.0  # accuracy points
    min_speed_vs_default: float = 1 / 1.15  # within 15% of default INT8's speed

    def passes(self, trial: Int8Trial) -> bool:
        return (trial.agreement >= self.min_agreement and abs(trial.spearman_drift) <= self.max_spearman_drift
                and trial.accuracy_drop <= self.max_drop and trial.speed_vs_default >= self.min_speed_vs_default)


def judge(logits: np.ndarray, fp32_logits: np.ndarray, labels, grades, *, seconds: float,
          default_seconds: float, choice: str, gate: Int8Gate) -> Int8Trial:
    """One INT8 graph's figures against its fp32 graph on the same labelled pairs."""
    from headcut.evaluate.metrics import agreement, summarize

    mine, ref = summarize(logits, labels, grades), summarize(fp32_logits, labels, grades)
    trial = Int8Trial(
        choice=choice,
        agreement=agreement(logits, fp32_logits),
        spearman_drift=mine["spearman"] - ref["spearman"],
        accuracy_drop=100 * (ref["accuracy"] - mine["accuracy"]),
        max_abs_diff=float(np.max(np.abs(logits - fp32_logits))),
        seconds=seconds,
        speed_vs_default=default_seconds / seconds,
    )
    trial.passes = gate.passes(trial)
    return trial
