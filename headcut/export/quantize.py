"""INT8 dynamic quantisation of the unfused fp32 graph, and the measurements that pick how.

Default dynamic quantisation (every MatMul/Gemm/Gather, one scale per tensor) changed ~9% of a MiniLM
teacher's grades while accuracy looked unchanged, so each way of quantising is judged on what users feel:
agreement with its own fp32 graph, Spearman drift, accuracy drop, and speed next to the default's.
"""
from __future__ import annotations

import logging
import re
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch

from headcut.arch import ARCHITECTURES, layer_parts


@dataclass(frozen=True)
class Int8Choice:
    """One way to quantise. `keep_fp32`: regexes over weight-node names left in fp32 ('last': the last layer);
    `outlier_ffn`: also keep the FFN down-projections of that many layers with the most outlying inputs."""

    name: str
    per_channel: bool = False
    op_types: tuple[str, ...] | None = None  # None: everything ORT can quantise (incl. embedding Gathers)
    keep_fp32: tuple[str, ...] = ()
    outlier_ffn: int = 0


def _scope(path: str) -> str:
    """A module path as an ONNX node-name scope: TorchScript turns `a.layer.3.b` into `a/layer.3/b`."""
    return re.sub(r"\.(?!\d)", "/", path)


# Every table architecture's FFN down-projection, in any layer.
FFN_OUT = "|".join(sorted({re.escape(_scope(a.layers)) + r"\.\d+/" + re.escape(_scope(a.ffn_out)) + "/"
                           for a in ARCHITECTURES.values()}))
# Cheapest first. Dynamic INT8 scales each activation tensor by its max, so one outlier coarsens every
# step: the GELU output entering a FFN down-projection has max/rms ~90 in MiniLM's first layers (vs ~14
# before attention). Measured on the Home Depot teacher (2,000 dev pairs): default 90.6% agreement,
# per-channel 96.7%, + the most outlying layer's FFN-out in fp32 97.3% at default speed, + every FFN-out
# 97.9% at 0.87x. Leaving embeddings/classifier (MatMul only) or the last layer in fp32 bought nothing (96.6%).
CHOICES = (
    Int8Choice("default"),
    Int8Choice("per-channel", per_channel=True),
    Int8Choice("per-channel-outlier-ffn-fp32", per_channel=True, outlier_ffn=1),
    Int8Choice("per-channel-2-outlier-ffn-fp32", per_channel=True, outlier_ffn=2),
    Int8Choice("per-channel-ffn-out-fp32", per_channel=True, keep_fp32=(FFN_OUT,)),
)
CHOICE_NAMES = tuple(c.name for c in CHOICES)


@torch.no_grad()
def outlier_scores(model, batches: list[dict]) -> list[float]:
    """Per layer: max |x| / rms(x) of the FFN down-projection's input over `batches` (calibration data);
    0 for a layer whose FFN was pruned away (nothing to keep in fp32)."""
    parts = layer_parts(model)
    peaks, squares, counts = {}, {}, {}
    handles = []
    for p in parts:
        if p.ffn_out is None:
            continue

        def record(module, args, i=p.index):
            x = args[0].abs()
            peaks[i] = max(peaks.get(i, 0.0), float(x.max()))
            squares[i] = squares.get(i, 0.0) + float(x.pow(2).mean())
            counts[i] = counts.get(i, 0) + 1
        handles.append(p.ffn_out.register_forward_pre_hook(record))
    try:
        for batch in batches:
            model(**batch)
    finally:
        for h in handles:
            h.remove()
    return [peaks[i] / max((squares[i] / counts[i]) ** 0.5, 1e-12) if i in peaks else 0.0 for i in range(len(parts))]


def ffn_out_pattern(model, layer: int) -> str:
    """The ONNX node-name regex of one layer's FFN down-projection (TorchScript names scopes by module path)."""
    target = layer_parts(model)[layer].ffn_out
    name = next(n for n, m in model.named_modules() if m is target)
    return re.escape("/" + _scope(name) + "/")


def resolve(choice: Int8Choice, model, batches: list[dict]) -> Int8Choice:
    """Turn `outlier_ffn` into concrete fp32 node patterns for this model, calibrated on `batches`."""
    if not choice.outlier_ffn:
        return choice
    scores = outlier_scores(model, batches)
    worst = [i for i in sorted(range(len(scores)), key=lambda i: -scores[i]) if scores[i] > 0][: choice.outlier_ffn]
    return replace(choice, keep_fp32=choice.keep_fp32 + tuple(ffn_out_pattern(model, i) for i in sorted(worst)))


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
                pattern != "last" and re.search(pattern, node.name)
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
    speed_vs_fp32: float  # fp32 graph's seconds / these seconds: what choosing INT8 over fp32 buys
    passes: bool = False

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Int8Gate:
    min_agreement: float = 0.97
    max_spearman_drift: float = 0.005
    max_drop: float = 1.0  # accuracy points
    # The alternative to an INT8 graph is the fp32 one, so that is the yardstick: a recipe slower than the
    # default INT8 (timing noise, or fp32 nodes kept) still beats shipping fp32 when it is clearly faster.
    min_speed_vs_fp32: float = 1.15

    def passes(self, trial: Int8Trial) -> bool:
        return (trial.agreement >= self.min_agreement and abs(trial.spearman_drift) <= self.max_spearman_drift
                and trial.accuracy_drop <= self.max_drop and trial.speed_vs_fp32 >= self.min_speed_vs_fp32)


def fastest_passing(trials: list[Int8Trial]) -> Int8Trial | None:
    """The fastest trial that passes its gate; None when none does. A faster graph that fails the gate
    (or the default INT8 yardstick, when it was only timed) is never chosen."""
    passing = [t for t in trials if t.passes]
    return min(passing, key=lambda t: t.seconds) if passing else None


def judge(logits: np.ndarray, fp32_logits: np.ndarray, labels, grades, *, seconds: float,
          default_seconds: float, fp32_seconds: float, choice: str, gate: Int8Gate) -> Int8Trial:
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
        speed_vs_fp32=fp32_seconds / seconds,
    )
    trial.passes = gate.passes(trial)
    return trial
