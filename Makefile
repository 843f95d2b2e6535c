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

.PHONY: install test test-fast demo bench bench-encode bench-mine bench-train bench-scale bench-list-scan bench-ivf-balance bench-scan-budget bench-coarse-search bench-analysis lint format clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet $(TORCH)
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

test: install
	$(BIN)/pytest -q

# The unit tests only (no CLI run end to end, no subprocess, no real model): the fast loop, under a minute.
test-fast: install
	$(BIN)/pytest -q -m "not integration"

# The main job: encode both sides of the BUCC-format de-en dev split as plain corpora, index them,
# learn the threshold on that split (into a copy of the model: calibrate writes bitextmine.json),
# mine with it, and score the mined pairs against the gold pairs.
demo: install
	mkdir -p $(WORK)/input
	cut -f2 $(BUCC)/de-en/de-en.dev.de > $(WORK)/input/de.txt
	cut -f2 $(BUCC)/de-en/de-en.dev.en > $(WORK)/input/en.txt
	test -f $(WORK)/model/config.json || { cp -r $(MODEL) $(WORK)/model && chmod -R u+w $(WORK)/model; }
	$(BIN)/bitextmine encode $(WORK)/input/de.txt --lang de --model $(WORK)/model --workdir $(WORK)
	$(BIN)/bitextmine encode $(WORK)/input/en.txt --lang en --model $(WORK)/model --workdir $(WORK)
	$(BIN)/bitextmine index de --workdir $(WORK)
	$(BIN)/bitextmine index en --workdir $(WORK)
	$(BIN)/bitextmine calibrate --bucc $(BUCC)/de-en --pair de-en --split dev --model $(WORK)/model --workdir $(WORK)
	$(BIN)/bitextmine mine de en --threshold auto --model $(WORK)/model --workdir $(WORK)
	$(BIN)/bitextmine eval bucc --bucc $(BUCC)/de-en --pair de-en --split dev --mined $(WORK)/mined/de-en.tsv.zst

bench: bench-encode bench-mine

bench-encode: install
	$(BIN)/pip install --quiet -e '.[bench]'
	$(BIN)/python examples/benchmarks/bench_encode.py

# Mining: BUCC-format dev F1 per margin/strategy, FAISS index choice at 200k/1M vectors, exact mining vs
# a brute-force reference (~26 min on 2 cores the first time, ~16 min once sentence vectors are cached in
# $(WORK)/cache).
bench-mine: install
	$(BIN)/python examples/benchmarks/bench_mine.py

# Mining at scale: index + mine at 100k, 300k, 1M and 3M vectors per side (real demo embeddings repeated
# with noise; needs `make demo` first): wall time, peak RSS, recall. About an hour on 2 cores.
bench-scale: install
	$(BIN)/python examples/benchmarks/bench_scale.py

# The IVF-Flat list scan's time per scanned vector by list count and query block, on balanced synthetic
# lists (~4.6 GB of lists at the largest count; a few minutes).
bench-list-scan: install
	$(BIN)/python examples/benchmarks/bench_list_scan.py

# IVF list balance of bench_scale's vectors by copies per sentence and list count, copying the embeddings
# of the workspace BASES (default: the demo's; needs `make demo` first; ~5 min).
BASES ?= $(WORK)
bench-ivf-balance: install
	$(BIN)/python examples/benchmarks/bench_ivf_balance.py --bases $(BASES)

# Recall@4 against the vectors a query scans, by nprobe and by a cap on the scan (mine --max-codes), and the
# search time a query with all sizes taking turns, in the workspaces that `bench_scale.py --list-size 366
# --keep` left (~11 min at 300k, 1M and 3M; the timing holds the three indexes at once, ~7 GB at 3M).
bench-scan-budget: install
	$(BIN)/python examples/benchmarks/bench_scan_budget.py

# The probe search of the same workspaces' HNSW-quantized indexes by efSearch, against a flat (exact)
# search of the centroids: time a query and the share of the nearest lists found (~2 min).
bench-coarse-search: install
	$(BIN)/python examples/benchmarks/bench_coarse_search.py

# Word-level alignment per layer (eval words, de-en and zh-en) and token matching (eval tokens) for the shared
# model, and for TRAINED=DIR (a `bitextmine train` output) when given; ~30 min per model on 2 cores.
TRAINED ?=
bench-analysis: install
	$(BIN)/python examples/benchmarks/bench_analysis.py $(if $(TRAINED),--trained $(TRAINED))

# Training objectives: each row trains for TRAIN_MINUTES then evaluates (~3 min); rows accumulate in
# examples/benchmarks/results/bench_train.{json,md}, so a subset can be run at a time: make bench-train TRAIN_ROWS=mexma
TRAIN_ROWS ?= base speed contrastive contrastive+mexma mexma contrastive+rtl contrastive+xtr scratch-ems
TRAIN_MINUTES ?= 10
bench-train: install
	for row in $(TRAIN_ROWS); do $(BIN)/python examples/benchmarks/bench_train.py --only $$row --minutes $(TRAIN_MINUTES) || exit 1; done

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) bitextmine-work .pytest_cache .ruff_cache
