# forge-ml — the two commands a newcomer needs:
#   make demo   train + evaluate the tiny model on the drone-router example (CPU, minutes)
#   make test   the test suite
# Both create .venv when missing and install what they need.

PYTHON   ?= python3
VENV     ?= .venv
VPY      := $(VENV)/bin/python
FORGE    := $(abspath $(VENV))/bin/forge-ml
STAMP    := $(VENV)/.forge-installed
DEMO_DIR ?= demo-project
PYTEST_ARGS ?=

.PHONY: install demo test test-fast bench lint format clean

$(VPY):
	$(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml scripts/install_torch.sh | $(VPY)
	scripts/install_torch.sh $(VPY)
	$(VPY) -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	@test -f $(DEMO_DIR)/forge.yaml || $(FORGE) init $(DEMO_DIR) --example drone-router
	$(FORGE) -p $(DEMO_DIR) train
	$(FORGE) -p $(DEMO_DIR) status

test: $(STAMP)
	$(VPY) -m pytest $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(VPY) -m pytest -m "not slow" $(PYTEST_ARGS)

bench: $(STAMP)
	$(VPY) bench/train_overhead.py
	$(VPY) bench/eval_batching.py
	$(VPY) bench/round_efficiency.py

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

clean:
	rm -rf $(DEMO_DIR) .pytest_cache .ruff_cache dist build
