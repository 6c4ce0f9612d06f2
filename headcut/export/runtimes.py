"""Which runtimes an export builds graphs for: backend auto asks for every runtime usable here, so it is decided in
one place that `headcut export`, `headcut run` (its checks, its fingerprint, its report) and build_grader share."""
from __future__ import annotations

from dataclasses import dataclass

from headcut_grader.errors import UserError, setting
from headcut.export.gate import named

BACKENDS = ("onnxruntime", "openvino", "auto")
INSTALL_OPENVINO = "pip install 'headcut[openvino]'"  # the export's extra: OpenVINO and NNCF (the runtime's lacks NNCF)
# what auto builds an OpenVINO graph with, as messages name them: NNCF judges its INT8 graphs
OPENVINO_PARTS = {"openvino": "OpenVINO", "nncf": "NNCF (which judges OpenVINO's INT8 graphs)"}


@dataclass(frozen=True)
class ExportBackend:
    """The backend an export builds for, as grader.json records it (onnxruntime, openvino or auto: both graphs), and
    `alone`: why backend auto builds ONNX Runtime's graph alone here (None where it builds what was asked)."""

    name: str
    alone: str | None = None


def export_backend(backend: str, precision: str, *, names: str = "arguments") -> ExportBackend:
    """`backend` as an export at `precision` (fp32, bf16, int8 or auto) builds it here: auto without a usable
    OpenVINO, or without NNCF where `precision` may choose an INT8 graph (int8, auto), is ONNX Runtime alone, as the
    grader's own backend choice takes the only graph whose runtime is usable. `names` as build_grader's."""
    if backend not in BACKENDS:
        raise UserError(f"{setting(named('backend', names), backend)} is not one of {', '.join(BACKENDS)}.",
                        about=("backend",))
    missing = openvino_missing(precision) if backend == "auto" else ""
    if not missing:
        return ExportBackend(backend)
    return ExportBackend("onnxruntime", f"{setting(named('backend', names), 'auto')}: {missing}, so ONNX Runtime "
                                        f"alone ({INSTALL_OPENVINO} for both)")


def openvino_missing(precision: str) -> str:
    """What an OpenVINO graph at `precision` needs and cannot use here, as a clause ('OpenVINO is not installed
    here'): OpenVINO, and NNCF for int8 and auto; "" where all can. One that fails to import counts, its error said."""
    from headcut_grader.optional import why_unusable

    needed = OPENVINO_PARTS if precision in ("int8", "auto") else {"openvino": OPENVINO_PARTS["openvino"]}
    return " and ".join(f"{said} {why}" for name, said in needed.items() if (why := why_unusable(name)))
