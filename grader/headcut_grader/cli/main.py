"""The `headcut-grader` command: `grade` and `serve`, the same functions as `headcut grade` and `headcut serve`."""
from __future__ import annotations

if __name__ == "__main__":  # `python -m headcut_grader.cli.main`: the commands load as `python -m headcut_grader` loads
    from headcut_grader.entry import run  # them, where a Ctrl-C meanwhile is one line, not a traceback

    run("headcut_grader.cli.main")

import typer

from headcut_grader import __version__

from headcut_grader.cli.common import OneLineErrors, version_option
from headcut_grader.cli.grade import grade
from headcut_grader.cli.serve import serve

app = typer.Typer(
    name="headcut-grader",
    help="Grade query-title pairs with a grader exported by `headcut export` (ONNX Runtime or OpenVINO, no torch).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=OneLineErrors,
)


@app.callback()
def main(version: bool = version_option("headcut-grader", __version__)) -> None:
    """Options before the command; see each command's --help."""


app.command()(grade)
app.command()(serve)
