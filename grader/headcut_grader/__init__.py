"""headcut-grader: run graders exported by `headcut export` with ONNX Runtime, tokenizers and numpy (no torch).

    from headcut_grader import Grader
    Grader("runs/grader", threads=2).grade([("cordless drill", "Ridgeline 20-volt cordless drill")])
"""
from typing import TYPE_CHECKING

from headcut_grader.errors import UserError

if TYPE_CHECKING:
    from headcut_grader.grader import GRADER_FORMAT, Grader, Grades

__all__ = ["Grader", "Grades", "UserError", "GRADER_FORMAT"]
__version__ = "0.1.0"
_FROM_GRADER = ("Grader", "Grades", "GRADER_FORMAT")


def __getattr__(name: str):
    """The grader's names load numpy, the tokenizer and the runtime on first use, not on `import headcut_grader`:
    `python -m headcut_grader` imports this package before its command can take a Ctrl-C (see __main__)."""
    if name in _FROM_GRADER:
        from headcut_grader import grader

        return getattr(grader, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
