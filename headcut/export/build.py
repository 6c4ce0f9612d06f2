"""Make a grader folder: export, gate, (optimise), (quantise and pick the INT8 recipe), write the card.

Nothing is written unless every gate passes: the folder appears whole or not at all.
"""
from __future__ import annotations

import statistics
from dataclasses import asdict
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from headcut.arch import heads_per_layer
from headcut.batching import check_max_length, encode
from headcut.data import Pairs
from headcut.errors import UserError
from headcut.evaluate.metrics import summarize
from headcut.export.card import grader_record, model_card
from headcut.export.export import (RANDOM_SHAPES, ParityError, check_parity, export_onnx, gate_batches, input_names, onnx_logits,
                                   parity, reference_logits, run_session, session)
from headcut.export.optimize import optimize_graph
from headcut.export.quantize import CHOICES, Int8Choice, Int8Gate, fastest_passing, judge, quantize_int8, resolve
from headcut.files import atomic_dir, file_hash, write_json, write_text
from headcut.timing import round_robin

TIMING_SHAPE = (32, 64)  # batch x sequence the INT8 speed comparison runs at


def build_grader(
    loaded,
    out: str | Path,
    *,
    pairs: Pairs | None = None,
    int8: bool = False,
    optimize: bool = False,
    opset: int = 17,
    max_length: int | None = None,
    gate: Int8Gate = Int8Gate(),
    choices: tuple[Int8Choice, ...] = CHOICES,
    threads: int = 2,
    overwrite: bool = False,
    progress: Callable[[str], None] | None = None,
) -> dict:
    """Write GRADER_DIR `out` for `loaded` (a headcut LoadedModel) and return its grader.json record.

    `pairs` (labelled) feed the real part of the parity gate, the accuracy figures and the INT8 choice.
    Raises ParityError when a graph fails its gate, UserError when INT8 is asked for without labelled pairs.
    """
    say = progress or (lambda message: None)
    model, tokenizer = loaded.model, loaded.tokenizer
    max_length = max_length or loaded.max_length
    check_max_length(model, max_length)  # a grader must not accept texts its graph cannot embed
    if int8 and (pairs is None or not pairs.has_labels):
        raise UserError("--int8 needs labelled pairs to check agreement, Spearman and accuracy; pass --data FILE.")
    if not getattr(tokenizer, "is_fast", False):
        raise UserError(f"{loaded.path}: the tokenizer has no fast (tokenizer.json) version, which the ONNX grader needs.")
    with atomic_dir(out, overwrite=overwrite) as tmp:
        say("exporting fp32 graph")
        fp32 = export_onnx(model, tmp / "fp32.onnx", opset=opset)
        batches = gate_batches(model, tokenizer, pairs, max_length=max_length)
        reference = reference_logits(model, batches)
        say("checking fp32 parity")
        record_parity = {"fp32": check_parity(parity(reference, session(fp32, threads=threads), batches),
                                              what="the fp32 ONNX export").as_dict()}
        final, optimized = fp32, None
        if optimize:
            say("optimising graph")
            optimized = optimize_graph(fp32, tmp / "optimized.onnx", hidden_size=model.config.hidden_size,
                                       heads_per_layer=heads_per_layer(model))
            record_parity["optimized"] = check_parity(
                parity(reference, session(tmp / "optimized.onnx", threads=threads), batches),
                what="the ORT-optimised graph (drop --optimize)").as_dict()
            final = tmp / "optimized.onnx"
        accuracy, int8_record = None, None
        if pairs is not None and pairs.has_labels:
            say(f"grading {len(pairs)} pairs")
            encoded = encode(tokenizer, pairs, max_length=max_length, model=model)
            shipped_fp32 = session(final, threads=threads)  # graded here, and the INT8 gate's speed yardstick
            logits = onnx_logits(shipped_fp32, encoded)
            labels = pairs.label_array()
            accuracy = {"data": {"source": pairs.source, "fingerprint": pairs.fingerprint, "rows": len(pairs)},
                        "metrics": summarize(logits, labels, pairs.grades)}
            if int8:
                calibration = batches[: len(batches) - len(RANDOM_SHAPES)]  # the real pairs only
                choices = tuple(resolve(c, model, calibration) for c in choices)
                final, int8_record, int8_logits = _choose_int8(fp32, shipped_fp32, tmp, encoded, logits, labels,
                                                               pairs.grades,
                                                               vocab=model.config.vocab_size, gate=gate, choices=choices, threads=threads, say=say)
                accuracy["fp32_metrics"] = accuracy["metrics"]
                accuracy["metrics"] = summarize(int8_logits, labels, pairs.grades)
        target = tmp / "model.onnx"
        Path(final).rename(target)
        for leftover in tmp.glob("*.onnx"):
            if leftover != target:
                leftover.unlink()
        tokenizer.save_pretrained(tmp)
        record = grader_record(
            loaded, input_names=input_names(model), max_length=max_length, opset=opset,
            precision="int8" if int8 else "fp32", graph_optimization="all", parity=record_parity,
            accuracy=accuracy, int8=int8_record, optimized=optimized,
            model_file={"name": "model.onnx", "sha256": file_hash(target), "bytes": target.stat().st_size},
        )
        write_json(tmp / "grader.json", record)
        write_text(tmp / "README.md", model_card(record))
    return record


FP32 = "fp32 graph"  # the session timed beside the INT8 graphs


def _choose_int8(fp32, fp32_session, tmp: Path, encoded, fp32_logits, labels, grades, *, vocab: int, gate: Int8Gate, choices,
                 threads, say):
    """Quantise every choice, judge each against the fp32 graph, keep the fastest that passes the gate."""
    g = torch.Generator().manual_seed(0)
    timing = {"input_ids": torch.randint(1, vocab, TIMING_SHAPE, generator=g).numpy(),
              "attention_mask": np.ones(TIMING_SHAPE, dtype=np.int64),
              "token_type_ids": np.zeros(TIMING_SHAPE, dtype=np.int64)}
    names = [c.name for c in choices]
    runs = ([CHOICES[0]] if CHOICES[0].name not in names else []) + list(choices)  # default: the speed yardstick
    sessions, logits_of = {}, {}
    for choice in runs:
        say(f"INT8 {choice.name}")
        sessions[choice.name] = session(quantize_int8(fp32, tmp / f"int8-{choice.name}.onnx", choice), threads=threads)
        if choice.name in names:
            logits_of[choice.name] = onnx_logits(sessions[choice.name], encoded)
    say("timing INT8 graphs")
    sessions[FP32] = fp32_session  # the graph shipped without --int8, timed last in the same turns
    times = round_robin([lambda b, s=s: run_session(s, b) for s in sessions.values()], timing, repeats=10)
    seconds = dict(zip(sessions, (statistics.median(t) for t in times)))
    trials = [judge(logits_of[name], fp32_logits, labels, grades, seconds=seconds[name],
                    default_seconds=seconds[CHOICES[0].name], fp32_seconds=seconds[FP32], choice=name, gate=gate)
              for name in names]
    best = fastest_passing(trials)
    if best is None:
        table = "; ".join(f"{t.choice}: agreement {t.agreement:.2%}, Spearman {t.spearman_drift:+.4f}, "
                          f"drop {t.accuracy_drop:+.2f} pt, speed x{t.speed_vs_fp32:.2f} of fp32" for t in trials)
        raise ParityError(f"no INT8 recipe passes the gate ({table}); export without --int8, or relax "
                          "--min-agreement/--max-spearman-drift/--max-drop.")
    fp32_nodes_of = {c.name: list(c.keep_fp32) for c in choices}  # recorded so the choice can be reproduced
    record = {"chosen": {**best.as_dict(), "keep_fp32": fp32_nodes_of[best.choice]},
              "trials": [t.as_dict() for t in trials], "gate": asdict(gate),
              "timing_shape": list(TIMING_SHAPE), "threads": threads}
    return tmp / f"int8-{best.choice}.onnx", record, logits_of[best.choice]
