# The two commands a fresh machine needs: `make demo` and `make test`.
PY ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test typecheck venv clean bench

$(STAMP): pyproject.toml
	@test -n "$(PY)" || { echo "need python3.11 on PATH (or set PY=...)"; exit 1; }
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch pinned to the CPU wheel first, so nothing pulls a CUDA build.
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[real,dev,ray]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/rolloutlab sim --controllers static:4,static:8,static:16,sagc,lagc --out runs/demo

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(MAKE) typecheck
	$(BIN)/python -m pytest -x -p no:cacheprovider

# mypy on rolloutlab.sim (config in pyproject.toml); sim/ is linked under its import name,
# which mypy cannot derive from setuptools' package-dir.
typecheck: $(STAMP)
	mkdir -p build/typecheck/rolloutlab
	touch build/typecheck/rolloutlab/__init__.py
	ln -sfn $(CURDIR)/sim build/typecheck/rolloutlab/sim
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python bench/sim_speed.py
	$(BIN)/python bench/fast_path.py
	$(BIN)/python bench/sweep_speed.py
	$(BIN)/python bench/paged_scaling.py

clean:
	rm -rf $(VENV) runs
