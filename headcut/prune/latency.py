"""Pruning to a measured latency budget: per-sublayer cost tables and a search against them.

FLOPs and milliseconds disagree on a CPU: a small matmul is slow per FLOP, and embeddings, LayerNorm,
softmax and per-call overhead do not shrink with the units removed. So `--latency S` times the model's
own layer at the deployment shape (batch x sequence): a one-layer copy with k heads and no FFN for every
k, and with no heads and an FFN w wide for a grid of widths. Every encoder layer of these models has the
same shape, so one table serves all layers; the cost of a model is then

    fixed + sum over layers of attention_ms(heads_l) + ffn_ms(neurons_l)

with `fixed` the one-layer copy with neither (embeddings, classifier, the stubs' LayerNorms). A `Timer`
times the copies on the runtime that will serve: PyTorch here (`torch_timer`), ONNX Runtime fp32 or INT8 in
`headcut.export.layer_timer`. Tables are cached per machine, runtime and shape. The search is a
Lagrangian relaxation: each (layer, sublayer) keeps its top-k units where value - lambda x ms is largest,
lambda bisected until the cost fits, then the budget left is filled greedily by value per millisecond.
"""
from __future__ import annotations

import copy
import hashlib
import json
import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from headcut.arch import intermediate_size, keep_heads, keep_layers, keep_neurons, mask_shape
from headcut_grader.errors import UserError, counted, setting
from headcut_grader.validation import MAX_RECORD_BYTES, read_small_text
from headcut.evaluate.fisher import UnitScores, check_unit_scores
from headcut.prune.budget import UnitPlan
from headcut.prune.measure import dummy_batch, measure_latency
from headcut.prune.plan import layer_weights
from headcut.timing import Runtime, cpu_info

WIDTHS = 12  # FFN widths timed: 0 and 12 even steps up to the full width


@dataclass(frozen=True)
class LayerCosts:
    """Measured milliseconds per batch of `batch` x `seq_len`: one layer's attention by heads kept (0..H),
    its FFN at `widths`, and the fixed part outside the encoder layers."""

    heads_ms: list[float]
    widths: list[int]
    ffn_ms: list[float]
    fixed_ms: float
    layers: int
    batch: int
    seq_len: int
    runtime: str
    machine: str

    def attention(self, heads: int) -> float:
        return self.heads_ms[heads]

    def ffn(self, neurons) -> np.ndarray:
        return np.interp(neurons, self.widths, self.ffn_ms)

    def total(self, heads: list[int], neurons: list[int]) -> float:
        return self.fixed_ms + sum(self.attention(h) for h in heads) + float(np.sum(self.ffn(neurons)))

    def to_dict(self) -> dict:
        return asdict(self)


def torch_timer(models: list, inputs: dict, seconds: float) -> list[float]:
    size, seq_len = inputs["input_ids"].shape
    return [rows[0]["ms"] for rows in measure_latency(models, seq_len=seq_len, batch_sizes=(size,),
                                                      min_seconds=seconds)]


def torch_runtime() -> Runtime:
    """PyTorch fp32 with its current number of threads."""
    return Runtime("torch-fp32", f"torch {torch.__version__}, {torch.get_num_threads()} threads", torch_timer)


def _machine(runtime: Runtime) -> str:
    return f"{cpu_info().model}; {runtime.version}"


def measure_layer_costs(model, *, batch: int = 32, seq_len: int = 64, seconds: float = 0.5,
                        runtime: Runtime | None = None) -> LayerCosts:
    """Time one-layer copies of `model` (unpruned) with every head count and a grid of FFN widths on
    `runtime` (default: PyTorch)."""
    runtime = runtime or torch_runtime()
    layers, num_heads = mask_shape(model)
    width = intermediate_size(model.config)
    one = copy.deepcopy(model).eval()
    keep_layers(one, [0])
    widths = sorted({int(round(width * i / WIDTHS)) for i in range(WIDTHS + 1)})

    def shaped(heads: int, neurons: int):
        m = copy.deepcopy(one)
        keep_heads(m, [list(range(heads))])
        keep_neurons(m, [list(range(neurons))])
        return m

    variants = [shaped(h, 0) for h in range(num_heads + 1)] + [shaped(0, w) for w in widths[1:]]
    ms = runtime.timer(variants, dummy_batch(model, batch, seq_len), seconds)
    fixed = ms[0]
    heads_ms = [max(0.0, t - fixed) for t in ms[: num_heads + 1]]
    ffn_ms = [0.0] + [max(0.0, t - fixed) for t in ms[num_heads + 1:]]
    # timing noise must not make a wider sublayer look cheaper: costs are non-decreasing in the units kept
    heads_ms = np.maximum.accumulate(heads_ms).tolist()
    ffn_ms = np.maximum.accumulate(ffn_ms).tolist()
    return LayerCosts(heads_ms, widths, ffn_ms, fixed, layers, batch, seq_len, runtime.name, _machine(runtime))


def layer_costs(model, *, batch: int, seq_len: int, cache: str | Path | None = None, seconds: float = 0.5,
                runtime: Runtime | None = None, notice: Callable[[str], None] | None = None,
                before_write: Callable[[], None] | None = None) -> LayerCosts:
    """`measure_layer_costs`, read from `cache` when this machine timed this shape on this runtime before.
    A cached table that does not fit (`table_problem`) is timed again; `notice` gets one line saying why.
    `before_write` runs on a miss, before the timing whose table will be written (the default cache's check that
    it is writable: a read-only cache that holds the table is read)."""
    runtime = runtime or torch_runtime()
    expected = _expected(model, batch=batch, seq_len=seq_len, runtime=runtime)
    path = _cache_path(model, cache, expected) if cache else None
    if path is not None and path.exists():
        table, problem = _read_table(path)
        problem = problem or table_problem(table, expected)
        if problem is None:
            return LayerCosts(**table)
        if notice:
            notice(f"not using the cached layer cost table {path}: {problem}; timing the layers again.")
    if path is not None and before_write:
        before_write()
    costs = measure_layer_costs(model, batch=batch, seq_len=seq_len, seconds=seconds, runtime=runtime)
    problem = table_problem(costs.to_dict(), expected)
    if problem:
        raise ValueError(f"the {runtime.name} timer gave a layer cost table that cannot be used: {problem}")
    if path is not None:
        from headcut_grader.files import write_json

        write_json(path, costs.to_dict())  # makes the folder, or one sentence naming it (a file there: a traceback)
    return costs


def _cache_path(model, cache: str | Path, expected: dict) -> Path:
    config = model.config.to_dict()
    shape = {k: config.get(k) for k in ("model_type", "hidden_size", "dim", "num_attention_heads", "n_heads",
                                        "intermediate_size", "hidden_dim", "num_hidden_layers", "n_layers")}
    run = [expected[k] for k in ("batch", "seq_len", "runtime", "machine")]
    key = hashlib.sha256(json.dumps([shape, *run], sort_keys=True).encode()).hexdigest()[:16]
    return Path(cache) / f"layer-costs-{key}.json"


def _read_table(path: Path) -> tuple[object, str | None]:
    try:
        return json.loads(read_small_text(path)), None
    except (OSError, UnicodeDecodeError) as e:
        return None, f"it cannot be read ({e})"
    except UserError:
        return None, f"it is over {counted(MAX_RECORD_BYTES, 'byte')}"
    except (ValueError, RecursionError):
        return None, "it is not complete JSON"


def _expected(model, *, batch: int, seq_len: int, runtime: Runtime) -> dict:
    """What a table for `model` at this shape on `runtime` must record."""
    layers, heads = mask_shape(model)
    return {"layers": layers, "heads": heads, "width": intermediate_size(model.config), "batch": batch,
            "seq_len": seq_len, "runtime": runtime.name, "machine": _machine(runtime)}


def table_problem(table: object, expected: dict) -> str | None:
    """Why `table` (a LayerCosts as JSON) cannot give the costs `expected` describes (`_expected`); None if it can."""
    if not isinstance(table, dict):
        return "it is not a JSON object"
    names = [f.name for f in fields(LayerCosts)]
    missing = [n for n in names if n not in table]
    unknown = sorted(set(table) - set(names))
    if missing or unknown:
        return f"it has no {missing[0]} field" if missing else f"it has an unknown field {unknown[0]}"
    return _numbers_problem(table) or _shape_problem(table, expected)


def _numbers_problem(table: dict) -> str | None:
    """Every cost a finite number >= 0 (a NaN would make every plan fit; a negative one would pay for units)."""
    for name in ("heads_ms", "widths", "ffn_ms"):
        if not isinstance(table[name], list):
            return f"its {name} is not a list"
    for name in ("heads_ms", "widths", "ffn_ms", "fixed_ms"):
        values = [table[name]] if name == "fixed_ms" else table[name]
        whole = name == "widths"
        bad = [v for v in values if not _is_cost(v) or (whole and not isinstance(v, int))]
        if bad:
            return f"its {name} holds {bad[0]!r}, which is not a {'whole' if whole else 'finite'} number >= 0"
    return None


def _is_cost(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


def _shape_problem(table: dict, expected: dict) -> str | None:
    """The table's own record of the model (layers, heads + 1 attention costs, FFN widths 0..width) and the run."""
    for name in ("layers", "batch", "seq_len", "runtime", "machine"):
        if table[name] != expected[name]:
            return f"its {name} is {table[name]!r} where this model and run need {expected[name]!r}"
    heads, width, widths = expected["heads"], expected["width"], table["widths"]
    if len(table["heads_ms"]) != heads + 1:
        return f"its heads_ms has {len(table['heads_ms'])} entries where {heads} heads per layer need {heads + 1}"
    if not widths or widths[0] != 0 or widths[-1] != width or any(a >= b for a, b in zip(widths, widths[1:])):
        return f"its widths do not rise from 0 to the model's FFN width {width}"
    if len(table["ffn_ms"]) != len(widths):
        return f"its ffn_ms has {len(table['ffn_ms'])} entries for {len(widths)} widths"
    return None


def check_latency_budget(share: float, costs: LayerCosts, *, flag: str = "latency") -> float:
    full = costs.total([len(costs.heads_ms) - 1] * costs.layers, [costs.widths[-1]] * costs.layers)
    if not (0 < share <= 1):
        raise UserError(f"{setting(flag, share)} is outside (0, 1]; pass the share of the model's measured latency to "
                        f"keep, e.g. {setting(flag, 0.5)}.")
    budget = share * full
    if budget < costs.fixed_ms:
        raise UserError(f"{setting(flag, share)} allows {budget:.1f} ms per batch of {costs.batch} x {costs.seq_len}, "
                        f"less than the embeddings and classifier alone take ({costs.fixed_ms:.1f} ms, "
                        f"{costs.fixed_ms / full:.2f} of the model); pass a larger share.")
    return budget


def plan_latency(scores: UnitScores, costs: LayerCosts, budget_ms: float, *, layer_prior: float = 0.0) -> UnitPlan:
    """Keep the units of largest total (prior-weighted) score whose estimated latency fits `budget_ms`."""
    check_unit_scores(scores)
    weights = layer_weights(scores.heads.shape[0], layer_prior).numpy()
    groups = []  # (layer, kind, unit ids by score, cumulative value, cost of keeping k = 0..n units)
    for kind, table in (("heads", scores.heads), ("neurons", scores.neurons)):
        for layer, row in enumerate(table.numpy()):
            present = np.flatnonzero(np.isfinite(row))  # absent units are -inf
            order = present[np.argsort(-row[present], kind="stable")]
            value = np.concatenate([[0.0], np.cumsum(row[order] * weights[layer])])
            k = np.arange(len(order) + 1)
            cost = np.array([costs.attention(int(i)) for i in k]) if kind == "heads" else costs.ffn(k)
            groups.append((layer, kind, order, value, cost))
    room = budget_ms - costs.fixed_ms

    def choose(lam: float) -> list[int]:
        return [int(np.argmax(value - lam * cost)) for *_, value, cost in groups]

    def spent(ks) -> float:
        return float(sum(g[4][k] for g, k in zip(groups, ks)))

    ks = choose(0.0)
    if spent(ks) > room:
        low, high = 0.0, 1.0
        while spent(choose(high)) > room:
            high *= 4
            if high > 1e30:
                break
        for _ in range(100):
            mid = (low + high) / 2
            low, high = (mid, high) if spent(choose(mid)) > room else (low, mid)
        ks = choose(high)
    while True:  # greedy fill: the next unit with the best value per ms that still fits
        left = room - spent(ks)
        best, best_gain = None, 0.0
        for i, (*_, value, cost) in enumerate(groups):
            k = ks[i]
            if k + 1 < len(value) and cost[k + 1] - cost[k] <= left:
                gain = (value[k + 1] - value[k]) / max(cost[k + 1] - cost[k], 1e-9)
                if gain > best_gain:
                    best, best_gain = i, gain
        if best is None:
            break
        ks[best] += 1
    layers = scores.heads.shape[0]
    kept = {"heads": [[] for _ in range(layers)], "neurons": [[] for _ in range(layers)]}
    for (layer, kind, order, *_), k in zip(groups, ks):
        kept[kind][layer] = sorted(int(u) for u in order[:k])
    return UnitPlan(tuple(map(tuple, kept["heads"])), tuple(map(tuple, kept["neurons"])))
