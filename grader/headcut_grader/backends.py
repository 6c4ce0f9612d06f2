"""Backends: the runtimes that execute a grader's graph, ONNX Runtime (always installed) and OpenVINO (the
`[openvino]` extra). Each opens one graph of a grader folder and turns a padded int64 batch into logits.

A grader folder always carries the ONNX Runtime graph (`model_file`, the portable one); `headcut export
--backend openvino|auto` adds an OpenVINO IR under grader.json's `openvino`. Every file a backend opens is named
inside the folder and checked against the size and sha256 prefix grader.json records, so a copied folder that
was cut short or altered is refused with one sentence instead of grading wrongly.
"""
from __future__ import annotations

import errno
import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from headcut_grader.errors import UserError, named, quoted, shown
from headcut_grader.files import hash_and_find
from headcut_grader.machine import runtime_version
from headcut_grader.optional import Unimportable, broken_said, optional_module
from headcut_grader.validation import permission_fix

BACKEND_NAMES = ("onnxruntime", "openvino")
BACKEND_CHOICES = ("auto", *BACKEND_NAMES)  # what a user may ask for: a runtime, or auto
INSTALL = {"onnxruntime": "pip install onnxruntime", "openvino": "pip install 'headcut-grader[openvino]'",
           "serve": "pip install 'headcut-grader[serve]'"}


@dataclass
class Backend:
    """One opened graph: `run(feed)` takes int64 arrays by input name and returns logits `(batch, outputs)`."""

    name: str  # onnxruntime | openvino
    precision: str  # fp32 | int8 | bf16 | int8-bf16: what the graph computes in on this CPU
    version: str  # the runtime's version
    input_names: list[str]
    run: Callable[[dict], np.ndarray]


def graphs(record: dict) -> dict[str, dict]:
    """The graphs a grader.json declares, by backend: their precision and the files each needs."""
    found = {"onnxruntime": {"precision": record["precision"], "files": {"model": record["model_file"]}}}
    if isinstance(record.get("openvino"), dict):
        found["openvino"] = record["openvino"]
    return found


def graph_sha256(record: dict, backend: str) -> str:
    """The recorded sha256 prefix of the `backend` graph of a grader.json (its weights file for OpenVINO)."""
    files = graphs(record)[backend]["files"]
    spec = files.get("model") or files.get("bin") or {}
    return str(spec.get("sha256", spec.get("name", "")))


def graph_file(folder: Path, spec, *, what: str) -> Path:
    """The checked path of one graph file: inside the folder, present, and as long and as hashed as recorded."""
    return checked_file(folder, spec, what=what)[0]


def checked_file(folder: Path, spec, *, what: str, markers: tuple[bytes, ...] = ()) -> tuple[Path, bool]:
    """graph_file's path, and whether the file holds any of `markers` (searched in the read that hashes it)."""
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str) or not spec["name"]:
        raise UserError(f"{folder / 'grader.json'}: {what} has no file name; re-export the grader.")
    path = (folder / spec["name"]).resolve()
    if folder.resolve() not in path.parents:
        if _names_inside(spec["name"]):  # a link in the folder: git-annex, DVC, a shared cache
            raise UserError(f"{folder / spec['name']} is a symbolic link to {path}, outside the grader folder, which "
                            "must hold its own files: put the file itself in place of the link.")
        raise UserError(f"{folder / 'grader.json'}: {what} {quoted(spec['name'])} is outside the grader folder; a "
                        "grader folder must hold its own graphs, so re-export it.")
    if not path.is_file():
        raise UserError(f"{folder}: no {spec['name']}, which grader.json names; re-export the grader or copy the "
                        "folder again.")
    size, digest = spec.get("bytes"), spec.get("sha256")
    if not _is_size(size) or not _is_digest(digest):  # else the file could not be checked, nor the grader named
        raise UserError(f"{folder / 'grader.json'}: {what} records bytes {shown(size)} and sha256 {shown(digest)}, "
                        "not its size and a sha256 prefix of 16 to 64 hex digits; re-export the grader.")
    if path.stat().st_size != size:
        raise _not_recorded(path)
    try:
        sha256, found = hash_and_find(path, markers)
    except OSError as e:
        raise unreadable(path, e) from None
    if sha256[:len(digest)] != digest:
        raise _not_recorded(path)
    _check_kind(folder, spec["name"], what)
    return path, found


# What each file key of grader.json must name, by the suffix that its reader goes by: OpenVINO picks its reader by
# the suffix (an .onnx given as the IR's .xml was read as ONNX and refused for its precision)
KINDS = {"model_file": (".onnx", "an ONNX graph (.onnx)"),
         "openvino.files.xml": (".xml", "an OpenVINO IR .xml file (with its weights, a .bin, under "
                                        "openvino.files.bin)"),
         "openvino.files.bin": (".bin", "an OpenVINO IR's weights, the .bin beside its .xml"),
         "tokenizer_file": (".json", "a tokenizer.json")}


def _check_kind(folder: Path, name: str, what: str) -> None:
    """The file that grader.json's `what` names, checked as the one recorded, is of the kind that key holds."""
    suffix, kind = KINDS[what]
    if Path(name).suffix.lower() != suffix:
        raise UserError(f"{folder / 'grader.json'}: {what} names {quoted(name)}, not {kind}; grader.json was edited "
                        "or the folder mixes files of two exports, so re-export the grader.")


def _names_inside(name: str) -> bool:
    """Whether a file `name` of grader.json names a path inside the folder, links not followed."""
    norm = os.path.normpath(name)
    return not os.path.isabs(norm) and norm != "." and norm.split(os.sep)[0] != ".."


def _not_recorded(path: Path) -> UserError:
    return UserError(f"{path} is not the file grader.json records (size or sha256 differs: altered or copied "
                     "incompletely); copy the grader folder again or re-export it.")


def unreadable(path: Path, error: OSError) -> UserError:
    """A grader folder's file that the system will not read: its permissions (another user's file), a folder in its
    place, a failing disk."""
    fix = (permission_fix([path], own="let this user read it", chmod="a+r", verb="read",
                          otherwise="copy the grader folder again") if error.errno in (errno.EACCES, errno.EPERM)
           else "copy the grader folder again or re-export it")
    return UserError(f"{path} cannot be read ({error.strerror or error}); {fix}.")


def _is_size(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_digest(value) -> bool:
    return isinstance(value, str) and 16 <= len(value) <= 64 and all(c in "0123456789abcdef" for c in value)


def open_backend(name: str, folder: Path, record: dict, *, threads: int, names: str = "arguments") -> Backend:
    """Open the `name` graph of a grader folder with `threads` threads; `names`: who chose it ("flags": a
    command's --backend, else Grader's backend argument), so that a refusal names it as they wrote it."""
    declared = graphs(record)
    if name not in declared:
        raise UserError(f"{folder} has no {name} graph (it has: {', '.join(declared)}); export one with "
                        f"`headcut export --backend {name}` or pick another {named('backend', names, section='')}.")
    if name == "openvino":
        try:
            found = optional_module("openvino")
        except Unimportable as e:
            raise no_openvino(names, broken=e) from None
        if found is None:
            raise no_openvino(names)
    return OPENERS[name](folder, declared[name], record, threads)


def _onnxruntime(folder: Path, graph: dict, record: dict, threads: int) -> Backend:
    import onnxruntime as ort

    path, quantized = checked_file(folder, graph["files"]["model"], what="model_file", markers=QUANTIZED_ONNX_OPS)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 4  # a failed run raises its error; logged too, it would print a second, raw line
    # The level the export's parity gate ran with; never a different one than was checked.
    if record.get("graph_optimization") == "disabled":
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime's InvalidProtobuf, Fail, ... derive from Exception only
        reason = str(e).split(":")[-1].strip()[:200] or type(e).__name__
        raise UserError(f"{path} is damaged or incomplete ({reason}); re-export the grader or copy the folder "
                        "again.") from None
    names = [i.name for i in session.get_inputs()]
    check_inputs(folder, names, record)
    check_precision(folder, "precision", graph["precision"], path, quantized)
    return Backend("onnxruntime", graph["precision"], ort.__version__, names,
                   lambda feed: session.run(["logits"], {k: feed[k] for k in names})[0])


def no_openvino(names: str = "arguments", *, broken: Unimportable | None = None) -> UserError:
    """The sentence for OpenVINO asked for where it is not installed, or is `broken` (fails to import), naming the
    other backend as whoever chose (`names`, as open_backend's) writes it: --backend onnxruntime,
    backend='onnxruntime'."""
    other = "pick --backend onnxruntime" if names == "flags" else "pass backend='onnxruntime'"
    if broken is not None:
        return UserError(f"the OpenVINO backend needs the openvino package, and {broken_said('openvino', broken.why)} "
                         f"(or {other}).")
    return UserError(f"the OpenVINO backend needs the openvino package; run: {INSTALL['openvino']} (or {other}).")


def openvino_config(inference_precision: str, threads: int) -> dict:
    """Compile settings: the precision the gate checked (OpenVINO would pick bf16 by itself on AMX CPUs), a
    latency stream, so each call gets every thread, as ONNX Runtime's session does, and no CPU pinning:
    pinned, the single-thread workers of `serve --workers 2` all ran on the first core (served 42% of
    offline pairs/s with 1.03 of 2 cores busy, benchmarks/serve_load.py)."""
    return {"INFERENCE_PRECISION_HINT": "bf16" if inference_precision == "bf16" else "f32",
            "INFERENCE_NUM_THREADS": threads, "NUM_STREAMS": 1, "PERFORMANCE_HINT": "LATENCY",
            "ENABLE_CPU_PINNING": False}


def _openvino(folder: Path, graph: dict, record: dict, threads: int) -> Backend:
    import openvino  # open_backend found it installed

    core = openvino.Core()

    files = graph.get("files") if isinstance(graph.get("files"), dict) else {}
    xml = graph_file(folder, files.get("xml"), what="openvino.files.xml")
    weights = graph_file(folder, files.get("bin"), what="openvino.files.bin")
    hint = graph.get("inference_precision", "fp32")
    with _damaged(xml, weights):
        model = core.read_model(str(xml), str(weights))
    names = [i.get_any_name() for i in model.inputs]
    check_inputs(folder, names, record)
    # before compiling: a folder refused here does not pay the compile (seconds for a large graph)
    check_precision(folder, "openvino.precision", graph.get("precision", "fp32"), xml, _quantized_ir(model))
    with _damaged(xml, weights):
        compiled = core.compile_model(model, "CPU", openvino_config(hint, threads))
    request = compiled.create_infer_request()
    # an openvino.Type: its name is "bf16" or "f32" (str() gives "<Type: 'bfloat16'>", which never says bf16)
    ran_in = compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()

    def run(feed):
        return request.infer({k: feed[k] for k in names})[0].copy()

    precision = graph.get("precision", "fp32")
    if hint == "bf16" and ran_in != "bf16":
        precision = precision.replace("-bf16", "").replace("bf16", "fp32")  # no bf16 on this CPU: it runs f32
    return Backend("openvino", precision, runtime_version("openvino"), names, run)


@contextmanager
def _damaged(xml: Path, weights: Path):
    """OpenVINO's failure to read or compile an IR (a RuntimeError with a multi-line C++ trace) as one sentence."""
    try:
        yield
    except Exception as e:
        reason = " ".join(str(e).split())[:200] or type(e).__name__
        raise UserError(f"{xml} is damaged or does not match {weights.name} ({reason}); re-export the grader or "
                        "copy the folder again.") from None


def check_inputs(folder: Path, names: list[str], record: dict) -> None:
    """A graph whose inputs are not the ones grader.json declares was not exported with this record."""
    declared = record.get("input_names")
    if isinstance(declared, list) and sorted(names) != sorted(declared):
        raise UserError(f"{folder}: the graph's inputs {names} are not grader.json's input_names {declared}; the "
                        "folder mixes files of two exports, so re-export it.")


# Op types only a quantized ONNX graph holds (static QDQ: QuantizeLinear / DequantizeLinear; dynamic: MatMulInteger
# with DynamicQuantizeLinear; QOperator: QLinear*; weight-only: MatMulNBits, the per-row-int8 recipe's one op; and
# ONNX Runtime's own fused ones), as the bytes the protobuf spells them with: found in the file without the onnx
# package, which the runtime does not install. Every recipe of headcut.export.quantize.CHOICES must hold one
# (tests/test_grader_folders.py opens a grader of each).
QUANTIZED_ONNX_OPS = (b"QuantizeLinear", b"MatMulInteger", b"QLinear", b"DynamicQuantizeMatMul", b"QAttention",
                      b"QGemm", b"MatMulNBits")


def _quantized_ir(model) -> bool:
    """Whether an OpenVINO model holds INT8 parts: NNCF's FakeQuantize ops, or weights stored as 8- or 4-bit
    integers."""
    small = {"i8", "u8", "i4", "u4"}
    return any(op.get_type_name() == "FakeQuantize" or (op.get_type_name() == "Constant" and
                                                        op.get_element_type().get_type_name() in small)
               for op in model.get_ops())


def check_precision(folder: Path, key: str, precision: str, path: Path, quantized: bool) -> None:
    """grader.json's `key` says INT8 exactly where the graph file `path` holds quantized operations: else an edited
    precision (or a graph of another export) would be reported and benchmarked as what it is not."""
    if ("int8" in precision) != quantized:
        holds = "holds" if quantized else "holds no"
        raise UserError(f"{folder / 'grader.json'}: {quoted(key)} is {shown(precision)}, but {path.name} {holds} "
                        "quantized (INT8) operations; grader.json was edited or the folder mixes files of two "
                        "exports, so re-export it.")


OPENERS = {"onnxruntime": _onnxruntime, "openvino": _openvino}
