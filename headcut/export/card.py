"""What a grader folder says about itself: grader.json (read by the runtime) and a short model card."""
from __future__ import annotations

import datetime as _dt

from headcut_grader.grader import GRADER_FORMAT
from headcut_grader.machine import runtime_version


def grader_record(loaded, *, input_names: list[str], max_length: int, opset: int, precision: str,
                  graph_optimization: str, parity: dict, accuracy: dict | None, int8: dict | None,
                  optimized: dict | None, model_file: dict, tokenizer_file: dict, backend: str = "onnxruntime",
                  openvino: dict | None = None, speed: dict | None = None, int8_rejected: dict | None = None,
                  backend_alone: str | None = None) -> dict:
    """grader.json: everything the runtime needs (grades, inputs, max length) and what the export proved."""
    from headcut.version import __version__ as headcut_version
    from headcut.arch import heads_per_layer, count_parameters

    grades = list(loaded.grades)
    task = {"task": "score", "activation": loaded.activation} if loaded.task == "score" else {
        "grades": grades, "label_map": {str(i): g for i, g in enumerate(grades)}}  # output column -> grade
    return {
        "format": GRADER_FORMAT,
        "headcut_version": headcut_version,  # which headcut exported it; the runtime reads only `format`
        **task,
        "max_length": max_length,
        "truncation": "longest_first",
        "input_names": input_names,
        "pad_id": int(loaded.tokenizer.pad_token_id or 0),
        "output_name": "logits",
        "model_file": model_file,
        "tokenizer_file": tokenizer_file,  # the runtime refuses another model's tokenizer.json by it
        "precision": precision,
        "graph_optimization": graph_optimization,  # the ORT session level the parity gate used
        "onnxruntime_version": runtime_version("onnxruntime"),
        # which graph `--backend auto` grades with: this one where it is installed, else the faster on its CPU
        "backend": backend,
        "backend_alone": backend_alone,  # why backend auto built ONNX Runtime's graph alone (None: it built both)
        "openvino": openvino,  # the OpenVINO IR (files, precision, parity, choice), when exported for it
        "speed": speed,  # each backend's graph timed in turns at export, with the CPU it ran on
        "opset": opset,
        "exporter": "torch.onnx TorchScript (dynamo=False)",
        "attention": "fused: one com.microsoft.MultiHeadAttention per layer, with its own head count",
        "source": {
            "path": loaded.path,
            "weights_hash": loaded.weights_hash,
            "model_type": loaded.model.config.model_type,
            "heads_per_layer": heads_per_layer(loaded.model),
            "parameters": count_parameters(loaded.model),
        },
        "parity": parity,
        "optimized": optimized,
        "int8": int8,
        "int8_rejected": int8_rejected,  # precision auto: the INT8 trials when none passed the gate (fp32 ships)
        "accuracy": accuracy,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


def model_card(record: dict) -> str:
    """A short markdown card: what the grader is, how it was checked, how to use it."""
    from headcut.evaluate.tasks import shown, unmeasured_words  # n/a where the pairs had no order to measure

    src = record["source"]
    lines = [
        "# headcut grader",
        "",
        (f"Query-title relevance grader (grades {record['grades'][0]}..{record['grades'][-1]}), exported to ONNX "
         if record.get("task") != "score" else f"Query-title reranker (one score, {record['activation']}), "
         "exported to ONNX ") +
        f"({record['precision']}, opset {record['opset']}) from `{src['path']}` (weights {src['weights_hash']})"
        + (f" and to OpenVINO ({record['openvino']['precision']})" if record.get("openvino") else "") + ".",
        "",
        f"- Architecture: {src['model_type']}, {len(src['heads_per_layer'])} layers, heads per layer "
        f"{src['heads_per_layer']}, {src['parameters']:,} parameters.",
        f"- Inputs: {', '.join(record['input_names'])}; at most {record['max_length']} tokens per pair "
        "(longest_first truncation).",
    ]
    fp32 = record["parity"]["fp32"]
    lines.append(f"- fp32 parity with PyTorch: max |logit diff| {fp32['max_abs_diff']:.2e}, argmax agreement "
                 f"{fp32['argmax_agreement']:.2%} on {fp32['rows']} rows.")
    if record.get("int8"):
        chosen = record["int8"]["chosen"]
        lines.append(f"- INT8 ({chosen['choice']}): agreement with fp32 {shown(chosen['agreement'], '.2%')}, Spearman "
                     f"drift {shown(chosen['spearman_drift'], '+.4f')}, accuracy drop "
                     f"{shown(chosen['accuracy_drop'], '+.2f')} points."
                     + (" " + unmeasured_words(chosen["not_measured"], judged="the gate's other limits")
                        if chosen.get("not_measured") else ""))
    if record.get("accuracy"):
        acc = record["accuracy"]
        lines.append(f"- On {acc['data']['source']} ({acc['data']['rows']} pairs): {quality_words(acc['metrics'])}.")
    lines += [
        "",
        "## Use",
        "",
        "```python",
        "from headcut_grader import Grader  # pip install headcut-grader (no torch); [openvino] for OpenVINO",
        "grader = Grader('THIS_FOLDER', threads=2)  # backend='auto': the graph timed fastest on this CPU",
        "result = grader.grade([('cordless drill', 'Acme 20-volt cordless drill')])",
        "```",
        "",
        "Limits: trained on the source model's data only; grades are relative judgements, not facts.",
        "",
    ]
    return "\n".join(lines)


def quality_words(metrics: dict) -> str:
    """A grader's headline figures: accuracy and Spearman, or a score model's Spearman, NDCG@10, pair accuracy."""
    from headcut.evaluate.tasks import shown  # n/a where the pairs had no order to measure

    if "accuracy" in metrics:
        return f"accuracy {metrics['accuracy']:.4f}, Spearman {shown(metrics['spearman'])}"
    return (f"Spearman {shown(metrics['spearman'])}, NDCG@10 {shown(metrics['ndcg@10'])}, within-query pair accuracy "
            f"{shown(metrics['pair_accuracy'])}")


def runtime_record(record: dict, backend: str, reason: str) -> dict:
    """What a grader folder ships on and the timings that chose it, from its grader.json `record`: `backend` and
    `reason` are the runtime's choice (headcut_grader.backend_choice.choose_backend); each graph's precision with
    every candidate timed for it (ms per batch of the timing shape, whether it passed the gate; fp32 is the
    yardstick), and each runtime's shipped graph timed against the other's (grader.json's "speed")."""
    from headcut_grader.backends import graphs

    speed = record.get("speed") or {}
    return {"backend": backend, "precision": graphs(record)[backend]["precision"], "reason": reason,
            "graphs": {name: _graph_timings(record, name) for name in graphs(record)},
            "speed": None if not speed else {"ms": {k: 1000 * s for k, s in speed["seconds"].items()},
                                             "shape": speed["shape"], "threads": speed["threads"]}}


def _graph_timings(record: dict, name: str) -> dict:
    """One graph's precision, its chosen candidate and every candidate timed for it (none: fp32 was asked for);
    the fp32 graph, the gate's yardstick, "passes": None, at the time the export recorded for it (a grader.json
    written before ONNX Runtime's "fp32_seconds" was: derived from the first trial's speed against fp32)."""
    if name == "onnxruntime":
        int8 = record.get("int8") or record.get("int8_rejected") or {}
        trials, chosen = int8.get("trials") or [], (int8.get("chosen") or {}).get("choice")
        fp32_seconds = int8.get("fp32_seconds")
        if fp32_seconds is None and trials:
            fp32_seconds = trials[0]["seconds"] * trials[0]["speed_vs_fp32"]
        return _timings(record["precision"], chosen, trials, fp32_seconds, [])
    choice = record["openvino"].get("choice") or {}
    chosen = choice.get("chosen")
    return _timings(record["openvino"]["precision"], None if chosen == "fp32" else chosen, choice.get("trials") or [],
                    choice.get("fp32_seconds"), choice.get("skipped") or [])


def _timings(precision: str, chosen: str | None, trials: list[dict], fp32_seconds: float | None,
             skipped: list[str]) -> dict:
    candidates = [] if fp32_seconds is None else [{"graph": "fp32", "ms": 1000 * fp32_seconds, "passes": None}]
    candidates += [{"graph": t["choice"], "ms": 1000 * t["seconds"], "passes": bool(t["passes"])} for t in trials]
    return {"precision": precision, "chosen": chosen or "fp32", "candidates": candidates, "skipped": skipped}
