# bitextmine — developer and demo entry points. `make demo` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# torch goes in first, so that pip does not take PyPI's build, on Linux the CUDA one (2.7 GB of wheels for
# torch 2.13.0 against 0.19 GB): where nvidia-smi lists no GPU, the CPU wheel from PyTorch's index, TORCH_INDEX
# (empty: pip's own indexes), and from pip's own, saying so, where that index cannot be reached. Any torch in
# pyproject's range works.
TORCH       ?= torch==2.13.0
ifndef TORCH_INDEX  # asked once; a GPU is a line "GPU 0: ..." (with no driver, nvidia-smi says so on stdout)
TORCH_INDEX := $(if $(shell nvidia-smi -L 2>/dev/null | grep '^GPU '),,https://download.pytorch.org/whl/cpu)
endif
REACHABLE   = $(BIN)/python -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=15)'
NO_TORCH_INDEX = make install: no $(TORCH) from $(TORCH_INDEX) (unreachable, or none for this Python): \
  installing it from pip's own indexes, where PyPI's Linux build brings CUDA (2.7 GB)
SHARED ?= ../shared
MODEL  ?= $(SHARED)/models/multilingual-e5-small-q4
BUCC   ?= $(SHARED)/data/bucc-like
WORK   ?= bitextmine-work/demo

.PHONY: install install-package test test-fast test-slurm demo bench bench-encode bench-mine bench-train bench-train-ablation bench-train-hard-negatives bench-train-margin bench-train-lr bench-train-weak-languages bench-analysis bench-lid bench-filters bench-thresholds bench-auto-pairs bench-exact bench-scale-real-encode bench-scale-real gpu-check-data gpu-check-dry-run lint format clean

# install: the package and the `dev` extra (tests, lint); install-package: the package alone, for the demo.
install: $(VENV)/.installed
install-package: $(VENV)/.package

$(VENV)/.package: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	@if [ -n '$(TORCH_INDEX)' ] && $(REACHABLE) '$(TORCH_INDEX)/' 2>/dev/null; then \
	  echo "installing $(TORCH) from $(TORCH_INDEX)"; \
	  $(BIN)/pip install --quiet --index-url '$(TORCH_INDEX)' '$(TORCH)' && exit 0; \
	  fi; [ -z '$(TORCH_INDEX)' ] || echo "$(NO_TORCH_INDEX)" >&2; $(BIN)/pip install --quiet '$(TORCH)'
	$(BIN)/pip install --quiet -e .
	touch $@

$(VENV)/.installed: $(VENV)/.package
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

test: install
	$(BIN)/pytest -q

# The unit tests only (no CLI run end to end, no subprocess, no real model, no test of seconds: all marked
# `integration`): the fast loop, under a minute on 2 cores.
test-fast: install
	$(BIN)/pytest -q -m "not integration"

# The Slurm launcher on a real one-node cluster (tests/launch/test_slurm_real.py, ~3 min): .ci/slurm-one-node.sh
# installs slurm-wlm and munge (root, apt-get), starts the daemons and stops them afterwards. Skipped, saying why,
# where Slurm cannot be installed or run; a failing test fails.
test-slurm: install
	.ci/slurm-one-node.sh run env BITEXTMINE_REQUIRE_SLURM=1 $(BIN)/pytest -q -m slurm; status=$$?; \
	if [ $$status = 77 ]; then echo "make test-slurm: SKIPPED: no Slurm cluster can be set up here (why: above)"; \
	status=0; fi; exit $$status

# The main job: encode both sides of the BUCC-format de-en dev split as plain corpora, index them,
# learn the threshold on that split (stored in $(WORK)/thresholds.json, never in the model dir),
# mine with it, and score the mined pairs against the gold pairs.
demo: install-package
	mkdir -p $(WORK)/input
	cut -f2 $(BUCC)/de-en/de-en.dev.de > $(WORK)/input/de.txt
	cut -f2 $(BUCC)/de-en/de-en.dev.en > $(WORK)/input/en.txt
	$(BIN)/bitextmine encode $(WORK)/input/de.txt --lang de --model $(MODEL) --workdir $(WORK)
	$(BIN)/bitextmine encode $(WORK)/input/en.txt --lang en --model $(MODEL) --workdir $(WORK)
	$(BIN)/bitextmine index de --workdir $(WORK)
	$(BIN)/bitextmine index en --workdir $(WORK)
	$(BIN)/bitextmine calibrate --bucc $(BUCC)/de-en --pair de-en --split dev --model $(MODEL) --workdir $(WORK)
	$(BIN)/bitextmine mine de en --threshold auto --model $(MODEL) --workdir $(WORK)
	$(BIN)/bitextmine eval bucc --bucc $(BUCC)/de-en --pair de-en --split dev --mined $(WORK)/mined/de-en.tsv.zst

# Benchmarks: what each answers, what it needs and how long it takes: examples/benchmarks/README.md.
bench: bench-encode bench-mine bench-filters

# Encoding throughput (packed, padded, sentence-transformers; fp32, bf16, int8) and each precision's dev F1
# (~25 min on 2 cores).
bench-encode: install
	$(BIN)/pip install --quiet -e '.[bench]'
	$(BIN)/python examples/benchmarks/bench_encode.py

# Mining: BUCC-format dev F1 per margin/strategy, exact mining vs a brute-force reference (~12 min on 2
# cores the first time, ~2 min once sentence vectors are cached in $(WORK)/cache).
bench-mine: install
	$(BIN)/python examples/benchmarks/bench_mine.py

# Word-level alignment per layer (eval words, de-en and zh-en) and token matching (eval tokens) for the shared
# model, and for TRAINED=DIR (a `bitextmine train` output) when given; ~30 min per model on 2 cores.
TRAINED ?=
bench-analysis: install
	$(BIN)/python examples/benchmarks/bench_analysis.py $(if $(TRAINED),--trained $(TRAINED))

# Language identification: py3langid against lingua (high and low accuracy) on Tatoeba and FLORES lines of 21
# languages and noisy-bucc's x sides: accuracy, lines/s, size, and what each confidence floor keeps (~3 min).
bench-lid: install
	$(BIN)/pip install --quiet 'lingua-language-detector>=2.1'
	$(BIN)/python examples/benchmarks/bench_lid.py

# Pair filters on noisy-bucc dev (de/fr/ru/zh-en): F1 with no filter, each filter alone and --filters web, threshold
# calibrated on the clean dev split; what each removes, its throughput (~15 min on 2 cores, ~2 min cached).
bench-filters: install
	$(BIN)/python examples/benchmarks/bench_filters.py

# Threshold transfer: each bucc-like dev split cut in two halves by its gold pairs, 20 times; what a threshold
# learned on one half loses on the other, per rule (best F1, bagged, joint, precision targets); ~8 min a model with
# its cache. THRESHOLD_MODEL=DIR THRESHOLD_LABEL=NAME measures a trained model.
THRESHOLD_MODEL ?= $(SHARED)/models/multilingual-e5-small-q4
THRESHOLD_LABEL ?= base
bench-thresholds: install
	$(BIN)/python examples/benchmarks/bench_thresholds.py --label "$(THRESHOLD_LABEL)" --model "$(THRESHOLD_MODEL)"

# `mine --threshold auto` learned from FLORES dev pairs alone on the BUCC-size dev splits of de, fr, ru and
# zh to English, against the FLORES margin and the split's oracle (~12 min, ~1 min once encoded).
bench-auto-pairs: install
	$(BIN)/python examples/benchmarks/bench_auto_pairs.py

# Training objectives: each row trains for TRAIN_MINUTES then evaluates (~3 min); rows accumulate in
# examples/benchmarks/results/bench_train.{json,md}, so a subset can be run at a time: make bench-train TRAIN_ROWS=mexma
# Each of TRAIN_ROWS trained for TRAIN_MINUTES once per TRAIN_SEEDS seed (~13 min a run; base and speed: once).
# Resumable: a rerun keeps the runs recorded and runs the others.
TRAIN_ROWS ?= base speed contrastive contrastive+mexma mexma contrastive+rtl contrastive+xtr scratch-ems
TRAIN_MINUTES ?= 10
TRAIN_SEEDS ?= 0,1,2
bench-train: install
	for row in $(TRAIN_ROWS); do $(BIN)/python examples/benchmarks/bench_train.py --only $$row \
	  --minutes $(TRAIN_MINUTES) --seeds $(TRAIN_SEEDS) --resume || exit 1; done

# contrastive + MEXMA with and without token gradients, ABLATION_STEPS steps each, once per seed (~11 min a run)
ABLATION_STEPS ?= 30
ABLATION_SEEDS ?= 0,1,2
bench-train-ablation: install
	$(BIN)/python examples/benchmarks/bench_train.py --ablation mexma --steps $(ABLATION_STEPS) --seeds $(ABLATION_SEEDS)

# The `mining` recipe with and without `train --hard-negatives HARD_NEGATIVES`: at HARD_NEGATIVE_STEPS steps (the
# recipe's 10 minutes) and at 10 and 30 minutes, once per seed (18 runs: ~7-9 h on 2 cores; a quiet machine,
# the minutes are wall clock). Resumable: a rerun keeps the runs recorded and runs the others.
HARD_NEGATIVES      ?= 3
HARD_NEGATIVE_STEPS ?= 122
HARD_NEGATIVE_SEEDS ?= 0,1,2
bench-train-hard-negatives: install
	$(BIN)/python examples/benchmarks/bench_train.py --ablation hard-negatives --hard-negatives $(HARD_NEGATIVES) \
	  --steps $(HARD_NEGATIVE_STEPS) --minutes 10,30 --seeds $(HARD_NEGATIVE_SEEDS) --resume

# The `mining` recipe with and without `--margin 0.3` at 30 minutes, once per seed (~37 min a run on 2 quiet cores);
# the control runs are bench-train-hard-negatives' 30-minute `contrastive` runs, run here only where absent
MARGIN_SEEDS ?= 0,1,2
bench-train-margin: install
	$(BIN)/python examples/benchmarks/bench_train.py --ablation margin --seeds $(MARGIN_SEEDS) --resume

# The same with `--lr 5e-5` in place of the margin (~37 min a run), sharing the same control runs
LR_SEEDS ?= 0,1,2
bench-train-lr: install
	$(BIN)/python examples/benchmarks/bench_train.py --ablation lr --seeds $(LR_SEEDS) --resume

# The `weak-languages` recipe over seeds 0-2, with and without distillation (train_weak_languages.sh;
# ~20 min a run on 2 cores, one at a time; WEAK_JOBS=6 on a GPU). Rows: results/weak_languages.{json,md}.
WEAK_JOBS ?= 1
bench-train-weak-languages: install
	DATA=$(SHARED)/data MODEL=$(MODEL) OUT=bitextmine-work/weak-languages JOBS=$(WEAK_JOBS) PY=$(BIN)/python \
	  examples/benchmarks/train_weak_languages.sh

# Exact mining, whole process against whole process: LASER's mine_bitexts.py logic (FAISS IndexFlatIP,
# ratio margin, k=4) against bitextmine.mine_arrays on the first EXACT_SIZE vectors a side of the scale
# encoding (bench-scale-real-encode), in turn EXACT_RUNS times, and whether their pairs are identical, in
# all and at or above EXACT_THRESHOLD (calibrate's best-F1 threshold on the de-en dev split for the shared
# model, which bench-scale-real records in SCALE_WORK/dev-calibration.json).
EXACT_SIZE      ?= 100000
EXACT_RUNS      ?= 2
EXACT_THRESHOLD ?= 1.0311367411803607
EXACT_DIR       ?= bitextmine-work/exact
bench-exact: install
	SCALE_WORK=$(SCALE_WORK) $(BIN)/python examples/benchmarks/bench_exact.py vectors --size $(EXACT_SIZE) --out $(EXACT_DIR)
	$(BIN)/python examples/benchmarks/bench_exact.py time $(EXACT_DIR) --runs $(EXACT_RUNS) --threshold $(EXACT_THRESHOLD)

# Real text at scale (shared/data/scale/de-en): encode both sides once in tier order (hours on 2 cores; a
# rerun resumes), then index, mine and score at SCALE_SIZES sentences a side, each at SCALE_DENSITIES gold
# densities ('set': the set's own; 0.01: one side of the other gold pairs dropped). SCALE_WORK keeps it all.
SCALE_WORK  ?= bitextmine-work/scale
SCALE_SIZES ?= 100000,300000,1050592
SCALE_DENSITIES ?= set,0.01,0.002
bench-scale-real-encode: install
	SCALE_WORK=$(SCALE_WORK) $(BIN)/python examples/benchmarks/bench_scale.py encode

bench-scale-real: install
	SCALE_WORK=$(SCALE_WORK) $(BIN)/python examples/benchmarks/bench_scale.py run --sizes $(SCALE_SIZES) \
	  --densities $(SCALE_DENSITIES)

# What examples/benchmarks/gpu_check.sh needs on a GPU machine without network: .whl/ (faiss-cpu,
# zstandard, py3langid, xformers for Python 3.12) and .gpu-data/ (the shared model's config and tokenizer,
# 200k scale sentences). Then, there: bash examples/benchmarks/gpu_check.sh (8 minutes on one H100).
GPU_WHEELS ?= faiss-cpu==1.15.1 zstandard==0.25.0 py3langid==0.4.0 xformers==0.0.35
gpu-check-data: install
	$(PYTHON) -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
	  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
	  --platform manylinux2014_x86_64 -d .whl $(GPU_WHEELS)
	mkdir -p .gpu-data/model-shape
	cd $(MODEL) && cp -r 1_Pooling config.json config_sentence_transformers.json modules.json \
	  sentence_bert_config.json special_tokens_map.json tokenizer.json tokenizer_config.json \
	  $(CURDIR)/.gpu-data/model-shape/
	chmod -R u+w .gpu-data
	for lang in de en; do zstd -dc $(SHARED)/data/scale/de-en/de-en.scale.$$lang.zst | head -100000 | cut -f2; done \
	  | zstd -19 -q -f -o .gpu-data/sentences.txt.zst

# The GPU check at toy sizes on the CPU (what the test suite runs too), ~1 min.
gpu-check-dry-run: install
	cd examples/benchmarks && ../../$(BIN)/python gpu_check.py --model-shape $(MODEL) \
	  --sentences $(SHARED)/data/tatoeba/tatoeba.deu-eng.deu --out /tmp/gpu-check-dry-run --dry-run

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) bitextmine-work .pytest_cache .ruff_cache
