"""Hold whole training queries apart for choosing settings: `select.tsv` (about --pairs pairs) and `pool.tsv`
(the rest of the train file), so a default is chosen on pairs that neither the prune, the distillation, nor
the reported dev split ever reads.

Queries are sorted, shuffled with random.Random(--seed) and taken whole until --pairs pairs are held; the rows
are copied unchanged, header first. With the defaults, on ../shared/data/homedepot/train.tsv, it holds 3,002
pairs of 488 queries apart and leaves 48,847: the split behind the held-apart choices in docs/benchmarks.md.

    python benchmarks/held_apart.py ../shared/data/homedepot/train.tsv --out runs/split
    headcut prune --model runs/score-teacher --flops 0.5 --data runs/split/pool.tsv \
        --eval-data runs/split/select.tsv --no-timing --out runs/sel-flops50
"""
from __future__ import annotations

import argparse
import csv
import random
import sys
from collections import defaultdict
from pathlib import Path

from bench_flags import file_to_read, out_dir, whole
from headcut.evaluate_arguments import argument_range
from headcut_grader.files import atomic_file


def split(rows: list[list[str]], query_col: int, pairs: int, seed: int) -> tuple[list, list, int]:
    """(held rows, the other rows, queries held), each side in file order."""
    by_query = defaultdict(list)
    for row in rows:
        by_query[row[query_col]].append(row)
    queries = sorted(by_query)
    random.Random(seed).shuffle(queries)
    held, count = set(), 0
    for query in queries:
        if count >= pairs:
            break
        held.add(query)
        count += len(by_query[query])
    chosen = [row for row in rows if row[query_col] in held]
    rest = [row for row in rows if row[query_col] not in held]
    return chosen, rest, len(held)


def write(path: Path, header: list[str], rows: list[list[str]], *, overwrite: bool = True) -> None:
    """A TSV, header first, written atomically under its writer's own temporary name (files.atomic_file): was
    `.NAME.tmp`, which two runs at once shared, one clobbering the other's rows. Without `overwrite`, a file another
    run wrote there meanwhile is kept and this write refused."""
    with atomic_file(path, binary=False, overwrite=overwrite, flag="--out") as f:
        writer = csv.writer(f, delimiter="\t", lineterminator="\n")
        writer.writerow(header)
        writer.writerows(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("train", type=file_to_read(),
                        help="the training pairs (TSV with a header and a `query` column)")
    parser.add_argument("--out", required=True, help="folder for select.tsv and pool.tsv")
    parser.add_argument("--pairs", type=whole(), default=3000, help="hold whole queries apart until this many pairs")
    parser.add_argument("--seed", type=whole(argument_range("seed")), default=7)
    parser.add_argument("--overwrite", action="store_true", help="replace select.tsv and pool.tsv in --out")
    args = parser.parse_args()
    args.out = out_dir(parser, args.out, inputs=[args.train])
    targets = [args.out / "select.tsv", args.out / "pool.tsv"]
    if not args.overwrite and any(t.exists() for t in targets):
        sys.exit(print(f"{args.out} already holds select.tsv or pool.tsv; pass --overwrite to replace them.",
                       file=sys.stderr) or 2)
    with open(args.train, newline="", encoding="utf-8") as f:
        header, *rows = list(csv.reader(f, delimiter="\t"))
    if "query" not in header:
        sys.exit(print(f"{args.train}: the header has no `query` column ({', '.join(header)}).", file=sys.stderr) or 2)
    held, rest, queries = split(rows, header.index("query"), args.pairs, args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    write(targets[0], header, held, overwrite=args.overwrite)
    write(targets[1], header, rest, overwrite=args.overwrite)
    print(f"held apart {len(held):,} pairs of {queries:,} queries in {targets[0]}; {len(rest):,} pairs in {targets[1]}")


if __name__ == "__main__":
    main()
