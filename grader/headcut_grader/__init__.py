"""headcut-grader: run graders exported by `headcut export` with ONNX Runtime, tokenizers and numpy (no torch).

    from headcut_grader import Grader
    Grader("runs/grader", threads=2).grade([("cordless drill", "Ridgeline 20-volt cordless drill")])
"""
from headcut_grader.errors import UserError
from headcut_grader.grader import GRADER_FORMAT, Grader, Grades

__all__ = ["Grader", "Grades", "UserError", "GRADER_FORMAT"]
__version__ = "0.1.0"
