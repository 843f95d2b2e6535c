"""The sentence head: the transformer's token states in, one vector per sentence out.

It runs what a sentence-transformers pipeline runs after its Transformer (st_files.py): Pooling (cls,
mean, max, mean_sqrt_len_tokens, weightedmean or lasttoken, with the prompt's tokens left out where the
Pooling config says ``include_prompt: false``), each Dense layer (linear and activation, its weights
read from the module's folder), then Normalize. A model dir without ``modules.json`` gets the
pooling and normalisation of its settings alone.

Why not sentence-transformers' own modules: sentence-transformers is not a run-time dependency of
bitextmine (only of its tests and benchmarks), and its Pooling works on a padded [batch, length,
hidden] tensor with an attention mask, while the packed forward yields [tokens, hidden] states without
padding. Pooling here works on that packed layout and the padded forward drops its padding before it,
so both forwards and every precision share one head. The head stays in float32 whatever the precision
of the transformer (it is a few small matrices).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from bitextmine.encoder.settings import EncoderSettings
from bitextmine.encoder.st_files import POOLING_MODES, StModule, pooling_config, st_modules
from bitextmine.errors import BitextmineError
from bitextmine.files import read_json

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

EMBEDDING = "sentence_embedding"  # the feature a Dense or Normalize module must read and write
DEFAULT_ACTIVATION = "torch.nn.modules.activation.Tanh"  # sentence-transformers' Dense default


class SentenceHead(nn.Module):
    """Pooling over the packed token states, then the Dense layers, then (optionally) normalisation."""

    def __init__(
        self,
        hidden_size: int,
        pooling: str,
        *,
        prompt_tokens: int = 0,
        dense: Sequence[nn.Sequential] = (),
        normalize: bool = True,
    ) -> None:
        super().__init__()
        if pooling not in POOLING_MODES:
            raise ValueError(f"unknown pooling {pooling!r}")
        self.pooling = pooling
        self.prompt_tokens = prompt_tokens  # leading tokens of every sentence left out of the pooling
        self.dense = nn.ModuleList(dense)
        self.normalize = normalize
        self.dim = dense[-1][0].out_features if dense else hidden_size

    def forward(self, hidden: torch.Tensor, seqlens: torch.Tensor) -> torch.Tensor:
        """hidden: float [tokens, hidden_size], sentences back to back; seqlens: long [sentences]."""
        vectors = pool(hidden, seqlens, self.pooling, self.prompt_tokens)
        for layer in self.dense:
            vectors = layer(vectors)
        return F.normalize(vectors, dim=-1) if self.normalize else vectors

    def identity(self) -> bytes:
        """What the model's fingerprint adds to its settings for this head: the Dense layers and the
        prompt tokens left out. Nothing for a head that is pooling and normalisation alone, so such
        models keep the fingerprint their settings give."""
        if not self.dense and not self.prompt_tokens:
            return b""
        digest = hashlib.sha256(f"prompt_tokens={self.prompt_tokens}".encode())
        for layer in self.dense:
            digest.update(type(layer[1]).__name__.encode())
            for tensor in layer[0].state_dict().values():
                digest.update(tensor.detach().cpu().numpy().tobytes())
        return digest.digest()


def pool(hidden: torch.Tensor, seqlens: torch.Tensor, mode: str, prompt_tokens: int = 0) -> torch.Tensor:
    """[sentences, hidden] from packed states, as sentence-transformers' Pooling computes each `mode`."""
    starts = torch.cumsum(seqlens, 0) - seqlens
    if mode == "cls":  # the first token after the prompt (the first token if the prompt is all there is)
        return hidden[starts + torch.where(seqlens > prompt_tokens, prompt_tokens, 0)]
    if mode == "lasttoken":
        return hidden[starts + seqlens - 1]
    owner = torch.repeat_interleave(torch.arange(len(seqlens), device=hidden.device), seqlens)
    position = torch.arange(hidden.shape[0], device=hidden.device) - starts[owner]
    if prompt_tokens:
        kept = position >= prompt_tokens
        hidden, owner, position = hidden[kept], owner[kept], position[kept]
    if mode == "max":
        lowest = hidden.new_full((len(seqlens), hidden.shape[1]), float("-inf"))
        return lowest.scatter_reduce_(0, owner[:, None].expand_as(hidden), hidden, "amax")
    if mode == "weightedmean":  # weights are the tokens' positions in the sentence, from 1
        weights = (position + 1).to(hidden.dtype)
        sums = hidden.new_zeros(len(seqlens), hidden.shape[1]).index_add_(0, owner, hidden * weights[:, None])
        total = hidden.new_zeros(len(seqlens)).index_add_(0, owner, weights)
        return sums / total.clamp(min=1e-9)[:, None]
    sums = hidden.new_zeros(len(seqlens), hidden.shape[1]).index_add_(0, owner, hidden)
    counts = (seqlens - prompt_tokens).to(hidden.dtype).clamp(min=1e-9)
    return sums / (counts.sqrt() if mode == "mean_sqrt_len_tokens" else counts)[:, None]


def load_head(
    model_dir: Path, settings: EncoderSettings, tokenizer: PreTrainedTokenizerBase, hidden_size: int
) -> SentenceHead:
    """The head of the model in `model_dir`: its sentence-transformers pipeline, with `settings`'
    pooling and normalisation (which the pipeline's files gave, unless something overrode them)."""
    modules = st_modules(model_dir)
    include_prompt = not modules or pooling_config(modules[1]).include_prompt
    prompt_tokens = 0 if include_prompt or not settings.prefix else prompt_length(tokenizer, settings.prefix)
    dense: list[nn.Sequential] = []
    for module in modules:
        if module.kind == "Dense":
            dense.append(load_dense(module, dense[-1][0].out_features if dense else hidden_size))
    return SentenceHead(
        hidden_size, settings.pooling, prompt_tokens=prompt_tokens, dense=dense, normalize=settings.normalize
    )


def prompt_length(tokenizer: PreTrainedTokenizerBase, prompt: str) -> int:
    """Tokens of `prompt` when it starts a sentence, counted as sentence-transformers counts them:
    the prompt tokenized alone, less a trailing special token (SEP, EOS)."""
    ids = tokenizer(prompt)["input_ids"]
    return len(ids) - (1 if ids and ids[-1] in tokenizer.all_special_ids else 0)


def load_dense(module: StModule, in_features: int) -> nn.Sequential:
    """A Dense module as [Linear, activation], with its weights; it must take `in_features`."""
    where = module.path
    if not (where / "config.json").is_file():
        raise BitextmineError(f"{where}: no config.json for the Dense layer")
    config = read_json(where / "config.json")
    if config.get("use_residual"):
        raise BitextmineError(f"{where}: Dense with use_residual is not supported")
    for key in ("module_input_name", "module_output_name"):
        if config.get(key, EMBEDDING) not in (EMBEDDING, None):
            raise BitextmineError(f"{where}: Dense on {config[key]!r} is not supported (only {EMBEDDING})")
    if int(config["in_features"]) != in_features:
        raise BitextmineError(f"{where}: Dense takes {config['in_features']} features, gets {in_features}")
    act = activation(config.get("activation_function", DEFAULT_ACTIVATION), where)
    linear = nn.Linear(int(config["in_features"]), int(config["out_features"]), bias=config.get("bias", True))
    state = {key.removeprefix("linear."): value for key, value in _weights(where).items()}
    try:
        linear.load_state_dict(state)
    except RuntimeError as exc:
        raise BitextmineError(
            f"{where}: weights do not fit the config ({str(exc).splitlines()[0]})"
        ) from None
    return nn.Sequential(linear, act)


def _weights(module_dir: Path) -> dict[str, torch.Tensor]:
    if (path := module_dir / "model.safetensors").is_file():
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        from bitextmine.encoder.loading import unreadable_weights

        try:
            return load_file(path)
        except SafetensorError as exc:
            raise unreadable_weights(path, exc) from None
    if (path := module_dir / "pytorch_model.bin").is_file():
        return torch.load(path, map_location="cpu", weights_only=True)
    raise BitextmineError(f"{module_dir}: no model.safetensors or pytorch_model.bin for the Dense layer")


def activation(import_path: str, where: Path) -> nn.Module:
    """The activation a Dense config names by import path, e.g. torch.nn.modules.activation.Tanh.

    Like sentence-transformers without trust_remote_code, only torch's own modules are loaded."""
    module_name, _, class_name = import_path.rpartition(".")
    found = None
    if module_name.startswith("torch."):
        with contextlib.suppress(ImportError, AttributeError):
            found = getattr(importlib.import_module(module_name), class_name)
    if not (isinstance(found, type) and issubclass(found, nn.Module)):
        raise BitextmineError(f"{where}: activation {import_path!r} is not a torch.nn module")
    return found()
