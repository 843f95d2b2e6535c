"""SentenceEncoder: sentences in, L2-normalized vectors out, in input order."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch

from bitextmine.devices import pick_device
from bitextmine.encoder.attention import select_attention, without_cudnn_attention
from bitextmine.encoder.batching import default_max_tokens, token_budget_batches
from bitextmine.encoder.head import SentenceHead, load_head
from bitextmine.encoder.loading import LoadedModel, load_model, lowercase_inputs, model_fingerprint
from bitextmine.encoder.packed import PackedBertForward, head_dim_of, supports_packing
from bitextmine.encoder.precision import (
    CHECK_SENTENCES,
    PrecisionCheck,
    compare,
    convert_model,
    record_check,
    recorded_check,
    resolve_precision,
)
from bitextmine.encoder.settings import EncoderSettings, resolve_settings
from bitextmine.encoder.threads import thread_summary, usable_cores
from bitextmine.errors import BitextmineValueError, whole_number
from bitextmine.progress import Advance, with_bar

_log = logging.getLogger(__name__)


@dataclass
class Tokenized:
    ids: list[list[int]]
    truncated: int


@dataclass
class Encoded:
    vectors: np.ndarray  # float32 [n, dim]
    tokens: int
    truncated: int

    def __array__(self, dtype: np.dtype | None = None, copy: bool | None = None) -> np.ndarray:
        """`np.asarray(encoded)` is `encoded.vectors`."""
        return np.array(self.vectors, dtype=dtype, copy=copy)


class SentenceEncoder:
    """Encodes sentences with a packed block-diagonal forward when the architecture allows it.

    ``packed=False`` forces the ordinary padded Hugging Face forward (the reference path and the
    fallback for architectures the packed forward does not know). ``precision`` (fp32, bf16, int8 or
    auto, see precision.py) converts the model once it is loaded; the first time a precision is used
    with a model on a device type, the built-in sample is encoded both ways and ``precision_check``
    holds the cosines to fp32 (later runs read the recorded check). Either forward's token states go
    through ``head`` (head.py; by default the settings' pooling and normalisation alone).
    """

    def __init__(
        self,
        loaded: LoadedModel,
        settings: EncoderSettings,
        *,
        max_tokens: int | None = None,
        packed: bool | None = None,
        attention: str = "auto",
        precision: str = "fp32",
        head: SentenceHead | None = None,
    ) -> None:
        self.loaded = loaded
        self.settings = settings
        if settings.lowercase:
            lowercase_inputs(loaded.tokenizer, loaded.model_dir)
        self.device = next(loaded.model.parameters()).device
        self.max_tokens = max_tokens or default_max_tokens(self.device.type)
        if head is None:  # the settings' pooling and normalisation alone (the model being trained)
            head = SentenceHead(
                loaded.model.config.hidden_size, settings.pooling, normalize=settings.normalize
            )
        self.head = head.to(self.device)
        model_limit = getattr(loaded.model.config, "max_position_embeddings", settings.max_length)
        if loaded.model.config.model_type in ("xlm-roberta", "roberta", "camembert"):
            model_limit -= loaded.model.config.pad_token_id + 1
        self.max_length = min(settings.max_length, model_limit)
        can_pack = supports_packing(loaded.model)
        self.packed = can_pack if packed is None else packed and can_pack
        precision = resolve_precision(precision, self.device)
        self._packed_forward = self._packed_forward_for(attention, precision) if self.packed else None
        self.fingerprint = model_fingerprint(loaded.model_dir, settings, self.head.identity())
        self.precision = "fp32"
        self.precision_check: PrecisionCheck | None = None
        self._set_precision(precision)

    @classmethod
    def load(
        cls,
        name_or_path: str,
        *,
        device: str = "auto",
        overrides: dict | None = None,
        max_tokens: int | None = None,
        packed: bool | None = None,
        attention: str = "auto",
        precision: str = "fp32",
    ) -> SentenceEncoder:
        loaded = load_model(name_or_path, pick_device(device))
        settings = resolve_settings(loaded.model_dir, overrides)
        if settings.lowercase:  # before the head counts the prompt's tokens
            lowercase_inputs(loaded.tokenizer, loaded.model_dir)
        head = load_head(loaded.model_dir, settings, loaded.tokenizer, loaded.model.config.hidden_size)
        _log.debug(
            "model %s: settings %s, %d Dense layer(s), %d prompt token(s) left out of the pooling",
            loaded.model_dir,
            settings.as_dict(),
            len(head.dense),
            head.prompt_tokens,
        )
        return cls(
            loaded,
            settings,
            max_tokens=max_tokens,
            packed=packed,
            attention=attention,
            precision=precision,
            head=head,
        )

    def _packed_forward_for(self, attention: str, precision: str) -> PackedBertForward:
        """The packed forward, its attention chosen for the dtype `precision` runs attention in."""
        model = self.loaded.model
        dtype = torch.bfloat16 if precision == "bf16" else torch.float32
        return PackedBertForward(
            model, select_attention(self.device, head_dim_of(model.config), attention, dtype=dtype)
        )

    def _set_precision(self, precision: str) -> None:
        if precision == "fp32":
            return
        check = recorded_check(self.fingerprint, precision, self.device)
        reference = None if check else self.encode(list(CHECK_SENTENCES)).vectors
        convert_model(self.loaded.model, precision)
        self.precision = precision
        if check is None:
            check = compare(precision, reference, self.encode(list(CHECK_SENTENCES)).vectors)
            record_check(self.fingerprint, self.device, check)
        self.precision_check = check

    @property
    def dim(self) -> int:
        """Size of the vectors: the head's output."""
        return self.head.dim

    @property
    def mode(self) -> str:
        return f"packed ({self._packed_forward.attention.name})" if self._packed_forward else "padded"

    def describe(self) -> str:
        """One line for people: the model, and how it runs here."""
        return (
            f"model {self.loaded.name} ({self.mode}, {self.device}, {self.precision}, "
            f"{usable_cores()} cores, {thread_summary()}, pooling {self.settings.pooling}, "
            f"prefix {self.settings.prefix!r}, max length {self.max_length})"
        )

    def tokenize(self, sentences: Sequence[str]) -> Tokenized:
        texts = [self.settings.prefix + s for s in sentences]
        batch = self.loaded.tokenizer(texts, truncation=True, max_length=self.max_length)
        if batch.encodings is not None:
            truncated = sum(1 for e in batch.encodings if e.overflowing)
        else:
            full = self.loaded.tokenizer(texts, truncation=False)["input_ids"]
            truncated = sum(1 for ids in full if len(ids) > self.max_length)
        return Tokenized(batch["input_ids"], truncated)

    def encode(
        self,
        sentences: str | Sequence[str],
        progress: Advance | None = None,
        window: int = 4096,
        *,
        batch_size: int | None = None,
        show_progress_bar: bool = False,
        normalize_embeddings: bool = True,
        convert_to_numpy: bool = True,
        convert_to_tensor: bool = False,
    ) -> Encoded | torch.Tensor | list[torch.Tensor]:
        """Vectors for `sentences` in their order, [n, dim]; a string is one sentence and gives [dim];
        windows of `window` sentences bound the memory, and a forward takes at most `max_tokens` tokens
        and `batch_size` sentences. sentence-transformers' keywords mean what they mean there:
        `convert_to_tensor` returns a tensor on the encoder's device, `convert_to_numpy=False` a list of
        tensors, `show_progress_bar` a bar on stderr; the vectors are unit vectors, as
        `normalize_embeddings=True` asks (False is refused: margin scores need them)."""
        if not normalize_embeddings:
            raise BitextmineValueError(
                "normalize_embeddings=False: bitextmine's vectors are always unit vectors"
            )
        texts = [sentences] if isinstance(sentences, str) else sentences
        with with_bar(progress, show_progress_bar, len(texts), rates=True) as advance:
            encoded = self._encode(texts, advance, window, batch_size)
        if isinstance(sentences, str):
            encoded = replace(encoded, vectors=encoded.vectors[0])
        if convert_to_tensor or not convert_to_numpy:
            tensor = torch.from_numpy(encoded.vectors).to(self.device)
            return tensor if convert_to_tensor or tensor.dim() == 1 else list(tensor)
        return encoded

    def _encode(
        self, sentences: Sequence[str], progress: Advance | None, window: int, batch_size: int | None
    ) -> Encoded:
        if batch_size is not None:
            whole_number("batch_size", batch_size)
        vectors = np.empty((len(sentences), self.dim), dtype=np.float32)
        tokens = truncated = 0
        for start in range(0, len(sentences), window):
            tokenized = self.tokenize(sentences[start : start + window])
            truncated += tokenized.truncated
            lengths = [len(ids) for ids in tokenized.ids]
            for batch in token_budget_batches(lengths, self.max_tokens, window, batch_size):
                ids = [tokenized.ids[i] for i in batch]
                vectors[[start + i for i in batch]] = self._encode_batch(ids)
                batch_tokens = sum(lengths[i] for i in batch)
                tokens += batch_tokens
                if progress:
                    progress(len(batch), batch_tokens)
        return Encoded(vectors, tokens, truncated)

    @torch.inference_mode()
    def _encode_batch(self, ids: list[list[int]]) -> np.ndarray:
        hidden, seqlens = self._packed(ids) if self._packed_forward else self._padded(ids)
        return self.head(hidden.float(), seqlens).cpu().numpy()  # the head in fp32 whatever the precision

    def _packed(self, ids: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Token states [tokens, hidden] of the sentences back to back, and their lengths."""
        seqlens = [len(x) for x in ids]
        stream = torch.tensor([t for x in ids for t in x], device=self.device)
        return self._packed_forward(stream, seqlens), torch.tensor(seqlens, device=self.device)

    def _padded(self, ids: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """The same as `_packed` from the padded forward: its states with the padding dropped."""
        batch = self.loaded.tokenizer.pad({"input_ids": ids}, return_tensors="pt").to(self.device)
        with without_cudnn_attention():
            hidden = self.loaded.model(**batch).last_hidden_state
        real = batch["attention_mask"].bool()
        return hidden[real], real.sum(1)


def load_encoder(
    model: str | os.PathLike[str],
    *,
    device: str = "auto",
    precision: str = "auto",
    max_tokens: int | None = None,
    **settings: object,
) -> SentenceEncoder:
    """A sentence encoder from a model dir or hub id, as `bitextmine encode` loads it: `precision` auto is
    bf16 where the device runs it natively; `settings` (pooling, prefix, max_length) override the model's.
    `encoder.encode(sentences).vectors` are float32 unit vectors. For a SentenceTransformer already
    loaded, pass it to `embed` as it is."""
    if not isinstance(model, str | os.PathLike):
        raise TypeError(
            f"load_encoder takes a model dir or hub id, not a {type(model).__name__}; pass an object with "
            ".encode (a SentenceTransformer) to bitextmine.embed as it is"
        )
    return SentenceEncoder.load(
        os.fspath(model), device=device, overrides=settings, max_tokens=max_tokens, precision=precision
    )
