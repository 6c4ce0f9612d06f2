"""Optional packages (a runtime, a metrics client, a server): the module where it is installed, None where not."""
from __future__ import annotations

import importlib
from types import ModuleType


def optional_module(name: str) -> ModuleType | None:
    """The module `name`, or None where it is not installed. A Ctrl-C that lands while a compiled extension starts
    (ONNX Runtime and OpenVINO are pybind11 modules) reaches Python as ImportError("initialization failed") caused
    by the KeyboardInterrupt; it is raised as the Ctrl-C it was (was: the package counted as not installed, so a
    `grade` interrupted while choosing its backend ended in a ValueError traceback)."""
    try:
        return _imported(name)
    except ImportError:
        return None


def why_unusable(name: str) -> str | None:
    """Why the module `name` cannot be used here, as a clause ('is not installed here', 'fails to import here
    (RuntimeError: ...)'), or None where it imports. An import that fails with any error counts: an OpenVINO whose
    import raises a RuntimeError is as unusable as one not installed (was: a traceback out of an auto export)."""
    try:
        _imported(name)
    except ImportError as e:
        if isinstance(e, ModuleNotFoundError) and e.name == name:
            return "is not installed here"
        return f"fails to import here ({_first_line(e)})"
    except Exception as e:  # noqa: BLE001 - a broken package's own error, whatever it is
        return f"fails to import here ({_first_line(e)})"
    return None


def _imported(name: str) -> ModuleType:
    """import_module, with an ImportError caused by a Ctrl-C raised as the Ctrl-C it was."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        if from_ctrl_c(e):
            raise KeyboardInterrupt from None
        raise


def _first_line(error: BaseException) -> str:
    line = (str(error).splitlines() or [""])[0]
    return f"{type(error).__name__}: {line[:100]}" if line else type(error).__name__


def from_ctrl_c(error: BaseException | None) -> bool:
    """Whether `error` is a KeyboardInterrupt or was raised while handling one (its cause or context chain)."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, KeyboardInterrupt):
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False
