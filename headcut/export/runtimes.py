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


def export_backend(backend: str, *, names: str = "arguments") -> ExportBackend:
    """`backend` as an export builds it here: auto without a usable OpenVINO and NNCF is ONNX Runtime alone, as the
    grader's own backend choice takes the only graph whose runtime is installed (was: `headcut export --backend auto`
    refused where OpenVINO was missing, and a traceback where it failed to import). `names` as build_grader's."""
    if backend not in BACKENDS:
        raise UserError(f"{setting(named('backend', names), backend)} is not one of {', '.join(BACKENDS)}.",
                        about=("backend",))
    missing = openvino_missing() if backend == "auto" else ""
    if not missing:
        return ExportBackend(backend)
    return ExportBackend("onnxruntime", f"{setting(named('backend', names), 'auto')}: {missing}, so ONNX Runtime "
                                        f"alone ({INSTALL_OPENVINO} for both)")


def openvino_missing() -> str:
    """What of OpenVINO and NNCF cannot be used here, as a clause ('OpenVINO is not installed here'); "" where both
    can. One that fails to import with any error counts, its error said (was: a traceback out of an auto run)."""
    from headcut_grader.optional import why_unusable

    return " and ".join(f"{said} {why}" for name, said in OPENVINO_PARTS.items() if (why := why_unusable(name)))
