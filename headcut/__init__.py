"""headcut: make fine-tuned BERT relevance graders small and fast without losing their judgement."""
import importlib as _importlib
import sys as _sys

# These modules live in the torch-free runtime distribution (headcut-grader, package headcut_grader). Their old
# names stay importable and ARE the same module objects, so patching `headcut.data.X` in a test patches the runtime.
for _name in ("errors", "ranges", "files", "data", "grader", "serve", "microbatch", "serve_metrics"):
    globals()[_name] = _sys.modules[f"{__name__}.{_name}"] = _importlib.import_module(f"headcut_grader.{_name}")

from headcut.errors import UserError  # noqa: E402
from headcut.data import Pairs, read_pairs, synthetic_pairs  # noqa: E402

__all__ = ["UserError", "Pairs", "read_pairs", "synthetic_pairs", "load_model", "save_model", "LoadedModel"]
__version__ = "0.1.0"


def __getattr__(name):
    # Loaded on first use so that `import headcut.grader` (the deployable ONNX runtime) never pulls in torch.
    if name in ("load_model", "save_model", "LoadedModel"):
        from headcut import models

        return getattr(models, name)
    raise AttributeError(f"module 'headcut' has no attribute {name!r}")
