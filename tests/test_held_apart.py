"""benchmarks/held_apart.py keeps whole queries apart for choosing settings; benchmarks/augment_pairs.py adds
unlabeled distillation pairs that keep each query and borrow only other queries' titles."""
from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HELD_APART = ROOT / "benchmarks" / "held_apart.py"
AUGMENT = ROOT / "benchmarks" / "augment_pairs.py"
WORDS = ["drill", "faucet", "lamp", "hose", "saw", "tile", "paint", "door"]


def run(script: Path, *args):
    return subprocess.run([sys.executable, str(script), *map(str, args)], capture_output=True, text=True)


def train_file(tmp_path: Path, lines: list[str]) -> Path:
    train = tmp_path / "train.tsv"
    train.write_text("query\ttitle\tgrade\tscore\n" + "\n".join(lines) + "\n")
    return train


def test_whole_queries_are_held_apart_and_every_row_lands_once_unchanged(tmp_path):
    lines = [f"q{i % 37}\ttitle {i}\t{1 + i % 5}\t{1 + (i % 3)}" for i in range(400)]
    train = train_file(tmp_path, lines)
    done = run(HELD_APART, train, "--out", tmp_path / "split", "--pairs", 50)
    assert done.returncode == 0, done.stderr
    held = (tmp_path / "split" / "select.tsv").read_text().splitlines()
    rest = (tmp_path / "split" / "pool.tsv").read_text().splitlines()
    assert held[0] == rest[0] == "query\ttitle\tgrade\tscore"
    assert sorted(held[1:] + rest[1:]) == sorted(lines)  # nothing lost, nothing changed, nothing twice
    assert not {r.split("\t")[0] for r in held[1:]} & {r.split("\t")[0] for r in rest[1:]}
    assert 50 <= len(held) - 1 < 50 + 11  # stops at the first query that reaches --pairs (queries hold 10-11)
    again = run(HELD_APART, train, "--out", tmp_path / "split", "--pairs", 50)
    assert again.returncode == 2 and "--overwrite" in again.stderr


def test_pairs_below_one_is_refused_by_the_flag_s_own_type(tmp_path):
    """--pairs reads bench_flags.whole(), which refuses 0 as argparse parses it (held_apart's own later
    `args.pairs < 1` check could never run: it is gone)."""
    train = train_file(tmp_path, ["q\tt\t3\t2"])
    done = run(HELD_APART, train, "--out", tmp_path / "split", "--pairs", 0)
    assert done.returncode == 2 and "argument --pairs: 0 is out of range; it must be at least 1" in done.stderr, \
        done.stderr
    assert not (tmp_path / "split").exists()


def rows(path: Path) -> list[tuple[str, str]]:
    lines = path.read_text().splitlines()
    assert lines[0] == "query\ttitle"
    return [tuple(line.split("\t")) for line in lines[1:]]


def test_extra_titles_come_from_other_queries_share_a_word_and_repeat(tmp_path):
    lines = [f"{WORDS[i % 8]} {i % 5}x\t{WORDS[i % 8]} model {i} by maker {i % 3}\t3\t2" for i in range(120)]
    train = train_file(tmp_path, lines)
    done = run(AUGMENT, train, "--out", tmp_path / "extra.tsv", "--ratio", 0.5)
    assert done.returncode == 0, done.stderr
    owner = {line.split("\t")[1]: line.split("\t")[0] for line in lines}
    real = Counter(line.split("\t")[0] for line in lines)
    extra = rows(tmp_path / "extra.tsv")
    assert Counter(q for q, _ in extra) == {q: round(n * 0.5) for q, n in real.items()}
    for query, title in extra:
        assert owner[title] != query  # never one of the query's own titles
        assert query.split()[0] in title  # the shared word (every query's first word is in 15 titles)
    assert len(set(extra)) == len(extra)
    again = run(AUGMENT, train, "--out", tmp_path / "again.tsv", "--ratio", 0.5)
    assert rows(tmp_path / "again.tsv") == extra
    assert run(AUGMENT, train, "--out", tmp_path / "extra.tsv").returncode == 2  # no --overwrite: the file stays


def test_bad_input_is_one_sentence_and_exit_2(tmp_path):
    train = tmp_path / "train.tsv"
    train.write_text("q\ttitle\nx\ty\n")
    done = run(AUGMENT, train, "--out", tmp_path / "extra.tsv")
    assert done.returncode == 2 and "no column 'query'" in done.stderr and not (tmp_path / "extra.tsv").exists()
    assert run(AUGMENT, train, "--out", tmp_path / "e.tsv", "--ratio", 0).returncode == 2


def test_two_writes_of_one_file_at_once_each_use_their_own_temporary(tmp_path):
    """Was: held_apart.write (augment_pairs' writer too) wrote through `.NAME.tmp`, one name for every run: a second
    run writing the same file meanwhile truncated and renamed the first's temporary, so the first run's later rows
    landed in the second's published file and its own rename failed (FileNotFoundError). Now each write has its own
    temporary (files.atomic_file): here a write started while another is half done, and each file published is
    one whole write."""
    sys.path.insert(0, str(HELD_APART.parent))
    try:
        from held_apart import write
    finally:
        sys.path.remove(str(HELD_APART.parent))
    out = tmp_path / "select.tsv"

    def first_rows():
        yield ["a", "1"]
        write(out, ["query", "title"], [["b", "2"]])  # another run's write of the same file, while this one writes
        assert out.read_text() == "query\ttitle\nb\t2\n"
        yield ["a", "3"]

    write(out, ["query", "title"], first_rows())
    assert out.read_text() == "query\ttitle\na\t1\na\t3\n"
    assert [p.name for p in tmp_path.iterdir()] == ["select.tsv"]
