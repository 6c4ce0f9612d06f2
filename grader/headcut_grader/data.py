"""The names users import to read query-title-grade pairs: the data model (`pairs`), the readers (`readers`),
the rules for a cell (`validation`) and resumable line reading (`lines`), gathered in one place.

Labels are class indices 0..G-1; grades are what people say (1..5 by default): grade = grades[label].
A one-score model (task `score`) reads a numeric column into `scores` instead (Home Depot: `score`, 1.0-3.0).
"""
from headcut_grader.lines import MAX_LINE_BYTES, Position, prefix_sha256
from headcut_grader.pairs import DEFAULT_GRADES, Pairs, fingerprint, query_groups
from headcut_grader.readers import (CHUNK_CHARS, FILE_KEYS, FORMATS, PRESETS, Chunk, Preset, file_keys, guess_format,
                                    iter_pairs, read_pairs)
from headcut_grader.tasks import TASKS
from headcut_grader.validation import FIX_ROW, MAX_TEXT_CHARS, check_regular, parse_label_map, text_problem

__all__ = ["CHUNK_CHARS", "DEFAULT_GRADES", "FILE_KEYS", "FIX_ROW", "FORMATS", "MAX_LINE_BYTES", "MAX_TEXT_CHARS",
           "PRESETS", "TASKS", "Chunk", "Pairs", "Position", "Preset", "check_regular", "file_keys", "fingerprint",
           "guess_format", "iter_pairs", "parse_label_map", "prefix_sha256", "query_groups", "read_pairs",
           "text_problem"]
