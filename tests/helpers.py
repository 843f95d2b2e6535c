"""Helpers the test modules share (fixtures are in conftest.py): the ../shared folder, tiny random models,
the CLI run in-process, generated sentences, and the packed and padded forwards compared by the encoder
tests."""

from __future__ import annotations

import ast
import io
import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest
import zstandard
from typer.testing import CliRunner

from bitextmine.calibration.thresholds import ThresholdRecord
from bitextmine.cli.plots import CURVES
from bitextmine.workspace.embeddings import EmbeddingShard, EmbeddingStore, ModelIdentity, ShardedVectors

if TYPE_CHECKING:
    from collections.abc import Callable

    import torch

    from bitextmine.train.loop import TrainConfig

REPO = Path(__file__).resolve().parents[1]


SHARED = Path(os.environ.get("BITEXTMINE_SHARED", REPO.parent / "shared"))


E5_DIR = SHARED / "models" / "multilingual-e5-small-q4"


TRAINING_TEXT = [
    "the dog sleeps on the sofa",
    "der Hund schläft auf dem Sofa",
    "a man rides a bicycle through the old town",
    "ein Mann fährt mit dem Fahrrad durch die Altstadt",
    "prices rose sharply in the second quarter",
    "die Preise stiegen im zweiten Quartal stark",
    "children play football in the park after school",
    "Kinder spielen nach der Schule Fußball im Park",
]


def require_shared(relative: str) -> Path:
    """Path under ../shared; skip when absent, fail instead when BITEXTMINE_REQUIRE_SHARED=1."""
    path = SHARED / relative
    if not path.exists():
        reason = f"{path} is absent (the shared data/models folder next to the repo)"
        if os.environ.get("BITEXTMINE_REQUIRE_SHARED") == "1":
            pytest.fail(f"BITEXTMINE_REQUIRE_SHARED=1 but {reason}")
        pytest.skip(reason)
    return path


def tiny_vocabulary(specials: list[str], normalizer, pre_tokenizer) -> dict[str, int]:
    """Token -> id: the specials, every word of TRAINING_TEXT (as the tokenizer's normalizer and
    pre-tokenizer cut it), and each of its characters as a word's start and as a continuation ("##c"), so
    that any word over those characters tokenizes."""
    words = sorted(
        {
            w
            for line in TRAINING_TEXT
            for w, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(line))
        }
    )
    chars = sorted({c for w in words for c in w})
    tokens = [*specials, *chars, *(f"##{c}" for c in chars), *(w for w in words if len(w) > 1)]
    return {token: i for i, token in enumerate(tokens)}


def _tiny_tokenizer(kind: str):
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    if kind == "bert":
        specials = {
            "pad_token": "[PAD]",
            "unk_token": "[UNK]",
            "cls_token": "[CLS]",
            "sep_token": "[SEP]",
            "mask_token": "[MASK]",
        }
        order = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        bos, eos = "[CLS]", "[SEP]"
    else:
        specials = {
            "bos_token": "<s>",
            "pad_token": "<pad>",
            "eos_token": "</s>",
            "unk_token": "<unk>",
            "cls_token": "<s>",
            "sep_token": "</s>",
            "mask_token": "<mask>",
        }
        order = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
        bos, eos = "<s>", "</s>"
    # a fixed vocabulary, not a trained one: tokenizers' WordPieceTrainer gave a different vocabulary in
    # each process (six runs, six vocabularies), and with it a different tiny model
    normalizer, pre_tokenizer = normalizers.NFKC(), pre_tokenizers.Whitespace()
    vocabulary = tiny_vocabulary(order, normalizer, pre_tokenizer)
    tok = Tokenizer(models.WordPiece(vocabulary, unk_token=specials["unk_token"]))
    tok.normalizer, tok.pre_tokenizer = normalizer, pre_tokenizer
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A {eos}", special_tokens=[(bos, tok.token_to_id(bos)), (eos, tok.token_to_id(eos))]
    )
    return PreTrainedTokenizerFast(tokenizer_object=tok, model_max_length=62, **specials)


def build_tiny_model(kind: str, directory: Path, seed: int = 0) -> Path:
    """A randomly initialised 2-layer BERT or XLM-R with a WordPiece vocabulary, saved to `directory`."""
    import torch
    from transformers import BertConfig, BertModel, XLMRobertaConfig, XLMRobertaModel

    torch.manual_seed(seed)
    tokenizer = _tiny_tokenizer(kind)
    common = dict(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        pad_token_id=tokenizer.pad_token_id,
    )
    if kind == "bert":
        model = BertModel(BertConfig(max_position_embeddings=62, **common))
    else:
        model = XLMRobertaModel(XLMRobertaConfig(max_position_embeddings=64, **common))
    model.eval()
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


_IMPORT_PROBE = """
import runpy, sys
sys.argv = ["bitextmine", *sys.argv[1:]]
try:
    runpy.run_module("bitextmine", run_name="__main__")
except SystemExit as exit:
    assert not exit.code, exit.code
print("imported:", sorted({"torch", "transformers"} & set(sys.modules)))
"""


def heavy_imports(*args: str) -> list[str]:
    """Which of torch and transformers `bitextmine ARGS` imports, run in a process of its own (it must
    succeed)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, "-c", _IMPORT_PROBE, *args], capture_output=True, text=True, env=env
    )
    last = result.stdout.splitlines()[-1:]
    assert last and last[0].startswith("imported: "), result.stdout + result.stderr
    return ast.literal_eval(last[0].removeprefix("imported: "))


def run(*args: str) -> tuple[int, str]:
    """`bitextmine ARGS...` in this process: (exit code, output)."""
    from bitextmine.cli import app

    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def sentences(n: int, seed: int) -> list[str]:
    """n distinct made-up sentences over the training vocabulary."""
    rng = np.random.default_rng(seed)
    words = " ".join(TRAINING_TEXT).split()
    return [" ".join(rng.choice(words, size=rng.integers(4, 12))) + f" n{seed}x{i}" for i in range(n)]


def read_mined(path: Path) -> list[list[str]]:
    """The fields of every line of a mined .tsv.zst file."""
    with open(path, "rb") as fh:
        text = io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(fh), encoding="utf-8").read()
    return [line.split("\t") for line in text.splitlines()]


def padded_reference(model, sequences: list[list[int]]) -> list[torch.Tensor]:
    """Hidden states of each sequence from the plain HF forward over a right-padded batch."""
    import torch

    width = max(len(s) for s in sequences)
    pad = model.config.pad_token_id
    ids = torch.tensor([s + [pad] * (width - len(s)) for s in sequences])
    mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in sequences])
    with torch.no_grad():
        hidden = model(input_ids=ids, attention_mask=mask).last_hidden_state
    return [hidden[i, : len(s)] for i, s in enumerate(sequences)]


def random_sequences(model, lengths: list[int], seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    vocab = model.config.vocab_size
    pad = model.config.pad_token_id
    return [[rng.choice([t for t in range(5, vocab) if t != pad]) for _ in range(n)] for n in lengths]


def packed_hidden(model, sequences: list[list[int]], attention=None) -> list[torch.Tensor]:
    """Hidden states of each sequence from the packed forward (SDPA unless `attention` is given), on the
    model's device."""
    import torch

    from bitextmine.encoder.attention import BlockDiagonalSDPA
    from bitextmine.encoder.packed import PackedBertForward

    forward = PackedBertForward(model, attention or BlockDiagonalSDPA())
    stream = torch.tensor([t for s in sequences for t in s], device=next(model.parameters()).device)
    with torch.no_grad():
        hidden = forward(stream, [len(s) for s in sequences])
    return list(torch.split(hidden, [len(s) for s in sequences]))


def max_length(model) -> int:
    offset = model.config.pad_token_id + 1 if model.config.model_type == "xlm-roberta" else 0
    return model.config.max_position_embeddings - offset


# Outputs of a workspace compared between runs (fault, chaos and Slurm tests)
# every command below the app, in --help's order; the `eval` group runs nothing itself
COMMANDS = [
    ["encode"],
    ["index"],
    ["mine"],
    ["mine-files"],
    ["score"],
    ["calibrate"],
    ["eval", "bucc"],
    ["eval", "tatoeba"],
    ["eval", "xsim"],
    ["eval", "words"],
    ["eval", "tokens"],
    ["train"],
]


TIMINGS = {"build_seconds", "search_ms_per_1000", "exact_ms_per_1000", "exact_rate", "seconds"}
SKIPPED = {"locks", "logs"}  # lock files and job logs are not outputs


def outputs(work: Path) -> dict[str, object]:
    """Every output file of the workspace: bytes, or JSON without timing fields."""
    found: dict[str, object] = {}
    for path in sorted(work.rglob("*")):
        relative = path.relative_to(work)
        if path.is_dir() or relative.parts[0] in SKIPPED:
            continue
        found[str(relative)] = (
            _without_timings(json.loads(path.read_text())) if path.suffix == ".json" else path.read_bytes()
        )
    return found


def _without_timings(data: object) -> object:
    if isinstance(data, dict):
        return {k: _without_timings(v) for k, v in data.items() if k not in TIMINGS}
    if isinstance(data, list):
        return [_without_timings(v) for v in data]
    return data


def eval_bucc_dev(bucc: Path, *options: str) -> tuple[int, str]:
    """`bitextmine eval bucc` on the de-en dev split in `bucc`."""
    return run("eval", "bucc", "--bucc", str(bucc), "--pair", "de-en", "--split", "dev", *options)


def write_bucc(directory: Path, shared: list[str]) -> None:
    """A de-en split whose gold pairs are identical sentences hidden among distractors."""
    de = shared + sentences(20, seed=5)
    en = sentences(20, seed=6) + shared
    rng = np.random.default_rng(0)
    de_ids = [f"de-{i:09d}" for i in rng.permutation(len(de)) + 1]
    en_ids = [f"en-{i:09d}" for i in rng.permutation(len(en)) + 1]
    (directory / "de-en.dev.de").write_text("".join(f"{i}\t{s}\n" for i, s in zip(de_ids, de, strict=True)))
    (directory / "de-en.dev.en").write_text("".join(f"{i}\t{s}\n" for i, s in zip(en_ids, en, strict=True)))
    gold = sorted(f"{de_ids[i]}\t{en_ids[20 + i]}\n" for i in range(len(shared)))
    (directory / "de-en.dev.gold").write_text("".join(gold))


def plotted(figure) -> dict[str, tuple[list[float], list[float]]]:
    """The data of each labelled line of the figure, by label."""
    lines = figure.axes[0].get_lines()
    return {
        line.get_label().split(":")[0]: (list(line.get_xdata()), list(line.get_ydata()))
        for line in lines
        if not line.get_label().startswith("_")
    }


def curve_arrays(rows) -> dict[str, tuple[list[float], list[float]]]:
    """What calibrate --json's curve says the figure shows: P, R and F1 against every threshold."""
    x = [row["threshold"] for row in rows]
    return {label: (x, [row[key] for row in rows]) for key, label in CURVES.items()}


DE_EN = ThresholdRecord(
    fingerprint="f1",
    model="e5",
    margin="ratio",
    pair="de-en",
    value=1.03,
    split="dev",
    precision=95.75,
    recall=95.75,
    f1=95.75,
    rule="best F1",
    date="2025-01-01T00:00:00+00:00",
)


def naive_block_attention(qkv: torch.Tensor, seqlens: list[int]) -> torch.Tensor:
    """softmax(q k^T / sqrt(d)) v computed sentence by sentence with explicit matrix products."""
    import torch

    outputs, start = [], 0
    for n in seqlens:
        q, k, v = qkv[start : start + n].double().unbind(1)  # [n, heads, dim] each
        scores = torch.einsum("qhd,khd->hqk", q, k) / q.shape[-1] ** 0.5
        outputs.append(torch.einsum("hqk,khd->qhd", scores.softmax(-1), v))
        start += n
    return torch.cat(outputs).float()


# ------------------------------------------------------------------------ vectors for index tests


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def random_unit(n: int, dim: int, seed: int = 0) -> np.ndarray:
    return unit(np.random.default_rng(seed).normal(size=(n, dim)))


def clustered_unit(n: int, dim: int, clusters: int = 64, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(clusters, dim))
    return unit(centres[rng.integers(clusters, size=n)] + 0.4 * rng.normal(size=(n, dim)))


def store_vectors(
    root, vectors: np.ndarray, shard_rows: int = 4000, fingerprint: str = "fp-a"
) -> ShardedVectors:
    store = EmbeddingStore(root, "de")
    store.bind(ModelIdentity("model", fingerprint, vectors.shape[1], {}))
    for i, start in enumerate(range(0, len(vectors), shard_rows)):
        block = vectors[start : start + shard_rows]
        store.write_shard(EmbeddingShard(f"shard-{i:05d}", len(block), "t", 0, 0), block)
    return store.vectors()


def toy_pairs(folder: Path, repeats: int = 12) -> Path:
    """FOLDER/toy.de and toy.en: TRAINING_TEXT's 4 (en, de) pairs `repeats` times, each line numbered."""
    en, de = TRAINING_TEXT[0::2] * repeats, TRAINING_TEXT[1::2] * repeats
    (folder / "toy.de").write_text("\n".join(f"{s} {i}" for i, s in enumerate(de)) + "\n")
    (folder / "toy.en").write_text("\n".join(f"{s} {i}" for i, s in enumerate(en)) + "\n")
    return folder / "toy.de"


def straight_and_interrupted(
    config: Callable[[Path], TrainConfig], root: Path, stop_at: int
) -> tuple[Path, Path]:
    """Train `config(out)` straight through into ROOT/straight, and into ROOT/interrupted until step
    `stop_at` is logged (like a kill between checkpoints): the two output dirs, the second to resume."""
    from bitextmine.train.loop import Reporter, train

    class StopAt(Reporter):
        def step(self, record: dict) -> None:
            if record["step"] == stop_at:
                raise KeyboardInterrupt

    straight, interrupted = root / "straight", root / "interrupted"
    train(config(straight))
    with pytest.raises(KeyboardInterrupt):
        train(config(interrupted), StopAt())
    return straight, interrupted
