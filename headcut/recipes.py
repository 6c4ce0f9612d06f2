"""Recipes: YAML files that mirror frozen dataclasses one to one.

A recipe is found by path or by built-in name (`finetune/minilm_homedepot_cpu` -> recipes/finetune/
minilm_homedepot_cpu.yaml). Unknown or misspelt keys are errors that name the key and the valid ones;
`key=value` overrides are parsed to the field's type.
"""
from __future__ import annotations

import contextlib
import dataclasses
import difflib
import enum
import functools
import math
import re
import shlex
import types
import typing
from pathlib import Path

import yaml

from headcut_grader.errors import UserError, WordedError, caller, cut, quoted, setting
from headcut_grader.files import RECIPE_FILE, as_file_to_read
from headcut_grader.lines import unmarked_wide, utf8_fix
from headcut_grader.ranges import argument, check_ranges, field_problem, large_whole
from headcut_grader.validation import MAX_RECIPE_BYTES, absent, read_small_text, signed, significant_digits

RECIPE_ROOT = Path(__file__).resolve().parent / "recipes"


def builtin_recipes(kind: str | None = None) -> list[str]:
    """Names of the shipped recipes, e.g. 'finetune/minilm_homedepot_cpu'."""
    root = RECIPE_ROOT / kind if kind else RECIPE_ROOT
    return sorted(str(p.relative_to(RECIPE_ROOT).with_suffix("")) for p in root.rglob("*.yaml"))


def find_recipe(name_or_path: str | Path, *, kind: str | None = None,
                flag: str = "find_recipe name_or_path") -> Path:
    """The YAML file `name_or_path` names: a path, or a built-in name under recipes/ (`kind`'s folder first).
    `flag`: what named it, as errors.caller reads it and setting() says it (a Python caller's: this argument; a run's
    key: teacher.recipe, or its --set; a command's positional RECIPE: "", its value alone)."""
    path = as_file_to_read(name_or_path, flag, what=RECIPE_FILE)
    if path.suffix in (".yaml", ".yml") and path.exists():
        if not path.is_file():  # a FIFO would block the read
            raise UserError(f"{setting(flag, path)} is not a regular file; pass a YAML file or a built-in name.")
        return path
    for candidate in (RECIPE_ROOT / f"{name_or_path}.yaml", RECIPE_ROOT / (kind or "") / f"{name_or_path}.yaml"):
        if candidate.exists():
            return candidate
    why = absent(path, "")  # a link to nothing or a loop of links, on the way or at the end: no name to look up
    if why:
        raise UserError(f"{setting(flag, path)}: {why}.")
    names = ", ".join(builtin_recipes(kind))
    given = cut(name_or_path) if str(name_or_path).isprintable() else quoted(name_or_path)  # a tab, a \u200b: shown
    raise UserError(f"{setting(flag, given)} is neither a YAML file nor a built-in name ({names}).")


def check_kind(path: Path, data: dict, kind: str, name_or_path, flag: str, *, fields=()) -> None:
    """Refuse a recipe of another kind than `kind` (finetune, distill, run) in one sentence naming it as `flag` gave
    it, the kind wanted and that kind's built-in recipes: one under recipes/<other kind>/, or one whose keys are
    another kind's (_better_kind; `fields`: the keys `kind` takes); a stray key is a slip, which from_dict names.
    Was: every key the wanted kind does not take listed as unknown, with all its valid keys; and a recipe one key
    away from the wanted kind's (a copy of finetune/minilm_synthetic_cpu given to distill: its `model`) was still
    that, as two such keys were asked for."""
    other = _shipped_kind(path)
    if other is None and fields:
        other = _better_kind(data, kind, fields)
    if other is None or other == kind:
        return
    names = ", ".join(builtin_recipes(kind))
    raise UserError(f"{setting(flag, cut(name_or_path))} is a {other} recipe, but a {kind} recipe is wanted here; "
                    f"pass one, such as a built-in: {names}.")


def _better_kind(data: dict, kind: str, fields) -> str | None:
    """The other kind `data` is a recipe of, the one with the most foreign keys if several; None where none is (every
    key taken, or a slip a recipe of `kind` made). A foreign key is one another kind's shipped recipes write and
    `fields` (the keys `kind` takes) lacks; keys both kinds take (epochs, train_data) count for neither. The other
    kind is named on two foreign keys, or on one that every shipped recipe of it writes (finetune's `model`,
    distill's `teacher`) where `data` holds none of the keys only `kind` takes. Was: shared keys counted for both, so
    a finetune recipe with one stray `temperature` was told it is a distill recipe."""
    if all(key in fields for key in data):
        return None
    found = {}
    for other in _kinds():
        if other == kind:
            continue
        shipped, hallmark = _shipped_keys(other), _shipped_keys(other, every=True)
        foreign = {key for key in data if key in shipped and key not in fields}
        own = any(key in fields and key not in shipped for key in data)
        if len(foreign) >= 2 or (foreign & hallmark and not own):
            found[other] = len(foreign)
    return max(found, key=found.get, default=None)


@functools.cache  # the shipped recipes are fixed while headcut runs
def _kinds() -> tuple[str, ...]:
    return tuple(sorted(p.name for p in RECIPE_ROOT.iterdir() if p.is_dir()))


def _shipped_kind(path: Path) -> str | None:
    """The kind folder of recipes/ that `path` lies in, or None."""
    with contextlib.suppress(ValueError, OSError):
        parts = path.resolve().relative_to(RECIPE_ROOT.resolve()).parts  # headcut/recipes links to recipes/
        return parts[0] if len(parts) > 1 else None
    return None


@functools.cache  # the shipped recipes are fixed while headcut runs
def _shipped_keys(kind: str, *, every: bool = False) -> frozenset:
    """Every top-level key the shipped recipes of `kind` write; with `every`, the keys each of them writes."""
    keys = []
    for name in builtin_recipes(kind):
        data = yaml.load((RECIPE_ROOT / f"{name}.yaml").read_text(), Loader=_Loader)  # noqa: S506 - SafeLoader's
        keys.append(set(data) if isinstance(data, dict) else set())
    if not keys:
        return frozenset()
    return frozenset(set.intersection(*keys) if every else set.union(*keys))


READ_FROM = "_read_from"  # the attribute load_recipe records its file in (read_from)


def load_recipe(cls, name_or_path: str | Path, *, overrides: list[str] = (), kind: str | None = None,
                flags: dict[str, tuple[str, str]] | None = None, flag: str = "load_recipe name_or_path"):
    """Read a recipe into the frozen dataclass `cls`, applying `key=value` overrides, then `flags` ({key: (flag,
    text)}: a command's own flags for keys, --train for train_data), which a refusal names as typed. `flag`: what
    named `name_or_path` (find_recipe's)."""
    path = find_recipe(name_or_path, kind=kind, flag=flag)
    data = read_recipe_file(path)
    if kind:
        check_kind(path, data, kind, name_or_path, flag, fields={f.name for f in dataclasses.fields(cls)})
    origins = set_origins(overrides)
    data.update(parse_override(item) for item in overrides)
    for key, (flag, text) in (flags or {}).items():
        if key in origins:
            raise UserError(f"{flag} {cut(text)} and {origins[key]} both name {key}; pass one of them.")
        data[key], origins[key] = text, f"{flag} {cut(text)}"
    recipe = from_dict(cls, data, where=str(path), origins=origins)
    object.__setattr__(recipe, READ_FROM, path)  # not a field: no key of the recipe, nor part of its fingerprint
    return recipe


def read_from(recipe) -> Path | None:
    """The file load_recipe read `recipe` from (find_recipe's path), where a command resolved its RECIPE once; None
    for a recipe built in Python or replace()d since. A training run's output never holds it (input_paths):
    --overwrite would delete it."""
    return getattr(recipe, READ_FROM, None)


def set_origins(overrides: list[str]) -> dict[str, str]:
    """{key: '--set KEY=VALUE'} for each override `overrides` gives, as a refusal names where a key's value came
    from; a key given twice is refused (refuse_repeat)."""
    origins = {}
    for item in overrides:
        key = parse_override(item)[0]
        refuse_repeat(origins.get(key), item)
        origins[key] = f"--set {cut(item)}"
    return origins


def check_recipe(recipe, cls, name: str, *, loader: str = "") -> None:
    """Raise UserError naming argument `name` where `recipe` is not a `cls` (a path or a dict failed later, as
    "must be called with a dataclass"), or a field is outside its range (a recipe built in Python rather than read
    by load_recipe). `loader`: the call that reads one, where load_recipe does not."""
    if not isinstance(recipe, cls):
        loader = loader or f"headcut.recipes.load_recipe({cls.__name__}, 'recipe.yaml')"
        raise UserError(f"{name} is {argument(recipe)[:60]}; pass a {cls.__name__}, e.g. {loader}.")
    check_ranges(recipe, "recipe")


def refuse_repeat(earlier: str | None, item: str) -> None:
    """A key given twice by --set is refused, as in a YAML file: which value was meant is not for headcut to guess."""
    if earlier is not None:
        raise UserError(f"{earlier} and --set {item} set the same key; keep one of them.")


def read_recipe_file(path: Path, *, what: str = "a recipe is a mapping of keys to values") -> dict:
    """The YAML mapping in the recipe file `path`: one sentence naming the file when it is not UTF-8, not
    YAML, or not a mapping (`what` says what it should be)."""
    try:
        text = read_small_text(path, limit=MAX_RECIPE_BYTES, what="recipe")
    except UnicodeDecodeError as e:
        raise UserError(f"{path}: not UTF-8 (byte 0x{e.object[e.start]:02x} at byte {e.start}); "
                        f"{utf8_fix(path)}.") from None
    if kind := unmarked_wide(text[:32].encode("utf-8")):  # read as UTF-8 with NULs, which YAML calls not allowed
        raise UserError(f"{path} is {kind} text without a byte-order mark (its letters are padded with NUL bytes); "
                        "re-save it as UTF-8.")
    data = parse_yaml(text, str(path), "fix the file")
    line = _first_value_line(text)
    if data is None and line is None:  # a failed save or a template not filled in, not every default (that is `{}`)
        raise UserError(f"{path}: no keys (the file is empty, or holds only blank lines and comments); {what}: "
                        f"write its keys, e.g. in a copy of a shipped one from {RECIPE_ROOT}.")
    if not isinstance(data, dict):  # was: no line, nor what it holds; `~` alone was said to be an empty file
        held = f"the text {shown(data)}" if isinstance(data, str) else yaml_kind(data)
        raise UserError(f"{at_line(str(path), line)}: {what}, and the file holds {held}; fix the file.")
    return data


def _first_value_line(text: str) -> int | None:
    """The line (from 1) of the first thing YAML reads in `text` other than a comment, a directive or a document
    marker; None where there is none (an empty file)."""
    for number, line in enumerate(text.splitlines(), 1):
        bare = line.strip()
        if bare and not bare.startswith(("#", "%")) and bare not in ("---", "..."):
            return number
    return None


def parse_override(item: str, *, form: str = "key=value", example: str = "epochs=2") -> tuple[str, object]:
    """One `--set key=value`: the key, and the value read as YAML; `form` and `example` word the error."""
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise UserError(f"--set {quoted(item)} is not {form}; write e.g. --set {example}.")
    if not value.strip():  # YAML reads nothing as null, which an optional key took silently (train_rows=: all rows)
        raise UserError(f"--set {cut(item)}: key {quoted(key.strip())} is empty (YAML reads nothing as null); write a "
                        f"value (--set {key.strip()}=VALUE), null where it is meant (--set {key.strip()}=null, or ~), "
                        "or drop that --set.")
    if marker := _document_marker(value):  # '--- 2' read as the document 2: a --set value is one value
        raise UserError(f"--set {quoted(item)}: {marker} marks a YAML document, which a --set value cannot hold; write "
                        f"the value alone (--set {key.strip()}=VALUE), or to give text, type {typed_text(item)}.")
    return key.strip(), parse_yaml(value, f"--set {quoted(item)}", f"quote text values, e.g. {typed_text(item)}")


def _document_marker(text: str) -> str | None:
    """The first YAML document marker written in `text` (a start ---, an end ..., a %directive) before anything YAML
    refuses (parse_yaml says that), or None."""
    with contextlib.suppress(yaml.YAMLError, RecursionError):
        for token in yaml.scan(text, Loader=_Loader):  # noqa: S506 - a SafeLoader subclass; tokens only
            if isinstance(token, (yaml.DocumentStartToken, yaml.DocumentEndToken, yaml.DirectiveToken)):
                return text[token.start_mark.index:token.end_mark.index].split()[0]
    return None


def typed_text(item: str, index: int | None = None) -> str:
    """What to type on a shell so `--set KEY=VALUE` gives VALUE as text: the value in YAML's double quotes and
    the whole item in single quotes (--set 'data.train="5"'), since a shell drops quotes typed bare; `index`: only
    that element of a list value is quoted (--set 'scan.methods=[kl, "5"]')."""
    key, _, value = item.partition("=")
    return "--set " + shlex.quote(f"{key.strip()}={_quoted(value.strip(), index)}")


def _quoted(value: str, index: int | None) -> str:
    """`value` (YAML text) with the whole of it, or the list element `index` of it, in double quotes."""
    start, end = 0, len(value)
    if index is not None:
        try:
            node = yaml.compose(value, Loader=_Loader)
        except yaml.YAMLError:
            node = None
        if isinstance(node, yaml.SequenceNode) and index < len(node.value):
            start, end = node.value[index].start_mark.index, node.value[index].end_mark.index
    text = value[start:end].replace("\\", "\\\\").replace('"', '\\"')  # YAML's escapes inside double quotes
    return f'{value[:start]}"{text}"{value[end:]}'


def text_fix(given: str | None, index: int | None = None) -> str:
    """How to write as text a value YAML read as another type: what to type on a shell where `given` (the
    '--set ITEM' it came from) says it came from --set, else a number in quotes in the file."""
    return f"type {typed_text(given.removeprefix('--set '), index)}" if given else 'e.g. "5", not 5'


def mistyped_text(value, given: str | None) -> bool:
    """Whether `value`, wanted as text, may be text that YAML read as another type: any from --set (`a: b`, `[x]`,
    `true`, `null`), a number from a file (a list or mapping in a file, or a JSON record, is not text mistyped)."""
    return not isinstance(value, str) and (given is not None or _is_number(value))


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def yaml_kind(value) -> str:
    """A value as YAML read it, for a message that it is not text: 'the number 5', 'the mapping {...}'."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    kind = "number" if _is_number(value) else "mapping" if isinstance(value, dict) else "list"
    return large_whole(value) or f"the {kind} {shown(value)}"


# Values of a recipe once its aliases (*name) are expanded: a recipe holds hundreds, an alias bomb billions.
MAX_VALUES = 100_000


class _Loader(yaml.SafeLoader):
    """YAML 1.1 reads 5e-4 (no dot) as text; YAML 1.2 and every user read it as a number. A key given twice
    is refused (YAML keeps the last one silently), and so are aliases that expand past MAX_VALUES, and every explicit
    tag but those of plain values (_refuse_tag)."""

    def construct_document(self, node):
        _expanded_size(node, {}, set())
        return super().construct_document(node)

    def compose_scalar_node(self, anchor):
        tag = self.peek_event().tag  # the tag as written (!!str), which the node no longer tells from a resolved one
        node = super().compose_scalar_node(anchor)
        node.written_tag = tag
        if tag == "!":  # YAML's non-specific tag makes a scalar text (`seed: ! 3` is '3'); PyYAML resolved it as plain
            node.tag = "tag:yaml.org,2002:str"
        return node

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            self._refuse_duplicates(node)
        return super().construct_mapping(node, deep=deep)

    def construct_placed_map(self, node):
        """A mapping as a Placed, which knows the line each key stands on (a merged key: the line of its anchor)."""
        data = Placed()
        yield data
        data.update(self.construct_mapping(node))
        for key_node, _ in node.value:
            key = self.construct_object(key_node)
            if isinstance(key_node, yaml.ScalarNode) and key in data:
                data.lines[key] = key_node.start_mark.line + 1  # a merge's keys come first: the mapping's own win

    def _refuse_duplicates(self, node: yaml.MappingNode) -> None:
        """Keys of the mapping itself; a merge (`<<: *base`) is overridden by its keys, as YAML means."""
        first = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node)
            if key in first:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {shown(key)}, first on line {first[key].line + 1}",
                    key_node.start_mark)
            first[key] = key_node.start_mark


# Tags that give what a plain value gives (!!str 3 is '3', !!float 1 is 1.0), which a refusal shows as YAML writes
# it; any other (!!binary, !!set, !!timestamp, !!omap, !!pairs, !!python/..., !foo) builds a value no key takes,
# which a refusal showed as Python writes it (b'hello', {'b', 'a'}), so it is refused where it is written.
PLAIN_TAGS = frozenset(f"tag:yaml.org,2002:{name}" for name in ("str", "int", "float", "bool", "null", "map", "seq"))


def _refuse_tag(loader, node: yaml.Node):
    """An explicit tag outside PLAIN_TAGS, refused at its line and column (SafeLoader's own words for an unknown tag,
    'could not determine a constructor for the tag ...', did not say what to do)."""
    tag = re.sub(r"^tag:yaml\.org,2002:", "!!", node.tag)
    raise yaml.constructor.ConstructorError(
        None, None, f"the tag {tag} gives a value no recipe key takes; remove the tag and write the value plainly",
        node.start_mark)


def _expanded_size(node: yaml.Node, sizes: dict, open_nodes: set) -> tuple[int, bool]:
    """How many values `node` holds with every alias expanded (memoised by node, so a bomb costs its size in
    the file, not its expansion), and whether an alias is among them; refused past MAX_VALUES, and an alias inside
    its own anchor (endless)."""
    if id(node) in sizes:  # a node met again is an alias of it
        return sizes[id(node)][0], True
    if id(node) in open_nodes:
        raise _too_large(node, aliased=True)
    open_nodes.add(id(node))
    children = node.value if isinstance(node, yaml.SequenceNode) else (
        [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else [])
    counted = [_expanded_size(child, sizes, open_nodes) for child in children]
    size, aliased = 1 + sum(n for n, _ in counted), any(a for _, a in counted)
    open_nodes.discard(id(node))
    if size > MAX_VALUES:
        raise _too_large(node, aliased=aliased)
    sizes[id(node)] = size, aliased
    return size, aliased


def _too_large(node: yaml.Node, *, aliased: bool) -> yaml.YAMLError:
    """Was: 'aliases here expand to more than 100,000 values' where no alias was written (a long list)."""
    said = (f"aliases here expand to more than {MAX_VALUES:,} values" if aliased
            else f"more than {MAX_VALUES:,} values here, where a recipe holds hundreds")
    return yaml.constructor.ConstructorError(None, None, said, node.start_mark)


def shown(value) -> str:
    """A value for a message as the user wrote it in YAML's flow style (true, null, {a: 1}, [1, 2], 'text'), cut
    short (a wrong value may be a list of thousands, or nested deep)."""
    text = _flow(value, depth=3)
    return text if len(text) <= _SHOWN_CHARS else text[:_SHOWN_CHARS] + "..."


_SHOWN_CHARS, _SHOWN_ITEMS = 100, 6


def _flow(value, *, depth: int) -> str:
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, dict):
        pairs = list(value.items())[:_SHOWN_ITEMS] if depth else []
        return _joined("{}", [f"{_key(k)}: {_flow(v, depth=depth - 1)}" for k, v in pairs], len(value))
    if isinstance(value, (list, tuple)):
        return _joined("[]", [_flow(v, depth=depth - 1) for v in value[:_SHOWN_ITEMS] if depth], len(value))
    return quoted(value) if isinstance(value, str) else large_whole(value) or cut(value)


def _joined(ends: str, words: list, count: int) -> str:
    """A flow collection of `count` items, of which `words` are shown: [1, 2, ...]."""
    return ends[0] + ", ".join(words + ["..."] * (count > len(words))) + ends[1]


def _key(key) -> str:
    """A mapping's key as YAML writes it: plain where it reads back as the same text (a), else as a value ('1')."""
    plain = isinstance(key, str) and re.fullmatch(r"[A-Za-z_][\w.-]*", key) and _reads_as_text(key)
    return key if plain else _flow(key, depth=0)


def _reads_as_text(text: str) -> bool:
    return yaml.load(text, Loader=_Loader) == text  # noqa: S506 - a SafeLoader subclass


def _yaml_12_scalars(loader) -> None:
    """Read plain scalars as YAML 1.2 does, not as PyYAML's YAML 1.1: `no`, `on` and `y` stay text (1.1 makes
    them booleans, so `mixed_precision: no` was False), `1:00` stays text (1.1: the base-60 number 60), `1_6`
    and `0x10` stay text (1.1: 16), `017` is 17 (1.1: octal 15), a date stays text, and `5e-4` is a number (1.1:
    text). A typed key then refuses a text value by name instead of running on a number nobody wrote."""
    dropped = {"tag:yaml.org,2002:bool", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float",
               "tag:yaml.org,2002:timestamp"}
    loader.yaml_implicit_resolvers = {first: [(tag, rx) for tag, rx in resolvers if tag not in dropped]
                                      for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
    loader.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
                                 list("tTfF"))
    loader.add_implicit_resolver("tag:yaml.org,2002:int", re.compile(r"^[-+]?[0-9]+$"), list("-+0123456789"))
    loader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)"
                   r"|\.(?:nan|NaN|NAN))$"),
        list("-+0123456789."))
    # no octal; a whole number of any length stays one, which its key's range then refuses
    loader.add_constructor("tag:yaml.org,2002:int", lambda self, node: _whole(self.construct_scalar(node)))


def _whole(text: str) -> int:
    """A YAML whole number ('+007', '-12'). Past Python's int-text limit (4,300 digits: a bare ValueError) it is
    read as 10 ** (digits - 1), a number of as many digits, which every key's range refuses by its digits."""
    digits = significant_digits(text) or "0"
    value = int(digits) if len(digits) <= 4000 else 10 ** (len(digits) - 1)
    return signed(text, value)


class TaggedText(str):
    """Text YAML read from a value tagged !!str or ! (`seed: !!str 3`, `seed: ! 3`): a refusal says to remove the
    tag, `tag` as written, not quotes."""

    tag = "!!str"


class TaggedDecimal(float):
    """A number YAML read from a value tagged !!float (`seed: !!float 3`): a refusal says to remove the tag."""


def _tagged(kind, construct):
    """A constructor that reads a scalar as `construct` does, as `kind` where its tag was written."""
    def build(loader, node):
        value = construct(loader, node)
        written = getattr(node, "written_tag", None)
        if written is None:
            return value
        tagged = kind(value)
        tagged.tag = "!" if written == "!" else "!!" + written.rsplit(":", 1)[-1]  # tag:yaml.org,2002:str -> !!str
        return tagged
    return build


_yaml_12_scalars(_Loader)
_Loader.add_constructor("tag:yaml.org,2002:map", _Loader.construct_placed_map)
_Loader.add_constructor("tag:yaml.org,2002:str", _tagged(TaggedText, yaml.SafeLoader.construct_yaml_str))
_Loader.add_constructor("tag:yaml.org,2002:float", _tagged(TaggedDecimal, yaml.SafeLoader.construct_yaml_float))
for _tag in [*_Loader.yaml_constructors, None]:
    if _tag not in PLAIN_TAGS:
        _Loader.add_constructor(_tag, _refuse_tag)


def parse_yaml(text: str, where: str, fix: str):
    """`text` read as YAML (recipe rules: see _Loader); one sentence naming `where` and the line when it is not."""
    try:
        return _unshared(yaml.load(text, Loader=_Loader))  # noqa: S506 - a SafeLoader subclass
    except yaml.reader.ReaderError as e:  # a character YAML does not allow (a NUL byte, say): no mark, a position
        line = text.count("\n", 0, e.position) + 1
        column = e.position - text.rfind("\n", 0, e.position)
        raise UserError(f"{where}, line {line}, column {column}: invalid YAML (character {e.character:#06x} is not "
                        f"allowed); {fix}.") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f", line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise UserError(f"{where}{at}: invalid YAML ({getattr(e, 'problem', e)}); {fix}.") from None
    except RecursionError:
        raise UserError(f"{where}: YAML nested too deeply; {fix}.") from None


class Placed(dict):
    """A recipe file's mapping and the line each of its keys stands on (`lines`, from 1), which a refusal of a key's
    value names (at_line); a key set over it (--set, a flag) has no line."""

    def __init__(self, *args, lines: dict | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.lines = dict(lines or {})


class _Dumper(yaml.SafeDumper):
    """SafeDumper that writes a Placed as the mapping it is; registered here, not on yaml.SafeDumper, so importing
    headcut leaves yaml.safe_dump as it was for everyone else."""


_Dumper.add_representer(Placed, yaml.representer.SafeRepresenter.represent_dict)


def dump_yaml(data) -> str:
    """`data` as YAML text, its mappings read from a recipe (Placed) written as plain mappings (their lines are not
    written): a recipe read, changed and written back."""
    return yaml.dump(data, Dumper=_Dumper)


def at_line(where: str, line: int | None) -> str:
    """`where` (a recipe file, or a section of one) with the line a key stands on, where it is known: the one way a
    refusal places a recipe key, as parse_yaml places invalid YAML."""
    return at_lines(where, [line])


def at_lines(where: str, lines) -> str:
    """at_line of several keys: `where`, lines 3 and 4."""
    said = lines_said(lines)
    return f"{where}, {said}" if said else where


def lines_said(lines) -> str:
    """The known `lines` (None: a key on no line), each once, in order: 'line 3', 'lines 3 and 4', '' for none."""
    known = sorted({line for line in lines if line})
    if len(known) < 2:
        return f"line {known[0]}" if known else ""
    return f"lines {', '.join(map(str, known[:-1]))} and {known[-1]}"


def _unshared(value):
    """`value` with each alias (*s) a copy of its anchor's value (&s), as it reads: YAML gives them one object, so a
    --set into one section (a run's student) changed every section that aliases it. Bounded: _expanded_size."""
    if isinstance(value, dict):
        return Placed({key: _unshared(item) for key, item in value.items()}, lines=getattr(value, "lines", {}))
    if isinstance(value, list):
        return [_unshared(item) for item in value]
    return value


def nearest(word, choices) -> str | None:
    """The choice `word` is likeliest a misspelling of, whatever its case (EPOCHS: epochs), or None."""
    lowered = {str(choice).lower(): choice for choice in reversed(list(choices))}  # the first of a case-only pair
    close = difflib.get_close_matches(str(word).lower(), lowered, n=1)
    return lowered[close[0]] if close else None


class SetError(UserError):
    """A recipe refused for values --set gave alone: its sentence is led by those --sets, not the recipe's file."""


class WordedSetError(SetError, WordedError):
    """A SetError a check worded by say(name, how) (WordedError), which a run words again with its names."""


def from_dict(cls, data: dict, *, where: str = "recipe", origins: dict | None = None, named: frozenset = frozenset(),
              checked: bool = True, beside: tuple[str, ...] = (), file: str = ""):
    """The recipe `cls` of `data`; every unknown, mistyped, missing or out-of-range key is reported in one
    error. `origins` names where a key's value came from (e.g. '--set epochs=0'), for the messages; its keys and
    `named` are the keys a user set over the recipe file (a run's section), which the recipe's check refuses
    where they do not apply even at their default value. `checked=False` skips that check of the keys together
    (a part of a recipe, read back from a record). `beside`: the keys the caller's section reads beside the
    recipe's (a run's recipe:), valid where `named` keys are given, so a misspelt one is told its nearest. `file`:
    the recipe file's name where `where` is another recipe's section that sets keys over it (a run's student): a
    problem with a key neither `named` nor `origins` gives is placed in that file, not in the section's."""
    origins = origins or {}
    fields = {f.name: f for f in dataclasses.fields(cls)}
    problems: list[tuple[str, str]] = []  # (key, what is wrong with it)
    unknown = [k for k in data if k not in fields]
    given = named | set(origins)  # keys a section set over the recipe file: `beside` is valid beside them
    in_file = f"{where} ({file})" if file else where
    valid = [*beside, *fields] if given & set(unknown) else list(fields)
    for key in unknown:
        close = nearest(key, valid if key in given else fields)
        problems.append((key, f"unknown key {key_said(key)}" + (f" (did you mean '{close}'?)" if close else "")))
    hints = typing.get_type_hints(cls)
    values = {}
    for key, value in data.items():
        if key in fields:
            if fields[key].metadata.get("numbers_are_text") and isinstance(value, int) and not isinstance(value, bool):
                value = str(value)
            try:
                values[key] = _coerce(value, hints[key], f"key '{key}'", origins.get(key))
            except UserError as e:
                problems.append((key, str(e).rstrip(".")))
                continue
            out_of_range = field_problem(fields[key], values[key])  # with the others, not after they are fixed
            if out_of_range:
                problems.append((key, out_of_range.rstrip(".")))
    for f in fields.values():
        if f.name not in data and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            problems.append((f.name, f"missing key '{f.name}' (add it or pass --set {f.name}=VALUE)"))
    recipe = None if problems else cls(**values)
    if problems:
        listed = f"; valid keys are: {', '.join(valid)}" if unknown else ""
        sets = [origins[key] for key, _ in problems if key in origins]
        if len(sets) == len(problems):  # --set values alone: led by them
            raise SetError(f"{' '.join(sets)}: " + "; ".join(text for _, text in problems) + f"{listed}.")
        raise UserError(_problems_said(problems, data, where, file, origins, given) + f"{listed}.")
    check = getattr(recipe, "check", None) if checked else None
    if check:  # a check reads the keys together: name the --set values, which may be what it refuses
        _checked_together(check, Lead(where, file, _file_lines(data, origins)), origins,
                          named=frozenset(origins) | named)
    return recipe


def key_said(key) -> str:
    """A mapping's key as a refusal names it, as YAML wrote it: 'epochs', and a key YAML read as no text as written
    (null, 1, true; was 'None', '1', 'True', as Python writes them)."""
    return quoted(key) if isinstance(key, str) else shown(key)


def _problems_said(problems: list, data: dict, where: str, file: str, origins: dict, given: set) -> str:
    """from_dict's problems (key, text) in one sentence led by `where`: each placed where its value came from, a --set
    (origins) or the recipe `file` beneath a section, and on the line its key stands on (data.lines: at_line), which
    leads for a lone problem."""
    lines = _file_lines(data, origins)
    own = [key for key, _ in problems if file and key not in given]  # the recipe file's own values
    if len(problems) == 1:
        key, text = problems[0]
        lead = f"{where} ({at_line(file, lines.get(key))})" if own else at_line(where, lines.get(key))
        return f"{lead}: {text}"
    if len(own) == len(problems):  # led by the file alone
        where, own = f"{where} ({file})", []
    came = {**{key: at_line(file, lines.get(key)) for key in own}, **origins}
    return f"{where}: " + "; ".join((f"on line {lines[key]}, " if key in lines and key not in came else "") + text
                                    + (f" (from {came[key]})" if key in came else "") for key, text in problems)


def _file_lines(data: dict, origins: dict) -> dict:
    """{key: line} of the keys of `data` that stand in a recipe file (Placed.lines), less those `origins` set."""
    return {key: line for key, line in getattr(data, "lines", {}).items() if key not in origins}


@dataclasses.dataclass(frozen=True)
class Lead:
    """Where a recipe's check leads its refusal: `where` (a recipe file, or a run's section), `file` (the recipe file
    beneath that section, or ""), and `lines`, the line each key stands on (in the section for a key it sets)."""
    where: str
    file: str
    lines: dict

    def of(self, keys, named: frozenset = frozenset()) -> str:
        """The lead placing `keys` on their lines: 'x.yaml, lines 3 and 4', '[distill.b], line 26 (s.yaml, line 5)'."""
        if not self.file:
            return at_lines(self.where, [self.lines.get(key) for key in keys])
        here = at_lines(self.where, [self.lines.get(key) for key in keys if key in named])
        return f"{here} ({at_lines(self.file, [self.lines.get(key) for key in keys if key not in named])})"


def _checked_together(check, lead: Lead, origins: dict, *, named: frozenset) -> None:
    """A recipe's `check` of its keys together, led by the recipe file (`lead`) and the --set values, and the lines of
    the keys it refuses (UserError.about) that the file holds; a refusal about keys none of which that file holds is
    led by where they came from instead: the --sets alone (a SetError), or the section that set them over the file
    (a run's student), on their lines in the run's file."""
    def with_sets(keys) -> str:
        return f" with {', '.join(origins[k] for k in keys)}" if keys else ""

    in_file = f"{lead.where} ({lead.file})" if lead.file else lead.where
    said = in_file + with_sets(list(origins))
    try:
        check(said, named=named)
    except UserError as e:
        e, keys = in_flags(e, origins), e.about
        if not keys:
            raise e from None
        if not lead.file or not set(keys) <= named:
            placed = lead.of(keys, named)
            if placed == in_file:  # no key of it on a line of the file
                raise e from None
            raise led_again(e, said, placed + with_sets(list(origins)), type(e)) from None
        if set(keys) <= set(origins):
            raise led_again(e, said, " ".join(origins[k] for k in keys), SetError) from None
        raise led_again(e, said, at_lines(lead.where, [lead.lines.get(k) for k in keys])
                        + with_sets([k for k in keys if k in origins])) from None


class CommandLine(enum.Enum):
    """A command's refusal's how(key) (in_flags(command_line=True)): a marker, not words, that `key` is changed there
    by --set KEY=VALUE (training.by_set), and whether the user gave it so, which the refusal then names as typed
    (training.typed); its own type, so no text a recipe or run gives for how(key) is taken for it."""
    SET = "changed by --set KEY=VALUE"
    GIVEN_BY_SET = "given by --set KEY=VALUE: named as typed"


def in_flags(error: UserError, origins: dict, *, command_line: bool = False) -> UserError:
    """A check's refusal (a WordedError) worded again with the flags that gave its keys (`origins`: '--dev FILE', not
    a --set: load_recipe's flags), as the user typed them; `error` itself where none did or it cannot be.
    `command_line`: a command's refusal, whose other keys are changed by --set KEY=VALUE (how(key) is CommandLine.SET;
    GIVEN_BY_SET for a key `origins` gives by --set, which the refusal names as typed: training.typed)."""
    flags = {key: given.split()[0] for key, given in origins.items() if caller(given) == "flags"}
    if not (flags or command_line) or not isinstance(error, WordedError):
        return error
    given_by_set = {key for key, given in origins.items() if caller(given) == "keys"}  # --set KEY=VALUE: led so
    return error.reworded(name=(lambda key: flags.get(key, key)) if flags else None,
                          how=(lambda key: CommandLine.GIVEN_BY_SET if key in given_by_set else CommandLine.SET)
                          if command_line else None)


@contextlib.contextmanager
def command_line_words(origins: dict):
    """A command's refusals (WordedError) inside, named as its user typed them: in_flags(..., command_line=True)."""
    try:
        yield
    except WordedError as e:
        raise in_flags(e, origins, command_line=True) from None


def led_again(error: UserError, lead: str, new_lead: str, kind=UserError) -> UserError:
    """`error`, a check's refusal led by `lead` (its sentences begin 'LEAD: '), led by `new_lead` instead, as a `kind`
    about the same keys, still a WordedError where it was one; the check is not run again (it may read the models'
    outlines)."""
    if isinstance(error, WordedError):
        return error.reworded(lead=f"{new_lead}: ", kind=WordedSetError if issubclass(kind, SetError) else WordedError)
    text = str(error)
    body = text[len(lead) + 2:] if text.startswith(f"{lead}: ") else text
    return kind(f"{new_lead}: {body}", about=error.about)


def _coerce(value, hint, where, given: str | None = None, index: int | None = None):
    """`value` as type `hint`; `given`: the `--set KEY=VALUE` it came from, if it did (the fix is typed there);
    `index`: the element of that list value `value` is."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, where, given, index)
            except UserError as e:
                errors.append(e)
        raise errors[0]
    if value is None and hint is not typing.Any and given is None:  # `epochs:` with nothing after it (parse_override
        # refuses an empty --set value; a typed null, --set epochs=null, is refused by type below)
        raise UserError(f"{where} is empty (YAML reads nothing as null); {_empty_fix(index)}.")
    if origin in (tuple, list):
        if not isinstance(value, (list, tuple)):
            raise UserError(f"{where} must be a list, not {shown(value)}{_list_fix(given)}.")
        inner = args[0] if args else typing.Any
        return tuple(_coerce(v, inner, f"{where} item {i + 1}", given, i) for i, v in enumerate(value))
    if origin is typing.Literal:
        if value not in args:
            raise UserError(f"{where} is {shown(value)}; choose one of {', '.join(map(str, args))}.")
        return value
    if hint is typing.Any:
        return value
    if hint is bool:
        if not isinstance(value, bool):
            raise UserError(f"{where} must be true or false, not {shown(value)}{_unquote_fix(value, hint)}.")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise UserError(f"{where} must be a whole number, not {shown(value)}{_unquote_fix(value, hint)}"
                            f"{_float_fix(value)}.")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UserError(f"{where} must be a number, not {shown(value)}{_unquote_fix(value, hint)}.")
        return value if large_whole(value) and abs(value) > 1e308 else float(value)  # its range refuses it by size
    if hint is str:  # a number is not turned into text: YAML reads 010 as 8 and 1.50 as 1.5, so the text is lost
        if mistyped_text(value, given):
            raise UserError(f"{where} is {yaml_kind(value)}; quote it as written to give text "
                            f"({text_fix(given, index)}).")
        if not isinstance(value, str):
            raise UserError(f"{where} must be text, not {shown(value)}.")
        return str(value)  # TaggedText's mark is for refusals only
    return value


def _unquote_fix(value, hint) -> str:
    """The fix of text that YAML would read as the `hint` (bool, int or float) unquoted ("1e-4", "true"): a quoted
    value is text, so it is said to drop the quotes; nothing for other values."""
    if not isinstance(value, str):
        return ""
    if isinstance(value, TaggedText):  # no quotes to remove: the tag made it text
        return f" (the tag {value.tag} makes it text: remove the tag)"
    try:
        unquoted = yaml.load(value, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except (yaml.YAMLError, RecursionError):
        return ""
    if hint is bool:
        fits = isinstance(unquoted, bool)
    else:
        fits = _is_number(unquoted) and (hint is float or isinstance(unquoted, int))
    return " (quoted, it is text: remove the quotes)" if fits else ""


def _float_fix(value) -> str:
    """What YAML made of a number where a whole number goes, where the value it shows is not what was written: 1e3
    and 1000.0 read as the float 1000.0 (a whole number is written without a point or exponent), a number past
    1e308 (1e400) as inf; nothing for other values."""
    if not isinstance(value, float) or math.isnan(value):
        return ""
    if isinstance(value, TaggedDecimal):  # written as it is (1.5, .inf) or whole, made a decimal by its tag
        return " (the tag !!float makes it a decimal: remove the tag)" if value.is_integer() else ""
    if math.isinf(value):
        return " (YAML reads a number past 1e308 as inf)"
    if not value.is_integer():
        return ""
    write = f": write {int(value)}" if abs(value) < 1e18 else ""  # a number of a size to write
    return f" (YAML reads a number with a point or an exponent as a decimal{write})"


def _empty_fix(index: int | None) -> str:
    """What to do about a recipe file's value left empty: write it, or drop the item or the key (its default then
    holds)."""
    if index is not None:
        return "write the item, or remove it"
    return "write a value after the colon, or remove the key to use its default"


def _list_fix(given: str | None) -> str:
    """How to type a list on a shell, where the value came from --set."""
    if not given:
        return ""
    key, _, value = given.removeprefix("--set ").partition("=")
    return f" (type --set {shlex.quote(f'{key.strip()}=[{value.strip()}]')})"


def to_dict(recipe) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(recipe).items()}
