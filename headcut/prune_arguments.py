"""The numeric arguments of pruning, declared once: the library's `prune` and `prune_to_budget` check them, `headcut
prune` bounds its flags and a run recipe its [prune] keys with the same ranges; and how a prune's messages name an
argument for each of those callers. Torch-free, so the command line reads them without importing the pruner."""
from __future__ import annotations

from headcut_grader.ranges import Range

SHARE = Range(0.0, 1.0, low_open=True)  # of the heads, FLOPs or latency to keep

# name: (range, whole number, None allowed)
ARGUMENTS = {
    "keep_ratio": (SHARE, False, False), "flops": (SHARE, False, True), "latency": (SHARE, False, True),
    "layer_prior": (Range(0.0, 100.0), False, False), "min_heads": (Range(0), True, False),
    "iterative": (Range(0, 100), True, False),  # each step re-scores: time
    "seq_len": (Range(1, 8192), True, True), "latency_batch": (Range(1, 4096), True, False),
}


def argument_range(name: str) -> Range:
    """The range of pruning argument `name`."""
    return ARGUMENTS[name][0]


NAMES = ("arguments", "keys", "flags")
FLAGS = {"latency_batch": "--batch"}  # `headcut prune`'s flags that are not --NAME


def named(name: str, names: str = "arguments") -> str:
    """Pruning argument `name` as a message names it for whoever called the prune: "arguments" the library's own
    (keep_ratio), "keys" a run recipe's (prune.keep_ratio, as --set writes it), "flags" `headcut prune`'s
    (--keep-ratio); headcut_grader.errors.setting(named(...), value) words it with its value."""
    if names not in NAMES:
        raise ValueError(f"names={names!r}; pass one of {', '.join(NAMES)}")
    if names == "flags":
        return FLAGS.get(name, "--" + name.replace("_", "-"))
    return f"prune.{name}" if names == "keys" else name
