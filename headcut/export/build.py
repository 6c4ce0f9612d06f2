"""Make a grader folder: export, gate, (optimise), (quantise and pick the INT8 recipe), write the card.

Nothing is written unless every gate passes: the folder appears whole or not at all.
"""
from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from headcut.arch import architecture, heads_per_layer
from headcut.batching import check_max_length, encode
from headcut_grader.data import Pairs
from headcut_grader.errors import UserError, check_names, concerning, setting
from headcut.evaluate.importance import gold
from headcut.evaluate.tasks import check_task, summary
from headcut.export.build_openvino import backend_speed, build_openvino, check_request
from headcut.export.card import grader_record, model_card
from headcut.export.export import (RANDOM_SHAPES, GateError, check_parity, export_onnx, gate_batches, input_names,
                                   onnx_logits, parity, reference_logits, run_session, session)
from headcut.export.gate import (ARGUMENTS, MIN_GATE_PAIRS, gate_fix, int8_said, labelled_pairs, more_pairs,
                                 named)
from headcut.export.openvino import PRECISIONS
from headcut.export.optimize import optimize_graph
from headcut.export.runtimes import INSTALL_OPENVINO, ExportBackend, export_backend, openvino_missing
from headcut.export.quantize import (CHOICES, Int8Choice, Int8Gate, batch_dependence, fastest_passing, gate_table,
                                     judge, quantize_int8, resolve)
from headcut_grader.files import as_path, atomic_dir, file_record, write_json, write_text
from headcut_grader.ranges import argument, check_callbacks, check_settings, checked_bool, checked_number
from headcut.model_arguments import check_loaded
from headcut.timing import round_robin
from headcut_grader.backend_choice import TIMING_SHAPE, timing_batch


def asked_precision(precision: str | None, *, int8: bool) -> str:
    """The precision an export is asked for: `precision`, else int8 where `int8` (its other spelling), else fp32."""
    return precision or ("int8" if int8 else "fp32")


@dataclass(frozen=True)
class ExportChoice:
    """What an export builds, decided once before any work (choose_export): `backend`, `precision` and `int8` as
    asked; `built`, the backend as built here (runtimes.export_backend: auto without a usable OpenVINO is ONNX
    Runtime alone, and says why); each graph's precision: `onnxruntime`, and `openvino` (None: no OpenVINO graph)."""

    backend: str
    precision: str | None
    int8: bool
    built: ExportBackend
    onnxruntime: str
    openvino: str | None

    @property
    def precisions(self) -> tuple[str, str | None]:
        return self.onnxruntime, self.openvino


def choose_export(backend: str, precision: str | None, *, int8: bool = False,
                  names: str = "arguments") -> ExportChoice:
    """What an export of `backend`, `precision` and `int8` builds here, refused where it cannot be asked or built;
    `names`: how messages name them (`gate.named`: a run's export.* keys, `headcut export`'s flags). `headcut
    export` chooses before the model loads and passes the choice to build_grader, so one decision is built and said."""
    check_names(names, "choose_export names")
    built = export_backend(backend, asked_precision(precision, int8=int8), names=names)
    backend_flag, precision_flag = named("backend", names), named("precision", names)
    if precision is not None and precision not in PRECISIONS:
        raise UserError(f"{setting(precision_flag, precision)} is not one of {', '.join(PRECISIONS)}.",
                        about=("precision",))
    _check_int8_agrees(precision, int8=int8, names=names)
    asked = asked_precision(precision, int8=int8)
    if built.name == "onnxruntime" and asked == "bf16":
        if backend == "auto":  # was: 'use --backend openvino or auto', which it was
            raise UserError(f"{setting(precision_flag, 'bf16')} needs OpenVINO, and {openvino_missing('bf16')}; "
                            f"{INSTALL_OPENVINO}, or choose another precision.", about=("precision", "backend"))
        raise UserError(f"{setting(precision_flag, 'bf16')}: ONNX Runtime graders are fp32 or int8; use "
                        f"{setting(backend_flag, 'openvino')} or auto.", about=("precision", "backend"))
    if built.name == "onnxruntime":
        return ExportChoice(backend, precision, int8, built, asked, None)
    # the ONNX Runtime graph always ships too: the portable fallback where openvino is not installed
    onnxruntime = "fp32" if built.name == "openvino" or asked == "bf16" else asked
    return ExportChoice(backend, precision, int8, built, onnxruntime, asked)


def _check_int8_agrees(precision: str | None, *, int8: bool, names: str) -> None:
    """int8=True is precision int8's other spelling: with another precision the request contradicts itself."""
    if int8 and precision not in (None, "int8"):
        raise UserError(f"{int8_said(names)} and {setting(named('precision', names), precision)} disagree; pass one "
                        "of them.", about=("precision",))


def checked_choice(choice, backend: str, precision: str | None, *, int8: bool, names: str) -> ExportChoice:
    """build_grader's `choice`, made for its `backend`, `precision` and `int8`; None: chosen here."""
    if choice is None:
        return choose_export(backend, precision, int8=int8, names=names)
    if not isinstance(choice, ExportChoice):
        raise UserError(f"build_grader choice is {argument(choice)[:60]}; pass "
                        f"headcut.export.choose_export(backend, precision, int8=int8), or None.")
    _check_int8_agrees(precision, int8=int8, names=names)
    # int8=True and precision int8 ask for one thing: the precisions compared are the ones asked for
    made = (choice.backend, asked_precision(choice.precision, int8=choice.int8))
    if made != (backend, asked_precision(precision, int8=int8)):
        raise UserError(f"build_grader choice was made for backend={choice.backend!r}, precision={choice.precision!r}, "
                        f"int8={choice.int8}, and this call asks for backend={backend!r}, precision={precision!r}, "
                        f"int8={int8}; pass choose_export(...) of this call's, or no choice.")
    return choice


def build_grader(
    loaded,
    out: str | Path,
    *,
    pairs: Pairs | None = None,
    int8: bool = False,
    backend: str = "onnxruntime",
    precision: str | None = None,
    optimize: bool = False,
    opset: int = 17,
    max_length: int | None = None,
    gate: Int8Gate = Int8Gate(),
    choices: tuple[Int8Choice, ...] = CHOICES,
    threads: int = 2,
    overwrite: bool = False,
    progress: Callable[[str], None] | None = None,
    names: str = "arguments",
    choice: ExportChoice | None = None,
) -> dict:
    """Write GRADER_DIR `out` for `loaded` (a headcut LoadedModel) and return its grader.json record.

    `backend`: onnxruntime (one ONNX graph), openvino (adds an OpenVINO IR beside an fp32 ONNX graph) or auto
    (both, each at `precision`, and the runtime grades with whichever was timed fastest on its CPU; ONNX Runtime's
    alone where OpenVINO or NNCF is not usable here: runtimes.export_backend says why).
    `precision`: fp32, bf16 (OpenVINO, CPUs with AMX/AVX512_BF16), int8 or auto (the fastest that passes the
    gate); `int8=True` is `precision="int8"`. `pairs` (labelled) feed the real part of the parity gate, the
    accuracy figures and every precision choice.
    Raises ParityError when a graph fails its gate, UserError when the request cannot be met here; both name the
    settings as `names` says: "arguments" (precision='fp32'), a run's "keys" or `headcut export`'s "flags".
    `choice`: choose_export's for this `backend`, `precision` and `int8`, where the caller chose before the model
    loaded (`headcut export`); None: chosen here. Either way the backend is decided once per export.
    """
    check_names(names, "build_grader names")
    check_callbacks("build_grader", progress=progress)
    out = as_path(out, "build_grader out")
    check_loaded(loaded, "build_grader loaded")
    with concerning("opset"):
        opset = checked_number(opset, named("opset", names), ARGUMENTS["opset"], whole=True)
    with concerning("threads"):
        threads = checked_number(threads, named("threads", names), ARGUMENTS["threads"], whole=True)
    if max_length is not None:  # None: the model's; 0 was taken as None, "64" a TypeError
        with concerning("max_length"):
            max_length = checked_number(max_length, named("max_length", names), ARGUMENTS["max_length"], whole=True)
    # a command's and a recipe's are bools already: these names are a Python caller's
    int8, optimize = checked_bool(int8, "int8"), checked_bool(optimize, "optimize")
    check_gate_and_pairs(gate, pairs, names)
    choice = checked_choice(choice, backend, precision, int8=int8, names=names)
    labelled = check_build(loaded, pairs, choice, max_length=max_length or loaded.max_length, names=names)
    ort_precision, ov_precision = choice.precisions
    say = progress or (lambda message: None)
    model, max_length = loaded.model, max_length or loaded.max_length
    try:
        with atomic_dir(out, overwrite=overwrite, flag=named("out", names)) as tmp:
            graphs = export_checked(model, loaded.tokenizer, pairs, tmp, opset=opset, max_length=max_length,
                                    optimize=optimize, threads=threads, say=say, names=names)
            graded = Graded(None, None, None, None, graphs.final)
            if labelled:
                graded = grade_and_quantize(loaded, pairs, graphs, tmp, ort_precision=ort_precision, gate=gate,
                                            choices=choices, threads=threads, max_length=max_length, say=say)
            openvino = speed = None
            if ov_precision:
                openvino, speed = openvino_beside(model, pairs if labelled else None, graphs, graded, tmp,
                                                  precision=ov_precision, gate=gate, threads=threads, say=say)
            record = write_grader(loaded, tmp, graphs, graded, max_length=max_length, opset=opset, backend=choice.built,
                                  openvino=openvino, speed=speed)
    except GateError as error:  # the fix is the caller's to name
        raise GateError(f"{error}; {gate_fix(names, int8=int8)}.", about=("precision",)) from None
    return record


def check_gate_and_pairs(gate, pairs, names: str) -> None:
    """`gate` is an Int8Gate within its ranges and `pairs` read pairs or None (was: a dict gate or a nan limit
    exported anyway, a list of pairs an AttributeError)."""
    if not isinstance(gate, Int8Gate):
        raise UserError(f"{named('gate', names)} is {argument(gate)[:60]}; pass a headcut.export.Int8Gate(...).")
    check_settings(gate)  # as a Python caller wrote it: `headcut export`'s flags and a run's keys are checked first
    if pairs is not None and not isinstance(pairs, Pairs):
        raise UserError(f"{named('pairs', names)} is {argument(pairs)[:60]}; pass headcut_grader.data.read_pairs(FILE) "
                        f"or None.")


def check_build(loaded, pairs: Pairs | None, choice: ExportChoice, *, max_length: int,
                names: str = "arguments") -> bool:
    """Refuse what cannot be built of `choice` for `loaded` and `pairs`, before any work; whether `pairs` are
    labelled. `names` as `build_grader`'s."""
    from headcut.models import check_stage

    check_stage(loaded, "export")
    # a grader must not accept texts its graph cannot embed
    with concerning("max_length"):
        check_max_length(loaded.model, max_length, flag=named("max_length", names))
    ort_precision, ov_precision = choice.precisions
    precision, int8 = choice.precision, choice.int8
    labelled = pairs is not None and pairs.task is not None
    if labelled:
        with concerning("model"):
            check_task(loaded.task, pairs, setting(named("model", names), loaded.path))

    def precision_said(value) -> str:
        return setting(named("precision", names), value)

    if precision == "auto" and not labelled:
        raise UserError(f"{precision_said('auto')} ships the fastest precision that passes the gate on labelled "
                        f"pairs; pass {labelled_pairs(names)}, or {precision_said('fp32')}.", about=("precision",))
    if ort_precision == "int8" and not labelled:
        raise UserError(f"{int8_said(names) if int8 else precision_said('int8')} needs labelled pairs to check "
                        f"agreement, Spearman and accuracy; pass {labelled_pairs(names)}.",
                        about=("precision",))
    if ov_precision:
        check_request(ov_precision, labelled=labelled, names=names)
    gated = {ort_precision, ov_precision} - {"fp32", None}
    if gated and labelled and loaded.task == "score" and not any(len(g) > 1 for g in pairs.query_groups()):
        raise UserError(f"{setting(named('data', names), pairs.source)}: no two of its {len(pairs)} pairs share a "
                        f"query, so the gate of a one-score model has no title order to check; pass "
                        f"{more_pairs(names)} or a file with several titles per query.", about=("data", "rows"))
    if gated and labelled and len(pairs) < MIN_GATE_PAIRS:
        raise UserError(f"{setting(named('data', names), pairs.source)}: {len(pairs)} pairs are too few for the gate "
                        f"that judges {precision_said(precision or 'int8')} against fp32 (it needs at least "
                        f"{MIN_GATE_PAIRS}); pass {more_pairs(names)}, or {precision_said('fp32')}.",
                        about=("data", "rows", "precision"))
    if not getattr(loaded.tokenizer, "is_fast", False):
        raise UserError(f"{loaded.path}: the tokenizer has no fast (tokenizer.json) version, "
                        "which the ONNX grader needs.")
    return labelled


def optimize_off(names: str) -> str:
    """How build_grader's caller exports without the graph optimisation: drop --optimize, or pass optimize=False."""
    return "drop --optimize" if names == "flags" else f"pass {setting(named('optimize', names), False)}"


@dataclass
class Graphs:
    """The fp32 export and what checked it: gate batches, PyTorch's logits on them, the parity records, and
    the graph that ships unless INT8 replaces it (`final`: the fp32 or ORT-optimised graph)."""

    fp32: Path
    final: Path
    optimized: dict | None
    batches: list
    calibration: list
    reference: list
    parity: dict


def export_checked(model, tokenizer, pairs, tmp: Path, *, opset: int, max_length: int, optimize: bool, threads: int,
                   say, names: str = "arguments") -> Graphs:
    """Export the fp32 graph and check its parity with PyTorch (and, with `optimize`, the optimised graph's); `names`
    as `build_grader`'s, for the way out of a failed optimisation."""
    say("exporting fp32 graph")
    fp32 = export_onnx(model, tmp / "fp32.onnx", opset=opset)
    batches = gate_batches(model, tokenizer, pairs, max_length=max_length)
    reference = reference_logits(model, batches)
    say("checking fp32 parity")
    record = {"fp32": check_parity(parity(reference, session(fp32, threads=threads), batches),
                                   what="the fp32 ONNX export").as_dict()}
    final, optimized = fp32, None
    if optimize:
        say("optimising graph")
        optimized = optimize_graph(fp32, tmp / "optimized.onnx", hidden_size=model.config.hidden_size,
                                   heads_per_layer=heads_per_layer(model),
                                   plain_attention=architecture(model).plain_attention)
        record["optimized"] = check_parity(parity(reference, session(tmp / "optimized.onnx", threads=threads), batches),
                                           what=f"the ORT-optimised graph ({optimize_off(names)})").as_dict()
        final = tmp / "optimized.onnx"
    calibration = batches[: len(batches) - len(RANDOM_SHAPES)]  # the real pairs only
    return Graphs(fp32, final, optimized, batches, calibration, reference, record)


@dataclass
class Graded:
    """The shipped graph's grades of the labelled pairs (`accuracy`), the INT8 choice when one ships, and the
    encoded pairs and gold the OpenVINO gate reuses."""

    accuracy: dict | None
    int8: dict | None
    encoded: object
    labels: object
    final: Path
    int8_rejected: dict | None = None  # auto: the INT8 trials when none passed the gate (fp32 ships)


def grade_and_quantize(loaded, pairs: Pairs, graphs: Graphs, tmp: Path, *, ort_precision: str, gate: Int8Gate,
                       choices, threads: int, max_length: int, say) -> Graded:
    """Grade the labelled pairs with the shipped graph; for int8 / auto, quantise and keep the fastest INT8
    recipe that passes `gate` (auto ships fp32 when none does)."""
    model = loaded.model
    say(f"grading {len(pairs)} pairs")
    encoded = encode(loaded.tokenizer, pairs, max_length=max_length, model=model)
    shipped = session(graphs.final, threads=threads)
    logits = onnx_logits(shipped, encoded, model=model)
    labels = gold(pairs)
    accuracy = {"data": pairs.provenance(),
                "metrics": summary(logits, pairs, task=loaded.task, activation=loaded.activation)}
    final, int8_record, rejected = graphs.final, None, None
    if ort_precision in ("int8", "auto"):
        ort_choices = tuple(resolve(c, model, graphs.calibration) for c in choices)
        graph, record, int8_logits = _choose_int8(
            graphs.fp32, shipped, tmp, encoded, logits, labels, pairs.grades, model=model,
            gate=gate, choices=ort_choices, calibration=graphs.calibration, threads=threads, say=say,
            groups=pairs.query_groups(), required=ort_precision == "int8")
        if graph is None:  # auto: no INT8 recipe passes, so the fp32 graph ships; the trials say why
            rejected = record
        else:
            final, int8_record = graph, record
            accuracy["fp32_metrics"] = accuracy["metrics"]
            accuracy["metrics"] = summary(int8_logits, pairs, task=loaded.task, activation=loaded.activation)
    return Graded(accuracy, int8_record, encoded, labels, final, rejected)


def openvino_beside(model, pairs: Pairs | None, graphs: Graphs, graded: Graded, tmp: Path, *, precision: str,
                    gate: Int8Gate, threads: int, say) -> tuple[dict, dict]:
    """The OpenVINO graph at `precision`, gated as the ONNX one; and both runtimes timed on this CPU."""
    judged = build_openvino(model, tmp, reference=graphs.reference, batches=graphs.batches,
                            calibration=graphs.calibration, encoded=graded.encoded, labels=graded.labels,
                            grades=pairs.grades if pairs is not None else None,
                            groups=pairs.query_groups() if pairs is not None else None,
                            precision=precision, gate=gate, threads=threads, say=say)
    say("timing ONNX Runtime against OpenVINO")
    shipped = session(graded.final, threads=threads)
    speed = backend_speed({"onnxruntime": lambda b: run_session(shipped, b), "openvino": judged.run},
                          vocab=model.config.vocab_size, threads=threads)
    return judged.record, speed


def write_grader(loaded, tmp: Path, graphs: Graphs, graded: Graded, *, max_length: int, opset: int,
                 backend: ExportBackend, openvino: dict | None, speed: dict | None) -> dict:
    """Keep the shipped graph as model.onnx, save the tokenizer, write grader.json and the model card."""
    target = tmp / "model.onnx"
    Path(graded.final).rename(target)
    for leftover in tmp.glob("*.onnx"):
        if leftover != target:
            leftover.unlink()
    loaded.tokenizer.save_pretrained(tmp)
    record = grader_record(
        loaded, input_names=input_names(loaded.model), max_length=max_length, opset=opset,
        precision="int8" if graded.int8 else "fp32", graph_optimization="all", parity=graphs.parity,
        accuracy=graded.accuracy, int8=graded.int8, int8_rejected=graded.int8_rejected, optimized=graphs.optimized,
        model_file=file_record(target, tmp), tokenizer_file=file_record(tmp / "tokenizer.json", tmp),
        backend=backend.name, backend_alone=backend.alone, openvino=openvino, speed=speed,
    )
    write_json(tmp / "grader.json", record)
    write_text(tmp / "README.md", model_card(record))
    return record


FP32 = "fp32 graph"  # the session timed beside the INT8 graphs


def _choose_int8(fp32, fp32_session, tmp: Path, encoded, fp32_logits, labels, grades, *, model, gate: Int8Gate, choices,
                 calibration, threads, say, groups=None, required: bool = True):
    """Quantise every choice, judge each against the fp32 graph, keep the fastest that passes the gate: its graph,
    the record of the trials and its logits. When none passes: GateError if `required`, else (None, the record with
    "chosen": None, None)."""
    timing = timing_batch(model.config.vocab_size)
    names = [c.name for c in choices]
    runs = ([CHOICES[0]] if CHOICES[0].name not in names else []) + list(choices)  # default: the speed yardstick
    sessions, logits_of, batch_of = {}, {}, {}
    for choice in runs:
        say(f"INT8 {choice.name}")
        graph = quantize_int8(fp32, tmp / f"int8-{choice.name}.onnx", calibration=calibration, choice=choice)
        sessions[choice.name] = session(graph, threads=threads)
        if choice.name in names:
            logits_of[choice.name] = onnx_logits(sessions[choice.name], encoded, model=model)
            batch_of[choice.name] = batch_dependence(sessions[choice.name], encoded, grades, model=model)
    say("timing INT8 graphs")
    sessions[FP32] = fp32_session  # the graph shipped without --int8, timed last in the same turns
    times = round_robin([lambda b, s=s: run_session(s, b) for s in sessions.values()], timing, repeats=10)
    seconds = dict(zip(sessions, (statistics.median(t) for t in times)))
    trials = [judge(logits_of[name], fp32_logits, labels, grades, seconds=seconds[name], batch=batch_of[name],
                    groups=groups, default_seconds=seconds[CHOICES[0].name], fp32_seconds=seconds[FP32],
                    choice=name, gate=gate)
              for name in names]
    best = fastest_passing(trials)
    if best is None and required:
        raise GateError(f"no INT8 recipe passes the gate ({gate_table(trials)})")  # build_grader adds the fix
    fp32_nodes_of = {c.name: list(c.keep_fp32) for c in choices}  # recorded so the choice can be reproduced
    record = {"chosen": None if best is None else {**best.as_dict(), "keep_fp32": fp32_nodes_of[best.choice]},
              "trials": [t.as_dict() for t in trials], "fp32_seconds": seconds[FP32], "gate": asdict(gate),
              "timing_shape": list(TIMING_SHAPE), "threads": threads}
    if best is None:
        return None, record, None
    return tmp / f"int8-{best.choice}.onnx", record, logits_of[best.choice]
