"""`pip install headcut-grader[openvino]` alone grades with an exported grader on both backends, and brings no torch,
transformers or accelerate.

The fresh venv installs grader/ from this checkout and its dependencies from the package index, pinned to the
versions this environment runs, so pip reuses its cache and the test checks the same onnxruntime the suite does.
"""
from __future__ import annotations

import csv
import importlib.metadata as metadata
import os
import shutil
import subprocess
import sys
import time
import tomllib

import pytest

from conftest import ROOT
from headcut.synthetic import synthetic_pairs
from headcut_grader.grader import Grader
from test_export import make_tiny_grader

FORBIDDEN = ("torch", "transformers", "accelerate")


def clean_env() -> dict:
    """No PYTHONPATH: the fresh venv must find everything in its own site-packages."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


def pinned(requirements: list[str]) -> list[str]:
    """name==version of every package installed here that `requirements` need, directly or not."""
    from packaging.requirements import Requirement

    seen, todo = {}, [Requirement(r) for r in requirements]
    while todo:
        requirement = todo.pop()
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        try:
            dist = metadata.distribution(requirement.name)
        except metadata.PackageNotFoundError:
            continue
        key = dist.metadata["Name"].lower().replace("_", "-")
        if key not in seen:
            seen[key] = dist.version
            todo += [Requirement(r) for r in dist.requires or []]
    return [f"{k}=={v}" for k, v in sorted(seen.items())]


def du(path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


@pytest.mark.slow
def test_runtime_installs_alone_and_grades_without_torch(tmp_path):
    folder = make_tiny_grader(tmp_path / "tiny", backend="auto")[0]  # an ONNX Runtime and an OpenVINO graph
    pairs = synthetic_pairs(40, seed=3)
    source = tmp_path / "pairs.tsv"
    with open(source, "w", newline="") as f:
        csv.writer(f, delimiter="\t").writerows([("query", "title"), *zip(pairs.queries, pairs.titles)])
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=clean_env(), timeout=300)
    python = venv / "bin" / "python"
    # built from a copy: setuptools leaves build/ and *.egg-info beside the sources it builds
    source_copy = shutil.copytree(ROOT / "grader", tmp_path / "grader-src", ignore=shutil.ignore_patterns(
        "build", "*.egg-info", "__pycache__"))
    constraints = tmp_path / "constraints.txt"
    project = tomllib.loads((ROOT / "grader" / "pyproject.toml").read_text())["project"]
    declared = project["dependencies"] + project["optional-dependencies"]["openvino"]
    constraints.write_text("\n".join(pinned(declared)) + "\n")
    install = subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                              "-c", str(constraints), f"{source_copy}[openvino]"],
                             capture_output=True, text=True, env=clean_env(), cwd=tmp_path, timeout=900)
    if install.returncode != 0 and any(s in install.stderr for s in ("NewConnectionError", "Temporary failure in name",
                                                                      "Network is unreachable")):
        pytest.skip(f"the package index is unreachable from here: {install.stderr.strip()[-200:]}")
    assert install.returncode == 0, install.stderr[-3000:]

    check = subprocess.run([str(python), "-c", "import importlib.util as u, headcut_grader; "
                            f"print([m for m in {FORBIDDEN!r} if u.find_spec(m)], headcut_grader.__file__)"],
                           capture_output=True, text=True, env=clean_env(), cwd=tmp_path, timeout=120)
    assert check.returncode == 0, check.stderr
    importable, where = check.stdout.split("] ")
    assert importable == "[" and where.startswith(str(venv)), check.stdout  # installed, not this checkout

    cold = {}
    for backend in ("onnxruntime", "openvino"):
        start = time.perf_counter()  # cold start: a new process, imports, loading the grader, grading, writing
        done = subprocess.run([str(venv / "bin" / "headcut-grader"), "grade", str(folder), str(source), "--out",
                               str(tmp_path / f"{backend}.tsv"), "--backend", backend], capture_output=True, text=True,
                              env=clean_env(), cwd=tmp_path, timeout=300)
        cold[backend] = time.perf_counter() - start
        assert done.returncode == 0, done.stderr
        assert backend in done.stdout, done.stdout  # the summary names the runtime that graded
        with open(tmp_path / f"{backend}.tsv", newline="") as f:
            grades = [int(row["grade"]) for row in csv.DictReader(f, delimiter="\t")]
        assert grades == Grader(folder, backend=backend).grade(pairs).grades.tolist()
    size = du(venv / "lib")
    openvino = du(next((venv / "lib").glob("python*/site-packages/openvino")))
    print(f"\nruntime venv site-packages with [openvino]: {size / 2**20:.0f} MiB "
          f"(openvino {openvino / 2**20:.0f} MiB); "
          "cold start (process to 40 graded pairs written): " + ", ".join(f"{b} {s:.2f} s" for b, s in cold.items()))
