"""headcut: make fine-tuned BERT relevance graders small and fast without losing their judgement."""
from headcut.errors import UserError
from headcut.data import Pairs, read_pairs, synthetic_pairs
from headcut.models import load_model, save_model, LoadedModel

__all__ = ["UserError", "Pairs", "read_pairs", "synthetic_pairs", "load_model", "save_model", "LoadedModel"]
__version__ = "0.1.0"
