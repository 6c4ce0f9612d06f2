"""Optional packages (a runtime, a metrics client, a server): the module where it is installed, None where not, and
Unimportable's sentence where it is installed but fails to import."""
from __future__ import annotations

import importlib
import sys
from types import ModuleType, TracebackType

from headcut_grader.errors import UserError

# A package whose import failed while its own code ran (not a missing one): the error, raised again on every later
# attempt in this process. Importing it again would rerun that code (OpenVINO's plugins load for seconds) and fail
# as before, and Python keeps whatever submodules the failed attempt imported, so a second try proves nothing. A
# package not installed is looked for again (a path search, and it may be installed while a notebook runs).
_BROKEN: dict[str, tuple[Exception, TracebackType | None]] = {}

NOT_INSTALLED = "is not installed here"


class Unimportable(UserError):
    """An optional package installed here whose import fails (an OSError for a shared library gone, an AttributeError
    of a half-upgraded install, a RuntimeError of its own): its sentence names the package, the error and the fix;
    `name` and `why` ('fails to import here (OSError: ...)') let a caller say it in its own sentence."""

    def __init__(self, name: str, why: str):
        super().__init__(f"{broken_said(name, why)}.")
        self.name, self.why = name, why


def reinstall(name: str) -> str:
    """The command that puts back a package installed here but failing to import (its files, its dependencies)."""
    return f"pip install --force-reinstall {name}"


def broken_said(name: str, why: str) -> str:
    """The clause for the package `name` that is installed but fails to import (`why`, as why_unusable says it), with
    the fix: 'openvino fails to import here (RuntimeError: ...); reinstall it: pip install --force-reinstall
    openvino'. Every sentence for such a package ends with it."""
    return f"{name} {why}; reinstall it: {reinstall(name)}"


def optional_module(name: str) -> ModuleType | None:
    """The module `name`, or None where it is not installed; Unimportable where it is but fails to import, whatever
    its error. A Ctrl-C that lands while a compiled extension starts (ONNX Runtime and OpenVINO are pybind11 modules)
    reaches Python as ImportError("initialization failed") caused by the KeyboardInterrupt; it is raised as the
    Ctrl-C it was, not taken as the package missing."""
    why = why_unusable(name)
    if why is None:
        return importlib.import_module(name)  # imported already: a look-up in sys.modules
    if why == NOT_INSTALLED:
        return None
    raise Unimportable(name, why)


def why_unusable(name: str) -> str | None:
    """Why the module `name` cannot be used here, as a clause (NOT_INSTALLED, 'fails to import here (RuntimeError:
    ...)'), or None where it imports. An import that fails with any error counts: an OpenVINO whose import raises a
    RuntimeError is as unusable as one not installed (was: a traceback out of an auto export)."""
    try:
        _imported(name)
    except Exception as e:  # noqa: BLE001 - a broken package's own error, whatever it is
        if isinstance(e, ImportError) and _not_installed(e, name):
            return NOT_INSTALLED
        return f"fails to import here ({_first_line(e)})"
    return None


def _imported(name: str) -> ModuleType:
    """import_module, with an ImportError caused by a Ctrl-C raised as the Ctrl-C it was, and a broken package's
    error (_BROKEN) raised again without a second attempt (was: why_unusable and optional_module reran its import
    each time they were asked, several times per run)."""
    if sys.modules.get(name) is None and name in _BROKEN:
        error, trace = _BROKEN[name]
        raise error.with_traceback(trace)
    try:
        return importlib.import_module(name)
    except Exception as e:  # noqa: BLE001 - a broken package's own error is kept, whatever it is
        if from_ctrl_c(e):  # no verdict on the package: the next attempt imports it
            if isinstance(e, ImportError):
                raise KeyboardInterrupt from None
            raise
        if not (isinstance(e, ImportError) and _not_installed(e, name)):
            _BROKEN[name] = e, e.__traceback__
        raise


def _not_installed(error: ImportError, name: str) -> bool:
    """Whether `error` says the module `name` (or a package above it) is not there, as against failing to load."""
    return isinstance(error, ModuleNotFoundError) and error.name is not None and \
        (name == error.name or name.startswith(error.name + "."))


def forget_broken() -> None:
    """Try every broken package's import again on its next use (tests that fake a broken or missing package)."""
    _BROKEN.clear()


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
