"""`python -m headcut` and the `headcut` script: the toolkit's commands (cli/main.py), loaded where a Ctrl-C
meanwhile is one line (headcut_grader/entry.py)."""
from headcut_grader.entry import run


def main() -> None:
    run("headcut.cli.main")


if __name__ == "__main__":  # not when a spawned worker process imports it
    main()
