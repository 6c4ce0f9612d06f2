"""The built-in synthetic product-search pairs (`synthetic`, `synthetic:SEED` where a data path goes): a
toolkit default for demos and tests, not real data."""
from __future__ import annotations

import random
import re

from headcut_grader.errors import UserError, quoted, setting
from headcut_grader.ranges import Range, checked_number
from headcut_grader.validation import whole_number
from headcut_grader.pairs import DEFAULT_GRADES, Pairs

_PRODUCTS = {
    "drill": ["cordless", "hammer", "brushless", "compact"],
    "faucet": ["kitchen", "bathroom", "pull-down", "single-handle"],
    "paint": ["interior", "exterior", "satin", "semi-gloss"],
    "lamp": ["desk", "floor", "led", "dimmable"],
    "saw": ["circular", "miter", "jig", "table"],
    "shelf": ["wall", "floating", "corner", "wire"],
    "door": ["storm", "interior", "sliding", "barn"],
    "mower": ["push", "riding", "electric", "self-propelled"],
    "tile": ["ceramic", "porcelain", "mosaic", "vinyl"],
    "fan": ["ceiling", "box", "tower", "exhaust"],
    "hose": ["garden", "expandable", "soaker", "rubber"],
    "grill": ["gas", "charcoal", "pellet", "portable"],
}
_COLORS = ["black", "white", "chrome", "brushed nickel", "bronze", "red", "gray", "blue"]
_BRANDS = ["Ridgeline", "HomeMax", "Acme Pro", "Northwind", "Bluebird", "Everbuild"]
_SIZES = ["12 in.", "24 in.", "36 in.", "1 gal.", "5 gal.", "20-volt", "60 ft."]


def is_synthetic(spec) -> bool:
    return str(spec).partition(":")[0] == "synthetic"


def synthetic_spec(spec: str, n: int | None = None, *, said: str = "n",
                   name: str = "synthetic_spec spec") -> Pairs | None:
    """'synthetic' or 'synthetic:SEED' (another seed = an independent held-out draw); None for a file path. `said`:
    what asked for `n` pairs, as its caller's user wrote it (rows, --limit: headcut.data_spec.read_spec); `name`:
    what named `spec` (--data, a recipe's train_data, a Python caller's argument)."""
    if not is_synthetic(spec):
        return None
    seed = synthetic_seed(spec, name=name)
    if n is not None and n > MAX_SYNTHETIC:
        raise UserError(f"{setting(name, quoted(spec))}: {n:,} pairs asked for ({said}); the synthetic set is made in "
                        f"memory, so ask for at most {MAX_SYNTHETIC:,}.")
    return synthetic_pairs(n or SYNTHETIC_PAIRS, seed=seed)


def synthetic_seed(spec: str, *, name: str = "synthetic_seed spec") -> int:
    """The seed of 'synthetic' (0) or 'synthetic:SEED'; `name`: what named `spec`, as synthetic_spec's."""
    _, colon, text = str(spec).partition(":")
    text = text if colon else "0"  # 'synthetic:' names no seed: refused below, not read as 0
    lead = setting(name, quoted(_cut(str(spec), 60)))  # a spec of thousands of digits, shown in part
    if not re.fullmatch(r"[-+]?[0-9]+", text):
        raise UserError(f"{lead}: write synthetic or synthetic:SEED with a whole-number seed.")
    seed = whole_number(text)  # '+5' and '005' are 5, -0 is 0; None past 18 digits
    if SEEDS.problem(seed) is None:
        return seed
    raise UserError(f"{lead}: seed {_cut(text, 40)} is out of range; write synthetic:SEED with "
                    f"{SEEDS.describe('a seed')}.")


def _cut(text: str, width: int) -> str:
    """`text`, cut to `width` characters where it is longer, marked so by '...'."""
    return text if len(text) <= width else text[:width - 3] + "..."


# a synthetic draw's seed (synthetic:SEED, synthetic_pairs' seed): it seeds Python's random alone, which takes any
# whole number, so its bound is whole_number's 18 digits, not ranges.SEED's (numpy's and torch's)
SEEDS = Range(0, 10**18 - 1)


MAX_SYNTHETIC = 1_000_000  # pairs: about 0.13 GB and 20 s to make
SYNTHETIC_PAIRS = 2000  # the pairs of a synthetic spec that asks for no count


def synthetic_pairs(n: int = SYNTHETIC_PAIRS, *, seed: int = 0) -> Pairs:
    """Deterministic product-search pairs whose grade follows term overlap and attribute agreement.

    Synthetic, not real data: grade 5 = same product type, attribute and colour; 4 = one attribute off;
    3 = same type, two off; 2 = a related word only; 1 = another product. `n` from 1 to MAX_SYNTHETIC (they are
    made in memory), `seed` a whole number from 0, as `synthetic:SEED` names one.
    """
    n = checked_number(n, "synthetic_pairs n", Range(1, MAX_SYNTHETIC), whole=True)
    seed = checked_number(seed, "synthetic_pairs seed", SEEDS, whole=True)  # a seed synthetic:SEED can name
    rng = random.Random(seed)
    kinds = list(_PRODUCTS)
    queries, titles, labels = [], [], []
    while len(queries) < n:
        kind = rng.choice(kinds)
        attr = rng.choice(_PRODUCTS[kind])
        color = rng.choice(_COLORS)
        query = f"{attr} {kind} {color}" if rng.random() < 0.5 else f"{color} {attr} {kind}"
        for _ in range(rng.randint(3, 6)):
            grade = rng.choice(DEFAULT_GRADES)
            t_kind, t_attr, t_color = kind, attr, color
            if grade <= 4:
                t_color = rng.choice([c for c in _COLORS if c != color])
            if grade <= 3:
                t_attr = rng.choice([a for a in _PRODUCTS[kind] if a != attr])
            if grade <= 2:
                t_kind = rng.choice([k for k in kinds if k != kind])
                t_attr = attr if grade == 2 else rng.choice(_PRODUCTS[t_kind])
            title = f"{rng.choice(_BRANDS)} {rng.choice(_SIZES)} {t_attr} {t_kind} in {t_color}"
            queries.append(query)
            titles.append(title)
            labels.append(DEFAULT_GRADES.index(grade))
            if len(queries) == n:
                break
    return Pairs(queries, titles, labels, DEFAULT_GRADES, f"synthetic(n={n}, seed={seed})")
