"""The data model: query-title-grade pairs (`Pairs`), their content fingerprint and query groups.

Labels are class indices 0..G-1; grades are what people say (1..5 by default): grade = grades[label].
A one-score model (task `score`) reads a numeric column into `scores` instead (Home Depot: `score`, 1.0-3.0).
"""
from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field

import numpy as np

from headcut_grader.errors import UserError, named, setting

DEFAULT_GRADES = (1, 2, 3, 4, 5)


@dataclass(frozen=True)
class Pairs:
    """Parallel lists of queries, titles and labels (0-based class indices, or None when unlabeled); `scores`:
    numeric gold scores for a one-score model (task `score`) instead of labels; `lines`: the file line each pair
    was read from, for messages about a pair (None: not read from a file); `gold_option`: what names the gold column
    for whoever read them (label_col=NAME, --label-col, --set data.label_col=NAME: readers.Named.fix)."""

    queries: list[str]
    titles: list[str]
    labels: list[int] | None
    grades: tuple[int, ...] = DEFAULT_GRADES
    source: str = "<memory>"
    fingerprint: str = field(default="", compare=False)
    scores: list[float] | None = None
    lines: list[int] | None = field(default=None, compare=False, repr=False)
    gold_option: str = field(default=setting(named("label_col", section="data"), "NAME"), compare=False, repr=False)

    def __post_init__(self):
        if not self.fingerprint:
            from headcut_grader.validation import surrogate_problem

            if problem := self._first_bad_text(_not_a_string):  # a Python caller's (files and the server refuse it)
                raise UserError(problem)
            gold = self.labels if self.scores is None else self.scores
            try:
                object.__setattr__(self, "fingerprint", fingerprint(self.queries, self.titles, gold))
            except UnicodeEncodeError:  # a lone surrogate in a Python caller's text, which nothing can encode
                raise UserError(self._first_bad_text(surrogate_problem)) from None

    def _first_bad_text(self, problem) -> str | None:
        """The sentence for the first query or title that `problem(text)` finds fault with (a lone surrogate such
        as '\\udc80'; a number), worded as the server and the file readers word it, naming the pair; else None."""
        for i, texts in enumerate(zip(self.queries, self.titles)):
            for side, text in zip(("query", "title"), texts):
                if said := problem(text):
                    return f"{self.where(i)}, {side}: {said}; fix that pair or drop it."
        return None

    @property
    def task(self) -> str | None:
        """What the gold of these pairs fits: `score`, `grades`, or None when unlabeled."""
        return "score" if self.scores is not None else ("grades" if self.labels is not None else None)

    def score_array(self) -> np.ndarray:
        if self.scores is None:
            raise UserError(f"{self.source} has no scores; pass a file with a numeric score column "
                            f"({self.gold_option}).")
        return np.asarray(self.scores, dtype=np.float64)

    def provenance(self) -> dict:
        """What a record says about the pairs it was computed on: their source, fingerprint and count."""
        return {"source": self.source, "fingerprint": self.fingerprint, "rows": len(self)}

    def __len__(self) -> int:
        return len(self.queries)

    @property
    def has_labels(self) -> bool:
        return self.labels is not None

    def label_array(self) -> np.ndarray:
        if self.labels is None:
            raise UserError(f"{self.source} has no labels; pass a file with a grade column ({self.gold_option}).")
        return np.asarray(self.labels, dtype=np.int64)

    def subset(self, indices) -> "Pairs":
        idx = [int(i) for i in indices]
        return Pairs(
            [self.queries[i] for i in idx],
            [self.titles[i] for i in idx],
            None if self.labels is None else [self.labels[i] for i in idx],
            self.grades,
            self.source,
            scores=None if self.scores is None else [self.scores[i] for i in idx],
            lines=None if self.lines is None else [self.lines[i] for i in idx],
            gold_option=self.gold_option,
        )

    def where(self, i: int) -> str:
        """Where pair `i` came from, as messages name it: 'FILE, line N', else 'SOURCE row N'."""
        return f"{self.source}, line {self.lines[i]}" if self.lines is not None else f"{self.source} row {i + 1}"

    def query_groups(self) -> list[np.ndarray]:
        """Row indices of each query, in first-seen order (for NDCG and query-level splits)."""
        return query_groups(self.queries)


    def sample(self, n: int | None, *, seed: int = 0) -> "Pairs":
        """A reproducible random subset of n rows (all rows when n is None or >= len)."""
        if n is None or n >= len(self):
            return self
        return self.subset(sampled_rows(len(self), n, seed))


def sampled_rows(total: int, n: int, seed: int) -> list[int]:
    """The sorted row numbers Pairs.sample(n, seed=seed) keeps of `total` rows (n < total): one draw, whether the
    rows are held (Pairs.sample) or read in chunks (headcut's data_spec)."""
    return sorted(random.Random(seed).sample(range(total), n))


def query_groups(queries: list[str]) -> list[np.ndarray]:
    seen: dict[str, list[int]] = {}
    for i, q in enumerate(queries):
        seen.setdefault(q, []).append(i)
    return [np.asarray(v) for v in seen.values()]


def _not_a_string(text) -> str | None:
    return None if isinstance(text, str) else f"{text!r:.60}, not a string"


def fingerprint(queries, titles, labels) -> str:
    """A short content hash, so a score file can be checked against the data it was computed on."""
    h = hashlib.sha256()
    for i, (q, t) in enumerate(zip(queries, titles)):
        h.update(q.encode())
        h.update(b"\t")
        h.update(t.encode())
        h.update(b"\t")
        h.update(b"" if labels is None else str(labels[i]).encode())
        h.update(b"\n")
    return h.hexdigest()[:16]
