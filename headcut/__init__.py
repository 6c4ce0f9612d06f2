"""headcut: make fine-tuned BERT relevance graders small and fast without losing their judgement."""
from headcut.errors import UserError
from headcut.data import Pairs, read_pairs, synthetic_pairs

__all__ = ["UserError", "Pairs", "read_pairs", "synthetic_pairs", "load_model", "save_model", "LoadedModel"]
__version__ = "0.1.0"


def __getattr__(name):
    # Loaded on first use so that `import headcut.grader` (the deployable ONNX runtime) never pulls in torch.
    if name in ("load_model", "save_model", "LoadedModel"):
        from headcut import models

        return getattr(models, name)
    raise AttributeError(f"module 'headcut' has no attribute {name!r}")
