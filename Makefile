# The two set-up commands of the README. Each installs what it needs into .venv first.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# CI-only pins (e.g. torch to the build on local disk); harmless elsewhere.
CONSTRAINTS := constraints/ci.txt

.PHONY: demo test lint install install-dev clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.installed: $(BIN)/python pyproject.toml $(CONSTRAINTS)
	$(BIN)/pip install -q -c $(CONSTRAINTS) -e ".[metaworld,pusht]"
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed
	$(BIN)/pip install -q -c $(CONSTRAINTS) -e ".[metaworld,pusht,dev]"
	touch $@

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev

# A real evaluation: MetaWorld MT10, its scripted experts, 10 episodes per task, on CPU,
# with a video of each task's first episode (outputs/demo/videos/).
demo: $(VENV)/.installed
	$(BIN)/rollbench eval --env.type=metaworld --env.task=mt10 --policy.type=expert \
		--eval.n_episodes=10 --eval.max_episodes_rendered=1 --output_dir=outputs/demo --resume=false

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy

# The whole test suite (what CI runs).
test: lint
	$(BIN)/pytest -q

clean:
	rm -rf $(VENV) outputs .pytest_cache .mypy_cache .ruff_cache
