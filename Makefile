# bitextmine — developer and demo entry points. `make demo` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# The CPU wheel of torch; any torch in pyproject's range works, this one avoids a CUDA download.
TORCH  ?= torch==2.13.0
SHARED ?= ../shared
MODEL  ?= $(SHARED)/models/multilingual-e5-small-q4
BUCC   ?= $(SHARED)/data/bucc-like
WORK   ?= bitextmine-work/demo

.PHONY: install test demo bench bench-encode lint format clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet $(TORCH)
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

test: install
	$(BIN)/pytest -q

# The main job as far as it exists: encode both sides of the BUCC-format de-en dev split.
demo: install
	mkdir -p $(WORK)/input
	cut -f2 $(BUCC)/de-en/de-en.dev.de > $(WORK)/input/de.txt
	cut -f2 $(BUCC)/de-en/de-en.dev.en > $(WORK)/input/en.txt
	$(BIN)/bitextmine encode $(WORK)/input/de.txt --lang de --model $(MODEL) --workdir $(WORK)
	$(BIN)/bitextmine encode $(WORK)/input/en.txt --lang en --model $(MODEL) --workdir $(WORK)

bench: bench-encode

bench-encode: install
	$(BIN)/pip install --quiet -e '.[bench]'
	$(BIN)/python examples/benchmarks/bench_encode.py

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) bitextmine-work .pytest_cache .ruff_cache
