"""`headcut export`: a model folder -> a parity-checked ONNX grader folder."""
from __future__ import annotations


import typer

from headcut.export.card import quality_words
from headcut.cli.common import (ALLOW_PICKLE, LABEL_COL, LABEL_MAP, LIMIT, MAX_LENGTH, OVERWRITE, PRESET, QUERY_COL,
                                THREADS, TITLE_COL, Opt, field_option, file_to_read, flags_set, number_in,
                                folder_option, path, quiet_transformers, read_data, user_errors)
from headcut.export.gate import ARGUMENTS, Int8Gate
from headcut_grader.errors import UserError


def trial_rows(title: str, trials: list[dict]) -> list[str]:
    """One line per judged graph: its figures against fp32 and whether it passed the gate ('batch': the largest
    move of a pair's expected grade between grading it alone and inside a mixed batch)."""
    from headcut.evaluate.tasks import missing, shown, unmeasured_words

    lines = [f"{title:<36} {'agree':>7} {'dSpear':>8} {'dAcc pt':>8} {'batch':>6} {'vs fp32':>7}  gate"]
    for t in trials:
        gained = None if missing(t["accuracy_drop"]) else -t["accuracy_drop"]
        lines.append(f"{t['choice']:<36} {shown(t['agreement'], '.2%'):>7} {shown(t['spearman_drift'], '+.4f'):>8} "
                     f"{shown(gained, '+.2f'):>8} {t.get('batch_drift', 0.0):>6.3f} {t['speed_vs_fp32']:>6.2f}x  "
                     f"{'pass' if t['passes'] else '-'}")
    names = list(dict.fromkeys(name for t in trials for name in t.get("not_measured", [])))
    if names:
        lines.append(unmeasured_words(names, judged="the gate's other limits"))
    return lines


def format_record(record: dict) -> str:
    fp32 = record["parity"]["fp32"]
    lines = [f"fp32 parity: max |logit diff| {fp32['max_abs_diff']:.2e}, argmax agreement "
             f"{fp32['argmax_agreement']:.2%} ({fp32['rows']} rows, shapes {fp32['shapes']})"]
    if record["parity"].get("optimized"):
        opt = record["parity"]["optimized"]
        lines.append(f"optimised:   max |logit diff| {opt['max_abs_diff']:.2e}, attention fused: "
                     f"{record['optimized']['attention_fused']}")
    if record.get("int8"):
        lines += trial_rows("INT8 recipe", record["int8"]["trials"])
        lines.append(f"chosen: {record['int8']['chosen']['choice']}")
    elif record.get("int8_rejected"):
        lines += trial_rows("INT8 recipe", record["int8_rejected"]["trials"])
        lines.append("chosen: fp32 (no INT8 recipe passed the gate)")
    if (record.get("accuracy") or {}).get("fp32_metrics"):
        m = record["accuracy"]["fp32_metrics"]
        lines.append(f"fp32 on {record['accuracy']['data']['rows']} pairs: {quality_words(m)}")
    if record.get("accuracy"):
        m = record["accuracy"]["metrics"]
        lines.append(f"{record['precision']} on {record['accuracy']['data']['rows']} pairs: {quality_words(m)}")
    lines.append(f"model.onnx: {record['model_file']['bytes'] / 2**20:.1f} MiB")
    lines += format_openvino(record)
    return "\n".join(lines)


def format_openvino(record: dict) -> list[str]:
    ov = record.get("openvino")
    if not ov:
        return []
    fp32 = ov["parity"]["fp32"]
    lines = [f"OpenVINO {ov['runtime_version']} fp32 parity: max |logit diff| {fp32['max_abs_diff']:.2e}, argmax "
             f"agreement {fp32['argmax_agreement']:.2%}"]
    choice = ov.get("choice") or {}
    if choice.get("trials"):
        lines += trial_rows("OpenVINO graph", choice["trials"])
    lines += [f"skipped {s}" for s in choice.get("skipped", [])]
    if choice.get("note"):
        lines.append(choice["note"])
    size = sum(f["bytes"] for f in ov["files"].values()) / 2**20
    lines.append(f"OpenVINO graph: {ov['precision']} ({size:.1f} MiB)")
    speed = record.get("speed")
    if speed:
        cpu = speed["cpu"]
        timed = ", ".join(f"{name} {1000 * s:.1f} ms" for name, s in speed["seconds"].items())
        lines.append(f"batch {speed['shape'][0]} x {speed['shape'][1]} on {cpu['model']} ({' '.join(cpu['flags'])}), "
                     f"{speed['threads']} threads: {timed}; fastest here: {speed['fastest']}")
    return lines


def one_model(argument: str | None, flag: str | None) -> tuple[str, str]:
    """The model, as export's first argument or as --model (the other commands' flag), and how it was named."""
    if argument is not None and flag is not None:
        raise UserError(f"export's first argument ({argument}) and --model ({flag}) both name the model; pass "
                        "one of them.")
    if argument is None and flag is None:
        raise UserError("no model given; pass it as export's first argument, e.g. headcut export runs/teacher "
                        "--out runs/grader.")
    return (argument, "") if argument is not None else (flag, "--model")


@user_errors
def export(
    ctx: typer.Context,
    model: Opt[str] = typer.Argument(None, metavar="MODEL", help="Model folder (teacher, pruned or distilled "
                                     "artifact) or built-in name; or pass it as --model."),
    model_flag: Opt[str] = typer.Option(None, "--model", "-m", help="The model, given as every other command "
                                        "takes it: the same as MODEL."),
    out: path = folder_option(..., "--out", "-o",
                              help="GRADER_DIR to write (model.onnx, tokenizer, grader.json, card)."),
    int8: bool = typer.Option(False, "--int8", help="Quantise to INT8, choosing the recipe that passes the gate "
                              "(the same as --precision int8)."),
    backend: str = typer.Option("onnxruntime", "--backend", help="Runtime to export for: onnxruntime; openvino "
                                "(adds an OpenVINO graph beside an fp32 ONNX one; needs the openvino extra of "
                                "headcut); auto (both, and graders grade with whichever was timed fastest on their "
                                "CPU; ONNX Runtime's alone where OpenVINO is not usable here, as it says)."),
    precision: Opt[str] = typer.Option(None, "--precision", help="fp32, int8, bf16 (OpenVINO on CPUs with AMX or "
                                       "AVX512_BF16) or auto (the fastest that passes the gate); int8, bf16 and "
                                       "auto are judged on --data (default: fp32)."),
    optimize: bool = typer.Option(False, "--optimize",
                                  help="ONNX Runtime operator fusion, kept only if it passes parity."),
    opset: int = number_in(ARGUMENTS["opset"], 17, "--opset", help="ONNX opset"),
    data: Opt[str] = typer.Option(None, "--data", "-d", parser=file_to_read("--data"),
                                  help="Labelled pairs for the gate and accuracy (needed by --int8)."),
    max_drop: float = field_option(Int8Gate, "max_drop", "--max-drop",
                                   help="INT8: most accuracy points it may lose against fp32"),
    min_agreement: float = field_option(Int8Gate, "min_agreement", "--min-agreement",
                                        help="INT8: least share of grades equal to fp32's"),
    max_spearman_drift: float = field_option(Int8Gate, "max_spearman_drift", "--max-spearman-drift",
                                             help="INT8: most Spearman change vs fp32"),
    threads: int = THREADS,
    max_length: Opt[int] = MAX_LENGTH,
    preset: Opt[str] = PRESET, query_col: Opt[str] = QUERY_COL, title_col: Opt[str] = TITLE_COL,
    label_col: Opt[str] = LABEL_COL, label_map: Opt[str] = LABEL_MAP, limit: Opt[int] = LIMIT,
    overwrite: bool = OVERWRITE, allow_pickle: bool = ALLOW_PICKLE,
):
    """Export MODEL to a grader folder (ONNX Runtime, OpenVINO or both); every graph must match PyTorch (max |logit
    diff| <= 1e-4, same grades).

    Example: headcut export runs/teacher --out runs/grader-int8 --int8 --data ../shared/data/homedepot/dev.tsv
    --limit 2000

    For the CPU it will serve on: headcut export runs/teacher --out runs/grader --backend auto --precision auto
    --data ../shared/data/homedepot/dev.tsv --limit 2000 (run it on that CPU: bf16 needs AMX or AVX512_BF16).
    """
    quiet_transformers()
    from headcut.export import build_grader
    from headcut_grader.files import check_out_dir
    from headcut.batching import check_max_length
    from headcut.models import load_model, outline

    from headcut.export.build import choose_export

    model, model_name = one_model(model, model_flag)
    check_out_dir(out, overwrite=overwrite, inputs=[model, data], flag="--out",
                  holds="model.onnx, the tokenizer, grader.json and the card")
    # a bad --backend/--precision stops here; build_grader builds this choice, not one of its own
    choice = choose_export(backend, precision, int8=int8, names="flags")
    gate_flags = flags_set(ctx, ["min_agreement", "max_spearman_drift", "max_drop"])
    if gate_flags and set(choice.precisions) <= {"fp32", None}:
        raise UserError(f"{gate_flags[0]} sets the gate an int8, bf16 or auto export must pass, and this export is "
                        f"fp32, so it would be ignored; drop {gate_flags[0]} or pass --precision int8, bf16 or auto.")
    data_flags = flags_set(ctx, ["limit", "preset", "query_col", "title_col", "label_col", "label_map"])
    if data_flags and not data:
        raise UserError(f"{data_flags[0]} reads --data, which is not given, so it would be ignored; drop "
                        f"{data_flags[0]} or pass --data FILE.")
    if max_length is not None:  # on the model's outline, before its weights and --data are read (build_grader: again)
        check_max_length(outline(model, flag=model_name).model, max_length, flag="--max-length")
    pairs = None
    loaded = load_model(model, allow_pickle=allow_pickle, flag=model_name)
    if data:
        pairs = read_data(data, preset=preset, query_col=query_col, title_col=title_col, label_col=label_col,
                          label_map=label_map, limit=limit, task=loaded.task, grades=loaded.grades)
    gate = Int8Gate(min_agreement=min_agreement, max_spearman_drift=max_spearman_drift, max_drop=max_drop)
    record = build_grader(loaded, out, pairs=pairs, int8=int8, backend=backend, precision=precision, optimize=optimize,
                          opset=opset, max_length=max_length, gate=gate, threads=threads, overwrite=overwrite,
                          progress=lambda msg: typer.echo(f"... {msg}", err=True), names="flags", choice=choice)
    typer.echo(format_record(record))
    if record["backend_alone"]:  # auto without a usable OpenVINO (or NNCF, for an INT8 graph): why no OpenVINO graph
        typer.echo(record["backend_alone"])
    typer.echo(f"wrote {out}")
