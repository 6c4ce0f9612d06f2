"""What pruning buys: parameters, FLOPs per pair at a sequence length, and measured CPU latency.

FLOPs count the matrix multiplies (2 per multiply-add) of the encoder at sequence length n, plus the
pooler/classifier on one token; embeddings, LayerNorm and softmax are left out (under 1% here). A
pruned layer's attention costs in proportion to its heads, so the ideal speedup is FLOPs before / after.
Measured speedup falls short of it where fixed costs (embeddings, LayerNorm, Python, thread start-up)
dominate: at batch 1 on short pairs, far more than at batch 32.
"""
from __future__ import annotations

import dataclasses
import statistics

import torch

from headcut.arch import count_parameters, flops_per_pair, takes_token_types
from headcut.model_arguments import check_model, check_models
from headcut.prune_arguments import argument_range
from headcut.timing import round_robin
from headcut_grader.errors import UserError
from headcut_grader.ranges import REPEATS, WARMUP, argument, check_arguments, check_timed_batch, fits_timed

# name: (range, whole number, None allowed); the lengths and batch sizes `headcut prune` times (--seq-len, --batch)
ARGUMENTS = {
    "seq_len": (argument_range("seq_len"), True, False),
    "batch_sizes": (argument_range("latency_batch"), True, False),
    # PruneSettings.latency_seconds' range closed at 0: no time is a median of min_runs alone, which the setting does
    # not offer but a caller of measure_latency may ask for
    "min_seconds": (dataclasses.replace(argument_range("latency_seconds"), low_open=False), False, False),
    "min_runs": (REPEATS, True, False),  # a median of no runs is no time
    "warmup": (WARMUP, True, False),
}
TIMED_SIZES = (1, 8, 32)  # the batch sizes timed where a caller names none


def dummy_batch(model, batch_size: int, seq_len: int, *, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random token ids of a fixed length: latency depends on shapes, not on the words."""
    g = torch.Generator().manual_seed(seed)
    vocab = int(getattr(model.config, "vocab_size", 1000))
    ids = torch.randint(5, max(6, vocab - 1), (batch_size, seq_len), generator=g)
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if takes_token_types(model):
        batch["token_type_ids"] = torch.zeros_like(ids)
    return batch


@torch.inference_mode()
def measure_latency(
    models, *, seq_len: int, batch_sizes=TIMED_SIZES, min_seconds: float = 1.0, min_runs: int = 3, warmup: int = 2
) -> list[list[dict]]:
    """Median milliseconds per batch and pairs per second of each model at each batch size (CPU).

    Models take turns in blocks (headcut.timing.round_robin): each size gets `warmup` untimed runs, then
    timed rounds until every model has `min_runs` runs and `min_seconds` of its own time.
    """
    seq_len, batch_sizes, min_seconds, min_runs, warmup = checked_timing(
        "measure_latency", models, seq_len=seq_len, batch_sizes=batch_sizes, min_seconds=min_seconds,
        min_runs=min_runs, warmup=warmup)
    results = [[] for _ in models]
    for m in models:
        m.eval()
    for size in batch_sizes:
        runs = [lambda _, m=m, batch=dummy_batch(m, size, seq_len): m(**batch) for m in models]
        times = round_robin(runs, None, warmup=warmup, repeats=min_runs, min_seconds=min_seconds)
        for out, t in zip(results, times):
            ms = statistics.median(t) * 1000
            out.append({"batch_size": size, "ms": ms, "pairs_per_second": size / (ms / 1000), "runs": len(t)})
    return results


def checked_timing(function: str, models, *, seq_len, batch_sizes, fitting: bool = False, **given) -> list:
    """Each of `models` a PyTorch model and `given` timing arguments of `function` checked against ARGUMENTS (a
    batch of `batch_sizes` against memory too), before any model runs; a UserError names the function and argument.
    `fitting`: the batch sizes too large to time at `seq_len` are left out rather than refused."""
    check_models(models, f"{function} models")
    if not isinstance(batch_sizes, (list, tuple)):
        raise UserError(f"{function} batch_sizes is {argument(batch_sizes)[:60]}; pass a list of batch sizes, e.g. "
                        f"{TIMED_SIZES}.")
    sizes = [check_arguments(ARGUMENTS, function, {"batch_sizes": size})[0] for size in batch_sizes]
    seq_len, *rest = check_arguments(ARGUMENTS, function, {"seq_len": seq_len, **given})
    if fitting:
        sizes = [size for size in sizes if fits_timed(size, seq_len)]
    else:
        for size in sizes:
            check_timed_batch(size, seq_len, flags=f"{function} batch_sizes, seq_len")
    return [seq_len, tuple(sizes), *rest]


def timed_length(tokens: int) -> int:
    """The length a speed summary of data whose pairs have `tokens` tokens (mean, median) is measured at: that, or the
    shortest length timed where the pairs are of a few words (was: a refusal of speed_summary's seq_len, after the
    pruning or the whole distillation)."""
    return max(int(tokens), int(ARGUMENTS["seq_len"][0].low))


def speed_summary(before, after, *, seq_len: int, latency: bool = True, **latency_options) -> dict:
    """Parameters, FLOPs and (optionally) latency of both models, with ideal and measured speedups."""
    check_model(before, "speed_summary before")
    check_model(after, "speed_summary after")
    seq_len = check_arguments(ARGUMENTS, "speed_summary", {"seq_len": seq_len})[0]
    out = {
        "seq_len": int(seq_len),
        "params": {"before": count_parameters(before), "after": count_parameters(after)},
        "flops": {"before": flops_per_pair(before, seq_len), "after": flops_per_pair(after, seq_len)},
    }
    out["ideal_speedup"] = out["flops"]["before"] / max(1, out["flops"]["after"])
    sizes = latency_options.pop("batch_sizes", TIMED_SIZES)
    if latency:  # at a long length only the batches that fit in memory are timed
        sizes = checked_timing("speed_summary", [before, after], seq_len=seq_len, batch_sizes=sizes, fitting=True)[1]
    if latency and sizes:
        lat_before, lat_after = measure_latency([before, after], seq_len=seq_len, batch_sizes=sizes,
                                                **latency_options)
        out["latency"] = [
            {"batch_size": b["batch_size"], "ms_before": b["ms"], "ms_after": a["ms"],
             "pairs_per_second_before": b["pairs_per_second"], "pairs_per_second_after": a["pairs_per_second"],
             "speedup": b["ms"] / a["ms"], "ratio_to_ideal": (b["ms"] / a["ms"]) / out["ideal_speedup"]}
            for b, a in zip(lat_before, lat_after)
        ]
    return out
