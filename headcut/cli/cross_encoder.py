"""`headcut cross-encoder`: a one-score model (pruned or not) -> a folder sentence-transformers loads."""
from __future__ import annotations


import typer

from headcut.cli.common import ALLOW_PICKLE, OVERWRITE, folder_option, path, quiet_transformers, user_errors


@user_errors
def cross_encoder(
    model: str = typer.Option(..., "--model", "-m", help="A one-score model folder (task score): a CrossEncoder, "
                              "or what headcut finetune / prune wrote from one."),
    out: path = folder_option(..., "--out", "-o", help="Folder to write."),
    allow_pickle: bool = ALLOW_PICKLE,
    overwrite: bool = OVERWRITE,
):
    """Write MODEL as a sentence-transformers CrossEncoder folder: CrossEncoder(OUT).predict gives the scores
    headcut gives. A pruned model is written at full width with its pruned heads and neurons zero (transformers
    cannot rebuild per-layer shapes), so it is as fast as the unpruned one there; `headcut export` makes the small,
    fast grader.

    Example: headcut cross-encoder --model runs/ce-flops50 --out runs/ce-flops50-st
    """
    quiet_transformers()
    from headcut_grader.files import check_out_dir
    from headcut.models import load_model, save_cross_encoder
    from headcut.prune_arguments import named

    check_out_dir(out, overwrite=overwrite, inputs=[model], flag="--out", holds="the model's files")
    loaded = load_model(model, allow_pickle=allow_pickle, flag="--model")
    save_cross_encoder(loaded, out, overwrite=overwrite, names="flags",
                       keep_layers_said=named("no_drop_layers", "flags"))  # as `headcut prune` spells it
    typer.echo(f"wrote {out} (load it with sentence_transformers.CrossEncoder('{out}'))")
