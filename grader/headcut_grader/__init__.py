"""headcut-grader: run graders exported by `headcut export` with ONNX Runtime, tokenizers and numpy (no torch).

    from headcut_grader import Grader
    Grader("runs/grader", threads=2).grade([("cordless drill", "Ridgeline 20-volt cordless drill")])
"""
TYPE_CHECKING = False  # typing's, without importing typing: this package loads before a Ctrl-C is taken (entry.py)
if TYPE_CHECKING:
    from headcut_grader.errors import UserError
    from headcut_grader.grader import GRADER_FORMAT, Grader, Grades

__all__ = ["Grader", "Grades", "UserError", "GRADER_FORMAT"]
__version__ = "0.1.0"
# name -> the module that holds it
_LAZY = {"UserError": "headcut_grader.errors", "Grader": "headcut_grader.grader", "Grades": "headcut_grader.grader",
         "GRADER_FORMAT": "headcut_grader.grader"}


def __getattr__(name: str):
    """These names load on first use, not on `import headcut_grader` (the grader's: numpy, the tokenizer and the
    runtime): `python -m headcut_grader` imports this package before its command can take a Ctrl-C (entry.py)."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    """The names that load on first use too: for tab completion, help() and a misspelt name's "Did you mean"."""
    return sorted({*globals(), *_LAZY})
