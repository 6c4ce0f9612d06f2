"""One architecture table: every entry resolves on its tiny model, and no other module branches on the type."""
from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import pytest

from headcut.arch import ARCHITECTURES, SUPPORTED, encoder_layers, layer_parts, module_at
from tests.conftest import TINY, tiny_model

PACKAGE = Path(__file__).resolve().parents[1] / "headcut"
TABLE = PACKAGE / "arch" / "table.py"


def test_every_architecture_has_its_tiny_test_model():
    assert set(SUPPORTED) == set(TINY), "add a tiny config to tests/conftest.py TINY for each table entry"


@pytest.mark.parametrize("kind", SUPPORTED)
def test_every_path_of_an_entry_names_a_module_of_its_model(kind):
    arch, model = ARCHITECTURES[kind], tiny_model(kind)
    assert module_at(model.base_model, arch.layers) is encoder_layers(model)
    layer = encoder_layers(model)[0]
    for field in ("attention_block", "attention", "query", "key", "value", "out", "ffn_block", "ffn_in", "ffn_out",
                  "attention_norm", "ffn_norm"):
        if getattr(arch, field) is not None:  # None: fused q/k/v (in head_rows), a pre-norm FFN norm (pre_norm)
            assert module_at(layer, getattr(arch, field)) is not None, field
    assert arch.heads_attr is None or hasattr(module_at(layer, arch.attention), arch.heads_attr)
    part = layer_parts(model)[0]
    assert getattr(model.config, arch.intermediate) == part.num_neurons
    assert part.ffn_in.out_features == part.num_neurons * arch.ffn_in_blocks
    assert part.query is not None or arch.query is None and module_at(layer, arch.head_rows[0]).out_features == 3 * 32
    if arch.pre_norm:
        assert layer_parts(model)[-1].ffn_norm is module_at(model.base_model, arch.pre_norm[1])
        assert part.ffn_norm is module_at(encoder_layers(model)[1], arch.pre_norm[0])


def test_only_the_table_branches_on_the_model_type():
    branching = re.compile(r"model_type(\(model\))?\s*(==|!=)|[\"'](" + "|".join(map(re.escape, SUPPORTED)) + r")[\"']")
    offenders = [f"{path.relative_to(PACKAGE)}:{i}" for path in PACKAGE.rglob("*.py") if path != TABLE
                 for i, line in enumerate(path.read_text().splitlines(), 1) if branching.search(line)
                 and "optimize_model(" not in line and "FusionOptions(" not in line]  # onnxruntime's graph type
    assert offenders == []


def _module_paths() -> set[str]:
    """Every multi-part module path the table names (e.g. `output.dense`, `attention.self.query`)."""
    found = set()
    for arch in ARCHITECTURES.values():
        for f in fields(arch):
            value = getattr(arch, f.name)
            values = value if isinstance(value, tuple) else (value,)
            found.update(v for v in values if isinstance(v, str) and "." in v)
    return found


def test_no_other_module_repeats_a_module_path_of_the_table():
    # Spelled with dots, ONNX scope slashes or regex-escaped dots, so a copied node-name pattern counts too.
    # One-word paths ("attention", "output", "ffn") are left out: they are ordinary words in prose.
    sep = r"(?:\\{0,2}\.|/)"
    patterns = {p: re.compile(r"(?<!\w)" + sep.join(map(re.escape, p.split("."))) + r"(?!\w)")
                for p in _module_paths()}
    offenders = [f"{path.relative_to(PACKAGE)}:{i} repeats {p}" for path in PACKAGE.rglob("*.py")
                 if path != TABLE for i, line in enumerate(path.read_text().splitlines(), 1)
                 for p, rx in patterns.items() if rx.search(line)]
    assert offenders == []
