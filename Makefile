# make run   : set up .venv, then optimize a seed model into out/
# make test  : set up .venv, then lint and run the tests (GPU tests are skipped without a GPU)
VENV ?= .venv
PY := $(VENV)/bin/python
SEED_MODEL ?= ../shared/problems/seed/gemm_sigmoid_scaling_residualadd.py
OUT ?= out

.PHONY: setup run test lint

setup:
	@VENV=$(VENV) bash scripts/setup.sh

run: setup
	$(PY) -m fuseforge optimize $(SEED_MODEL) -o $(OUT)

lint: setup
	@if $(PY) -m ruff --version >/dev/null 2>&1; then $(PY) -m ruff check fuseforge tests scripts; \
	else echo "lint: ruff is not installed here (offline machine): skipped"; fi

test: lint
	$(PY) -m pytest -q -n 2 --dist loadfile
