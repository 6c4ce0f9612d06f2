"""Extra unlabeled pairs for distillation: each query of a train file paired with titles of *other* queries of
the same file that share a word with it, for the teacher to score (`headcut distill --set unlabeled_data=...`).

A student learns the teacher's function from more of its inputs than the labelled pairs alone (TinyBERT's
data augmentation, here without a generator): the extra titles are near misses, and since they keep the
query, margin-MSE compares them with that query's real titles in the same batch. For a query with n real
titles, round(n * --ratio) extra titles are drawn: a random word of the query (three letters or more), then a
random title of another query holding that word; a random title of another query where no word matches. Rows
are `query<TAB>title` under a header; the same file and seed give the same rows.

    python benchmarks/augment_pairs.py runs/split/pool.tsv --out runs/split/pool-extra.tsv
    headcut distill minilm_score_bottom3_cpu --set teacher=runs/score-teacher \
        --set train_data=runs/split/pool.tsv --set unlabeled_data=runs/split/pool-extra.tsv \
        --set dev_data=runs/split/select.tsv --set dev_rows=3002 --set epochs=1 --out runs/score-bottom3-extra
"""
from __future__ import annotations

import argparse
import csv
import random
import re
import sys
from collections import defaultdict
from pathlib import Path

from held_apart import write  # the atomic TSV writer (this folder is on sys.path when a script runs)
from bench_flags import file_to_read, out_file, real, whole
from headcut.evaluate_arguments import argument_range
from headcut_grader.ranges import Range

WORD = re.compile(r"[a-z0-9]{3,}")


def words(text: str) -> set[str]:
    return set(WORD.findall(text.lower()))


def read(path: Path) -> dict[str, list[str]]:
    """Titles of each query, in file order (the header names the `query` and `title` columns)."""
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f, delimiter="\t")
        header = next(reader)
        missing = [c for c in ("query", "title") if c not in header]
        if missing:
            sys.exit(print(f"{path}: line 1 has no column {missing[0]!r}; the header must name query and title.",
                           file=sys.stderr) or 2)
        q, t = header.index("query"), header.index("title")
        titles = defaultdict(list)
        for row in reader:
            titles[row[q]].append(row[t])
    return titles


def augment(titles: dict[str, list[str]], ratio: float, seed: int) -> list[tuple[str, str]]:
    """(query, title) rows: for each query, round(n * ratio) distinct titles of other queries."""
    rng = random.Random(seed)
    everyone = sorted({(title, query) for query, ts in titles.items() for title in ts})
    holding = defaultdict(list)
    for i, (title, _) in enumerate(everyone):
        for word in words(title):
            holding[word].append(i)
    rows = []
    for query in sorted(titles):
        own, want = set(titles[query]), round(len(titles[query]) * ratio)
        keys = sorted(w for w in words(query) if w in holding)
        picked: list[str] = []
        for _ in range(20 * want):
            if len(picked) >= want:
                break
            pool = holding[rng.choice(keys)] if keys else range(len(everyone))
            title, owner = everyone[rng.choice(pool)]
            if owner != query and title not in own and title not in picked:
                picked.append(title)
        rows += [(query, title) for title in picked]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("train", type=file_to_read(),
                        help="the training pairs (TSV whose header names query and title)")
    parser.add_argument("--out", required=True, help="the TSV to write (query, title)")
    parser.add_argument("--ratio", type=real(Range(0.0, 10.0, low_open=True)), default=1.0,
                        help="extra titles per real title of each query")
    parser.add_argument("--seed", type=whole(argument_range("seed")), default=0)
    parser.add_argument("--overwrite", action="store_true", help="replace --out")
    args = parser.parse_args()
    args.out = out_file(parser, args.out, overwrite=args.overwrite, inputs=[args.train], example="pairs.tsv")
    rows = augment(read(args.train), args.ratio, args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write(args.out, ["query", "title"], rows, overwrite=args.overwrite)
    print(f"wrote {len(rows):,} pairs for {len(set(q for q, _ in rows)):,} queries to {args.out}")


if __name__ == "__main__":
    main()
