"""`python -m headcut_grader`: the runtime's commands (cli/main.py)."""
import sys

INTERRUPTED_EXIT = 130  # as cli.common's, which cannot be imported before the command has loaded


def main() -> None:
    """Load the commands, then run one. A Ctrl-C while they load (numpy, typer, the runtime: about 0.4 s) stops a
    command that has not begun, so it wrote nothing; was: a KeyboardInterrupt traceback."""
    try:
        from headcut_grader.cli.main import app
    except KeyboardInterrupt:
        sys.stderr.write("interrupted: stopped while starting, before anything was written; rerun the same "
                         "command.\n")
        sys.exit(INTERRUPTED_EXIT)
    app()


if __name__ == "__main__":  # not when a spawned worker process imports it
    main()
