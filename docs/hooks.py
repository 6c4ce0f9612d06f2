"""mkdocs hook: pages that cannot drift from the code are generated at build time.

A page holds a marker comment and the hook replaces it:
  <!-- generated: recipes -->            every recipe field, from the recipe dataclasses
  <!-- generated: cli headcut -->        every command and option, from the typer app
  <!-- generated: cli headcut-grader -->
tests/test_docs.py imports the same functions, so what the site shows is what the tests check.
"""
from __future__ import annotations

import dataclasses
import inspect
import io
import re
import tokenize
import typing

MARKER = re.compile(r"<!-- generated: (recipes|cli [\w-]+) -->")


def on_page_markdown(markdown, page, config, files):  # mkdocs hook
    return MARKER.sub(lambda m: generate(m.group(1)), markdown)


def generate(what: str) -> str:
    if what == "recipes":
        return recipes_markdown()
    return cli_markdown(what.split()[1])


# ---- recipes -------------------------------------------------------------------------------------------------

def recipe_classes() -> list[tuple[str, str, type]]:
    """(title, how a key is set, dataclass) for every recipe kind and pipeline section."""
    from headcut.distill.recipe import DistillRecipe
    from headcut.finetune import FinetuneRecipe
    from headcut.pipeline import recipe as pipeline

    out = [("Finetune recipe", "`recipes/finetune/*.yaml`, read by `headcut finetune`; `--set KEY=VALUE`", FinetuneRecipe),
           ("Distill recipe", "`recipes/distill/*.yaml`, read by `headcut distill`; `--set KEY=VALUE`", DistillRecipe)]
    sections = [("data", pipeline.DataSection), ("teacher", pipeline.TeacherSection),
                ("scan", pipeline.ScanSection), ("prune", pipeline.PruneSection),
                ("distill.NAME", pipeline.StudentSection), ("export", pipeline.ExportSection),
                ("bench", pipeline.BenchSection), ("floor", pipeline.FloorSection)]
    for name, cls in sections:
        out.append((f"Pipeline section `{name}`", f"`recipes/run/*.yaml`, read by `headcut run`; `--set {name}.KEY=VALUE`",
                    cls))
    return out


def field_comments(cls: type) -> dict[str, str]:
    """The comment beside (or on the lines just above) each field in the class bodies of `cls` and its bases."""
    comments: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass) or klass is object:
            continue
        try:
            source = inspect.getsource(klass)
        except (OSError, TypeError):
            continue
        pending: list[str] = []
        lines: dict[int, list] = {}
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            lines.setdefault(tok.start[0], []).append(tok)
        for number in sorted(lines):
            toks = [t for t in lines[number] if t.type not in (tokenize.INDENT, tokenize.DEDENT, tokenize.NL,
                                                              tokenize.NEWLINE)]
            if not toks:
                continue
            if toks[0].type == tokenize.COMMENT:
                pending.append(toks[0].string.lstrip("# ").strip())
                continue
            names = [t for t in toks if t.type == tokenize.NAME]
            is_field = len(toks) > 1 and toks[0].type == tokenize.NAME and toks[1].string == ":"
            if is_field:
                text = " ".join(pending + [t.string.lstrip("# ").strip() for t in toks if t.type == tokenize.COMMENT])
                if text:
                    comments[names[0].string] = text
            pending = []
    return comments


def _type_name(tp) -> str:
    if isinstance(tp, str):
        return tp
    if typing.get_origin(tp) is typing.Literal:
        return " \\| ".join(repr(a).replace("'", "") for a in typing.get_args(tp))
    text = getattr(tp, "__name__", None) if typing.get_origin(tp) is None else None
    return text or str(tp).replace("typing.", "").replace("|", "\\|")


def _default(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return "(required)"
    if isinstance(value, tuple):
        value = list(value)
    return f"`{value!r}`".replace("|", "\\|") if value is not None else "`null`"


def recipe_table(cls: type) -> str:
    hints = typing.get_type_hints(cls)
    notes = field_comments(cls)
    rows = ["| key | type | default | allowed | note |", "|---|---|---|---|---|"]
    for f in dataclasses.fields(cls):
        if f.name in ("source", "overrides"):
            continue  # bookkeeping, not keys a recipe file sets
        allowed = f.metadata["range"].describe() if "range" in f.metadata else ""
        if "tune" in f.metadata:
            low, high, log = f.metadata["tune"]
            allowed += f"; `--tune` searches [{low:g}, {high:g}]{' (log)' if log else ''}"
        note = notes.get(f.name, "").replace("|", "\\|")
        rows.append(f"| `{f.name}` | {_type_name(hints[f.name])} | {_default(f)} | {allowed} | {note} |")
    return "\n".join(rows)


def recipes_markdown() -> str:
    parts = []
    for title, how, cls in recipe_classes():
        doc = inspect.getdoc(cls) if cls.__doc__ and not cls.__doc__.startswith(cls.__name__ + "(") else ""
        parts.append(f"### {title}\n\n{how}.\n\n" + (f"{doc}\n\n" if doc else "")
                     + recipe_table(cls))
    return "\n\n".join(parts)


# ---- command line --------------------------------------------------------------------------------------------

def cli_apps() -> dict:
    from headcut.cli.main import app as toolkit
    from headcut_grader.cli.main import app as runtime

    return {"headcut": toolkit, "headcut-grader": runtime}


def cli_commands(prog: str) -> dict:
    """{command name: click command} of `prog`'s typer app."""
    import typer.main

    group = typer.main.get_command(cli_apps()[prog])
    return {"": group, **group.commands}


def _option_row(param, ctx) -> str:
    record = param.get_help_record(ctx)
    if record is None:  # an argument without help text
        record = (param.name.upper(), "")
    names, help_text = record
    names = names.replace("|", "\\|")
    help_text = " ".join(help_text.split()).replace("|", "\\|").replace("<", "&lt;")
    return f"| `{names}` | {help_text} |"


def cli_markdown(prog: str) -> str:
    parts = []
    for name, command in cli_commands(prog).items():
        if command.hidden if hasattr(command, "hidden") else False:
            continue
        title = f"`{prog} {name}`".replace(" `", "`") if name else f"`{prog}`"
        usage = " ".join(command.collect_usage_pieces(_context(command, prog, name)))
        text = (command.help or "").strip()
        ctx = _context(command, prog, name)
        rows = ["| argument / option | help |", "|---|---|"]
        rows += [_option_row(p, ctx) for p in command.params if not getattr(p, "hidden", False)]
        parts.append(f"### {title}\n\n```text\n{prog}{' ' + name if name else ''} {usage}\n```\n\n"
                     f"{_escape(text)}\n\n" + "\n".join(rows))
    return "\n\n".join(parts)


def _escape(text: str) -> str:
    # typer help is plain text: paragraphs joined, `<` kept literal; the examples stay commands, in a code block
    parts = []
    for paragraph in text.split("\n\n"):
        if paragraph.startswith("Example"):
            parts.append("```text\n" + "\n".join(help_examples(paragraph)) + "\n```")
        else:
            parts.append(" ".join(paragraph.split()).replace("<", "&lt;"))
    return "\n\n".join(parts)


def help_examples(paragraph: str) -> list[str]:
    """The command lines of an `Example:` / `Examples:` paragraph of a command's help, one per example."""
    body = paragraph.split(":", 1)[1]
    lines: list[str] = []
    for line in body.strip().split("\n"):
        line = line.strip()
        if line.startswith(("headcut ", "headcut-grader ", "curl ")) or not lines:
            lines.append(line)
        else:
            lines[-1] += " " + line
    return lines


def _context(command, prog: str, name: str):
    from typer._click import Context

    return Context(command, info_name=f"{prog} {name}".strip())
