"""The `headcut` command: a thin typer layer over the library."""
from __future__ import annotations

if __name__ == "__main__":  # `python -m headcut.cli.main`: the commands load as `python -m headcut` loads them, where
    from headcut_grader.entry import run  # a Ctrl-C meanwhile is one line, not a traceback

    run("headcut.cli.main")

import typer

from headcut.version import __version__
from headcut.cli.distill import distill
from headcut.cli.evaluate import evaluate
from headcut.cli.export import export
from headcut.cli.finetune import finetune
from headcut.cli.bench import bench
from headcut.cli.common import version_option
from headcut_grader.cli.common import OneLineErrors
from headcut.cli.cross_encoder import cross_encoder
from headcut.cli.prune import prune
from headcut.cli.run import run
from headcut.cli.scan import probe, scan
from headcut_grader.cli.grade import grade
from headcut_grader.cli.serve import serve

app = typer.Typer(
    name="headcut",
    help="Make fine-tuned BERT relevance graders small and fast: score heads, prune, distill, export to ONNX Runtime "
         "and OpenVINO.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=OneLineErrors,
)


@app.callback()
def main(version: bool = version_option("headcut", __version__)) -> None:
    """Options before the command; see each command's --help."""


app.command()(evaluate)
app.command()(finetune)
app.command()(distill)
app.command()(export)
app.command()(grade)
app.command()(bench)
app.command()(serve)
app.command()(prune)
app.command()(scan)
app.command()(probe)
app.command()(run)
app.command("cross-encoder")(cross_encoder)
