"""headcut: make fine-tuned BERT relevance graders small and fast without losing their judgement.

The toolkit stands on the torch-free runtime `headcut_grader` (the headcut-grader distribution) and imports
its modules by that name. The old names `headcut.data`, `headcut.grader`, ... still import until the next
release, with a DeprecationWarning: each is a thin module that reads the runtime's."""
import importlib as _importlib
import importlib.machinery as _machinery  # not importlib.abc / .util: they load tempfile, shutil, ... (16 ms)
import sys as _sys
import warnings as _warnings

TYPE_CHECKING = False  # typing's, without importing typing: `python -m headcut` imports this package before its
if TYPE_CHECKING:  # command can take a Ctrl-C (headcut_grader/entry.py), so the names below load on first use
    from headcut_grader.data import Pairs, read_pairs
    from headcut_grader.errors import UserError

    from headcut.models import LoadedModel, load_model, save_model
    from headcut.synthetic import synthetic_pairs
    from headcut.version import __version__

__all__ = ["UserError", "Pairs", "read_pairs", "synthetic_pairs", "load_model", "save_model", "LoadedModel",
           "__version__"]

MOVED = ("errors", "ranges", "files", "data", "grader", "serve", "microbatch", "serve_metrics")
# toolkit-only names that left headcut_grader.data for the toolkit: the old `headcut.data` still finds them
LEFT_DATA = {"synthetic_pairs": "headcut.synthetic", "synthetic_spec": "headcut.synthetic",
             "is_synthetic": "headcut.synthetic"}


class _MovedLoader:
    """Runs `import headcut.<name>` for a module that moved to headcut_grader: warns, then forwards."""

    def create_module(self, spec):
        return None  # the default module

    def exec_module(self, module):
        new = f"headcut_grader.{module.__name__.rsplit('.', 1)[1]}"
        _warnings.warn(f"{module.__name__} is deprecated and goes in the next release; import {new} instead.",
                       DeprecationWarning, stacklevel=2)
        real = _importlib.import_module(new)
        module.__getattr__ = lambda name: getattr(_importlib.import_module(LEFT_DATA[name]) if new.endswith(".data")
                                                  and name in LEFT_DATA else real, name)
        module.__dir__ = lambda: dir(real)


class _MovedFinder:
    def find_spec(self, fullname, path=None, target=None):
        package, _, name = fullname.rpartition(".")
        return _machinery.ModuleSpec(fullname, _MovedLoader()) if package == __name__ and name in MOVED else None


_sys.meta_path.insert(0, _MovedFinder())


# name -> the module that holds it (models: torch)
_LAZY = {"Pairs": "headcut_grader.data", "read_pairs": "headcut_grader.data", "UserError": "headcut_grader.errors",
         "synthetic_pairs": "headcut.synthetic", "__version__": "headcut.version", "load_model": "headcut.models",
         "save_model": "headcut.models", "LoadedModel": "headcut.models"}


def __getattr__(name):
    if name in _LAZY:
        return getattr(_importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'headcut' has no attribute {name!r}")


def __dir__():
    """The names that load on first use too: for tab completion, help(headcut) and a misspelt name's "Did you
    mean"."""
    return sorted({*globals(), *_LAZY})
