"""The allowed range of every numeric flag and recipe field, stated once where the flag or field is declared.

The CLI checks flags while parsing (before any work) and recipes.from_dict checks fields when a recipe is
read, both with `Range.problem`, so a flag and a recipe key say the same thing about the same value.
"""
from __future__ import annotations

import dataclasses
import math
import numbers
import operator
from dataclasses import dataclass

from headcut_grader.errors import UserError, cut


def _number(x: float) -> str:
    return f"{x:g}" if isinstance(x, float) else large_whole(x) or cut(x)


def large_whole(x) -> str | None:
    """A whole number of 19 digits or more (a recipe's 777...7) as a message says it, by its size: 'a whole number
    of 305 digits' (str(x) is refused past 4,300 digits); None for any other value."""
    if isinstance(x, bool) or not isinstance(x, int) or abs(x) < 10**18:
        return None
    digits = int(abs(x).bit_length() * math.log10(2))  # at most its digits
    while 10**digits <= abs(x):
        digits += 1
    return f"a whole number of {digits:,} digits"


def _shown(x) -> str:
    """A field's value as a message shows it: a number as a range shows one, anything else as argument() does."""
    return _number(x) if isinstance(x, numbers.Real) and not isinstance(x, bool) else argument(x)[:60]


@dataclass(frozen=True)
class Range:
    low: float | None = None
    high: float | None = None
    low_open: bool = False  # True: `low` itself is outside
    high_open: bool = False

    def describe(self, kind: str = "") -> str:
        """The range as a sentence says it ('in [1, 8]', 'at least 1'), after `kind` where given ('a whole number in
        [1, 8]', 'a whole number of at least 1')."""
        low, high = self.low, self.high
        if low is not None and high is not None:
            bound = f"in {'(' if self.low_open else '['}{_number(low)}, {_number(high)}{')' if self.high_open else ']'}"
            return f"{kind} {bound}" if kind else bound
        if low is not None:
            bound = f"{'more than' if self.low_open else 'at least'} {_number(low)}"
        else:
            bound = f"{'less than' if self.high_open else 'at most'} {_number(high)}"
        return f"{kind} of {bound}" if kind else bound

    def problem(self, value) -> str | None:
        """Why `value` is not allowed, as the end of a sentence; None when it is."""
        if isinstance(value, bool) or not isinstance(value, numbers.Real):  # text, a list: no order with a number
            return f"is not a number; it must be {self.describe()}"
        if isinstance(value, float) and not math.isfinite(value):
            return f"is not a finite number; it must be {self.describe()}"
        low_bad = self.low is not None and (value < self.low or (self.low_open and value == self.low))
        high_bad = self.high is not None and (value > self.high or (self.high_open and value == self.high))
        return f"is out of range; it must be {self.describe()}" if low_bad or high_bad else None


def ranged(default, low=None, high=None, *, low_open=False, high_open=False, metadata=None):
    """A dataclass field whose values (or each element, for a tuple) must lie in the range."""
    valid = Range(low, high, low_open, high_open)
    return dataclasses.field(default=default, metadata={**(metadata or {}), "range": valid})


def declared_range(cls, name: str) -> Range:
    """The range settings dataclass `cls` declares for its field `name` (ranged, range_field); Range() where it
    declares none."""
    return next(f for f in dataclasses.fields(cls) if f.name == name).metadata.get("range") or Range()


def range_field(default, valid: Range, *, beyond: str = ""):
    """A dataclass field whose values must lie in `valid`, a range declared elsewhere (a library function's);
    `beyond`: what to do instead of a value past its bounds, said with them (field_problem)."""
    return dataclasses.field(default=default, metadata={"range": valid, **({"beyond": beyond} if beyond else {})})


def same_as(cls, name: str):
    """A dataclass field with the default and range of dataclass `cls`'s field `name`: a setting two
    dataclasses hold is declared once."""
    field = next(f for f in dataclasses.fields(cls) if f.name == name)
    return dataclasses.field(default=field.default, metadata=field.metadata)


def _several(f: dataclasses.Field) -> bool:
    annotation = str(f.type)  # its text (postponed annotations): what the field holds
    return "tuple" in annotation or "list" in annotation


def _outside(f: dataclasses.Field, value, *, unset_ok: bool = True) -> tuple[object, str] | None:
    """The first of `value` (or its elements, for a tuple) outside field `f`'s range and why (the end of a
    sentence); None when all are inside, it is unset (None, where `unset_ok`) or the field has no range."""
    valid = f.metadata.get("range")
    if valid is None or (value is None and unset_ok):
        return None
    whole = "int" in str(f.type) and "float" not in str(f.type)
    for item in value if _several(f) and isinstance(value, (tuple, list)) else (value,):
        problem = valid.problem(item)
        if problem is None and whole and as_whole(item) is None:
            problem = f"is not a whole number; it must be {valid.describe()}"
        if problem:
            beyond = f"; {f.metadata['beyond']}" if "beyond" in f.metadata and problem.startswith("is out") else ""
            return item, f"{problem}{beyond}"
    return None


def field_problem(f: dataclasses.Field, value) -> str | None:
    """The sentence saying why `value` (or an element, for a tuple) is outside field `f`'s `ranged` range;
    None when it is inside, unset (None) or the field has no range."""
    found = _outside(f, value)
    return None if found is None else f"key '{f.name}' is {_shown(found[0])}, which {found[1]}."


def check_settings(obj) -> None:
    """Raise UserError for the first field of settings dataclass `obj` that a Python caller gave wrong, named as
    they wrote it (BenchSettings(seq_lens=(4,)): ...): a value (or element) outside its range, None where the field
    allows none (neither its default nor its type), or a ranged tuple field given no tuple, an empty one or one that
    names a value twice. A recipe's keys are worded by check_ranges instead."""
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        said = f"{type(obj).__name__}({f.name}={argument(value)[:60]})"
        numbers_list = _several(f) and "range" in f.metadata  # a list of names checks itself (ScanSettings.methods)
        if numbers_list and (not isinstance(value, (tuple, list)) or not value):
            raise UserError(f"{said}: pass a tuple of one value or more, e.g. {f.name}={f.default!r}.", about=(f.name,))
        found = _outside(f, value, unset_ok=f.default is None or "None" in str(f.type))
        if found:
            raise UserError(f"{said}: {_shown(found[0])} {found[1]}.", about=(f.name,))
        twice = next((v for v in value if list(value).count(v) > 1), None) if numbers_list else None
        if twice is not None:
            raise UserError(f"{said} names {_shown(twice)} twice; list each value once.", about=(f.name,))


def range_problems(obj) -> list[tuple[str, str]]:
    """(field, sentence) for every field of dataclass `obj` outside its `ranged` range (None is unset)."""
    problems = ((f.name, field_problem(f, getattr(obj, f.name))) for f in dataclasses.fields(obj))
    return [(name, sentence) for name, sentence in problems if sentence]


def check_ranges(obj, where: str) -> None:
    """Raise UserError for the first field of dataclass `obj` outside its range."""
    problems = range_problems(obj)
    if problems:
        raise UserError(f"{where}: {problems[0][1]}", about=(problems[0][0],))


def checked_bool(value, name: str) -> bool:
    """`value` as a plain bool where it is True or False (numpy's too), else UserError naming argument `name`: a
    truthy text such as 'no' must not turn on what it names (overwrite='no' replaced the output)."""
    if not isinstance(value, bool) and type(value).__name__ != "bool_":
        raise UserError(f"{name} is {argument(value)[:60]}; pass True or False.")
    return bool(value)


def check_callbacks(function: str, **given) -> None:
    """Raise UserError naming `function` and the argument for a given callback (progress=..., on_trial=...) that is
    neither None nor callable: it failed only once work had begun, as "'int' object is not callable"."""
    for name, value in given.items():
        if value is not None and not callable(value):
            raise UserError(f"{function} {name} is {argument(value)[:60]}; pass a function to call as work goes on, "
                            "or None.")


def as_whole(value) -> int | None:
    """`value` as an int where its type is a whole number's (int, a numpy integer; not bool), else None."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def as_real(value) -> float | None:
    """`value` as a float where its type is a real number's (float, int, numpy's; not bool), else None."""
    return None if isinstance(value, bool) or not isinstance(value, numbers.Real) else float(value)


def checked_number(value, name: str, valid: Range, *, whole: bool = False) -> int | float:
    """`value` as a plain int (`whole`) or float, where it is such a number (numpy's too; not bool) inside `valid`;
    else UserError naming argument `name` (a library function's argument, e.g. 'prune iterative')."""
    plain = as_whole(value) if whole else as_real(value)
    if plain is None or valid.problem(plain):
        kind = "a whole number" if whole else "a number"
        raise UserError(f"{name} is {argument(value)[:60]}; it must be {valid.describe(kind)}.")
    return plain


def check_arguments(table: dict, function: str, given: dict) -> list:
    """`given` numeric arguments of library function `function` as plain ints and floats (a numpy number is one),
    each checked against its `table` entry (range, whole number, None allowed); a UserError names the function and
    the argument."""
    checked = []
    for name, value in given.items():
        valid, whole, optional = table[name]
        checked.append(value if value is None and optional else
                       checked_number(value, f"{function} {name}", valid, whole=whole))
    return checked


def checked_fields(given, cls, name_of):
    """`given`, an instance of dataclass `cls`, with each ranged field checked (checked_number; name_of(field) names
    it) and whole numbers as plain ints; anything else where a `cls` belongs is one sentence naming name_of("")."""
    if not isinstance(given, cls):
        raise UserError(f"{name_of('')} is {argument(given)[:60]}; pass a {cls.__module__}.{cls.__name__}(...).")
    return dataclasses.replace(given, **{
        f.name: checked_number(getattr(given, f.name), name_of(f.name), f.metadata["range"],
                               whole=isinstance(f.default, int))
        for f in dataclasses.fields(given) if "range" in f.metadata})


def argument(value) -> str:
    """An argument's value as a message shows it: 2.0 for numpy's float64(2.0) too, 'two' for text."""
    return repr(value.item() if type(value).__module__ == "numpy" and hasattr(value, "item") else value)


# Bounds of settings that several commands and recipes share (one declaration each).
MAX_THREADS = 256  # a runtime's threads: more only exhausts the process limit (tokenizers panicked at 100,000)
THREADS = Range(1, MAX_THREADS)  # threads: every --threads, threads argument and setting reads this one
# The runtime's threads per grader where none is asked for: Grader, GradeSettings and ray_data (a server or grade job
# runs several workers; the functions write it as a number for the API reference; a test checks them against this)
RUNTIME_THREADS = 1
# numpy's and torch's bound: every --seed, seed argument and recipe seed reads this, except a synthetic draw's
# (synthetic:SEED, synthetic_pairs' seed), which seeds Python's random alone and reads headcut.synthetic.SEEDS
SEED = Range(0, 2**32 - 1)
MAX_BOOTSTRAP = 100_000  # resamples of a CI: beyond this the CI does not move, and the run takes hours
MAX_WORKERS = 256  # processes, each with its own grader: far past any one machine's cores
WORKERS = Range(1, MAX_WORKERS)  # GradeSettings.workers, grade's and serve's --workers, the benchmarks' read this
MAX_CHUNK_ROWS = 10_000_000  # pairs in memory at once per chunk
# a grade's pairs per chunk: GradeSettings.chunk_rows, --chunk-rows, iter_pairs' chunk_rows and read_pairs' limit
CHUNK_ROWS = Range(1, MAX_CHUNK_ROWS)
MAX_BATCH = 1024  # pairs per forward pass: memory grows with it, speed stops growing long before
BATCH = Range(1, MAX_BATCH)  # a batch size: every --batch-size, batch_size argument and setting reads this one
# A sequence length a batch is timed or counted at, and a model's max_length (tokens per pair; under 8 a pair keeps
# barely a token of its query or title): headcut bench --seq-lens, headcut prune --seq-len, training's max_length
SEQ_LEN = Range(8, 8192)
# A timing's untimed warm-up runs before the timed ones, and its timed runs (p50/p95 come from these): BenchSettings'
# warmup and repeats, `headcut bench --repeats`, prune's measure_latency and the benchmarks/ scripts read these
WARMUP = Range(0, 1000)
REPEATS = Range(1, 10_000)
# The runtime's pairs per forward pass offline: Grader, GradeSettings, `grade --batch-size` and ray_data (the
# functions write it as a number for the API reference; a test checks them against this)
BATCH_SIZE = 32
# A server's (serve.Batching, `serve --batch-size`), smaller on purpose: it sorts each run of merged requests by length
# and cuts it into batches, and small batches pad short pairs least (benchmarks/serve_load.py)
SERVE_BATCH_SIZE = 16


MAX_TIMED_SCORES = 2 ** 25  # batch x length^2: a timed batch's attention scores per head (1.6 GB for 12 heads)


def fits_timed(batch: int, length: int) -> bool:
    """Whether a batch that timing runs whole fits in memory: attention grows with batch x length squared."""
    return batch * length ** 2 <= MAX_TIMED_SCORES


def check_timed_batch(batch: int, length: int, *, flags: str) -> None:
    """A batch that timing runs whole must fit in memory (fits_timed), else one sentence naming `flags`."""
    if not fits_timed(batch, length):
        most = max(1, MAX_TIMED_SCORES // length ** 2)
        raise UserError(f"{flags}: a batch of {batch} at {length} tokens would hold {batch * length ** 2:,} attention "
                        f"scores per head, more than memory allows; time batches of {most} or less at that length "
                        "(or a shorter length).")
