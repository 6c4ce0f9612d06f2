"""INT8 quantisation of the unfused fp32 graph, and the measurements that pick how.

A pair's grade must not depend on the pairs that share its batch, so every recipe scales activations either
with ranges fixed at export from calibration pairs ("fixed": static quantisation, QDQ) or row by row at run
time ("per-row": ORT's MatMulNBits with 8-bit weights and int8 compute, which quantises each row's
activations in blocks of its own). Dynamic quantisation scales a whole activation tensor by the batch's range
(padding included), so a pair's grade moves with its neighbours (benchmarks/int8_batch.py measures it) and it
is not offered. Each recipe is judged on
what users feel: agreement with its own fp32 graph, Spearman drift, accuracy drop, grades alone vs in mixed
batches, and speed next to the fp32 graph's.
"""
from __future__ import annotations

import contextlib
import io
import logging
import re
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import torch

from headcut.arch import ARCHITECTURES, layer_parts
from headcut.export.gate import Int8Gate


@dataclass(frozen=True)
class Int8Choice:
    """One way to quantise. `scales`: fixed (static) or per-row (see the module docstring). `calibration`: how
    a fixed range is read from the calibration pairs (minmax: their extremes; percentile: the 99.999th
    percentile of |x|, so one outlier does not coarsen every step). `keep_fp32`: regexes over weight-node names
    left in fp32 ('last': the last layer); `outlier_ffn`: also keep the FFN down-projections of that many
    layers with the most outlying inputs."""

    name: str
    scales: str = "fixed"
    calibration: str = "minmax"
    per_channel: bool = True
    keep_fp32: tuple[str, ...] = ()
    outlier_ffn: int = 0


def _scope(path: str) -> str:
    """A module path as an ONNX node-name scope: TorchScript turns `a.layer.3.b` into `a/layer.3/b`."""
    return re.sub(r"\.(?!\d)", "/", path)


# Every table architecture's FFN down-projection, in any layer.
FFN_OUT = "|".join(sorted({re.escape(_scope(a.layers)) + r"\.\d+/" + re.escape(_scope(a.ffn_out)) + "/"
                           for a in ARCHITECTURES.values()}))
# One fixed scale per activation tensor is coarse where a tensor has outliers: the GELU output entering a FFN
# down-projection has max/rms ~90 in MiniLM's first layers (vs ~14 before attention), so later fixed recipes
# read ranges by percentile and keep the most outlying FFN down-projections in fp32. Per-row scales follow
# each pair's own range. The first recipe is the speed yardstick. Figures: benchmarks/int8_batch.py.
CHOICES = (
    Int8Choice("static-minmax"),
    Int8Choice("static-percentile", calibration="percentile"),
    Int8Choice("static-percentile-outlier-ffn-fp32", calibration="percentile", outlier_ffn=1),
    Int8Choice("static-percentile-ffn-out-fp32", calibration="percentile", keep_fp32=(FFN_OUT,)),
    Int8Choice("per-row-int8", scales="per-row"),
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
    found = re.search(r"layers?\.(\d+)/", name)  # ModernBERT's scope is layers.N
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


def quantize_int8(src: str | Path, dst: str | Path, *, calibration: list[dict],
                  choice: Int8Choice = CHOICES[0]) -> Path:
    """Write the INT8 version of the fp32 graph `src` to `dst`, as `choice` says; fixed scales are read from
    the `calibration` batches (dicts of int arrays; any widths)."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # ORT logs a pre-processing hint on the root logger at every call
    try:
        if choice.scales == "per-row":
            _quantize_per_row(src, dst, choice)
        else:
            _quantize_fixed(src, dst, calibration, choice)
    finally:
        root.setLevel(level)
    return Path(dst)


def _quantize_fixed(src, dst, calibration: list[dict], choice: Int8Choice) -> None:
    """Static QDQ: weights per channel, every weight MatMul's input range fixed from the calibration rows."""
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    method = {"minmax": CalibrationMethod.MinMax, "percentile": CalibrationMethod.Percentile}[choice.calibration]
    with contextlib.redirect_stdout(io.StringIO()):  # ORT's calibrators print their progress
        quantize_static(
            str(src), str(dst), _Calibration(src, calibration), quant_format=QuantFormat.QDQ,
            per_channel=choice.per_channel, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
            op_types_to_quantize=["MatMul", "Gemm"], nodes_to_exclude=fp32_nodes(src, choice),
            calibrate_method=method,
            # attention's activation x activation products stay fp32; 99.999: the percentile recipes' range
            extra_options={"MatMulConstBOnly": True, "CalibPercentile": 99.999},
        )


def _quantize_per_row(src, dst, choice: Int8Choice, *, block: int = 32) -> None:
    """MatMulNBits: 8-bit symmetric weights in blocks of `block` input channels; accuracy level 4 computes in
    int8 with each row's activations quantised per block at run time."""
    import onnx
    from onnxruntime.quantization import QuantFormat
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

    config = DefaultWeightOnlyQuantConfig(block_size=block, is_symmetric=True, accuracy_level=4, bits=8,
                                          quant_format=QuantFormat.QOperator)
    quantizer = MatMulNBitsQuantizer(onnx.load(str(src)), bits=8, block_size=block, is_symmetric=True,
                                     accuracy_level=4, nodes_to_exclude=fp32_nodes(src, choice), algo_config=config)
    quantizer.process()
    quantizer.model.save_model_to_file(str(dst))


class _Calibration:
    """ORT's calibration reader over the rows of `batches`, re-batched to one shape: every row padded to the
    widest, `size` rows a batch, a last short batch dropped (ORT's histograms stack every batch)."""

    def __init__(self, graph: str | Path, batches: list[dict], size: int = 32):
        import onnx

        if not batches:
            raise ValueError("static INT8 quantisation needs at least one calibration batch")
        names = [i.name for i in onnx.load(str(graph), load_external_data=False).graph.input]
        width = max(np.asarray(b["input_ids"]).shape[1] for b in batches)
        rows = {n: np.concatenate([_pad(np.asarray(b[n], dtype=np.int64), width) for b in batches]) for n in names}
        size = min(size, len(rows["input_ids"]))
        starts = range(0, len(rows["input_ids"]) - size + 1, size)
        self._batches = iter([{n: x[i:i + size] for n, x in rows.items()} for i in starts])

    def get_next(self) -> dict | None:
        return next(self._batches, None)

    def __iter__(self):
        return self._batches


def _pad(x: np.ndarray, width: int) -> np.ndarray:
    """Right-pad with 0: a 0 attention mask hides the padded positions, whatever id they hold."""
    return np.pad(x, ((0, 0), (0, width - x.shape[1])))


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
    batch_changes: int = 0  # grades that differ between a pair graded alone and inside a mixed batch
    batch_drift: float = 0.0  # the largest |expected grade alone - in a batch| over those pairs
    # the quality figures the pairs cannot measure (NaN above; evaluate.tasks.NOT_MEASURABLE says why), unjudged
    not_measured: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        from headcut.evaluate.tasks import shown

        return (f"{self.choice}: agreement {shown(self.agreement, '.2%')}, Spearman "
                f"{shown(self.spearman_drift, '+.4f')}, drop {shown(self.accuracy_drop, '+.2f')} pt, batch drift "
                f"{self.batch_drift:.3f}, "
                f"x{self.speed_vs_fp32:.2f} of fp32")


def fastest_passing(trials: list[Int8Trial]) -> Int8Trial | None:
    """The fastest trial that passes its gate; None when none does. A faster graph that fails the gate
    (or the default INT8 yardstick, when it was only timed) is never chosen."""
    passing = [t for t in trials if t.passes]
    return min(passing, key=lambda t: t.seconds) if passing else None


def gate_table(trials: list[Int8Trial]) -> str:
    """Every trial's figures in one line, for the message of a gate that no graph passes."""
    return "; ".join(t.describe() for t in trials)


def batch_dependence(run, encoded, grades, *, rows: int = 64, batch_size: int = 16, seed: int = 0,
                     model=None) -> tuple[int, float]:
    """Grade `rows` of the encoded pairs one at a time and again in shuffled batches of mixed lengths (each
    padded to its longest): how many grades change, and the largest change of the expected grade. `model`: the one
    the graph was exported from; a graph of an eager-attention model builds its (batch, heads, L, L) scores, so its
    mixed batches are cut as the model's scoring passes are (`evaluate.attention.bounded`)."""
    from headcut.batching import collate
    from headcut.evaluate.attention import bounded
    from headcut.evaluate.metrics import expected_grade
    from headcut.export.export import run_session

    picked = np.random.default_rng(seed).permutation(len(encoded))[:rows]
    alone = np.concatenate([run_session(run, collate(encoded, [i])) for i in picked])
    batches = [picked[k:k + batch_size] for k in range(0, len(picked), batch_size)]
    if model is not None:
        batches = bounded(model, encoded, batches, layers_held=False)
    mixed = np.concatenate([run_session(run, collate(encoded, rows)) for rows in batches])
    changes = int(np.sum(alone.argmax(axis=1) != mixed.argmax(axis=1)))  # a one-score graph has none

    def value(logits):  # what ranks a pair: the expected grade, or a score model's raw score
        return logits[:, 0] if logits.shape[1] == 1 else expected_grade(logits, grades)

    return changes, float(np.max(np.abs(value(alone) - value(mixed)), initial=0.0))


def judge(logits: np.ndarray, fp32_logits: np.ndarray, labels, grades, *, seconds: float,
          default_seconds: float, fp32_seconds: float, choice: str, gate: Int8Gate,
          batch: tuple[int, float] = (0, 0.0), groups=None) -> Int8Trial:
    """One INT8 graph's figures against its fp32 graph on the same labelled pairs; `batch`: its
    batch_dependence. A one-score graph (`labels`: gold scores, `groups`: the pairs' query groups) is judged on
    ranking: agreement = within-query pairs ordered as fp32 orders them, and `accuracy_drop` = the drop of
    within-query pair accuracy against the gold, in points."""
    from headcut.evaluate.metrics import agreement, summarize
    from headcut.evaluate.ranking import order_kept, score_summary
    from headcut.evaluate.tasks import unmeasured

    if logits.shape[1] == 1:  # the points alone: a gate reads no CI
        mine, ref = score_summary(logits[:, 0], labels, groups), score_summary(fp32_logits[:, 0], labels, groups)
        agree = order_kept(logits[:, 0], fp32_logits[:, 0], groups)
        accuracy = "pair_accuracy"
    else:
        mine, ref = summarize(logits, labels, grades), summarize(fp32_logits, labels, grades)
        agree, accuracy = agreement(logits, fp32_logits), "accuracy"
    # NaN where the pairs cannot measure a figure (one gold value, no query of two titles): the gate skips it
    figures = {"agreement": agree, "spearman": mine["spearman"] - ref["spearman"],
               accuracy: 100 * (ref[accuracy] - mine[accuracy])}
    trial = Int8Trial(
        choice=choice,
        agreement=agree,
        spearman_drift=figures["spearman"],
        accuracy_drop=figures[accuracy],
        not_measured=unmeasured(figures),
        max_abs_diff=float(np.max(np.abs(logits - fp32_logits))),
        seconds=seconds,
        speed_vs_default=default_seconds / seconds,
        speed_vs_fp32=fp32_seconds / seconds,
        batch_changes=batch[0],
        batch_drift=batch[1],
    )
    trial.passes = gate.passes(trial)
    return trial
