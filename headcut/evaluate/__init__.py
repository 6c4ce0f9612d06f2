"""Scores that describe a model: predictions, metrics with CIs, head importance scans, probes, figures."""
from headcut.evaluate.metrics import (
    agreement,
    bootstrap_ci,
    expected_grade,
    macro_f1,
    ndcg_at_k,
    nll,
    paired_bootstrap,
    spearman,
    summarize,
)
from headcut.evaluate.criteria import CRITERIA, Criterion, head_importance, register_criterion
from headcut.evaluate.importance import read_scores, write_scores
from headcut.batching import collate, encode, length_batches
from headcut.evaluate.predict import predict_logits
from headcut.evaluate.compare import compare_models
from headcut.evaluate.report import Scorer, against_reference, evaluate_model, metrics_with_ci, open_scorer

__all__ = [
    "agreement", "bootstrap_ci", "expected_grade", "macro_f1", "ndcg_at_k", "nll", "paired_bootstrap",
    "spearman", "summarize", "compare_models", "collate", "encode", "length_batches", "predict_logits",
    "evaluate_model", "metrics_with_ci", "Scorer", "against_reference", "open_scorer",
    "CRITERIA", "Criterion", "register_criterion", "head_importance", "read_scores", "write_scores",
]
