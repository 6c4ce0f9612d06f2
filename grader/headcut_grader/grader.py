"""The deployable grader: an exported GRADER_DIR run with ONNX Runtime or OpenVINO, tokenizers and numpy only.

Importing this module must not import torch or transformers (tests check it in a fresh interpreter), so
it repeats the few lines of length-sorted batching and softmax that the torch-side code also has.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

from headcut_grader.backend_choice import Choice, choose_backend
from headcut_grader.backends import BACKEND_CHOICES, Backend, graph_sha256, open_backend, unreadable
from headcut_grader.errors import UserError, check_names, setting, shown
from headcut_grader.files import as_path
from headcut_grader.ranges import BATCH, THREADS, Range, argument, as_whole, check_callbacks
from headcut_grader.readers import bounded_int, unique_keys
from headcut_grader.tasks import ACTIVATIONS, score_values
from headcut_grader.tokens import NoTokens, encode_pairs, fewest_pair_tokens, load_tokenizer
from headcut_grader.validation import absent, read_small_text, text_problem

# The one source of truth for grader.json's "format": `headcut export` writes it, the runtime accepts only it.
GRADER_FORMAT = 1


@dataclass
class Grades:
    """Per pair: the grade (argmax), the probability of each grade, and the expected grade (for ranking)."""

    grades: np.ndarray  # (n,) int, in the grader's grade scale (e.g. 1..5)
    probabilities: np.ndarray  # (n, num_grades) float32
    expected: np.ndarray  # (n,) float: sum_i p_i * grade_i
    logits: np.ndarray  # (n, num_grades) float32
    grade_values: np.ndarray | None = None  # the grade of each column (names the p<grade> columns)

    def __len__(self) -> int:
        return len(self.grades)

    @property
    def ordering(self) -> np.ndarray:
        """What ranks titles: the expected grade."""
        return self.expected

    def rows(self) -> list[dict]:
        return [{"grade": int(g), "expected_grade": float(e), "probabilities": [float(x) for x in p]}
                for g, e, p in zip(self.grades, self.expected, self.probabilities)]

    def ranked(self, i: int) -> dict:
        return {"grade": int(self.grades[i]), "expected_grade": float(self.expected[i])}

    def take(self, rows) -> "Grades":
        return Grades(self.grades[rows], self.probabilities[rows], self.expected[rows], self.logits[rows],
                      self.grade_values)

    def columns(self, digits: int | None = 4) -> dict[str, list]:
        """Output columns of a grade file: grade, expected_grade, p<grade>...; numbers rounded to `digits`
        (None: as computed)."""
        out = {"grade": self.grades.tolist(), "expected_grade": _rounded(self.expected, digits)}
        for j, g in enumerate(self.grade_values.tolist()):
            out[f"p{g}"] = _rounded(self.probabilities[:, j], digits)
        return out


@dataclass
class Scores:
    """Per pair: one relevance score, a reranker's (task score), its recorded activation applied."""

    scores: np.ndarray  # (n,) float64
    logits: np.ndarray  # (n, 1) float32

    def __len__(self) -> int:
        return len(self.scores)

    @property
    def ordering(self) -> np.ndarray:
        return self.scores

    def rows(self) -> list[dict]:
        return [{"score": float(s)} for s in self.scores]

    def ranked(self, i: int) -> dict:
        return {"score": float(self.scores[i])}

    def take(self, rows) -> "Scores":
        return Scores(self.scores[rows], self.logits[rows])

    def columns(self, digits: int | None = 6) -> dict[str, list]:
        """The output column of a grade file: score, rounded to `digits` (None: as computed)."""
        return {"score": _rounded(self.scores, digits)}


def _rounded(values: np.ndarray, digits: int | None) -> list[float]:
    return [float(v) if digits is None else round(float(v), digits) for v in values]


def grades_from_logits(logits: np.ndarray, grade_values: np.ndarray) -> Grades:
    """Grades of logits `(n, num_grades)`, whichever process computed them."""
    z = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs = z / z.sum(axis=1, keepdims=True)
    return Grades(grade_values[logits.argmax(1)], probs, probs @ grade_values.astype(np.float64), logits, grade_values)


def results_from_logits(logits: np.ndarray, record: dict) -> Grades | Scores:
    """What a grader's logits mean, by its grader.json: Grades, or a score model's Scores."""
    if record.get("task") == "score":
        return Scores(score_values(logits, record["activation"]), logits)
    return grades_from_logits(logits, np.asarray(record["grades"]))


def read_record(folder: str | Path, *, flag: str = "") -> dict:
    """grader.json of `folder`, checked; `flag`: the flag that named the folder, for messages."""
    folder = Path(folder)
    path = folder / "grader.json"
    if not folder.exists():
        plain = "no such folder; pass a folder written by `headcut export`"
        raise UserError(f"{setting(flag, folder)}: {absent(folder, plain)}.")
    if not folder.is_dir():  # e.g. the grader.json itself, whose folder is the one to pass, or a pairs file
        example = f", e.g. {folder.parent}" if (folder.parent / "grader.json").is_file() else ""
        raise UserError(f"{setting(flag, folder)} is a file; pass the grader's folder (written by `headcut export`)"
                        f"{example}.")
    if not path.exists() and (folder / "config.json").is_file():  # a Hugging Face model folder
        raise UserError(f"{setting(flag, folder)} is a model folder, not a grader; export it first: headcut export "
                        f"--model {folder} --out GRADER_DIR.")
    if not path.exists():
        raise UserError(f"{setting(flag, folder)}: no grader.json; pass a folder written by `headcut export`.")
    try:
        text = read_small_text(path, what="grader record", bom_folder="a grader folder")
        record = json.loads(text, object_pairs_hook=unique_keys(f"{path}: an object"), parse_int=bounded_int)
    except OSError as e:
        raise unreadable(path, e) from None
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise UserError(f"{path} is damaged or incomplete (not valid JSON: {e}); re-export the grader.") from None
    if not isinstance(record, dict):
        raise UserError(f"{path} holds a JSON {type(record).__name__}, not a grader record; re-export the grader.")
    _check_format(path, record)
    # every export writes a score grader's activation: identity would read a sigmoid grader's raw logits
    needed = ("max_length", "model_file", "precision") + (("activation",) if record.get("task") == "score"
                                                          else ("grades",))
    missing = [k for k in needed if k not in record]
    if missing or not isinstance(record["model_file"], dict) or "name" not in record["model_file"]:
        raise UserError(f"{path} is damaged or incomplete (no '{(missing or ['model_file.name'])[0]}'); "
                        "re-export the grader.")
    problem = record_problem(record)
    if problem:
        raise UserError(f"{path}: {problem}; re-export the grader.")
    return record


def _check_format(path: Path, record: dict) -> None:
    """grader.json's format is this runtime's; a newer one asks for a newer runtime, not for a re-export, which the
    headcut that wrote it would repeat."""
    found = record.get("format")
    if type(found) is int and found == GRADER_FORMAT:  # not true or 1.0, which equal 1 in Python
        return
    if isinstance(found, int) and not isinstance(found, bool) and found > GRADER_FORMAT:
        by = record.get("headcut_version")
        written = f" (exported by headcut {by[:20]})" if isinstance(by, str) else ""
        raise UserError(f"{path}: grader format {found}{written} is newer than the format {GRADER_FORMAT} this "
                        "headcut-grader reads; upgrade it (pip install -U headcut-grader) or export the grader again "
                        "with this version's headcut.")
    raise UserError(f"{path}: grader format {shown(found)} is not {GRADER_FORMAT}; re-export it.")


MAX_POSITIONS = 8192  # the longest position table of the architectures headcut exports (ModernBERT's)


def record_problem(record: dict) -> str | None:
    """What is wrong with the values grader.json holds (types and ranges), or None."""
    if record.get("task", "grades") not in ("grades", "score"):
        return f"'task' is {shown(record.get('task'))}, not grades or score"
    if record.get("task") == "score":
        activation = record.get("activation", "identity")  # a model's headcut.json may leave it to config.json
        if not isinstance(activation, str) or activation not in ACTIVATIONS:
            return f"'activation' is {shown(activation)}, not one of {', '.join(ACTIVATIONS)}"
        grades = [1, 2]  # a score grader has no grades
    else:
        grades = record["grades"]
    if not isinstance(grades, list) or len(grades) < 2 or not all(
            isinstance(g, int) and not isinstance(g, bool) for g in grades):
        return f"'grades' is {shown(grades)}, not a list of at least two whole numbers"
    if len(set(grades)) != len(grades):
        return f"'grades' is {shown(grades)}, which names a grade twice"
    for key, low, high in (("max_length", 2, MAX_POSITIONS), ("pad_id", 0, 2 ** 31 - 1)):
        value = record.get(key, low)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            return f"'{key}' is {shown(value)}, not {Range(low, high).describe('a whole number')}"
    return _client_keys_problem(record, grades) or _sections_problem(record)


def _client_keys_problem(record: dict, grades: list) -> str | None:
    """The keys only clients in other languages read (docs/deployment.md) say what this runtime does: an edited
    one would make such a client grade otherwise than the runtime, with nothing refused."""
    label_map = {str(column): grade for column, grade in enumerate(grades)}
    if record.get("task", "grades") == "grades" and record.get("label_map", label_map) != label_map:
        return (f"'label_map' is {shown(record['label_map'], width=80)}, but the runtime grades column i as "
                f"grades[i]: {label_map}")
    names = record.get("input_names", [])
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return f"'input_names' is {shown(names)}, not a list of the graph's input names"
    for key, value in (("truncation", "longest_first"), ("output_name", "logits")):
        if record.get(key, value) != value:
            return f"'{key}' is {shown(record[key])}, but the graph and the runtime use {value}"
    return None


ORT_PRECISIONS = ("fp32", "int8")
OPENVINO_PRECISIONS = ("fp32", "bf16", "int8", "int8-bf16")
GRAPH_OPTIMIZATIONS = ("all", "disabled")  # the ONNX Runtime session levels an export's parity gate runs with


def _sections_problem(record: dict) -> str | None:
    """What is wrong with the types of the graph and speed sections an export writes, or None."""
    choices = (("precision", ORT_PRECISIONS), ("backend", BACKEND_CHOICES), ("graph_optimization", GRAPH_OPTIMIZATIONS))
    for key, allowed in choices:
        if key in record and record[key] not in allowed:
            return f"'{key}' is {shown(record[key])}, not one of {', '.join(allowed)}"
    for key in ("openvino", "speed", "int8", "int8_rejected"):  # null: not exported for OpenVINO, or INT8
        if record.get(key) is not None and not isinstance(record[key], dict):
            return f"'{key}' is {shown(record[key])}, not an object"
    return (_openvino_problem(record.get("openvino")) or _speed_problem(record.get("speed"))
            or _choice_problem(record.get("int8"), "int8.chosen", "choice")
            or _choice_problem((record.get("openvino") or {}), "openvino.choice", "chosen"))


def _choice_problem(section: dict | None, key: str, name: str) -> str | None:
    """The INT8 (or OpenVINO) choice `key` of `section` names its recipe by `name`, as headcut bench reads it. Was:
    'int8': "yes" or 'int8.chosen': 3 a traceback in headcut bench ('str' object has no attribute 'get')."""
    found = (section or {}).get(key.split(".")[-1])
    if found is None or isinstance(found, dict) and isinstance(found.get(name, ""), str):
        return None
    return f"'{key}' is {shown(found)}, not an object naming the recipe chosen ({name!r})"


def _openvino_problem(section: dict | None) -> str | None:
    if section is None:
        return None
    for key, allowed in (("precision", OPENVINO_PRECISIONS), ("inference_precision", ("fp32", "bf16"))):
        if section.get(key, "fp32") not in allowed:
            return f"'openvino.{key}' is {shown(section[key])}, not one of {', '.join(allowed)}"
    # bf16 is no property of the IR files but of the compile hint, so the two keys must say it alike: else the
    # grader reports bf16 and computes in f32, or the reverse
    precision, hint = section.get("precision", "fp32"), section.get("inference_precision", "fp32")
    if ("bf16" in precision) != (hint == "bf16"):
        return (f"'openvino.precision' is {shown(precision)}, but 'openvino.inference_precision' is {shown(hint)} "
                "(a bf16 graph compiles with the bf16 hint, every other with fp32)")
    # nor of the IR: the export's choice says whether a bf16 graph passed the gate (was: an fp32 export edited to
    # bf16 and its hint graded in bf16, unchecked, exit 0)
    choice = section.get("choice")
    chosen = choice.get("chosen") if isinstance(choice, dict) else None
    made = chosen.split(":")[0] if isinstance(chosen, str) else "fp32"  # bf16, int8:name, int8-bf16:name
    if ("bf16" in precision) != ("bf16" in made):
        return (f"'openvino.precision' is {shown(precision)}, but 'openvino.choice' records that the export chose the "
                f"{made} graph (bf16 is a compile setting the IR files do not hold)")
    files = section.get("files")
    if not isinstance(files, dict) or not all(isinstance(files.get(k), dict) for k in ("xml", "bin")):
        return f"'openvino.files' is {shown(files)}, not an object naming the xml and bin files"
    return None


def _speed_problem(section: dict | None) -> str | None:
    if section is None:
        return None
    seconds, cpu = section.get("seconds", {}), section.get("cpu", {})
    if not isinstance(seconds, dict) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < float("inf")
            for v in seconds.values()):
        return f"'speed.seconds' is {shown(seconds)}, not an object of times in seconds by backend"
    if not isinstance(cpu, dict):
        return f"'speed.cpu' is {shown(cpu)}, not an object"
    return None


def _as_columns(pairs) -> tuple[list[str], list[str]]:
    """The queries and titles of `pairs`, each text checked and stripped by the rule of files and the server; a Pairs
    (any object of queries and titles) too, whoever built it."""
    if hasattr(pairs, "queries") and hasattr(pairs, "titles"):
        queries, titles = list(pairs.queries), list(pairs.titles)
        if len(queries) != len(titles):
            raise ValueError(f"pairs has {len(queries)} queries and {len(titles)} titles; give each query its title")
        pairs = zip(queries, titles)
    problem = _pairs_problem(pairs)
    if problem:
        raise TypeError(f"pairs must be a list of (query, title) pairs, {problem}")
    queries, titles = [], []
    for item in pairs:
        if not isinstance(item, dict) and (isinstance(item, str) or not hasattr(item, "__len__") or len(item) != 2):
            raise TypeError(f"each pair must be (query, title), not {item!r:.60}")
        if isinstance(item, dict) and not {"query", "title"} <= item.keys():
            raise TypeError(f"each pair given as a dict needs 'query' and 'title', not {sorted(item)!r:.60}")
        q, t = (item["query"], item["title"]) if isinstance(item, dict) else item
        for side, text in (("query", q), ("title", t)):  # the rule files and the server apply
            if not isinstance(text, str):  # a missing value: None from Parquet, nan from pandas
                raise TypeError(f"pair {len(queries)}'s {side} is {text!r:.60}, not a string; each pair must be two "
                                "strings (query, title)")
            problem = text_problem(text)
            if problem:
                raise ValueError(f"pair {len(queries)}'s {side}: {problem}; fix that pair or drop it")
        # as a file's texts are read (validation.to_text): a byte-level BPE tokenizer makes other tokens of ' drill'
        queries.append(q.strip())
        titles.append(t.strip())
    return queries, titles


def _pairs_problem(pairs) -> str | None:
    """Why `pairs` is not a collection of pairs ("not one str", ...), or None."""
    if isinstance(pairs, tuple) and len(pairs) == 2 and all(isinstance(text, str) for text in pairs):
        return f"not one pair {pairs!r:.80}; pass a list of them, e.g. [{pairs!r:.80}]"
    if hasattr(pairs, "columns"):  # iterating a DataFrame gives its column names
        return "not a DataFrame; pass list(zip(df['query'], df['title']))"
    if isinstance(pairs, (str, dict)):
        return f"not one {type(pairs).__name__}"
    if not hasattr(pairs, "__iter__"):
        return f"not {pairs!r:.60}"
    return None


def _count(name: str, value, valid: Range) -> int:
    """Grader setting `name` as a plain int (a numpy integer is one), refused unless a whole number in `valid`."""
    plain = as_whole(value)
    if plain is None or valid.problem(plain):
        raise UserError(f"Grader {name} is {argument(value)}; it must be {valid.describe('a whole number')}.")
    return plain


class Grader:
    """An exported grader: `Grader(folder, threads=2).grade([(query, title), ...])`."""

    def __init__(self, folder: str | Path, *, threads: int = 1, batch_size: int = 32, backend: str = "auto",
                 names: str = "arguments"):
        """`backend`: onnxruntime, openvino, or auto (the folder's graph that grades fastest on this CPU, as
        measured at export or, on another CPU, timed here once and cached; backend_choice.py). `names`: who chose
        the backend, "flags" for a command's --backend (backends.open_backend)."""
        check_names(names, "Grader names")
        batch_size, threads = (_count(name, value, most) for name, value, most in
                               (("batch_size", batch_size, BATCH), ("threads", threads, THREADS)))
        if backend not in BACKEND_CHOICES:
            raise UserError(f"Grader backend is {backend!r}; use one of: {', '.join(BACKEND_CHOICES)}.")
        self.folder = as_path(folder, "Grader folder", what="a grader folder's path")
        self.record = read_record(self.folder)
        self.task = self.record.get("task", "grades")
        self.grade_values = np.asarray(self.record.get("grades") or [])
        self.outputs = 1 if self.task == "score" else len(self.grade_values)
        self.max_length = int(self.record["max_length"])
        self.batch_size = batch_size
        self.tokenizer = load_tokenizer(self.folder, max_length=self.max_length,
                                        recorded=self.record.get("tokenizer_file"))
        self.pad_id = int(self.record.get("pad_id", 0))
        vocab_size = self.tokenizer.get_vocab_size()
        if self.pad_id >= vocab_size:
            raise UserError(f"{self.folder / 'grader.json'}: 'pad_id' is {self.pad_id}, but the tokenizer has "
                            f"{vocab_size} tokens; re-export the grader.")
        if backend == "auto":
            choice = choose_backend(self.folder, self.record, threads=threads, vocab_size=vocab_size)
        else:
            choice = Choice(backend, "asked for")
        self.backend = open_backend(choice.backend, self.folder, self.record, threads=threads, names=names)
        self.backend_reason = choice.reason
        self.broken_runtimes = choice.broken  # auto skipped their graphs: {runtime: why it fails to import}
        self.input_names = self.backend.input_names
        width = self._first_pass()
        if width != self.outputs:
            raise UserError(f"{self.folder / 'grader.json'} names {self.outputs} outputs (task {self.task}) but the "
                            f"graph has {width}; the folder mixes files of two exports, so re-export it.")
        probe = self.backend if self.backend.name == "onnxruntime" else open_backend(
            "onnxruntime", self.folder, self.record, threads=1)  # ONNX Runtime's graph fails where OpenVINO's reads on
        self._check_vocabulary(probe)
        self._check_max_length(probe)

    def _first_pass(self) -> int:
        """The outputs of one tiny pass (does the graph fit the record?); a graph that fails on it, one sentence."""
        try:
            return self._run([[self.pad_id] * 2], [[0, 0]]).shape[-1]
        except Exception as e:  # ONNX Runtime's and OpenVINO's errors derive from Exception only
            raise UserError(f"{self.folder}: the {self.backend.name} graph fails on a two-token input "
                            f"({str(e).strip()[:160]}); the folder mixes files of two exports, "
                            "so re-export it.") from None

    def _check_vocabulary(self, probe: Backend) -> None:
        """A tokenizer.json with more tokens than the graph's embedding table is another model's: probed with its
        last id in ONNX Runtime (`probe`). A folder whose grader.json records its tokenizer_file refused another
        one by its hash already; this catches the larger ones in folders exported before that was recorded."""
        size = self.tokenizer.get_vocab_size()
        try:
            probe.run(self._feed([[size - 1] * 2], [[0, 0]]))
        except Exception:  # ONNX Runtime's InvalidArgument derives from Exception only
            raise UserError(f"{self.folder / 'tokenizer.json'} has {size} tokens, more than the graph's embeddings "
                            "hold: it is another model's tokenizer, so copy the grader folder again or re-export "
                            "it.") from None

    def _check_max_length(self, probe: Backend) -> None:
        """grader.json's max_length must leave each text a token and fit the graph's position embeddings. Those are
        probed in ONNX Runtime (`probe`), whose graph fails past them (OpenVINO's would grade on), at max_length
        tokens and, only when that fails, at the lengths between that find the limit."""
        path = self.folder / "grader.json"
        least = fewest_pair_tokens(self.tokenizer.num_special_tokens_to_add(True))
        if self.max_length < least:
            raise UserError(f"{path}: 'max_length' is {self.max_length}, but a pair needs at least {least} tokens "
                            f"({least - 2} special ones and one of each text); re-export the grader.")
        filler = 1 if self.pad_id != 1 else 2  # not padding, which RoBERTa's positions skip

        def fits(n: int) -> bool:
            try:
                probe.run(self._feed([[filler] * n], [[0] * n]))
            except Exception:  # ONNX Runtime's Fail, InvalidArgument, ... derive from Exception only
                return False
            return True

        limit = most_tokens(fits, self.max_length)
        if limit < self.max_length:
            raise UserError(f"{path}: 'max_length' is {self.max_length}, but the graph has position embeddings for at "
                            f"most {limit} tokens; set max_length to {limit} or less, or re-export the grader.")

    @property
    def graph_sha256(self) -> str:
        """The recorded sha256 prefix of the graph this grader runs (its weights file for OpenVINO)."""
        return graph_sha256(self.record, self.backend.name)

    @property
    def precision(self) -> str:
        """What the graph computes in on this CPU (a bf16 graph runs fp32 where the CPU has no bf16)."""
        return self.backend.precision

    @property
    def runtime(self) -> str:
        """The runtime, its version and the precision that grade, as a summary says them: 'openvino 2026.4.1 bf16'."""
        return f"{self.backend.name} {self.backend.version} {self.precision}"

    def logits(self, pairs, *, progress: Callable[[int], None] | None = None) -> np.ndarray:
        """Logits `(n, num_grades)` in input order; pairs of similar length share a batch (less padding)."""
        check_callbacks("Grader.logits", progress=progress)
        queries, titles = _as_columns(pairs)
        try:
            ids, types = encode_pairs(self.tokenizer, queries, titles)
        except NoTokens as e:
            if not hasattr(pairs, "where"):
                raise
            raise NoTokens(e.index, e.side, e.shown, pairs.where(e.index)) from None  # a Pairs: its file's line
        out = np.zeros((len(ids), self.outputs), dtype=np.float32)
        order = np.argsort([len(x) for x in ids], kind="stable")
        for start in range(0, len(order), self.batch_size):
            rows = order[start:start + self.batch_size]
            out[rows] = self._run([ids[i] for i in rows], [types[i] for i in rows])
            if progress:
                progress(len(rows))
        return out

    def _run(self, ids: list[list[int]], types: list[list[int]]) -> np.ndarray:
        return self.backend.run(self._feed(ids, types))

    def _feed(self, ids: list[list[int]], types: list[list[int]]) -> dict[str, np.ndarray]:
        width = max(len(x) for x in ids)
        feed = {"input_ids": np.full((len(ids), width), self.pad_id, dtype=np.int64),
                "attention_mask": np.zeros((len(ids), width), dtype=np.int64),
                "token_type_ids": np.zeros((len(ids), width), dtype=np.int64)}
        for j, (row, kinds) in enumerate(zip(ids, types)):
            feed["input_ids"][j, :len(row)] = row
            feed["attention_mask"][j, :len(row)] = 1
            feed["token_type_ids"][j, :len(row)] = kinds
        return feed

    def close(self) -> None:
        """Let go of the runtime's session (the graph in memory), keeping what describes the grader (record,
        backend, precision): for a caller whose worker processes each grade with a Grader of their own."""
        self.backend = replace(self.backend, run=_closed)

    def grade(self, pairs, *, progress: Callable[[int], None] | None = None) -> Grades | Scores:
        """Grade (query, title) pairs (tuples, {'query','title'} dicts, or a headcut Pairs): Grades, or Scores for
        a one-score grader (task score). Each text is read without its outer whitespace, as a pairs file's is."""
        check_callbacks("Grader.grade", progress=progress)
        return results_from_logits(self.logits(pairs, progress=progress), self.record)

    def rank(self, query: str, titles: Iterable[str]) -> list[dict]:
        """Titles ordered by expected grade (a score grader: score), best first (ties keep input order)."""
        if isinstance(titles, str) or not isinstance(query, str) or not hasattr(titles, "__iter__"):
            raise TypeError("rank takes one query string and a list of title strings, not query "
                            f"{query!r:.40} and titles {titles!r:.40}")
        titles = list(titles)
        if not titles:
            return []
        return ranking(titles, self.grade([(query, t) for t in titles]))


def _closed(feed):
    raise UserError("this Grader was closed (Grader.close()); make a new Grader(folder) to grade.")


def most_tokens(fits: Callable[[int], bool], up_to: int) -> int:
    """The largest n <= up_to with fits(n), where fits holds from 2 tokens up to some length and not past it."""
    if fits(up_to):
        return up_to
    low, high = 2, up_to  # fits(low), not fits(high)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low


def ranking(titles: Sequence[str], result: Grades | Scores) -> list[dict]:
    """`titles` ordered by their expected grade (or score) in `result`, best first (ties keep input order)."""
    order = np.argsort(-result.ordering, kind="stable")
    return [{"title": titles[i], "index": int(i), **result.ranked(i)} for i in order]
