"""The training loop: model and objectives, AdamW with warm-up and decay, accumulation, clipping, bf16
autocast, budgets, periodic evaluation, checkpoints with exact resume, and the final model dir."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bitextmine.devices import pick_device
from bitextmine.encoder.loading import load_model, lowercase_inputs
from bitextmine.encoder.precision import bf16_is_native
from bitextmine.encoder.settings import BITEXTMINE_CONFIG, EncoderSettings, resolve_settings
from bitextmine.encoder.st_files import st_modules
from bitextmine.errors import BitextmineError
from bitextmine.files import WriteError, atomic_open, remove_temporaries, write_json
from bitextmine.progress import Progress
from bitextmine.train.checkpoint import (
    checkpoint_dir,
    latest_checkpoint,
    load_checkpoint,
    random_state,
    restore_random_state,
    save_checkpoint,
)
from bitextmine.train.data import (
    ENGLISH,
    PairBatch,
    data_files,
    distinct_pairs,
    find_sources,
    interleave,
    pair_stream,
    read_excluded,
    token_batches,
)
from bitextmine.train.evaluation import EvalSets, evaluate_model, sentence_encoder
from bitextmine.train.hard_negatives import (
    BatchNegatives,
    HardNegativeMiner,
    HardNegativeSettings,
    pool_size,
)
from bitextmine.train.mined import ScoreUse
from bitextmine.train.model import TrainContext, TrainEncoder, split_side
from bitextmine.train.objectives.base import HardNegatives, ObjectiveInputs, ObjectiveSetup
from bitextmine.train.objectives.distill import TEACHER_DIR, TeacherVectors, load_teacher
from bitextmine.train.objectives.registry import build_objectives, check_capabilities
from bitextmine.train.objectives.settings import ObjectiveOptions
from bitextmine.workspace.locks import file_lock

LOG_FILE = "train_log.jsonl"
LOCK_FILE = ".train.lock"  # held for the whole run: a second run into the same OUT is refused
VOCABULARY_DIR = "vocabulary"  # --from-scratch: the SentencePiece model trained on the data
MIN_DISTINCT_PAIRS = 2  # fewer, and no pair has a negative in its batch


@dataclass
class TrainConfig:
    data: list[str]
    out: Path
    objectives: dict[str, float]  # name -> weight
    base: str | None = None
    from_scratch: bool = False
    exclude: list[str] = field(default_factory=list)
    min_score: float | None = None  # mined files: keep pairs scoring at least this
    weight_by_score: bool = False  # mined files: weight pairs by score (train/mined.py)
    max_steps: int | None = None
    max_minutes: float | None = None
    lr: float = 2e-5
    warmup_steps: int = 100
    weight_decay: float = 0.01
    grad_accum: int = 1
    clip: float = 1.0
    bf16: str = "auto"  # auto, on, off
    seed: int = 0
    max_tokens: int = 8192
    max_pairs: int = 256
    max_length: int = 128
    shuffle_buffer: int = 50_000
    checkpoint_every: int = 200
    keep_checkpoints: int = 2
    eval_every: int = 0  # 0: only at the end
    eval_sets: EvalSets = field(default_factory=EvalSets)
    packed: bool = True
    device: str = "auto"
    # the objectives' settings (a mapping of option names, {"temperature": 0.1}, is made into one)
    options: ObjectiveOptions = field(default_factory=ObjectiveOptions)
    scratch: dict[str, int] = field(default_factory=dict)  # vocab_size, layers, hidden, heads
    hard_negatives: int = 0  # mined negatives per pair for the contrastive loss (0: none)
    hard_negative_refresh: int = 100  # steps between minings
    hard_negative_pool: int = 20_000  # pairs mined at once: the next ones of the stream

    def __post_init__(self) -> None:
        if not self.objectives:
            raise BitextmineError(
                "no objectives: pass --objectives, e.g. contrastive or contrastive=1,mexma=1"
            )
        if (self.base is None) == (not self.from_scratch):
            raise BitextmineError("pass exactly one of --base MODEL and --from-scratch")
        if self.max_steps is None and self.max_minutes is None:
            raise BitextmineError("no budget: pass --max-steps N and/or --max-minutes M")
        self.options = ObjectiveOptions(self.options)
        check_capabilities(self.objectives, self.weight_by_score, bool(self.hard_negatives))
        self.options.check(self)
        if self.hard_negatives and self.hard_negative_pool < self.max_pairs:
            raise BitextmineError(
                f"--negative-pool {self.hard_negative_pool} is smaller than a batch "
                f"(--max-pairs {self.max_pairs}): a batch's pairs must fit in the pool"
            )

    @property
    def hard_negative_settings(self) -> HardNegativeSettings | None:
        if not self.hard_negatives:
            return None
        return HardNegativeSettings(self.hard_negatives, self.hard_negative_refresh, self.hard_negative_pool)

    @property
    def teacher(self) -> str | None:
        """The distill objective's teacher model: --teacher, else the base model."""
        return self.options.of("distill").teacher or self.base if "distill" in self.objectives else None

    def resume_key(self) -> dict[str, Any]:
        """What must match for a checkpoint to be continued (budgets and evaluation may change)."""
        keep = ("data", "objectives", "base", "from_scratch", "exclude", "lr", "warmup_steps", "weight_decay")
        keep += ("grad_accum", "seed", "max_tokens", "max_pairs", "max_length", "shuffle_buffer", "options")
        keep += ("min_score", "weight_by_score")
        key = {k: getattr(self, k) for k in keep} | {"options": dict(self.options)}
        if self.hard_negative_settings:  # absent without, so that checkpoints from before it still resume
            key["hard_negatives"] = self.hard_negative_settings.as_dict()
        return json.loads(json.dumps(key, default=str))


@dataclass
class TrainSummary:
    steps: int
    pairs: int
    tokens: int
    seconds: float
    resumed_from: int
    final_loss: float
    evaluation: dict[str, float]
    out: Path


class Reporter:
    """What the loop tells the outside (the CLI draws a live table); the default says nothing."""

    def started(self, config: TrainConfig, resumed_from: int, languages: list[str]) -> None: ...
    def step(self, record: dict[str, Any]) -> None: ...
    def evaluated(self, step: int, results: dict[str, float]) -> None: ...
    def checkpoint(self, path: Path) -> None: ...
    def note(self, message: str) -> None: ...
    def warning(self, message: str) -> None: ...

    def progress(self) -> Progress:
        """Where work outside a step (mining hard negatives) reports its progress."""
        return Progress()


@dataclass
class _Run:
    config: TrainConfig
    encoder: TrainEncoder
    objectives: nn.ModuleDict
    tokenizer: Any
    settings: EncoderSettings
    model_dir: Path
    languages: list[str]
    ctx: TrainContext
    optimizer: torch.optim.Optimizer
    schedule: torch.optim.lr_scheduler.LambdaLR
    autocast: bool
    tokenize: Callable[[list[str]], list[list[int]]]
    teacher: TeacherVectors | None = None  # distill's teacher, whose new vectors are saved at checkpoints
    miner: HardNegativeMiner | None = None  # --hard-negatives
    step: int = 0
    pairs_drawn: int = 0
    pairs: int = 0
    tokens: int = 0


def train(config: TrainConfig, reporter: Reporter | None = None) -> TrainSummary:
    """Train into `config.out`, which this run locks: another run into it is refused at once."""
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    with file_lock(out / LOCK_FILE, exclusive=True, what=f"{out} (another train run is writing it)"):
        for folder in (out, checkpoint_dir(out), out / VOCABULARY_DIR, *(out / TEACHER_DIR).glob("*/")):
            remove_temporaries(folder)  # of killed runs: no other run writes here while we hold the lock
        return _train(config, reporter or Reporter())


def _train(config: TrainConfig, reporter: Reporter) -> TrainSummary:
    started = time.perf_counter()
    torch.manual_seed(config.seed)
    sources = find_sources(config.data, ScoreUse(config.min_score, config.weight_by_score), reporter.note)
    run = _build_run(config, sources, reporter)
    resumed_from = _resume(run)
    reporter.started(config, resumed_from, run.languages)
    excluded = read_excluded(config.exclude, warn=reporter.warning)
    _check_distinct_pairs(run, sources, excluded, reporter)
    skipped = [0]
    stream = pair_stream(
        sources,
        config.seed,
        buffer=config.shuffle_buffer,
        excluded=excluded,
        on_excluded=lambda _pair: skipped.__setitem__(0, skipped[0] + 1),
        warn=reporter.warning,
    )
    if config.hard_negative_settings:
        run.miner = _hard_negative_miner(run, config.hard_negative_settings, sources, excluded, reporter)
    batches = token_batches(
        stream, run.tokenize, max_tokens=config.max_tokens, max_pairs=config.max_pairs, skip=run.pairs_drawn
    )
    loss = float("nan")
    evaluation: dict[str, float] = {}
    while not _budget_spent(run, started):
        loss = _optimizer_step(run, batches, reporter, started)
        if config.checkpoint_every and run.step % config.checkpoint_every == 0:
            _save_checkpoint(run, reporter)
        if config.eval_every and run.step % config.eval_every == 0:
            evaluation = _evaluate(run, reporter)
    if run.step > resumed_from:
        _save_checkpoint(run, reporter)
    if not evaluation or (config.eval_every and run.step % config.eval_every):
        evaluation = _evaluate(run, reporter)
    save_model(run, evaluation, excluded_pairs=skipped[0])
    return TrainSummary(
        run.step,
        run.pairs,
        run.tokens,
        time.perf_counter() - started,
        resumed_from,
        loss,
        evaluation,
        config.out,
    )


def _build_run(config: TrainConfig, sources, reporter: Reporter) -> _Run:
    device = pick_device(config.device)
    model, tokenizer, settings, model_dir = _starting_model(config, sources, device, reporter.warning)
    model.train()
    languages = sorted({s.lang for s in sources} | {ENGLISH})
    encoder = TrainEncoder(model, pooling=settings.pooling, packed=config.packed)
    special = frozenset(tokenizer.all_special_ids)
    generator = torch.Generator().manual_seed(config.seed)
    ctx = TrainContext(encoder, tokenizer.mask_token_id, special, len(tokenizer), languages, generator)
    teacher = load_teacher(config.teacher, device, Path(config.out) / TEACHER_DIR) if config.teacher else None
    setup = ObjectiveSetup(encoder, ctx, teacher, settings.normalize)
    objectives = build_objectives(config.objectives, setup, config.options).to(device)
    params = [p for p in [*encoder.parameters(), *objectives.parameters()] if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, _lr_factor(config))
    autocast = config.bf16 == "on" or (config.bf16 == "auto" and bf16_is_native(device))
    return _Run(
        config,
        encoder,
        objectives,
        tokenizer,
        settings,
        model_dir,
        languages,
        ctx,
        optimizer,
        schedule,
        autocast,
        _tokenizer_fn(tokenizer, settings.prefix, config.max_length),
        teacher,
    )


def _check_distinct_pairs(run: _Run, sources, excluded: set[bytes], reporter: Reporter) -> None:
    """Refuse data of fewer than MIN_DISTINCT_PAIRS distinct pairs; warn when one batch could hold every
    distinct pair, so that each batch repeats them (their copies are no negatives: objectives/contrastive)."""
    config = run.config
    # what the files have wrong, the pair stream reports
    pairs = distinct_pairs(sources, excluded, config.max_pairs, warn=lambda _message: None)
    if not pairs:
        return  # the pair stream says that there are none, and why
    if len(pairs) < MIN_DISTINCT_PAIRS:
        raise BitextmineError(
            f"{data_files(sources)}: {len(pairs)} distinct pair (after --exclude); train needs at least "
            f"{MIN_DISTINCT_PAIRS}: a pair's negatives are the other pairs of its batch"
        )
    tokens = sum(map(len, run.tokenize([p.src for p in pairs] + [p.tgt for p in pairs])))
    if len(pairs) < config.max_pairs and tokens <= config.max_tokens:
        reporter.warning(
            f"{data_files(sources)}: only {len(pairs)} distinct pairs, fewer than one batch takes "
            f"(--max-pairs {config.max_pairs}, --max-tokens {config.max_tokens}): every batch repeats them"
        )


def _hard_negative_miner(
    run: _Run, settings: HardNegativeSettings, sources, excluded: set[bytes], reporter: Reporter
) -> HardNegativeMiner:
    """A miner reading its own copy of the batches' pair stream (whose problems the batches report), its
    pool no larger than the distinct pairs; the first mining's encoding is shown as `reporter.progress`."""
    config = run.config
    pool = pool_size(settings.pool, interleave(sources, excluded, warn=lambda _message: None))
    if pool < settings.pool:
        reporter.note(f"hard negatives: a pool of {pool:,} pairs, every distinct training pair")
        settings = replace(settings, pool=pool)
    pairs = pair_stream(
        sources, config.seed, buffer=config.shuffle_buffer, excluded=excluded, warn=lambda _message: None
    )
    encoder = sentence_encoder(run.encoder.model, run.tokenizer, run.settings, run.model_dir)
    device = "cuda" if encoder.device.type == "cuda" else "cpu"

    def encode(texts: list[str]):
        # under the training step's bf16 autocast where it has one: faster than fp32, with vectors all but
        # equal to its (examples/benchmarks/results/constants.md, hard-negative pool)
        progress = reporter.progress()
        with (
            progress.stage("hard negatives: encoding the pool", len(texts), rates=True),
            _eval_mode(run.encoder),
            torch.autocast(device, dtype=torch.bfloat16, enabled=run.autocast),
        ):
            return encoder.encode(texts, progress.advance).vectors

    def report(step: int, summary: dict[str, Any]) -> None:
        _log(config.out, {"step": step + 1, "hard_negatives": summary})  # mined before step + 1
        reporter.note(
            f"hard negatives for step {step + 1}: {summary['negatives']:,} for {summary['pairs']:,} pairs "
            f"({summary['pairs_short']:,} with fewer than {settings.n}); the guard dropped "
            f"{summary['excluded_duplicates']:,} duplicates of gold targets and "
            f"{summary['excluded_above_gold']:,} scoring at least their gold pair ({summary['seconds']} s)"
        )

    return HardNegativeMiner(settings, pairs, encode, run.tokenize, device, report)


@contextlib.contextmanager
def _eval_mode(encoder: TrainEncoder) -> Iterator[None]:
    """Dropout off while the model encodes for evaluation or mining, training mode again after."""
    encoder.eval()
    try:
        yield
    finally:
        encoder.train()


def _tokenizer_fn(tokenizer, prefix: str, max_length: int) -> Callable[[list[str]], list[list[int]]]:
    return lambda texts: tokenizer([prefix + t for t in texts], truncation=True, max_length=max_length)[
        "input_ids"
    ]


def _starting_model(config: TrainConfig, sources, device: torch.device, warn: Callable[[str], None]):
    if config.from_scratch:
        from bitextmine.train.scratch import build_scratch_model

        excluded = read_excluded(config.exclude)
        texts = (text for pair in interleave(sources, excluded) for text in (pair.src, pair.tgt))
        vocab_dir = Path(config.out) / VOCABULARY_DIR
        model, tokenizer = build_scratch_model(texts, vocab_dir, seed=config.seed, **config.scratch)
        settings = EncoderSettings(pooling="mean", prefix="", max_length=config.max_length)
        return model.to(device), tokenizer, settings, vocab_dir
    loaded = load_model(config.base, device)
    settings = resolve_settings(loaded.model_dir)
    if settings.lowercase:  # the base's do_lower_case: training tokenizes as encoding does
        lowercase_inputs(loaded.tokenizer, loaded.model_dir)
    if dense := sum(module.kind == "Dense" for module in st_modules(loaded.model_dir)):
        warn(
            f"{config.base}: its sentence-transformers pipeline has {dense} Dense layer(s) after the "
            f"pooling, which training neither uses nor saves: {config.out} will encode with the "
            f"transformer's {settings.pooling} pooling, without them (docs/training.md)"
        )
    return loaded.model, loaded.tokenizer, settings, loaded.model_dir


def _save_checkpoint(run: _Run, reporter: Reporter) -> None:
    if run.teacher is not None:  # what a resume from this checkpoint need not encode again
        run.teacher.save()
    reporter.checkpoint(save_checkpoint(run.config.out, run.step, _state(run), run.config.keep_checkpoints))


def _lr_factor(config: TrainConfig) -> Callable[[int], float]:
    """Linear warm-up, then linear decay to 0 at max_steps (constant when only minutes bound the run)."""
    warmup = max(config.warmup_steps, 1)

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        if config.max_steps is None:
            return 1.0
        return max(0.0, (config.max_steps - step) / max(config.max_steps - warmup, 1))

    return factor


def _budget_spent(run: _Run, started: float) -> bool:
    config = run.config
    if config.max_steps is not None and run.step >= config.max_steps:
        return True
    return config.max_minutes is not None and time.perf_counter() - started >= 60 * config.max_minutes


def _optimizer_step(run: _Run, batches, reporter: Reporter, started: float) -> float:
    """One optimizer step over grad_accum batches; returns the mean loss."""
    step_started = time.perf_counter()
    total, terms, pairs, tokens = 0.0, {}, 0, 0
    for _ in range(run.config.grad_accum):
        batch = next(batches)
        negatives = run.miner.for_batch(batch, run.step) if run.miner else None
        loss, batch_terms = batch_loss(
            run.encoder, run.objectives, run.config.objectives, batch, run.ctx, run.autocast, negatives
        )
        (loss / run.config.grad_accum).backward()
        total += loss.item() / run.config.grad_accum
        for name, value in batch_terms.items():
            terms[name] = terms.get(name, 0.0) + value / run.config.grad_accum
        pairs, tokens = pairs + len(batch.src_ids), tokens + batch.tokens
        run.pairs_drawn = batch.pairs_drawn
    params = [p for group in run.optimizer.param_groups for p in group["params"]]
    grad_norm = (
        float(torch.nn.utils.clip_grad_norm_(params, run.config.clip)) if run.config.clip else float("nan")
    )
    run.optimizer.step()
    run.schedule.step()
    run.optimizer.zero_grad(set_to_none=True)
    run.step += 1
    run.pairs, run.tokens = run.pairs + pairs, run.tokens + tokens
    seconds = time.perf_counter() - step_started
    record = {
        "step": run.step,
        "loss": total,
        **terms,
        "lr": run.schedule.get_last_lr()[0],
        "grad_norm": grad_norm,
        "pairs": pairs,
        "tokens": tokens,
        "pairs_per_s": pairs / seconds,
        "elapsed_s": time.perf_counter() - started,
    }
    _log(run.config.out, record)
    reporter.step(record)
    return total


def batch_loss(
    encoder: TrainEncoder,
    objectives: nn.ModuleDict,
    weights: dict[str, float],
    batch: PairBatch,
    ctx: TrainContext,
    autocast: bool = False,
    negatives: BatchNegatives | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Weighted sum of the objectives' losses on one batch, and their logged terms. `negatives` (hard
    negatives) are encoded in the targets' forward."""
    device = next(encoder.parameters()).device
    index = {lang: i for i, lang in enumerate(ctx.languages)}
    src_langs = torch.tensor([index[lang] for lang in batch.langs], device=device)
    pair_weights = batch.pair_weights
    tgt_ids = batch.tgt_ids + (negatives.ids if negatives else [])
    tgt_langs = torch.full((len(tgt_ids),), index[ENGLISH], device=device)
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
        src, tgt = encoder.encode_pair(batch.src_ids, tgt_ids, src_langs, tgt_langs)
        mined = None
        if negatives:
            tgt, side = split_side(tgt, len(batch.tgt_ids))
            mined = HardNegatives(side.pooled, torch.from_numpy(negatives.allowed).to(device))
        inputs = ObjectiveInputs(
            src,
            tgt,
            ctx,
            batch.english,
            None if pair_weights is None else torch.tensor(pair_weights, device=device),
            mined,
        )
        total = torch.zeros((), device=device)
        terms: dict[str, float] = {}
        for name, objective in objectives.items():
            output = objective(inputs)
            total = total + weights[name] * output.loss.float()
            terms.update({f"{name}/{key}": value for key, value in output.terms.items()})
    return total, terms


def _log(out: Path, record: dict[str, Any]) -> None:
    """Append one record; a failed write (full disk) is cut off again and becomes a WriteError."""
    path = Path(out) / LOG_FILE
    size = path.stat().st_size if path.exists() else 0
    try:
        with open(path, "ab") as fh:
            fh.write((json.dumps(record) + "\n").encode())
    except OSError as exc:
        with contextlib.suppress(OSError):  # no half record for the resume to trip over
            os.truncate(path, size)
        raise WriteError(path, exc) from exc


def _state(run: _Run) -> dict[str, Any]:
    return {
        "config": run.config.resume_key(),
        "step": run.step,
        "pairs_drawn": run.pairs_drawn,
        "pairs": run.pairs,
        "tokens": run.tokens,
        "encoder": run.encoder.state_dict(),
        "objectives": run.objectives.state_dict(),
        "optimizer": run.optimizer.state_dict(),
        "schedule": run.schedule.state_dict(),
        "random": random_state(run.ctx.generator),
    }


def _resume(run: _Run) -> int:
    path = latest_checkpoint(run.config.out)
    if path is None:
        return 0
    state = load_checkpoint(path)
    if state["config"] != run.config.resume_key():
        raise BitextmineError(
            f"{path} was written by a run with other settings (data, objectives, optimizer or batching); "
            "use another --out or delete its checkpoints/ to start over"
        )
    run.encoder.load_state_dict(state["encoder"])
    run.objectives.load_state_dict(state["objectives"])
    run.optimizer.load_state_dict(state["optimizer"])
    run.schedule.load_state_dict(state["schedule"])
    restore_random_state(state["random"], run.ctx.generator)
    run.step, run.pairs_drawn, run.pairs, run.tokens = (
        state["step"],
        state["pairs_drawn"],
        state["pairs"],
        state["tokens"],
    )
    _truncate_log(run.config.out, run.step)
    return run.step


def _truncate_log(out: Path, step: int) -> None:
    """Drop the records of steps after the checkpoint: the resumed run logs them again."""
    path = Path(out) / LOG_FILE
    if not path.is_file():
        return
    kept = [
        line for line in path.read_text(encoding="utf-8").splitlines() if json.loads(line)["step"] <= step
    ]
    with atomic_open(path, "w") as fh:
        fh.write("".join(line + "\n" for line in kept))


def _evaluate(run: _Run, reporter: Reporter) -> dict[str, float]:
    if run.config.eval_sets.empty:
        return {}
    with _eval_mode(run.encoder):
        results = evaluate_model(
            run.encoder.model, run.tokenizer, run.settings, run.model_dir, run.config.eval_sets
        )
    _log(run.config.out, {"step": run.step, "eval": results})
    reporter.evaluated(run.step, results)
    return results


def save_model(run: _Run, evaluation: dict[str, float], excluded_pairs: int) -> None:
    """The final model dir: weights, tokenizer and bitextmine.json (encoder settings, training summary)."""
    out = Path(run.config.out)
    run.encoder.model.save_pretrained(out)
    run.tokenizer.save_pretrained(out)
    settings = asdict(run.settings)
    hard_negatives = run.config.hard_negative_settings
    write_json(
        out / BITEXTMINE_CONFIG,
        {
            "encoder": settings,
            "training": {
                "base": run.config.base,
                "from_scratch": run.config.from_scratch,
                "objectives": run.config.objectives,
                "options": dict(run.config.options),
                "data": run.config.data,
                "excluded": run.config.exclude,
                "excluded_pairs_seen": excluded_pairs,
                "min_score": run.config.min_score,
                "weight_by_score": run.config.weight_by_score,
                "hard_negatives": hard_negatives.as_dict() if hard_negatives else None,
                "languages": run.languages,
                "steps": run.step,
                "pairs": run.pairs,
                "tokens": run.tokens,
                "evaluation": evaluation,
            },
        },
    )
