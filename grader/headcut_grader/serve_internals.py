"""The internals of uvicorn and h11 that serve_protocol's request head deadline reads, none of them their public
API, and the start-up check that the installed ones have them (`headcut serve` runs it, else app_from_env), apart
from serve_protocol so that serve.app_from_env can check without importing the module that imports serve."""
from __future__ import annotations

import dis

import h11
import uvicorn
from uvicorn.protocols.http import h11_impl
from uvicorn.protocols.http.h11_impl import H11Protocol

from headcut_grader.errors import UserError

# The uvicorn releases whose protocol internals (below) this module was tested against; grader/pyproject.toml's
# serve extra requires the same range (a test keeps the two equal).
UVICORN_SUPPORTED = ">=0.55,<0.56"
# likewise h11's (uvicorn's h11 protocol wraps an h11.Connection, whose state H11HeadTimed reads)
H11_SUPPORTED = ">=0.16,<0.17"
# uvicorn's internals the classes below override or read, none of them uvicorn's public API: the methods each
# protocol class has, and the attributes its __init__ sets (the request cycle's likewise)
PROTOCOL_METHODS = ("connection_made", "data_received", "connection_lost", "on_response_complete",
                    "_unset_keepalive_if_required", "timeout_keep_alive_handler")
PROTOCOL_ATTRIBUTES = ("loop", "transport", "app_state", "cycle", "timeout_keep_alive", "timeout_keep_alive_task")
H11_ATTRIBUTES = ("conn",)
HTTPTOOLS_METHODS = ("on_message_begin", "on_headers_complete")
CYCLE_ATTRIBUTES = ("response_complete",)
H11_CONNECTION = ("their_state",)  # h11's, not uvicorn's: a property of h11.Connection
H11_BUFFER = ("_receive_buffer",)  # set by h11.Connection's __init__: whose length says a head has begun


def _set_by_init(cls) -> set[str]:
    """The attribute names `cls.__init__` assigns (on self, as uvicorn's classes set their state)."""
    return {step.argval for step in dis.get_instructions(cls.__init__) if step.opname == "STORE_ATTR"}


def _defined(cls) -> set[str]:
    """The names the library's classes in `cls`'s ancestry define (uvicorn's, or h11's; not asyncio.Protocol's no-op
    methods of those names)."""
    package = cls.__module__.split(".")[0]
    return {name for owner in cls.__mro__ if owner.__module__.split(".")[0] == package for name in vars(owner)}


def _internals():
    """(the library, its class, the names this module needs of it, whether they are set by __init__ rather than
    defined), the protocol serve uses first."""
    try:  # uvicorn's "auto" (and serve_protocol's HeadTimedProtocol) takes httptools where it is installed
        from uvicorn.protocols.http import httptools_impl
    except ImportError:
        httptools_impl = None
    if httptools_impl is not None:
        HttpToolsProtocol = httptools_impl.HttpToolsProtocol
        yield uvicorn, HttpToolsProtocol, PROTOCOL_METHODS + HTTPTOOLS_METHODS, False
        yield uvicorn, HttpToolsProtocol, PROTOCOL_ATTRIBUTES, True
        yield uvicorn, httptools_impl.RequestResponseCycle, CYCLE_ATTRIBUTES, True
    yield uvicorn, H11Protocol, PROTOCOL_METHODS, False
    yield uvicorn, H11Protocol, PROTOCOL_ATTRIBUTES + H11_ATTRIBUTES, True
    yield uvicorn, h11_impl.RequestResponseCycle, CYCLE_ATTRIBUTES, True
    yield h11, h11.Connection, H11_CONNECTION, False
    yield h11, h11.Connection, H11_BUFFER, True


def missing_internals() -> dict:
    """The internals this module uses that the installed uvicorn and h11 lack: {library module: ['Class.name', ...]},
    only those lacking one."""
    missing = {}
    for library, cls, names, by_init in _internals():
        present = _set_by_init(cls) if by_init else _defined(cls)
        lacking = [f"{cls.__name__}.{name}" for name in names if name not in present]
        if lacking:
            missing.setdefault(library, []).extend(lacking)
    return missing


def check_uvicorn() -> None:
    """Raise UserError where the installed uvicorn or h11 lacks an internal the head deadline uses (serve's start-up
    and app_from_env call it): one sentence then, rather than an AttributeError in the middle of a request."""
    missing = missing_internals()
    if missing:
        supported = {uvicorn: UVICORN_SUPPORTED, h11: H11_SUPPORTED}
        lacks = " and ".join(f"{lib.__name__} {lib.__version__} lacks {', '.join(names)}"
                             for lib, names in missing.items())
        install = " ".join(f"'{lib.__name__}{supported[lib]}'" for lib in missing)
        which = " and ".join(lib.__name__ for lib in missing)
        raise UserError(f"{lacks}, which the server's request head deadline uses; install a supported {which}: "
                        f"pip install {install}.")
