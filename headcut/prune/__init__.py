"""Plans (which heads to keep), surgery (slicing them out), iterative pruning, measurements and artifacts."""
from headcut.prune.artifact import prune_meta, write_artifact
from headcut.evaluate.compare import compare_models
from headcut.prune.iterative import iterative_plan, step_ratios
from headcut.prune.measure import flops_per_pair, measure_latency, speed_summary
from headcut.prune.pipeline import prune, prune_to_budget
from headcut.prune.plan import HeadPlan, check_keep_ratio, effective_scores, layer_weights, plan_heads
from headcut.prune.report import format_report, shape_figure
from headcut.prune.result import PruneResult, PruneSettings
from headcut.prune.scores import check_unpruned, default_data, scan_scores, scores_from_file
from headcut.prune.surgery import apply_plan, pruned_copy

__all__ = [
    "HeadPlan", "PruneResult", "PruneSettings", "apply_plan", "check_keep_ratio", "check_unpruned",
    "compare_models", "default_data", "effective_scores", "flops_per_pair", "format_report", "shape_figure",
    "iterative_plan", "layer_weights", "measure_latency", "plan_heads", "prune", "prune_meta", "prune_to_budget",
    "pruned_copy", "scan_scores", "scores_from_file", "speed_summary", "step_ratios", "write_artifact",
]
