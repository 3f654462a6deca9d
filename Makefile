# Thin wrappers over the `course` command (graders/cli.py) and the stock tools.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
FAST ?= 0
DEVICE ?= auto
WORKERS ?= auto

.PHONY: setup data run test lab release clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

data: $(STAMP)
	$(BIN)/course data

setup: $(STAMP) data

run: setup
	$(BIN)/course run --device $(DEVICE) $(if $(filter 1,$(FAST)),--fast)

test: setup
	PATH="$(CURDIR)/$(BIN):$$PATH" MPLBACKEND=Agg $(BIN)/python -m pytest -n $(WORKERS)

lab: setup
	$(BIN)/jupyter lab notebooks/

release: setup
	$(BIN)/course release

clean:
	rm -rf build
