"""Side-by-side deployment benchmark: PyTorch models and ONNX graders on the same data and shapes.

All variants are loaded in one process with the same thread count and take turns in blocks in every
(batch, sequence) cell (headcut.timing), so load from other processes on a shared machine hits all of them alike.
"""
from __future__ import annotations

import gc
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from headcut.arch import flops_per_pair, heads_per_layer, takes_token_types
from headcut.batching import encode
from headcut_grader.data import Pairs
from headcut_grader.errors import UserError
from headcut.evaluate.tasks import agreement, summary
from headcut.evaluate.predict import predict_logits
from headcut_grader.files import write_json, write_text
from headcut.timing import round_robin
from headcut_grader.machine import clock_ghz, cpu_record, peak_gflops, runtime_version


@dataclass(frozen=True)
class BenchSettings:
    batch_sizes: tuple[int, ...] = (1, 8, 32)
    seq_lens: tuple[int, ...] = (32, 64, 128)
    threads: int = 2
    warmup: int = 2
    repeats: int = 10  # timed runs per variant and cell; p50/p95 come from these


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
        return predict_logits(model, loaded.tokenizer, pairs, batch_size=32, max_length=loaded.max_length)

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

    grader = Grader(grader_dir, threads=threads, batch_size=32, backend=backend)
    size = sum((Path(grader_dir) / f["name"]).stat().st_size for f in graphs(grader.record)[backend]["files"].values())
    label = {"onnxruntime": "ORT", "openvino": "OpenVINO"}[backend]
    return Variant(f"{name} ({label} {grader.precision})", backend, size, grader.backend.run, grader.logits,
                   info={"precision": grader.precision, "runtime": f"{backend} {grader.backend.version}",
                         "int8_choice": _int8_choice(grader.record, backend)}, flops=flops)


def grader_backends(grader_dir: str | Path) -> list[str]:
    """The folder's graphs whose runtime is installed here (ONNX Runtime first): one benchmark variant each."""
    from headcut_grader.backend_choice import installed
    from headcut_grader.backends import graphs
    from headcut_grader.grader import read_record

    return [b for b in graphs(read_record(grader_dir)) if installed(b)]


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


def write_bench(result: BenchResult, folder: str | Path, *, notes: str = "") -> str:
    """Write bench.json, bench.md (the table, then `notes`) and bench.png into `folder` (made if missing),
    each file atomically; returns the markdown. `headcut bench` passes its atomic output folder."""
    import matplotlib.pyplot as plt

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    report = result.to_dict()
    table = markdown(report) + notes
    write_json(folder / "bench.json", report)
    write_text(folder / "bench.md", table)
    fig, partial = figure(report), folder / ".bench.png.partial"
    try:
        fig.savefig(partial, dpi=130, format="png")
        partial.replace(folder / "bench.png")
    finally:
        plt.close(fig)
        partial.unlink(missing_ok=True)
    return table


def benchmark(variants: list[Variant], tokenizer, pairs: Pairs, settings: BenchSettings = BenchSettings(), *,
              progress: Callable[[str], None] | None = None) -> BenchResult:
    """Latency grid, throughput, size, memory, accuracy and agreement with `variants[0]` (the reference)."""
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
            figures = summary(logits, pairs, task=task)  # a score model's accuracy is its within-query pair accuracy
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


def cell(row: dict, batch: int, seq: int) -> dict | None:
    return next((c for c in row["cells"] if c["batch"] == batch and c["seq"] == seq), None)


def markdown(report: dict, *, batch: int = 32, seq: int = 64) -> str:
    """One row per variant at the headline cell, then the full p50 grid."""
    s = report["settings"]
    lines = [f"Threads {s['threads']}, warm-up {s['warmup']}, {s['repeats']} timed runs per cell; accuracy and "
             f"agreement with `{report['reference']}` on {report['data']['rows']} pairs of {report['data']['source']}.",
             _machine_line(report),
             "", f"| variant | size MiB | memory MiB | accuracy | Spearman | agreement | p50 ms | p95 ms | pairs/s "
                 f"| speedup (b{batch} x s{seq}) | GFLOP/s | of peak |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in report["variants"]:
        c = cell(row, batch, seq) or cell(row, *_first_cell(row))
        achieved, peak = c.get("gflop_per_s"), row.get("peak_gflop_per_s")
        share = f"{achieved / peak:.1%} of {peak:.0f}" if achieved and peak else "-"
        lines.append(f"| {row['name']} | {row['size_mb']:.1f} | {row['memory_mb']:.0f} | {row.get('accuracy', float('nan')):.4f} "
                     f"| {row.get('spearman', float('nan')):.4f} | {row['agreement']:.2%} | {c['p50_ms']:.1f} "
                     f"| {c['p95_ms']:.1f} | {c['pairs_per_s']:.0f} | {c['speedup']:.2f}x "
                     f"| {f'{achieved:.1f}' if achieved else '-'} | {share} |")
    lines += ["", "p50 ms per batch (batch x sequence):", ""]
    shapes = [(c["batch"], c["seq"]) for c in report["variants"][0]["cells"]]
    lines.append("| variant | " + " | ".join(f"{b}x{q}" for b, q in shapes) + " |")
    lines.append("|---|" + "---:|" * len(shapes))
    for row in report["variants"]:
        lines.append(f"| {row['name']} | " + " | ".join(f"{cell(row, b, q)['p50_ms']:.1f}" for b, q in shapes) + " |")
    return "\n".join(lines) + "\n"


def _machine_line(report: dict) -> str:
    m = report.get("machine")
    if not m:
        return ""
    return (f"\nMachine: {m['cpu']['model']}, {m['cpu']['cores']} cores at {m['ghz']:.2f} GHz, flags "
            f"{' '.join(m['cpu']['flags']) or 'none'}; {', '.join(f'{k} {v}' for k, v in m['runtimes'].items())}. "
            "Peak = threads x clock x FLOPs per cycle per core at the variant's precision (theoretical).")


def machine_record() -> dict:
    """The CPU and runtime versions every speed table carries (ratios move between CPUs and releases)."""
    runtimes = {"torch": torch.__version__}
    runtimes.update({n: v for n in ("onnxruntime", "openvino") if (v := runtime_version(n))})
    return {"cpu": cpu_record(), "ghz": clock_ghz(), "runtimes": runtimes}


def _first_cell(row: dict) -> tuple[int, int]:
    return row["cells"][0]["batch"], row["cells"][0]["seq"]


MARKERS = {"pytorch": "s", "onnxruntime": "o", "openvino": "^"}


def figure(report: dict, *, batch: int = 32, seq: int = 64):
    """Throughput vs agreement with the reference at one cell, one point per variant, named in the legend (accuracy
    barely moves on graded data, so agreement is what separates graders); returns a matplotlib Figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8.5, 4.4))
    for row in report["variants"]:
        c = cell(row, batch, seq) or cell(row, *_first_cell(row))
        ax.scatter(c["pairs_per_s"], 100 * row["agreement"], marker=MARKERS.get(row["kind"], "o"), s=50,
                   label=row["name"])
    ax.set_xlabel(f"pairs per second (batch {batch} x sequence {seq}, {report['settings']['threads']} threads)")
    ax.set_ylabel(f"% same grade as {report['reference']}")
    ax.set_title("Throughput vs agreement (square: PyTorch, circle: ONNX Runtime, triangle: OpenVINO)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    fig.tight_layout()
    return fig


@contextmanager
def running_server(grader: str | Path, *, workers: int = 1, threads: int = 1, args: tuple[str, ...] = (),
                   wait_seconds: float = 120.0, cwd: str | Path | None = None):
    """Start `headcut serve GRADER` on a free loopback port and yield its URL once /healthz answers.

    Raises RuntimeError with the server's own output when it exits or does not answer in time; the
    server is stopped on leaving the block.
    """
    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "headcut", "serve", str(Path(grader).resolve()), "--port", str(port),
           "--workers", str(workers), "--threads", str(threads), *args]
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + wait_seconds
            while True:
                if proc.poll() is not None:
                    log.seek(0)
                    raise RuntimeError(f"headcut serve exited ({proc.returncode}): "
                                       f"{log.read().decode(errors='replace')[-2000:]}")
                try:
                    if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"headcut serve did not answer /healthz on {url} within {wait_seconds:.0f} s")
                time.sleep(0.5)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def load_test(url: str, bodies: list[dict], *, concurrency: int = 8, path: str = "/grade", timeout: float = 60.0) -> dict:
    """POST every body once with `concurrency` clients in flight; requests/s, pairs/s, latency and errors."""
    from concurrent.futures import ThreadPoolExecutor

    import httpx

    def send(client, body):
        start = time.perf_counter()
        try:
            ok = client.post(url + path, json=body).status_code == 200
        except httpx.HTTPError:
            ok = False
        return ok, time.perf_counter() - start

    with httpx.Client(timeout=timeout, limits=httpx.Limits(max_connections=concurrency)) as client:
        start = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:
            results = list(pool.map(lambda b: send(client, b), bodies))
        wall = time.perf_counter() - start
    latencies = [t for _, t in results]
    pairs = sum(len(b.get("pairs", b.get("titles", []))) for b in bodies)
    return {"requests": len(bodies), "errors": sum(not ok for ok, _ in results), "concurrency": concurrency,
            "seconds": wall, "requests_per_s": len(bodies) / wall, "pairs_per_s": pairs / wall,
            "p50_ms": 1000 * statistics.median(latencies), "p95_ms": 1000 * percentile(latencies, 95)}
