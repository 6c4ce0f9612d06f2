"""The one exception type a user can cause.

Library code raises `UserError` with one sentence that names the file, line, column or flag and says
how to fix it; the CLI turns it into that sentence on stderr and exit code 2 (no traceback).
"""
import copy
import json
from contextlib import contextmanager
from pathlib import Path, PurePath


class UserError(Exception):
    """A problem with the user's input (file, flag, model) that they can fix. `about`: the arguments it refuses
    (their names as the raising function takes them: flops, backend), the one it blames first, so a caller that
    named them (a run, by its recipe keys) tells where they came from without reading the sentence."""

    about: tuple[str, ...] = ()

    def __init__(self, *args, about: tuple[str, ...] = ()):
        super().__init__(*args)
        if about:
            self.about = tuple(about)


@contextmanager
def concerning(*names: str):
    """A UserError raised inside marked as `about` arguments `names`, where the check that raised it (one given
    only a flag's text to name) did not say which."""
    try:
        yield
    except UserError as e:
        if not e.about:
            e.about = names
        raise


class WordedError(UserError):
    """A check's refusal of keys `about` worded by `say(name, how)`: `name(key)` names each key it speaks of, `how(key)`
    says where to change it ("" where the check's caller set it), led by `lead` (its sentence's text before `say`'s),
    so a caller that gave keys under its own names (a run's [data]: data.dev for dev_data) words it again (reworded)."""

    def __init__(self, lead: str, say, *, about: tuple[str, ...] = (), name=str, how=lambda key: ""):
        super().__init__(f"{lead}{say(name, how)}", about=about)
        self.lead, self.say, self.name, self.how = lead, say, name, how

    def reworded(self, *, lead: str | None = None, name=None, how=None, kind=None) -> "WordedError":
        """This refusal led by `lead` and worded by `name` and `how` (each its own where not given), as a `kind` (a
        WordedError class; its own by default)."""
        return (kind or type(self))(self.lead if lead is None else lead, self.say, about=self.about,
                                    name=name or self.name, how=how or self.how)


def led(error: UserError, lead: str) -> UserError:
    """`error` with its sentence led by `lead` (the file that holds what it names), of its own class (a GateError
    stays one), to raise in its place; a WordedError words on under that lead."""
    if isinstance(error, WordedError):
        return error.reworded(lead=lead + error.lead)
    again = copy.copy(error)
    again.args = (f"{lead}{error}",)
    return again


def lead_of(where: str) -> str:
    """The lead of a sentence about something read from `where` (a file, a recipe and its --set values): 'WHERE: ',
    or nothing where it was given in Python."""
    return f"{where}: " if where else ""


def setting(name: str, value) -> str:
    """A setting and its value as a message names them: `--flops 0.5` for a flag, `prune.flops=0.5` for a recipe
    key (`--set` form), `--set prune.flops=0.5` for a key given by --set, `[scan] draws 5` for a key named by its
    section as a recipe check names it, so a library check called by a command and by `headcut run` names what the
    user wrote, a Typed name's value as the user typed it; no name (a command's positional argument): the value
    alone."""
    if not name:
        return str(value)
    value = typed_value(name, value)
    spaced = caller(name) == "flags" or name.startswith("[")  # a flag, or a key named by its section: [scan] draws 5
    return f"{name} {value}" if spaced else f"{name}={value}"


class Typed(str):
    """A setting's name with its value as the user typed it (a --set's text), which setting() shows for that value:
    --set prune.flops=1e-9, not Python's 1e-09."""

    def __new__(cls, name: str, typed: str):
        given = super().__new__(cls, name)
        given.typed = typed
        return given


def typed_value(name: str, value):
    """`value` as the user typed it where `name` carries that text (Typed) and it reads as `value`, else `value`:
    what setting() shows, and what a sentence derives another value from (a suggested folder: runs/x, not
    /home/u/runs/x where headcut run resolved runs/x.json)."""
    typed = getattr(name, "typed", None)
    return typed if _typed_as(typed, value) else value


def _typed_as(typed: str | None, value) -> bool:
    """Whether text the user typed reads as `value` (a number, text or a path), so a message may show it as typed:
    x.json/ for Path('x.json'), which drops the /, or for the path it resolves to (headcut run's out)."""
    if isinstance(value, PurePath) and typed is not None:
        return PurePath(typed) == value or value.is_absolute() and _resolved(typed) == value
    if typed is None or isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return False
    try:
        return type(value)(typed) == value
    except (TypeError, ValueError):
        return False


def _resolved(typed: str) -> Path | None:
    try:
        return Path(typed).resolve()
    except (OSError, RuntimeError, ValueError):  # a loop of links, a NUL byte
        return None


NAMES = ("arguments", "keys", "flags")  # who called a library check: Python, a run recipe, a command


class Given(str):
    """`names` ("keys", say) of a caller that spells some names as its user gave them, over a module's own spellings:
    a run names a key a --set gave by that --set (Given("keys", {"flops": "--set prune.flops"})). A str equal to
    its kind, so it passes wherever `names` does."""

    def __new__(cls, names: str, spellings: dict[str, str]):
        given = super().__new__(cls, names)
        given.spellings = dict(spellings)
        return given


def named(name: str, names: str = "arguments", *, section: str, spelled: dict | None = None) -> str:
    """Argument `name` as a message names it for whoever called: "arguments" the library's own (keep_ratio), "keys"
    a run recipe's in `section` (prune.keep_ratio, as --set writes it; section "": a recipe's own top-level key),
    "flags" the command's (--keep-ratio);
    `spelled` ({names: {name: spelling}}) where a caller spells it otherwise, and a Given `names` where its user
    did. setting(named(...), value) words it with its value."""
    check_names(names)
    given = {**(spelled or {}).get(names, {}), **getattr(names, "spellings", {})}
    if name in given:
        return given[name]
    if names == "flags":
        return "--" + name.replace("_", "-")
    return f"{section}.{name}" if names == "keys" and section else name


def check_names(names, name: str = "names") -> None:
    """UserError naming argument `name` ("prune names" at a public function's entry) where `names` is not one of
    NAMES: a wrong one was a bare ValueError, and only once a refusal was being worded, if ever."""
    if names not in NAMES:
        raise UserError(f"{name} is {names!r:.60}; pass 'arguments' (a Python call's), 'keys' (a run recipe's) or "
                        "'flags' (a command's).")


def caller(name: str) -> str:
    """Which of NAMES a setting's name, as named() and setting() spell it, was named for: "flags" a command's flag
    (--out) or positional argument (""); "keys" a recipe's key (prune.flops, [scan] draws, --set prune.flops, or
    a recipe's own top-level key: model); "arguments" a Python call's, which a library message names with its
    function (load_model source). The one rule that reads a name back, so a message's advice (--overwrite or
    overwrite=True) follows how named() spelled what it advises on."""
    if name.startswith(("--set ", "[")):
        return "keys"
    if not name or name.startswith("-"):
        return "flags"
    return "arguments" if " " in name else "keys"


def fix_verb(name: str) -> str:
    """How a message asks for another value of setting `name`: "pass" what a command line gives (a flag, --set
    KEY=VALUE), "set" a recipe's key or a Python argument."""
    return "pass" if caller(name) == "flags" or name.startswith("--set ") else "set"


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """`n` of `noun` as a sentence says it: thousands grouped, the noun singular for one ('1 byte', '64,000 bytes')."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def quoted(name) -> str:
    """A name from a user's file or flag (a column, a key) as a message quotes it: 'grade', with each character
    that does not print (a zero-width space, a tab, NUL) written as Python escapes it ('grade\\u200b'), so a name
    that only looks like another is told apart from it; cut as `cut` cuts."""
    return _cut(str(name), repr)


SHOWN_CHARS = 200  # of a value a message repeats: a 5,000-digit --limit is not echoed whole


def cut(value) -> str:
    """A user's value (a flag's, a key's) as a message repeats it: its first SHOWN_CHARS characters, then how many
    it has where it has more."""
    return _cut(str(value), str)


def _cut(text: str, show) -> str:
    head = show(text[:SHOWN_CHARS])
    return head if len(text) <= SHOWN_CHARS else f"{head}... ({len(text):,} characters)"


def shown(value, *, width: int = 60) -> str:
    """A record's value as its JSON file spells it ("64" for text, 64 for a number, true), cut to `width`."""
    return json.dumps(value)[:width]
