"""Tokenising (query, title) pairs as training did (longest_first truncation to max_length), with memory that
follows max_length, not the texts: a long text is tokenised only as far as the tokens kept need.

Why a prefix gives the whole text's tokens: a tokenizer normalises, splits into words (pre-tokens: whitespace,
punctuation, CJK characters, BPE's regex) and tokenises each word on its own. So the tokens of a prefix are the
whole text's, except those of the prefix's last word, which the cut may have split. A prefix whose other words
give more tokens than the pair can keep, and more than the other side has, hands truncation the same tokens to
keep and the same choice of which side to shorten (longest_first looks only at which side is longer and how long
the shorter one is). The normalisers of BERT-family tokenizers (lower case, accents, NFD/NFKC) change characters
in place, so they do not move words across the cut.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Sequence

from headcut_grader.errors import UserError
from headcut_grader.validation import refuse_bom

# The first cut: max_length * CHARS_PER_TOKEN characters. Ordinary text has more tokens than that (English about
# 4-6 characters a token, Chinese 1); a rarer text (100-character words, long runs of spaces) is cut twice as long
# until its whole words are enough, or read whole.
CHARS_PER_TOKEN = 8


def load_tokenizer(folder: str | Path, *, max_length: int, recorded: dict | None = None):
    """The fast tokenizer of a grader folder, truncating pairs exactly as training did (longest_first);
    `recorded`: grader.json's tokenizer_file (name, size, sha256), checked where the export wrote one, so that
    another model's tokenizer.json is refused instead of giving the graph other ids."""
    from tokenizers import Tokenizer

    from headcut_grader.backends import graph_file

    path = Path(folder) / "tokenizer.json"
    if not path.exists():
        raise UserError(f"{folder}: no tokenizer.json; re-export the grader with `headcut export`.")
    refuse_bom(path, folder="a grader folder")  # said first: its fix (save it without the BOM) is the whole fix
    if recorded is not None:
        path = graph_file(Path(folder), recorded, what="tokenizer_file")
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as e:  # tokenizers raises a bare Exception for a malformed file
        raise UserError(f"{path} is damaged or incomplete ({str(e)[:200]}); re-export the grader.") from None
    tokenizer.enable_truncation(max_length, strategy="longest_first")
    tokenizer.no_padding()
    return tokenizer


def fewest_pair_tokens(special: int) -> int:
    """The shortest max_length a pair fits in: the `special` tokens the tokenizer adds, and one of each text."""
    return special + 2


class NoTokens(UserError, ValueError):
    """Pair `index`'s `side` (query or title) is a text the tokenizer reduces to no tokens (combining marks, U+FFFD,
    characters it drops): the graph would grade an empty text. `shown`: one of its characters, for the sentence;
    `where`: the pair as its caller names it ('FILE, line N': Pairs.where), else 'pair N'. A UserError, so that
    whoever grades pairs and lets it out says it as one sentence."""

    def __init__(self, index: int, side: str, shown: str, where: str | None = None):
        super().__init__(index, side, shown, where)  # as given, so that a worker process's error pickles
        self.index, self.side, self.shown, self.where = index, side, shown, where

    @property
    def problem(self) -> str:
        return no_tokens_problem(self.shown)

    def __str__(self) -> str:
        if self.where is not None:  # as headcut's encode and Pairs' own checks say a pair read from a file
            return f"{self.where}, {self.side}: {self.problem}; fix that pair or drop it."
        return f"pair {self.index}'s {self.side}: {self.problem}; fix that pair or drop it"


def no_tokens_problem(text: str, *, whose: str = "the grader's") -> str:
    """Why a text of no tokens is not one, in the words of validation.text_problem's empty texts; `whose`
    tokenizer it is ("the model's" for headcut's)."""
    return f"empty text ({whose} tokenizer keeps none of its characters, such as U+{ord(_shown(text)):04X})"


def _shown(text: str) -> str:
    return next((ch for ch in text if not ch.isspace()), " ")


def encode_pairs(tokenizer, queries: Sequence[str], titles: Sequence[str]) -> tuple[list[list[int]], list[list[int]]]:
    """Token ids and token type ids of each pair (unpadded), as `tokenizer` gives for the whole texts; NoTokens
    for the first pair with a text of no tokens."""
    cut = tokenizer.truncation["max_length"] * CHARS_PER_TOKEN
    short = [i for i, (q, t) in enumerate(zip(queries, titles)) if len(q) <= cut and len(t) <= cut]
    encodings = dict(zip(short, tokenizer.encode_batch([(queries[i], titles[i]) for i in short])))
    empty = {i: side for i in short if (side := empty_side(encodings[i].sequence_ids)) is not None}
    for i in range(len(queries)):
        if i not in encodings:
            encodings[i] = _encode_long(tokenizer, queries[i], titles[i], cut=cut)
            if isinstance(encodings[i], str):  # the side with no tokens
                empty[i] = encodings[i]
    if empty:  # the graph would grade an empty text
        i = min(empty)
        raise NoTokens(i, empty[i], _shown(queries[i] if empty[i] == "query" else titles[i]))
    ordered = [encodings[i] for i in range(len(queries))]
    return [e.ids for e in ordered], [e.type_ids for e in ordered]


SIDES = ("query", "title")


def empty_side(sequence_ids: list) -> str | None:
    """The side of a pair's encoding (by its tokens' sequence ids) that holds no token: truncation keeps one token
    of each side that has any, so a side missing here had none."""
    return next((side for side, sequence in zip(SIDES, (0, 1)) if sequence not in sequence_ids), None)


def _encode_long(tokenizer, query: str, title: str, *, cut: int):
    """One pair with a text longer than `cut` characters: the shorter text is tokenised whole, the longer one from
    a prefix with more whole-word tokens than the pair keeps and than the shorter text has; the side ('query',
    'title') that has no tokens, if one has none."""
    plain = _untruncated(tokenizer)
    keep = tokenizer.truncation["max_length"] - tokenizer.num_special_tokens_to_add(True)
    query_first = len(query) <= len(title)
    shorter, longer = (query, title) if query_first else (title, query)
    whole = plain.encode(shorter, add_special_tokens=False)
    part = _prefix_encoding(plain, longer, more_than=max(keep, len(whole.ids)), cut=cut)
    pair = (whole, part) if query_first else (part, whole)
    if not pair[0].ids or not pair[1].ids:  # post_process keeps no sequence ids to tell it by
        return SIDES[0 if not pair[0].ids else 1]
    for encoding, length in zip(pair, choice_lengths(*(len(e.ids) for e in pair), keep=keep)):
        encoding.truncate(length)  # tokenizers' longest_first takes ~40 us a token of its inputs
    return tokenizer.post_process(*pair)


def choice_lengths(first: int, second: int, *, keep: int) -> tuple[int, int]:
    """Lengths at most `first` and `second` from which longest_first keeps the same tokens when the pair has room
    for `keep`: past keep + 1 tokens only which side is longer matters."""
    a, b = min(first, keep + 1), min(second, keep + 1)
    if a == b and first != second:
        a, b = (a + 1, b) if first > second else (a, b + 1)
    return a, b


def _prefix_encoding(plain, text: str, *, more_than: int, cut: int):
    """The encoding of `text`, or of a prefix of it whose tokens before its last word number more than
    `more_than` (those are the whole text's first tokens)."""
    while cut < len(text):
        encoding = plain.encode(text[:cut], add_special_tokens=False)
        words = encoding.word_ids
        if words and words.index(words[-1]) > more_than:  # tokens before the last word's first
            return encoding
        cut *= 2
    return plain.encode(text, add_special_tokens=False)


@lru_cache(maxsize=8)
def _untruncated(tokenizer):
    """A copy of `tokenizer` that does not truncate, to count a text's tokens."""
    from tokenizers import Tokenizer

    plain = Tokenizer.from_str(tokenizer.to_str())
    plain.no_truncation()
    plain.no_padding()
    return plain
