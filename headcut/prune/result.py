"""What a prune returns (`PruneResult`) and the settings `prune` and `prune_to_budget` share (`PruneSettings`).

The result carries everything the artifact records, so `write_artifact(prune(...), out)` from Python writes
what `headcut prune` writes: the command only parses its flags into these calls and prints the result.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from headcut.models import LoadedModel
from headcut.evaluate_arguments import argument_field
from headcut.prune_arguments import argument_range
from headcut_grader.ranges import check_settings, range_field


@dataclass(frozen=True)
class PruneSettings:
    """How a prune samples its pairs, batches its passes and reports quality and speed (the command's flags)."""

    score_rows: int | None = range_field(512, argument_range("score_rows"))  # sample units are scored on (None: all)
    calibrate_rows: int | None = range_field(512, argument_range("calibrate_rows"))  # budget prunes: (seed + 1) tuning
    eval_rows: int | None = range_field(None, argument_range("eval_rows"))  # seeded sample of the quality pairs
    batch_size: int = argument_field("batch_size")
    bootstrap: int = argument_field("bootstrap")  # resamples of the paired 95% CIs
    timing: bool = True  # measure CPU latency before/after (slow: `latency_seconds` per model and batch size)
    latency_seconds: float = range_field(1.0, argument_range("latency_seconds"))
    seed: int = argument_field("seed")  # of the samples, scans and bootstrap

    def __post_init__(self):
        check_settings(self)  # a Python caller's: the flags and a run recipe's keys are checked first


@dataclass
class PruneResult:
    """A pruned model and what it rests on; `record()` is its headcut.json `prune` entry and the report's input."""

    pruned: LoadedModel
    source: LoadedModel
    request: dict  # what was asked besides a budget: layer_prior; heads: keep_ratio, min_heads, iterative
    plan: dict  # kept original head (and neuron) ids and counts per layer
    scores: dict  # provenance: the method used, and the score file or the data sample it ran on
    speed: dict  # parameters, FLOPs, ideal speedup and measured latency, before and after
    budget: dict | None = None  # budget prunes: the share asked, its FLOPs (or ms) and the plan's
    tuning: dict | None = None  # budget prunes: the mask tuning's calibration data and per-sublayer fits
    quality: dict | None = None  # before/after metrics with paired CIs, agreement; None without quality pairs
    quality_untuned: dict | None = None  # budget prunes with mask tuning: the same before the tuning
    notes: list[str] = field(default_factory=list)  # caveats a reader of the figures must see
    names: str = "arguments"  # how the prune's caller names its arguments, for the report's words (not recorded)

    def record(self) -> dict:
        source = {"path": str(Path(self.source.path).resolve()), "weights_hash": self.source.weights_hash}
        record = {"source": source, **self.request}
        optional = {"budget": self.budget, "tuning": self.tuning, "quality": self.quality,
                    "quality_untuned": self.quality_untuned}
        record.update(plan=self.plan, scores=self.scores, **{k: v for k, v in optional.items() if v is not None})
        return {**record, "speed": self.speed, "notes": list(self.notes)}
