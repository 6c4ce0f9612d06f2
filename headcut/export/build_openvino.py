"""The OpenVINO graph of a grader folder: convert, gate fp32 against PyTorch, judge bf16 / INT8, keep the
fastest graph that passes, and time it against the ONNX Runtime graph on this CPU.

Candidates are judged exactly as ONNX Runtime INT8 recipes are (quantize.judge): agreement with the fp32
graph, Spearman drift and accuracy drop on the labelled pairs given to the export (selection pairs, never a
report's), and speed against fp32 timed in turns with every other candidate (headcut.timing).
"""
from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from pathlib import Path


from headcut_grader.errors import UserError, setting
from headcut.export.export import GateError, check_parity, export_onnx, onnx_logits, parity
from headcut.export.openvino import (OV_INT8_CHOICES, bf16_problem, compiled_runner, convert, quantize_int8,
                                     require_openvino, required, save_ir)
from headcut.export.gate import labelled_pairs, named
from headcut.export.quantize import Int8Gate, batch_dependence, fastest_passing, gate_table, judge
from headcut.timing import round_robin
from headcut_grader.backend_choice import TIMING_SHAPE, timing_batch
from headcut_grader.machine import cpu_record, runtime_version

@dataclass
class Candidate:
    name: str  # fp32, bf16, int8:<recipe>, int8-bf16:<recipe>
    precision: str  # what grader.json records
    hint: str  # the compile-time inference precision: fp32 or bf16
    model: object  # the OpenVINO model to save when chosen


@dataclass
class Judged:
    """What the OpenVINO part of an export measured: `folder` holds the IR once `save` ran."""

    record: dict  # grader.json's "openvino"
    run: object  # the chosen graph's run(batch), for the backend timing


def check_request(precision: str, *, labelled: bool, names: str = "arguments") -> None:
    """Refuse, before any work, what the OpenVINO graph cannot do here; `names` as build_grader's."""
    require_openvino()
    flag = named("precision", names)
    if precision in ("bf16", "int8") and not labelled:
        raise UserError(f"{setting(flag, precision)} needs labelled pairs to check agreement, Spearman and accuracy "
                        f"against fp32; pass {labelled_pairs(names)}.", about=("precision",))
    if precision == "bf16" and bf16_problem():
        raise UserError(f"{setting(flag, 'bf16')}: {bf16_problem()}; or use {setting(flag, 'fp32')}, int8 or auto.",
                        about=("precision",))
    if precision in ("int8", "auto") and labelled:
        required("nncf", f"{setting(flag, precision)} on OpenVINO needs NNCF", about=("precision",))


def build_openvino(model, tmp: Path, *, reference, batches, calibration, encoded, labels, grades, precision: str,
                   gate: Int8Gate, threads: int, say, groups=None) -> Judged:
    """Write `tmp/openvino/model.{xml,bin}` for the graph `precision` asks for (see the module docstring).
    A one-score model (`labels`: gold scores, `groups`: the pairs' query groups) is judged on ranking, as
    quantize.judge does for ONNX Runtime INT8."""
    plain = export_onnx(model, tmp / "plain.onnx", fuse=False)
    fp32_model = convert(plain)
    plain.unlink()
    fp32_run = compiled_runner(fp32_model, inference_precision="fp32", threads=threads)
    say("checking OpenVINO fp32 parity")
    gate_parity = check_parity(parity(reference, fp32_run, batches), what="the OpenVINO fp32 graph").as_dict()
    record = {"precision": "fp32", "inference_precision": "fp32", "runtime_version": _version(),
              "source": "plain ONNX graph (attention op by op) through openvino.convert_model",
              "parity": {"fp32": gate_parity}, "cpu": cpu_record()}
    chosen, run = Candidate("fp32", "fp32", "fp32", fp32_model), fp32_run
    if precision != "fp32" and labels is not None:
        chosen, run, record["choice"] = _choose(fp32_model, fp32_run, calibration, encoded, labels, grades,
                                                precision=precision, gate=gate, threads=threads, say=say,
                                                model=model, groups=groups)
    elif precision != "fp32":
        record["choice"] = {"note": "no labelled pairs: fp32, the only precision checked without them"}
    record.update(precision=chosen.precision, inference_precision=chosen.hint, files=save_ir(chosen.model, tmp))
    return Judged(record, run)


def _version() -> str:
    require_openvino()
    return runtime_version("openvino")


def candidates(fp32_model, calibration, *, precision: str, say) -> tuple[list[Candidate], list[str]]:
    """What `precision` asks to judge, and why anything was left out."""
    found, skipped = [], []
    bf16 = bf16_problem() is None
    if precision in ("bf16", "auto") and bf16:
        found.append(Candidate("bf16", "bf16", "bf16", fp32_model))
    elif precision == "auto":
        skipped.append(f"bf16: {bf16_problem()}")
    if precision in ("int8", "auto"):
        for choice in OV_INT8_CHOICES:
            say(f"OpenVINO INT8 {choice.name}")
            quantized = quantize_int8(fp32_model, calibration, choice)
            found.append(Candidate(f"int8:{choice.name}", "int8", "fp32", quantized))
            if bf16:
                found.append(Candidate(f"int8-bf16:{choice.name}", "int8-bf16", "bf16", quantized))
    return found, skipped


def _choose(fp32_model, fp32_run, calibration, encoded, labels, grades, *, precision, gate, threads, say, model,
            groups=None):
    found, skipped = candidates(fp32_model, calibration, precision=precision, say=say)
    runs = {c.name: compiled_runner(c.model, inference_precision=c.hint, threads=threads) for c in found}
    say(f"grading {len(labels)} pairs with {len(found) + 1} OpenVINO graphs")
    fp32_logits = onnx_logits(fp32_run, encoded, model=model)
    logits = {name: onnx_logits(run, encoded, model=model) for name, run in runs.items()}
    say("timing OpenVINO graphs")
    seconds = time_runs({"fp32": fp32_run, **runs}, vocab=model.config.vocab_size)
    trials = [judge(logits[c.name], fp32_logits, labels, grades, seconds=seconds[c.name],
                    batch=batch_dependence(runs[c.name], encoded, grades, model=model), default_seconds=seconds["fp32"],
                    fp32_seconds=seconds["fp32"], choice=c.name, gate=gate, groups=groups)
              for c in found]
    best = fastest_passing(trials)
    if best is None and precision != "auto":
        # build_grader: the fix
        raise GateError(f"no OpenVINO {precision} graph passes the gate ({gate_table(trials)})")
    by_name = {c.name: c for c in found}
    chosen = by_name[best.choice] if best else Candidate("fp32", "fp32", "fp32", fp32_model)
    record = {"chosen": chosen.name, "trials": [t.as_dict() for t in trials], "skipped": skipped,
              "fp32_seconds": seconds["fp32"], "gate": asdict(gate), "timing_shape": list(TIMING_SHAPE),
              "threads": threads}
    return chosen, runs.get(chosen.name, fp32_run), record


def time_runs(runs: dict, *, vocab: int, repeats: int = 10) -> dict[str, float]:
    """Median seconds per TIMING_SHAPE batch of each `run(batch)`, all taking turns (headcut.timing)."""
    times = round_robin(list(runs.values()), timing_batch(vocab), repeats=repeats)
    return {name: statistics.median(t) for name, t in zip(runs, times)}


def backend_speed(runs: dict, *, vocab: int, threads: int) -> dict:
    """grader.json's "speed": each backend's graph timed in turns on this CPU, which `--backend auto` reads."""
    seconds = time_runs(runs, vocab=vocab)
    return {"cpu": cpu_record(), "threads": threads, "shape": list(TIMING_SHAPE), "seconds": seconds,
            "fastest": min(seconds, key=seconds.get)}
