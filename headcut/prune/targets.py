"""What a prune aims at: exactly one of a head keep ratio, a FLOPs share or a latency share. The rule and
its sentence live here once, and which settings each target reads; the CLI, the library and run recipes word
them with flags or keys."""
from __future__ import annotations

from headcut_grader.errors import named, setting

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
        what = TARGETS[name][1]
        item = _flag(name) if flags else name
        last_of_kind = i + 1 == len(names) or TARGETS[names[i + 1]][1] != what
        items.append(f"{item} ({what})" if last_of_kind else item)
    return "exactly one of " + (", ".join(items[:-1]) + " or " + items[-1] if len(items) > 1 else items[0])


# The prunes that read each setting (the CLI's flags and run recipes' [prune] keys share the names); given to
# another prune a setting would be ignored, so it is refused.
READ_BY = {"scores": ("keep_ratio",), "min_heads": ("keep_ratio",), "targets": ("flops", "latency"),
           "tune": ("flops", "latency"), "tune_fit": ("flops", "latency"), "calibrate": ("flops", "latency"),
           "seq_len": ("flops", "latency"), "drop_layers": ("flops",), "batch": ("latency",),
           "runtime": ("latency",)}
# Read only by a prune that scores units itself: a keep_ratio prune ranked by given head scores (--scores, a
# run's scan) ignores them.
SCORING = ("data", "score_rows", "iterative")


# Settings read only while a switch is on: setting -> (the switches, any of which has it read (the first is named),
# what the setting does, what the first switch turns off). Given with every switch off a setting would be ignored, so
# it is refused (the CLI's flags, a recipe's keys). calibrate: its pairs are mask tuning's and the layer search's.
SWITCHED = {"tune_fit": (("tune",), "chooses what mask tuning fits", "tuning"),
            "calibrate": (("tune", "drop_layers"), "picks the pairs mask tuning fits on", "tuning"),
            "latency_seconds": (("timing",), "sets how long each model is timed", "timing")}


def one_plan_problem(drop_layers: str, iterative: str, steps: int) -> str:
    """The sentence for layers dropped (`drop_layers`, named as the user gave it) in an iterative prune of `steps`
    steps (`iterative`): the layer search plans the unpruned model once."""
    return (f"{drop_layers} searches one plan of the unpruned model; {setting(iterative, steps)} re-plans a pruned "
            "one, so pass one of them")


def switched_off_problem(setting: str, *, name: str, off: str) -> str:
    """The sentence for `setting` given with its switch off; `name` names the setting as the user wrote it
    (--tune-fit, [prune] tune_fit), `off` the switch turned off (--no-tune, [prune] tune: false)."""
    _, does, what = SWITCHED[setting]
    return f"{name} {does}, and {off} turns {what} off; drop one of them."


def ignored_settings(target: str, given, *, from_scores: bool = False) -> list[tuple[str, tuple[str, ...] | None]]:
    """(setting, the targets that read it) for each setting of `given` a prune aiming at `target` would ignore;
    None in place of the targets: it is read only when the prune scores units itself (`from_scores`: it does
    not)."""
    ignored = [(name, READ_BY[name]) for name in given if name in READ_BY and target not in READ_BY[name]]
    if from_scores:
        ignored += [(name, None) for name in given if name in SCORING]
    return ignored


def target_flags(targets: tuple[str, ...]) -> str:
    """'--flops F or --latency S'."""
    return " or ".join(_flag(t) for t in targets)


def _flag(target: str) -> str:
    return setting(named(target, "flags", section="prune"), TARGETS[target][0])
