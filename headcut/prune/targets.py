"""What a prune aims at: exactly one of a head keep ratio, a FLOPs share or a latency share. The rule and
its sentence live here once; the CLI, the library and run recipes word it with flags or keys."""
from __future__ import annotations

# target -> (the flag's metavar, what it prunes)
TARGETS = {"keep_ratio": ("R", "heads only"), "flops": ("F", "heads and FFN neurons"),
           "latency": ("S", "heads and FFN neurons")}


def one_target_problem(given: dict[str, object], *, flags: bool) -> str | None:
    """None when exactly one of `given` (target -> value or None) is set; else "exactly one of ..." naming
    them as flags (`--flops F`) or as recipe keys (`flops`)."""
    if sum(value is not None for value in given.values()) == 1:
        return None
    names = list(given)
    items = []
    for i, name in enumerate(names):
        metavar, what = TARGETS[name]
        item = f"--{name.replace('_', '-')} {metavar}" if flags else name
        last_of_kind = i + 1 == len(names) or TARGETS[names[i + 1]][1] != what
        items.append(f"{item} ({what})" if last_of_kind else item)
    return "exactly one of " + (", ".join(items[:-1]) + " or " + items[-1] if len(items) > 1 else items[0])
