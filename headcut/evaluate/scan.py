"""One scan of a model: importance scores by several methods (sharing passes where they can), the
study's experiments and the head probes, as one JSON-ready result that `scan_report` writes out."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import numpy as np
import torch
from scipy.stats import spearmanr

from headcut.arch import heads_per_layer, present_heads
from headcut.batching import check_max_length, encode, max_length_of
from headcut_grader.data import Pairs
from headcut_grader.errors import UserError, named, quoted, setting
from headcut_grader.ranges import argument, check_callbacks, check_settings
from headcut.evaluate_arguments import argument_field
from headcut_grader.validation import whole_number
from headcut.evaluate.experiments import EXPERIMENTS, effects, run_experiments
from headcut.evaluate.criteria import CRITERIA, ScoringData, criterion, gold_name
from headcut.evaluate.importance import gold
from headcut.evaluate.tasks import check_task, summary
from headcut.model_arguments import check_loaded
from headcut.evaluate.predict import predict_logits
from headcut.evaluate.probes import best_head, example_attention, probe_heads, probe_inputs, segmented_inputs


@dataclass(frozen=True)
class ScanSettings:
    """What one scan computes; `headcut scan`'s flags read their ranges here."""

    methods: tuple[str, ...] = ("ablation", "kl", "gradient", "fisher", "entropy")
    experiments: tuple[str, ...] = EXPERIMENTS
    probes: bool = True
    batch_size: int = argument_field("batch_size")
    max_length: int | None = argument_field("max_length")  # None: the model's (batching.max_length_of)
    draws: int = argument_field("draws")  # random masks per ratio
    k: int = argument_field("k")  # term-matching heads masked in experiment 5
    iters: int = argument_field("iters")  # bootstrap resamples for the CIs
    seed: int = argument_field("seed")

    def __post_init__(self):
        check_settings(self)  # a Python caller's: the flags and a run recipe's keys are checked first
        for key, known in (("methods", tuple(CRITERIA)), ("experiments", EXPERIMENTS)):
            names = getattr(self, key)
            if not _distinct_names(names, known, empty=key == "experiments"):
                raise UserError(f"ScanSettings({key}={argument(names)[:60]}): pass a tuple of distinct names from "
                                f"{', '.join(known)}.", about=(key,))


def _distinct_names(names, known: tuple[str, ...], *, empty: bool) -> bool:
    """`names` is a tuple or list of names of `known`, each once, and not empty unless `empty`."""
    return (isinstance(names, (tuple, list)) and (empty or bool(names)) and len(set(names)) == len(names)
            and all(isinstance(n, str) and n in known for n in names))


def parse_experiments(text: str, *, name: str = "parse_experiments text") -> tuple[str, ...]:
    """'all', 'none', or a comma list of numbers 1..5 or names (random, halves, layers, heads, term), each once;
    `name` names the setting as the user wrote it (--experiments, [scan] experiments; by default this
    function's own argument)."""
    text = text.strip().lower()
    if text == "all":
        return EXPERIMENTS
    if text == "none":
        return ()
    items = [item.strip() for item in text.split(",")]
    use = f"use all, none or numbers 1-5 ({', '.join(EXPERIMENTS)})"
    chosen = []
    for item in items:
        number = whole_number(item)
        experiment = EXPERIMENTS[number - 1] if number is not None and 1 <= number <= len(EXPERIMENTS) else item
        if item in ("all", "none"):
            raise UserError(f"{setting(name, text)}: {quoted(item)} stands alone; {use}.")
        if experiment not in EXPERIMENTS:
            raise UserError(f"{setting(name, repr(text))}: " + (f"unknown {quoted(item)}" if item else "an empty entry")
                            + f"; {use}.")
        if experiment in chosen:
            raise UserError(f"{setting(name, text)} names {experiment} twice; name each once.")
        chosen.append(experiment)
    return tuple(chosen)


def parse_methods(text: str | list[str], *, name: str = "parse_methods text") -> tuple[str, ...]:
    """A comma list of criteria (evaluate.criteria), or a recipe's list of them, each named once; `name` names
    the setting as the user wrote it (--method, [scan] methods)."""
    listed = not isinstance(text, str)
    names = [str(m).strip().lower() for m in (text if listed else text.split(","))]
    shown = f"[{', '.join(map(str, text))}]" if listed else text
    bad = [m for m in names if m not in CRITERIA]
    if bad or not names:
        what = (f"unknown {', '.join(quoted(m) for m in bad if m)}" if any(bad)
                else "an empty entry" if bad else "no method")
        raise UserError(f"{setting(name, repr(shown) if not listed else shown)}: {what}; choose from "
                        f"{', '.join(CRITERIA)}.")
    twice = next((m for m in names if names.count(m) > 1), None)
    if twice:
        raise UserError(f"{setting(name, shown)} names {twice} twice; name each once.")
    return tuple(names)


# The experiments each setting sets up (the CLI's flags and a run recipe's [scan] keys share the names): given
# without any of them it would be ignored, so it is refused.
EXPERIMENT_SETTINGS = {"draws": ("random", "halves", "term"), "k": ("term",)}


def check_experiment_settings(given: dict[str, str], chosen: tuple[str, ...], *,
                              experiments: str = "check_experiment_settings chosen") -> None:
    """Refuse a setting of `given` (setting -> its name as the user wrote it: --draws, [scan] draws) that no
    experiment of `chosen` sets up; `experiments` names the setting that chose them."""
    for key, used_by in EXPERIMENT_SETTINGS.items():
        if key not in given or set(used_by) & set(chosen):
            continue
        numbers = [str(EXPERIMENTS.index(e) + 1) for e in used_by]
        listed = " or ".join([", ".join(numbers[:-1]), numbers[-1]] if len(numbers) > 1 else numbers)
        raise UserError(f"{given[key]} sets up experiment{'s' if len(used_by) > 1 else ''} {', '.join(numbers)} "
                        f"({', '.join(used_by)}), and {experiments} runs {', '.join(chosen) or 'none'}, so it "
                        f"would be ignored; drop {given[key]} or add {listed} to {experiments}.")


def head_label(index: int, width: int) -> str:
    return f"L{index // width}H{index % width}"


def rank_heads(scores: torch.Tensor, *, n: int = 5) -> dict:
    """The n most and least important present heads, as labels like L2H9."""
    flat = scores.flatten()
    order = [int(i) for i in torch.argsort(flat, descending=True, stable=True) if torch.isfinite(flat[i])]
    width = scores.shape[1]
    return {"top": [head_label(i, width) for i in order[:n]],
            "bottom": [head_label(i, width) for i in order[-n:][::-1]]}


def method_correlations(scores: dict[str, torch.Tensor]) -> dict[str, dict[str, float]]:
    """Spearman rank correlation between every two methods over the present heads."""
    out: dict[str, dict[str, float]] = {}
    for a, sa in scores.items():
        out[a] = {}
        for b, sb in scores.items():
            keep = torch.isfinite(sa) & torch.isfinite(sb)
            out[a][b] = (float(spearmanr(sa[keep].numpy(), sb[keep].numpy()).statistic) if keep.sum() > 2
                         else float("nan"))
    return out


def telling_example(model, inputs, probes: dict, *, max_tokens: int = 24) -> dict:
    """Attention maps of one short pair that shares a term between query and title, and the heads
    that best show each probe (for the small-multiples figure). Where every pair is longer than `max_tokens`, the
    maps of its first `max_tokens` tokens: the figure grows with the tokens squared (5.4 GB and 2 minutes to draw
    a 512-token pair's); `length` is the pair's own."""
    ids = inputs.encoded.input_ids
    order = sorted(range(len(ids)), key=lambda i: (len(ids[i]) > max_tokens, -_twins(ids[i], inputs), len(ids[i])))
    index = order[0]
    maps, tokens = example_attention(model, inputs, index)
    length = len(tokens)
    maps, tokens = [None if m is None else m[:, :max_tokens, :max_tokens] for m in maps], tokens[:max_tokens]
    heads, seen = [], set()
    for name in ("previous", "next", "term_match", "boundary_f1", "noop"):
        best = best_head(probes, name) if name in probes else None
        if best is None:  # not probed, or nothing to measure: no head to show for it
            continue
        layer, head, value = best
        if (layer, head) not in seen and maps[layer] is not None:
            seen.add((layer, head))
            heads.append((layer, head, f"{name} {value:.2f}"))
    return {"index": index, "tokens": tokens, "maps": maps, "heads": heads, "length": length}


def _check_shared_terms(inputs, settings: ScanSettings, pairs: Pairs, names: str) -> None:
    """Experiment 5 masks the heads that attend most from a token to its twin in the other text: on pairs where no
    title repeats a token of its query, every head scores nothing, and the "strongest" were the first k."""
    if "term" not in settings.experiments or any(_twins(ids, inputs) for ids in inputs.encoded.input_ids):
        return
    others = tuple(e for e in settings.experiments if e != "term")
    raise UserError(f"experiment 5 (term) masks the heads that match a query's terms in its title, and no pair of "
                    f"{pairs.source} repeats a token of its query in its title, so there are none to find; pass "
                    f"{passed(names, experiments=others)}, or pairs whose titles share words with their queries.")


def _twins(ids: list[int], inputs) -> int:
    sep = ids.index(inputs.sep_id) if inputs.sep_id in ids else len(ids)
    query = set(ids[1:sep]) - inputs.special_ids
    return sum(1 for t in ids[sep + 1:] if t in query)


def top_overlap(scores: dict[str, torch.Tensor], *, k: int = 10) -> dict[str, dict[str, float]]:
    """Share of the k most important heads two methods have in common: the head of the ranking is what a
    prune keeps, and rank correlation over all heads is dominated by the many near-zero ones."""
    k = min([k] + [int(torch.isfinite(s).sum()) for s in scores.values()])
    tops = {m: set(torch.argsort(s.flatten(), descending=True, stable=True)[:k].tolist()) for m, s in scores.items()}
    return {a: {b: len(tops[a] & tops[b]) / max(k, 1) for b in tops} for a in tops}


@dataclass
class ScanResult:
    """A scan and what it describes: the model and the data sample (scan_report.write_scan writes it)."""

    findings: dict  # what scan() returns: scores, baseline, experiments, probes, rankings, settings
    model: dict  # path and weights hash
    data: dict  # source, fingerprint, samples, and the seed and limit of the sample


def needs_gold(settings: ScanSettings) -> bool:
    """Whether a scan with `settings` reads the pairs' gold: the experiments do, and a criterion that needs it
    (the exact ablation)."""
    return bool(settings.experiments) or any(CRITERIA[m].needs_gold for m in settings.methods)


def scan_gold(settings: ScanSettings, *, required: bool) -> dict:
    """How a scan's pairs are read (read_pairs' require_labels and wants_gold), decided here so that `headcut scan` and
    a run's scan stage read alike: gold is wanted where the scan reads it (`needs_gold`: a file holding only the other
    task's gold is refused with the sentence that says so; one with none, by `scan`), and `required` where the caller
    says so (a command: its --label-col names the column; a run: wherever the scan reads gold, so that its checks
    refuse up front what the scan would refuse after the teacher stage)."""
    return {"require_labels": required, "wants_gold": needs_gold(settings)}


# where a caller of scan names a setting otherwise than NAME, --NAME or scan.NAME (headcut_grader.errors.named)
SCAN_SPELLED = {"arguments": {"methods": "ScanSettings methods", "experiments": "ScanSettings experiments",
                              "k": "ScanSettings k", "max_length": "ScanSettings max_length"},
                "flags": {"methods": "--method", "title_words": "--seg-col"}}


def scan_said(name: str, names: str) -> str:
    """ScanSettings' `name` as scan's caller sets it: ScanSettings k, a command's --k, a run recipe's scan.k."""
    return named(name, names, section="scan", spelled=SCAN_SPELLED)


def passed(names: str, **values) -> str:
    """The settings `values` as scan's caller passes them: ScanSettings(k=4, experiments=()) from Python,
    --k 4 --experiments none for a command, scan.k=4 scan.experiments=none for a run recipe."""
    if names == "arguments":
        return f"ScanSettings({', '.join(f'{key}={value!r}' for key, value in values.items())})"
    shown = {key: ",".join(value) or "none" if isinstance(value, tuple) else value for key, value in values.items()}
    return " ".join(setting(scan_said(key, names), value) for key, value in shown.items())


def scan_model(loaded, pairs: Pairs, settings: ScanSettings = ScanSettings(), *, seed: int = 0,
               limit: int | None = None, title_words: list[str] | None = None,
               progress: Callable[[str, int], None] | None = None, names: str = "arguments") -> ScanResult:
    """`scan`, with the provenance its outputs record; `seed`/`limit`: how `pairs` were sampled."""
    check_callbacks("scan_model", progress=progress)
    findings = scan(loaded, pairs, settings, title_words=title_words, progress=progress, names=names)
    return ScanResult(findings, {"path": loaded.path, "weights_hash": loaded.weights_hash},
                      {"source": pairs.source, "fingerprint": pairs.fingerprint, "samples": len(pairs), "seed": seed,
                       "limit": limit})


def scan(loaded, pairs: Pairs, settings: ScanSettings = ScanSettings(), *, title_words: list[str] | None = None,
         progress: Callable[[str, int], None] | None = None, names: str = "arguments") -> dict:
    """Score, experiment and probe. `progress(stage, pairs_done)`: each stage is one pass over `pairs`.
    `title_words`: per pair, the title's words separated by spaces, the boundary probe's reference
    (Chinese); without it the tokenizer's word pieces are. `names`: who chose the settings, so that a refusal
    names them as written (`passed`).

    Returns {"scores": {method: (layers, heads) tensor}, "baseline", "ablation_table", "experiments",
    "probes", "correlations", "ranking", "settings"}.
    """
    check_callbacks("scan", progress=progress)
    check_loaded(loaded, "scan loaded")
    model, tokenizer = loaded.model, loaded.tokenizer
    labelled = pairs.task is not None
    if labelled:
        check_task(loaded.task, pairs, "the model")
    score = loaded.task == "score"
    if score and settings.experiments:
        raise UserError(f"the scan experiments ({', '.join(settings.experiments)}) do not support one-score models "
                        f"(task score) yet; pass {passed(names, experiments=())} (the head scores and probes do).")
    if not labelled and needs_gold(settings):
        raise UserError(f"{pairs.source} has no {gold_name(loaded.task)}, which "
                        f"{setting(scan_said('methods', names), 'ablation')} and the experiments need; pass "
                        f"{passed(names, methods=('kl', 'gradient', 'fisher', 'entropy'), experiments=())}.")
    heads = sum(heads_per_layer(model))
    if "term" in settings.experiments and settings.k > heads:
        raise UserError(f"{setting(scan_said('k', names), settings.k)} is more than the {heads} heads of the model; "
                        f"pass {passed(names, k=heads)} or fewer.")
    if settings.max_length is not None:  # as its caller named it, before the first pass (encode names its own)
        check_max_length(model, settings.max_length, flag=scan_said("max_length", names))
    stage = (lambda name: (lambda n: progress(name, n))) if progress else (lambda name: None)
    model.eval()  # no dropout: scores depend on the model and the data, not on the random state
    settings = replace(settings, max_length=max_length_of(model, settings.max_length))  # recorded as used
    encoded = encode(tokenizer, pairs, max_length=settings.max_length, model=model)
    inputs = None
    if settings.probes or "term" in settings.experiments:  # before any pass: experiment 5 needs shared terms
        if title_words is not None:
            inputs = segmented_inputs(tokenizer, pairs, title_words, max_length=settings.max_length, model=model,
                                      said=scan_said("title_words", names))
        else:
            inputs = probe_inputs(tokenizer, pairs, max_length=settings.max_length, model=model)
        _check_shared_terms(inputs, settings, pairs, names)
    labels = gold(pairs)
    data = ScoringData(model, encoded, labels, source=str(pairs.source), batch_size=settings.batch_size,
                       progress=progress)
    result: dict = {"settings": settings.__dict__, "pairs": len(pairs)}
    base = single = None
    if {"ablation", "kl"} & set(settings.methods) or "heads" in settings.experiments:
        base, single = data.ablation()
    elif labelled:
        base = predict_logits(model, None, None, batch_size=settings.batch_size, encoded=encoded,
                              progress=stage("baseline"))
    if labelled:
        result["baseline"] = summary(base, pairs, task=loaded.task, activation=loaded.activation)
    scores = {method: criterion(method).score(data).heads.float() for method in settings.methods}
    if "fisher" in settings.methods:
        result["fisher_targets"] = data.fisher_targets
    if labelled and single is not None and not score:  # the per-head effects table is of grade metrics
        present = present_heads(model)
        result["ablation_table"] = [
            {"layer": i, "head": h, **effects(single[i, h][None], base, labels, pairs.grades, iters=settings.iters,
                                              seed=settings.seed)}
            for i in range(present.shape[0]) for h in range(present.shape[1]) if present[i, h]
        ]
    probes = None
    if inputs is not None:
        probes = probe_heads(model, inputs, batch_size=settings.batch_size, progress=stage("probes"))
        result["probes"] = probes
        result["example"] = telling_example(model, inputs, probes)
    if settings.experiments:
        which = tuple(e for e in settings.experiments if e != "heads")  # the heat map is the ablation table
        term = torch.as_tensor(np.nan_to_num(probes["term_match"], nan=-np.inf)) if probes else None
        result["experiments"] = run_experiments(
            model, encoded, labels, pairs.grades, base=base, single=None, term_scores=term, which=which,
            draws=settings.draws, k=settings.k, iters=settings.iters, seed=settings.seed,
            batch_size=settings.batch_size, progress=progress)
        if "heads" in settings.experiments:
            result["experiments"]["heads"] = result.get("ablation_table", [])
    result["scores"] = scores
    result["correlations"] = method_correlations(scores)
    result["top10_overlap"] = top_overlap(scores)
    result["ranking"] = {m: rank_heads(s) for m, s in scores.items()}
    return result
