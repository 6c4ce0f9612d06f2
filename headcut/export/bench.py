"""Side-by-side deployment benchmark: PyTorch models and ONNX graders on the same data and shapes (the report
and figure: bench_report; a server load test: server_load).

All variants are loaded in one process with the same thread count and take turns in blocks in every
(batch, sequence) cell (headcut.timing), so load from other processes on a shared machine hits all of them alike.
"""
from __future__ import annotations

import gc
import hashlib
import json
import os
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from headcut.arch import flops_per_pair, heads_per_layer, takes_token_types
from headcut.batching import encode
from headcut_grader.data import Pairs
from headcut_grader.errors import UserError, quoted
from headcut.evaluate.tasks import agreement, summary
from headcut.evaluate.predict import predict_logits
from headcut.export.bench_settings import BenchSettings
from headcut.timing import round_robin
from headcut_grader.machine import clock_ghz, cpu_record, peak_gflops, runtime_version
from headcut_grader.ranges import check_callbacks


@dataclass
class Variant:
    """A named thing that turns a batch of numpy int64 inputs into logits."""

    name: str
    kind: str  # "pytorch", or the grader's backend: "onnxruntime" or "openvino"
    size_bytes: int
    run: Callable[[dict], np.ndarray]
    logits: Callable[[Pairs], np.ndarray]  # on a dataset, with the variant's own tokenisation
    memory_mb: float = 0.0
    info: dict = field(default_factory=dict)
    tokenizer: object = None  # PyTorch variants: the transformers tokenizer (makes the timing inputs)
    flops: Callable[[int], int] | None = None  # FLOPs per pair at a sequence length: achieved GFLOP/s per cell


def short_names(paths: list, tail: int) -> list[str]:
    """Each path's last `tail` parts (a run's grader folders share the name `grader`, so theirs are two), with more
    where another path ends the same: runs/a/teacher and runs/b/teacher are a/teacher and b/teacher, not teacher
    twice, in every row and legend of the report."""
    parts = [Path(os.path.abspath(p)).parts for p in paths]

    def short(mine: tuple) -> str:
        n = tail
        while n < len(mine) and any(other != mine and other[-n:] == mine[-n:] for other in parts):
            n += 1
        return os.path.join(*mine[-n:])

    return [short(p) for p in parts]


def rss_mb() -> float:
    """Resident memory of this process (Linux /proc; 0 where unavailable)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError):
        return 0.0


def pytorch_variant(name: str, loaded, *, threads: int) -> Variant:
    torch.set_num_threads(threads)
    model = loaded.model.eval()
    size = sum(p.numel() * p.element_size() for p in model.parameters())

    @torch.inference_mode()
    def run(batch):
        return model(**{k: torch.from_numpy(v) for k, v in batch.items() if _takes(model, k)}).logits.numpy()

    def logits(pairs):
        return predict_logits(model, loaded.tokenizer, pairs, max_length=loaded.max_length)

    return Variant(name, "pytorch", size, run, logits, tokenizer=loaded.tokenizer,
                   info={"heads_per_layer": heads_per_layer(model), "flops_per_pair_64": flops_per_pair(model, 64),
                         "precision": "fp32", "runtime": f"torch {torch.__version__}"},
                   flops=lambda seq: flops_per_pair(model, seq))


def _takes(model, key: str) -> bool:
    return key != "token_type_ids" or takes_token_types(model)


def grader_variant(name: str, grader_dir: str | Path, *, threads: int, backend: str = "onnxruntime",
                   flops: Callable[[int], int] | None = None) -> Variant:
    """A grader folder's graph on one backend, named with its runtime and precision."""
    from headcut_grader import Grader
    from headcut_grader.backends import graphs

    grader = Grader(grader_dir, threads=threads, backend=backend)  # its quality pass: the runtime's own batch
    size = sum((Path(grader_dir) / f["name"]).stat().st_size for f in graphs(grader.record)[backend]["files"].values())
    label = {"onnxruntime": "ORT", "openvino": "OpenVINO"}[backend]
    return Variant(f"{name} ({label} {grader.precision})", backend, size, grader.backend.run, grader.logits,
                   info={"precision": grader.precision, "runtime": f"{backend} {grader.backend.version}",
                         "int8_choice": _int8_choice(grader.record, backend)}, flops=flops)


def grader_backends(grader_dir: str | Path) -> tuple[list[str], dict[str, str]]:
    """The folder's graphs whose runtime imports here (ONNX Runtime first), one benchmark variant each, and the
    others' runtimes: {runtime: why_unusable} (not installed, or failing to import), for the caller to say."""
    from headcut_grader.backends import graphs
    from headcut_grader.grader import read_record
    from headcut_grader.optional import why_unusable

    unusable = {b: why for b in graphs(read_record(grader_dir)) if (why := why_unusable(b))}
    return [b for b in graphs(read_record(grader_dir)) if b not in unusable], unusable


def skipped_said(runtime: str, why: str) -> str:
    """Why a grader's graph on `runtime` was not benchmarked (`why` as why_unusable says it), with the fix."""
    from headcut_grader.backends import INSTALL
    from headcut_grader.optional import NOT_INSTALLED, broken_said

    return f"{runtime} {why}; run: {INSTALL[runtime]}" if why == NOT_INSTALLED else broken_said(runtime, why)


def skipped_note(grader: str, runtime: str, why: str) -> str:
    """That `grader`'s graph on `runtime` was not benchmarked, why and the fix: `headcut bench` prints it, a run's
    report (bench.json "skipped") says it."""
    return f"{grader}'s {runtime} graph was skipped: {skipped_said(runtime, why)}"


# The parts of a tokenizer that decide a text's ids: truncation and padding are left out (bench sets the lengths it
# times), and the decoder (ids back to text) too.
ID_PARTS = ("model", "added_tokens", "normalizer", "pre_tokenizer", "post_processor")


def tokenizer_digest(folder: str | Path, *, grader: bool = False, flag: str = "tokenizer_digest folder") -> str:
    """A hash of how a model folder (or built-in name), or a grader folder, turns text into token ids: variants
    with the same digest give every pair the same ids. `flag`: what named `folder`, for messages."""
    from headcut.models import read_tokenizer
    from headcut_grader.grader import read_record
    from headcut_grader.tokens import load_tokenizer

    if grader:
        record = read_record(folder, flag=flag)
        tokenizer = load_tokenizer(folder, max_length=record["max_length"], recorded=record.get("tokenizer_file"))
    else:
        tokenizer = read_tokenizer(folder, flag=flag)
    backend = getattr(tokenizer, "backend_tokenizer", tokenizer)  # a fast tokenizer wraps a `tokenizers` one
    if hasattr(backend, "to_str"):
        spec = json.loads(backend.to_str())
        parts = [spec.get(k) for k in ID_PARTS]
    else:  # a slow (Python) tokenizer: its class and vocabulary
        parts = [type(tokenizer).__name__, sorted(tokenizer.get_vocab().items())]
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def onnx_variant(name: str, grader_dir: str | Path, *, threads: int) -> Variant:
    """The folder's ONNX Runtime graph (every grader folder has one)."""
    return grader_variant(name, grader_dir, threads=threads)


def _int8_choice(record: dict, backend: str) -> str | None:
    if backend == "openvino":
        return ((record.get("openvino") or {}).get("choice") or {}).get("chosen")
    return (record.get("int8") or {}).get("chosen", {}).get("choice")


def load_measured(make: Callable[[], Variant]) -> Variant:
    """Build a variant and record how much resident memory it added (load the weights inside `make`)."""
    gc.collect()
    before = rss_mb()
    variant = make()
    variant.memory_mb = rss_mb() - before
    return variant


def cell_inputs(tokenizer, pairs: Pairs, batch: int, seq: int) -> dict:
    """`batch` real pairs tokenised to at most `seq` tokens and padded to exactly `seq`."""
    rows = pairs.subset(range(min(batch, len(pairs))))
    enc = encode(tokenizer, rows, max_length=seq)
    while len(enc.input_ids) < batch:  # fewer pairs than the batch: repeat them
        enc.input_ids.append(enc.input_ids[len(enc.input_ids) % len(rows)])
        if enc.token_type_ids is not None:
            enc.token_type_ids.append(enc.token_type_ids[len(enc.token_type_ids) % len(rows)])
    out = {k: np.zeros((batch, seq), dtype=np.int64) for k in ("input_ids", "attention_mask", "token_type_ids")}
    out["input_ids"][:] = enc.pad_id
    for j, ids in enumerate(enc.input_ids[:batch]):
        out["input_ids"][j, :len(ids)] = ids
        out["attention_mask"][j, :len(ids)] = 1
        if enc.token_type_ids is not None:
            out["token_type_ids"][j, :len(ids)] = enc.token_type_ids[j]
    return out


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


@dataclass
class BenchResult:
    """What `benchmark` measured: one row per variant (the first is the reference), each with its cells of
    the (batch, sequence) grid. `extra`: what a caller adds (exports, a server load test), kept in bench.json."""

    settings: BenchSettings
    data: dict  # source, rows
    variants: list[dict]
    extra: dict = field(default_factory=dict)

    @property
    def reference(self) -> str:
        return self.variants[0]["name"]

    def to_dict(self) -> dict:
        return {"settings": asdict(self.settings), "data": self.data, "reference": self.reference,
                "variants": self.variants, **self.extra}


def benchmark(variants: list[Variant], tokenizer, pairs: Pairs, settings: BenchSettings = BenchSettings(), *,
              progress: Callable[[str], None] | None = None) -> BenchResult:
    """Latency grid, throughput, size, memory, accuracy and agreement with `variants[0]` (the reference)."""
    check_callbacks("benchmark", progress=progress)
    names = [v.name for v in variants]
    twice = next((n for n in names if names.count(n) > 1), None)
    if twice is not None:  # the report's rows and legend tell variants apart by name alone
        raise UserError(f"benchmark: two variants are named {quoted(twice)}; give each variant its own name.")
    say = progress or (lambda message: None)
    rows = {id(v): {"name": v.name, "kind": v.kind, "size_mb": v.size_bytes / 2**20, "memory_mb": v.memory_mb,
                     **v.info, "cells": []} for v in variants}
    reference_logits = None
    for v in variants:
        say(f"accuracy of {v.name}")
        logits = v.logits(pairs)
        reference_logits = logits if reference_logits is None else reference_logits
        if logits.shape[1] != reference_logits.shape[1]:
            raise UserError(f"{v.name} has {logits.shape[1]} outputs and the reference {reference_logits.shape[1]}; "
                            "bench grades models against grades models, score models against score models.")
        row = rows[id(v)]
        task = "score" if logits.shape[1] == 1 else "grades"
        if pairs.task is not None:
            figures = summary(logits, pairs, task=task)
            # a score model's accuracy is its within-query pair accuracy (NaN, n/a: no two titles of one query)
            row.update({"accuracy": figures["accuracy" if task == "grades" else "pair_accuracy"],
                        "spearman": figures["spearman"]})
        row["agreement"] = agreement(logits, reference_logits, pairs)
        row["max_abs_diff"] = float(np.max(np.abs(logits - reference_logits)))
    for seq in settings.seq_lens:
        for size in settings.batch_sizes:
            say(f"timing batch {size} x sequence {seq}")
            times = round_robin([v.run for v in variants], cell_inputs(tokenizer, pairs, size, seq),
                                warmup=settings.warmup, repeats=settings.repeats)
            for v, t in zip(variants, times):
                p50 = statistics.median(t)
                rows[id(v)]["cells"].append({"batch": size, "seq": seq, "p50_ms": 1000 * p50,
                                              "p95_ms": 1000 * percentile(t, 95), "pairs_per_s": size / p50,
                                              "gflop_per_s": v.flops(seq) * size / p50 / 1e9 if v.flops else None})
    reference = rows[id(variants[0])]
    for row in rows.values():
        for cell, ref in zip(row["cells"], reference["cells"]):
            cell["speedup"] = cell["pairs_per_s"] / ref["pairs_per_s"]
    for v in variants:  # the physical limit beside each: cores x clock x FLOPs per cycle at its precision
        rows[id(v)]["peak_gflop_per_s"] = peak_gflops(v.info.get("precision", "fp32"), threads=settings.threads)
    return BenchResult(settings, {"source": pairs.source, "rows": len(pairs)}, list(rows.values()),
                       {"machine": machine_record()})


def machine_record() -> dict:
    """The CPU and runtime versions every speed table carries (ratios move between CPUs and releases)."""
    runtimes = {"torch": torch.__version__}
    runtimes.update({n: v for n in ("onnxruntime", "openvino") if (v := runtime_version(n))})
    return {"cpu": cpu_record(), "ghz": clock_ghz(), "runtimes": runtimes}
