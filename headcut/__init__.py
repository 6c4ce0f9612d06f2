"""headcut: make fine-tuned BERT relevance graders small and fast without losing their judgement.

The toolkit stands on the torch-free runtime `headcut_grader` (the headcut-grader distribution) and imports
its modules by that name. The old names `headcut.data`, `headcut.grader`, ... still import until the next
release, with a DeprecationWarning: each is a thin module that reads the runtime's."""
import importlib as _importlib
import importlib.abc as _abc
import importlib.util as _util
import sys as _sys
import warnings as _warnings

from headcut_grader.data import Pairs, read_pairs
from headcut_grader.errors import UserError

from headcut.synthetic import synthetic_pairs
from headcut.version import __version__

__all__ = ["UserError", "Pairs", "read_pairs", "synthetic_pairs", "load_model", "save_model", "LoadedModel",
           "__version__"]

MOVED = ("errors", "ranges", "files", "data", "grader", "serve", "microbatch", "serve_metrics")
# toolkit-only names that left headcut_grader.data for the toolkit: the old `headcut.data` still finds them
LEFT_DATA = {"synthetic_pairs": "headcut.synthetic", "synthetic_spec": "headcut.synthetic",
             "is_synthetic": "headcut.synthetic"}


class _MovedLoader(_abc.Loader):
    """Runs `import headcut.<name>` for a module that moved to headcut_grader: warns, then forwards."""

    def exec_module(self, module):
        new = f"headcut_grader.{module.__name__.rsplit('.', 1)[1]}"
        _warnings.warn(f"{module.__name__} is deprecated and goes in the next release; import {new} instead.",
                       DeprecationWarning, stacklevel=2)
        real = _importlib.import_module(new)
        module.__getattr__ = lambda name: getattr(_importlib.import_module(LEFT_DATA[name]) if new.endswith(".data")
                                                  and name in LEFT_DATA else real, name)
        module.__dir__ = lambda: dir(real)


class _MovedFinder(_abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        package, _, name = fullname.rpartition(".")
        return _util.spec_from_loader(fullname, _MovedLoader()) if package == __name__ and name in MOVED else None


_sys.meta_path.insert(0, _MovedFinder())


def __getattr__(name):
    # models (and torch) are loaded on first use
    if name in ("load_model", "save_model", "LoadedModel"):
        from headcut import models

        return getattr(models, name)
    raise AttributeError(f"module 'headcut' has no attribute {name!r}")
