"""Where `headcut` and `headcut-grader` start (`python -m`, the console scripts): the first code they run, so that a
Ctrl-C at any moment after Python has started ends the command with one `interrupted:` line and exit code 130, never
a traceback. It imports only what Python has loaded before it runs any code (os, sys)."""
import os
import sys

INTERRUPTED_EXIT = 130  # what a shell reports for a command Ctrl-C (SIGINT) ended: 128 + the signal's number

# How far the command has come, for a Ctrl-C that stops it outside its body (user_errors): inside, the body says
# what it left itself.
STARTING, IN_BODY, FINISHED = "starting", "in its body", "finished"
_stage = [STARTING]


def reached(stage: str) -> None:
    _stage[0] = stage


def say_interrupted() -> None:
    """The `interrupted:` line for a Ctrl-C outside the command's body: before it (loading, parsing the command
    line) nothing was written; after it, everything was. Said once, by the main process (`accelerate launch`
    numbers the others' RANK from 1); nothing where the body has said its own line or error."""
    if os.environ.get("RANK", "0") != "0":
        return
    if _stage[0] == STARTING:
        sys.stderr.write("interrupted: stopped while starting, before anything was written; rerun the same "
                         "command.\n")
    elif _stage[0] == FINISHED:
        sys.stderr.write("interrupted: stopped after the command had finished: its outputs were written whole; "
                         "nothing needs rerunning.\n")


def run(module: str) -> None:
    """Import `module` and run its typer `app`; a Ctrl-C that reaches here (while the commands load: numpy, typer,
    the runtime, torch) is said in one line, exit code 130. The stage is STARTING until the app's OneLineErrors.main
    says otherwise (it resets it as each invocation begins)."""
    try:
        import importlib

        importlib.import_module(module).app()
    except KeyboardInterrupt:
        say_interrupted()
        sys.exit(INTERRUPTED_EXIT)
