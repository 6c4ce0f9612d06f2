"""`python -m headcut_grader` and the `headcut-grader` script: the runtime's commands (cli/main.py), loaded where a
Ctrl-C meanwhile is one line (entry.py)."""
from headcut_grader.entry import run


def main() -> None:
    run("headcut_grader.cli.main")


if __name__ == "__main__":  # not when a spawned worker process imports it
    main()
