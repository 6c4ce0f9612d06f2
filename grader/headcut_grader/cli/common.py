"""CLI plumbing the runtime's commands share with the toolkit's: user errors -> one sentence + exit 2, checked
numeric flags, data options, progress bars."""
from __future__ import annotations

import contextvars
import errno
import functools
import inspect
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Optional

import typer

try:
    from typer import _click as click  # typer 0.2x parses with its own copy of click, and raises its exceptions
except ImportError:  # older typer: click itself
    import click

from headcut_grader import entry
from headcut_grader.backends import BACKEND_CHOICES
from headcut_grader.errors import UserError, caller, counted, cut, quoted
from headcut_grader.files import PAIRS_FILE, folder_spelled, path_mark
from headcut_grader.ranges import Range, declared_range
from headcut_grader.validation import NAME_MAX_BYTES, PATH_MAX_BYTES, cell_number, name_length_problem


class OneLineErrors(typer.core.TyperGroup):
    """A command line typed wrong (a missing or unknown option, a missing argument) is one sentence on stderr
    with exit code 2, as every other user error is, instead of a usage block and a box."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        entry.reached(entry.STARTING)
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            done = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.NoArgsIsHelpError as e:  # no command: the help, as asked for
            e.show()
            sys.exit(e.exit_code)
        except click.exceptions.UsageError as e:
            where = e.ctx.command_path if e.ctx is not None else self.name
            typer.secho(f"error: {e.format_message().rstrip('.')}; see `{where} --help`.", fg=typer.colors.RED,
                        err=True)
            sys.exit(2)
        except click.exceptions.ClickException as e:
            e.show()
            sys.exit(e.exit_code)
        except typer.Abort:
            typer.echo("Aborted!", err=True)
            sys.exit(1)
        if done == INTERRUPTED_EXIT:  # typer ends a Ctrl-C outside the command's body (parsing) in silence
            entry.say_interrupted()
        sys.exit(done if isinstance(done, int) else 0)  # a command's typer.Exit(code) comes back as its code

    def parse_args(self, ctx, args):
        command = next((self.commands[a] for a in args if a in self.commands), None)
        given = args[args.index(command.name) + 1:] if command is not None else []
        blank = blank_value(command, given) if command is not None else None
        problem = (f"{blank} is empty{BLANK_MEANS.get(blank, '; give it a value')}" if blank else
                   command is not None and (given_twice(command, given) or file_as_folder(command, given)))
        if problem:  # its help is the command's: a context of it, made without parsing
            raise click.exceptions.UsageError(problem, click.Context(command, parent=ctx, info_name=command.name))
        return super().parse_args(ctx, args)


# What a blank value would do, where that says more than "give it a value": serve's socket layer reads an empty
# host as every interface
BLANK_MEANS = {"--host": ", which would listen on every interface; pass 127.0.0.1 (this machine only) or "
                         "0.0.0.0 (the network) on purpose"}


def given_values(command, args: list[str]):
    """Each option and argument `args` give `command`, in order, as (param, spelled, value): an option as spelled
    (--out, -o, --no-tune) with its value as click reads it (--out=a, --out a, -oa; a flag's is its spelling, a value
    missing at the end None); an argument as (None, None, text), every token after `--` one. A token that names no
    option of the command is skipped: click refuses it."""
    options = {name: p for p in command.params if p.param_type_name == "option"
               for name in (*p.opts, *p.secondary_opts)}
    tokens = iter(args)
    for token in tokens:
        if token == "--":
            break
        long = token.startswith("--")
        name, eq, value = token.partition("=") if long else (token, "", "")
        if not long and name not in options and token[:2] in options:  # -oVALUE: a short option's value attached
            name, eq, value = token[:2], "=", token[2:]
        param = options.get(name)
        if param is not None:
            yield param, name, name if param.is_flag else (value if eq else next(tokens, None))
        elif not token.startswith("-"):
            yield None, None, token
    for token in tokens:
        yield None, None, token


def blank_value(command, args: list[str]) -> str | None:
    """The option or argument of `command` that `args` give as blank text ('' or spaces), or None: typer turns a
    blank path into Path('.'), the current folder, and a check downstream then names the wrong thing."""
    arguments = [p.name.upper() for p in command.params if p.param_type_name == "argument"]
    position = 0
    for param, _, value in given_values(command, args):
        if param is None:
            if not value.strip():
                return arguments[min(position, len(arguments) - 1)] if arguments else "an argument"
            position += 1
        elif not param.is_flag and value is not None and not value.strip():
            return param.opts[0]  # -m: named as --model
    return None


def given_twice(command, args: list[str]) -> str | None:
    """The sentence for an option of `command` that takes one value, given twice with different ones in `args`
    (--precision int8 ... --precision fp32, or --tune ... --no-tune), else None: click keeps the last in silence, so a
    command line edited by appending ran with a setting its user did not see. A repeatable option is left alone;
    two spellings of one path (--out a.json and --out ./a.json) are one value (same_path)."""
    seen: dict[str, tuple[str, str]] = {}
    for param, name, given in given_values(command, args):
        if param is None or given is None:  # a missing value: click says so
            continue
        first = seen.setdefault(param.name, (name, given))
        if param.multiple or first[1] == given or same_path(param, first[1], given):
            continue
        if param.is_flag:
            return f"{first[0]} and {name} are both given; pass one of them"
        return (f"{param.opts[0]} is given twice, as {quoted(first[1])} and as {quoted(given)}; pass it once, with "
                "the value you mean")
    return None


def file_as_folder(command, args: list[str]) -> str | None:
    """The sentence for a file_option of `command` that `args` give as a folder (o.tsv/), else None: typer drops the
    trailing separator before the command sees it, and the file o.tsv was written."""
    examples = file_examples(command)
    return next((problem for param, name, value in given_values(command, args)
                 if param is not None and param.name in examples
                 and (problem := folder_spelled(value, param.opts[0], example=examples[param.name]))),
                None)


def file_examples(command) -> dict[str, str]:
    """The file_options of click `command`, as {parameter name: example file name}: read from the command's own
    signature (typer's callback wraps it), whose defaults are the options file_option made."""
    if command.callback is None:
        return {}
    parameters = inspect.signature(command.callback).parameters.values()
    return {p.name: FILE_EXAMPLES[p.default] for p in parameters
            if isinstance(p.default, typer.models.OptionInfo) and p.default in FILE_EXAMPLES}


def same_path(param, first: str, given: str) -> bool:
    """Whether two values of option `param` name one file or folder (a.json, ./a.json, /abs/a.json; an input's
    link to it): a path option's (typed Path) always compared as paths; a text option's (--data, --model) only where
    both are written as paths (with a /) to something on disk, as a bare word may be a name that wins over a file of
    that name (--model minilm-l6, --data synthetic). An output (--out) is compared as written: a link there is what
    the write replaces, not what it points at."""
    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)  # typer 0.29
    typed_path = (isinstance(annotation, type) and issubclass(annotation, Path)  # Path, or file_to_read's path
                  or type(getattr(param, "type", None)).__name__ == "Path")  # older: click.Path
    on_disk = all(os.path.exists(value) for value in (first, given))
    if not (typed_path or (on_disk and all(os.sep in value for value in (first, given)))):
        return False
    if _lexical(first) == _lexical(given):
        return True
    return param.name != "out" and on_disk and os.path.realpath(first) == os.path.realpath(given)


def _lexical(path: str) -> str:
    """`path` absolute and normalised as written (a/../b is b), no link followed."""
    return os.path.normpath(os.path.abspath(path))


def user_errors(fn):
    """Turn a UserError into its sentence on stderr and exit code 2, without a traceback; a flag whose value
    `number` refused stops the command here, before its body does any work."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            bad = next((v for v in kwargs.values() if isinstance(v, BadValue)), None)
            if bad is not None:
                raise UserError(bad.sentence)
            entry.reached(entry.IN_BODY)
            written = written_whole(kwargs.get("out"))
            marked = _MARKED.set((kwargs.get("out"), written))  # the body's written_whole(out) is this one
            try:
                with on_interrupt(lambda: _left_outside(written)):  # a command that keeps something says so inside
                    done = fn(*args, **kwargs)
            finally:
                _MARKED.reset(marked)
            entry.reached(entry.FINISHED)
            return done
        except UserError as e:
            typer.secho(f"error: {e}", fg=typer.colors.RED, err=True)
            raise typer.Exit(2)
        except OSError as e:
            if e.errno != errno.ENAMETOOLONG:
                raise
            typer.secho(f"error: {name_too_long(e, kwargs)}", fg=typer.colors.RED, err=True)
            raise typer.Exit(2) from None

    return wrapper


INTERRUPTED_EXIT = entry.INTERRUPTED_EXIT


# (out, its written_whole) of the running command, made by user_errors as it began
_MARKED: contextvars.ContextVar = contextvars.ContextVar("marked", default=(None, None))


def written_whole(out) -> Callable[[], str | None]:
    """Made as a command begins: the sentence for a Ctrl-C once the command has published `out` (a new file or
    folder there: every command publishes its output in one last rename or link, files.py), else None. Was: a
    Ctrl-C after that, while the command removed its partial files or printed its summary, said OUT was not
    written. The command's own --out, marked by user_errors already, is not looked at again."""
    marked, said_by_command = _MARKED.get()
    if out is not None and said_by_command is not None and marked == out:
        return said_by_command
    before = path_mark(out) if out is not None else None

    def said() -> str | None:
        now = path_mark(out) if out is not None else None
        # another file or folder, not the one there before as --overwrite removes it (its mtime changes meanwhile)
        if now is None or (before is not None and now[:2] == before[:2]):
            return None
        return f"{out} was written whole; nothing needs rerunning."

    return said


def _left_outside(written: Callable[[], str | None]) -> str | None:
    """What Ctrl-C outside a command's own on_interrupt left: OUT whole once published, else nothing, as every
    command publishes its outputs in one last rename (files.atomic_dir, write_json). Said once, by the main process
    (`accelerate launch` numbers the others' RANK from 1)."""
    if os.environ.get("RANK", "0") != "0":
        return None
    return written() or ("no output was written (outputs appear only whole, at the end); rerun the same command to "
                         "start again.")


@contextmanager
def on_interrupt(left: Callable[[], str | None]):
    """Ctrl-C inside: one line on stderr, "interrupted: " and `left()` (what the command left behind and how to go
    on, read once it stopped; None prints nothing, as on the other processes of `accelerate launch`), then exit
    code 130. Opened outside a progress bar's `with`, so the bar is closed before the line is printed."""
    try:
        yield
    except KeyboardInterrupt:
        sentence = left()
        if sentence:
            typer.echo(f"interrupted: {sentence}", err=True)
        raise typer.Exit(INTERRUPTED_EXIT) from None


def name_too_long(error: OSError, kwargs: dict) -> str:
    """The sentence for a path the file system refused as too long wherever the library met it first (a model
    folder, a recipe, a path inside a recipe): naming the flag or argument whose path is too long, else the path."""
    ctx = click.globals.get_current_context(silent=True)
    for param in ctx.command.params if ctx is not None else ():
        values = kwargs.get(param.name)
        for value in values if isinstance(values, (list, tuple)) else [values]:
            problem = name_length_problem(value) if isinstance(value, (str, Path)) else None
            if problem:
                named = f"{param.opts[0]} {value}" if param.param_type_name == "option" else str(value)
                return f"{named}: {problem}; use a shorter name."
    return (f"{error.filename}: a name in this path is too long for the file system (at most "
            f"{counted(NAME_MAX_BYTES, 'byte')} a name, {PATH_MAX_BYTES:,} the path); use shorter names.")


def flags_set(ctx: typer.Context, names) -> list[str]:
    """The flags (as typed: --no-tune, not --tune) of the parameters `names` that the command line set. (Typer may
    carry its own copy of click, so the source is compared by name.)"""
    params = {p.name: p for p in ctx.command.params}
    out = []
    for name in names:
        if getattr(ctx.get_parameter_source(name), "name", None) == "COMMANDLINE":
            p = params[name]
            out.append(p.secondary_opts[0] if p.secondary_opts and ctx.params.get(name) is False else p.opts[0])
    return out


def progress_bar(total: int | None, desc: str, *, initial: int = 0):
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, desc=desc, unit="pair", file=sys.stderr, dynamic_ncols=True,
                leave=False, disable=None)


class BadValue:
    """What `number`'s parser returns for a refused value: `user_errors` reports it as the command's one sentence
    (a click usage error would print a usage block and a box instead of one line)."""

    def __init__(self, sentence: str):
        self.sentence = sentence


def bounded(kind: type, valid: Range, flag: str):
    """A parser for a whole or finite number within `valid`."""

    def parse(value):
        if isinstance(value, kind) and not isinstance(value, bool):
            number = value
        else:
            try:
                number = cell_number(value, kind, ascii_only=True)
            except (TypeError, ValueError):
                return BadValue(f"{flag} {quoted(str(value))} is not a {'whole number' if kind is int else 'number'}; "
                                f"it must be {valid.describe()}.")
        problem = valid.problem(number)
        return BadValue(f"{flag} {cut(value)} {problem}.") if problem else number

    parse.__name__ = kind.__name__  # the metavar typer shows in --help
    parse.valid = valid
    return parse


def one_of(choices: tuple[str, ...], flag: str):
    """A parser for a flag that takes one of `choices`."""

    def parse(value):
        return value if value in choices else BadValue(f"{flag} {cut(value)} is not one of {', '.join(choices)}; "
                                                       f"pass one of them.")

    parse.__name__ = "str"  # the metavar typer shows in --help
    return parse


def number(default, *flags: str, help: str, low=None, high=None, low_open=False, high_open=False, kind=None):
    """A typer option for a number with a checked range: number(64, "--batch-size", help=..., low=1)."""
    return number_in(Range(low, high, low_open, high_open), default, *flags, help=help, kind=kind)


def number_in(valid: Range, default, *flags: str, help: str, kind=None):
    """`number` with a range declared elsewhere (a library's), so the flag and the library cannot drift apart."""
    kind = kind or type(default)
    return typer.Option(default, *flags, help=f"{help} ({valid.describe()}).", parser=bounded(kind, valid, flags[0]))


def field_option(cls, name: str, *flags: str, help: str, kind=None):
    """`number` with the default and range of dataclass field `name` of `cls` (declared there once, with
    headcut_grader.ranges.ranged), so a flag and the library's setting cannot drift apart."""
    import dataclasses

    default = next(f for f in dataclasses.fields(cls) if f.name == name).default
    return number_in(declared_range(cls, name), default, *flags, help=help, kind=kind)


FILE = "FILE"  # the metavar --help shows for a file_option
# each file_option (the typer OptionInfo a command's signature holds as its default) -> the example file that
# file_as_folder names ("" for none); typer keeps no value of ours on the click option it parses with
FILE_EXAMPLES: dict[typer.models.OptionInfo, str] = {}


def file_option(default, *flags: str, help: str, example: str = ""):
    """A typer option for a file to write (a Path): shown as FILE in --help, and refused while parsing where it is
    written as a folder (o.tsv/, file_as_folder), naming a file such as `example` (grades.tsv) in that folder."""
    option = typer.Option(default, *flags, metavar=FILE, help=help)
    FILE_EXAMPLES[option] = example
    return option


class path(type(Path())):  # noqa: N801  (its name is what --help shows)
    """A Path that file_to_read parses, for the command's annotation: typer (0.29) shows a parameter with a parser
    by its annotation's name, so one annotated Path showed <Path> where an unparsed Path shows <path>."""


def folder_option(default, *flags: str, help: str):
    """A typer option for a folder to write, annotated `path`: its value keeps the text as typed (typed_path), so a
    refusal names it so (--out x.json/: files.as_typed), where typer's Path dropped the / before any check."""
    return typer.Option(default, *flags, parser=typed_path, help=help)


def typed_path(value):
    """`value` as a `path` carrying the text it was typed as (its `typed`); None, or a path already, as it is."""
    if value is None or isinstance(value, Path):
        return value
    parsed = path(value)
    parsed.typed = value
    return parsed


def file_to_read(flag: str, kind: type = str, *, what: str = PAIRS_FILE):
    """A parser for an option or argument that names a file to read (pairs, a recipe, a score file): text that names a
    folder (p.tsv/, p.tsv/.) is refused naming `flag` and, for a folder that is there, the file `what` asks for
    (folder_spelled), where typer's Path dropped the / and the file p.tsv was read; else the value as `kind` (str,
    or `path` for one annotated `path`, shown <path> in --help)."""

    positional = caller(flag) != "flags"  # not a flag: a command's argument (PAIRS_FILE), shown by its value alone

    def parse(value):
        if isinstance(value, str) and (problem := folder_spelled(value, flag, reading=True, positional=positional,
                                                                    what=what)):
            return BadValue(problem)
        return value if value is None else kind(value)

    parse.__name__ = kind.__name__  # the metavar typer shows in --help (older typer; 0.29 shows the annotation's)
    return parse


def version_option(program: str, version: str):
    """The eager `--version` option of a program's callback: prints "PROGRAM VERSION" and exits."""
    def show(value: bool) -> None:
        if value:
            typer.echo(f"{program} {version}")
            raise typer.Exit()

    return typer.Option(False, "--version", callback=show, is_eager=True, help="Print the version and exit.")


# Reusable option declarations (typer reads the defaults).
PRESET = typer.Option(None, "--preset", help="Column/label preset: homedepot or qbqtc.")
QUERY_COL = typer.Option(None, "--query-col", help="Query column name (default: query).")
TITLE_COL = typer.Option(None, "--title-col", help="Title column name (default: title).")
LABEL_COL = typer.Option(None, "--label-col", help="Gold column name (default: grade; score for a one-score model).")
BACKEND = typer.Option("auto", "--backend", parser=one_of(BACKEND_CHOICES, "--backend"),
                       help="Runtime: onnxruntime, openvino (needs the openvino extra of "
                       "headcut-grader and a grader exported with --backend openvino or auto), or auto: the folder's "
                       "graph that was timed fastest on this CPU model (timed here once and cached on another CPU).")
OVERWRITE = typer.Option(False, "--overwrite", help="Replace an existing output file or non-empty output folder.")
Opt = Optional
