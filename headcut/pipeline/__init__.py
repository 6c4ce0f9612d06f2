"""`headcut run`: a pipeline recipe's stages (teacher, scan, prune, distill, export, bench) with fingerprints,
skipping and resuming, and the run's report."""
from headcut.pipeline.recipe import PipelineRecipe, load_pipeline
from headcut.pipeline.run import RunResult, Stage, plan, run_pipeline

__all__ = ["PipelineRecipe", "RunResult", "Stage", "load_pipeline", "plan", "run_pipeline"]
