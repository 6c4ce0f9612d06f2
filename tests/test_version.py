"""`--version` on both commands, and the version every artifact records (old artifacts without it still load)."""
from __future__ import annotations

import json

from typer.testing import CliRunner

import headcut
import headcut_grader
from headcut.cli.main import app
from headcut.models import LoadedModel, load_model, save_model
from headcut_grader.cli.main import app as grader_app
from headcut_grader.grader import GRADER_FORMAT, read_record
from tests.conftest import tiny_model
from tests.test_export import tiny_tokenizer


def test_both_commands_print_their_version():
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output == f"headcut {headcut.__version__}\n"
    result = CliRunner().invoke(grader_app, ["--version"])
    assert result.exit_code == 0 and result.output == f"headcut-grader {headcut_grader.__version__}\n"
    assert headcut.__version__ == headcut_grader.__version__  # released together at one version


def test_an_artifact_records_the_version_and_one_without_it_still_loads(tmp_path):
    tokenizer = tiny_tokenizer(tmp_path / "tok")
    model = tiny_model("bert", vocab_size=len(tokenizer))
    old = {"grades": [1, 2, 3, 4, 5], "max_length": 32, "headcut_version": "0.0.1"}
    out = save_model(LoadedModel(model, tokenizer, old), tmp_path / "m")
    meta = json.loads((out / "headcut.json").read_text())
    assert meta["headcut_version"] == headcut.__version__  # the writer's version, not the source's
    del meta["headcut_version"]
    (out / "headcut.json").write_text(json.dumps(meta))
    assert load_model(out).meta["grades"] == [1, 2, 3, 4, 5]


def test_grader_json_with_or_without_a_version_is_read(tmp_path):
    record = {"format": GRADER_FORMAT, "grades": [1, 2, 3], "max_length": 16, "model_file": {"name": "model.onnx"},
              "precision": "fp32"}
    (tmp_path / "grader.json").write_text(json.dumps(record))
    assert "headcut_version" not in read_record(tmp_path)
    (tmp_path / "grader.json").write_text(json.dumps({**record, "headcut_version": "0.1.0"}))
    assert read_record(tmp_path)["headcut_version"] == "0.1.0"


def test_a_grader_of_a_newer_format_asks_for_a_newer_runtime(tmp_path):
    """Was: 'grader format 2 is not 1; re-export it', as if the folder were damaged, where this runtime is too old."""
    import pytest

    from headcut_grader.errors import UserError

    record = {"format": GRADER_FORMAT + 1, "headcut_version": "9.0.0", "grades": [1, 2, 3], "max_length": 16,
              "model_file": {"name": "model.onnx"}, "precision": "fp32"}
    (tmp_path / "grader.json").write_text(json.dumps(record))
    with pytest.raises(UserError) as refused:
        read_record(tmp_path)
    said = str(refused.value)
    assert said.startswith(f"{tmp_path / 'grader.json'}: grader format {GRADER_FORMAT + 1} (exported by headcut "
                           "9.0.0) is newer")
    assert "upgrade it (pip install -U headcut-grader)" in said and "re-export" not in said
    (tmp_path / "grader.json").write_text(json.dumps({**record, "format": "1"}))
    with pytest.raises(UserError, match='grader format "1" is not 1; re-export it'):
        read_record(tmp_path)
