"""Per-layer token vectors from a Hugging Face encoder, for the word- and token-level analyses.

Gaschi et al. 2022 §III-B: the whole sentence goes through the model and the vectors of every layer
are kept, layer 0 being the input embedding layer (``hidden_states[0]`` of a Hugging Face model), so a
12-block model gives 13 layers. MEXMA §5.5 looks at the last layer's tokens.

Sentences get the model's prefix (e.g. e5's ``"query: "``, from the encoder settings as everywhere in
bitextmine) and are run through the ordinary padded forward, in length-sorted token-budget batches, in
float32 as `load_layer_encoder` loads the model (an evaluator reads the model of the encoder it is given).
Each token is mapped back to its characters in the sentence with the fast tokenizer's offsets; special
tokens and the tokens of the prefix are marked as not *content*. A token that straddles the end
of the prefix (SentencePiece glues the prefix's trailing space to the first word) is content.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch

from bitextmine.encoder.batching import DEFAULT_MAX_TOKENS, token_budget_batches
from bitextmine.encoder.encoder import SentenceEncoder
from bitextmine.encoder.loading import LoadedModel
from bitextmine.errors import BitextmineError


@dataclass(frozen=True)
class TokenizedSentence:
    input_ids: list[int]
    offsets: list[tuple[int, int]]  # characters of each token in the sentence (prefix removed)
    content: list[bool]  # False for special tokens and the prefix's tokens

    def content_positions(self) -> list[int]:
        return [i for i, keep in enumerate(self.content) if keep]

    def tokens_of(self, start: int, end: int) -> list[int]:
        """Positions of the content tokens that overlap the characters [start, end) of the sentence."""
        return [
            i
            for i, ((s, e), keep) in enumerate(zip(self.offsets, self.content, strict=True))
            if keep and s < end and e > start and e > s
        ]


def load_layer_encoder(name_or_path: str, device: str = "auto") -> SentenceEncoder:
    """The model as `eval words` and `eval tokens` analyse it: in fp32, with bitextmine's encoder settings
    (prefix, max length) and no packed forward to set up, as its hidden states come from the padded one."""
    encoder = SentenceEncoder.load(name_or_path, device=device, packed=False, precision="fp32")
    HiddenStates.of(
        encoder
    )  # a tokenizer without character offsets fails at loading, not once the evaluation has begun
    return encoder


class HiddenStates:
    """A model, its tokenizer and prefix; yields every sentence's hidden states at chosen layers."""

    def __init__(
        self, loaded: LoadedModel, prefix: str, max_length: int, max_tokens: int = DEFAULT_MAX_TOKENS
    ) -> None:
        if not loaded.tokenizer.is_fast:
            raise BitextmineError(f"{loaded.model_dir}: needs a fast tokenizer (character offsets)")
        self.loaded = loaded
        self.prefix = prefix
        self.max_length = max_length
        self.max_tokens = max_tokens
        self.device = next(loaded.model.parameters()).device

    @classmethod
    def of(cls, encoder: SentenceEncoder) -> HiddenStates:
        """The states of `encoder`'s model as the encoder holds it (device, precision), with its prefix and
        max length: what the layer analyses' evaluators read."""
        return cls(encoder.loaded, encoder.settings.prefix, encoder.max_length)

    @property
    def layers(self) -> int:
        """Number of layers including the embedding layer (layer 0)."""
        return int(self.loaded.model.config.num_hidden_layers) + 1

    @property
    def dim(self) -> int:
        return int(self.loaded.model.config.hidden_size)

    def tokenize(self, sentences: Sequence[str]) -> list[TokenizedSentence]:
        skip = len(self.prefix)
        batch = self.loaded.tokenizer(
            [self.prefix + s for s in sentences],
            truncation=True,
            max_length=self.max_length,
            return_offsets_mapping=True,
            return_special_tokens_mask=True,
        )
        return [
            TokenizedSentence(
                ids,
                [(max(s - skip, 0), e - skip) for s, e in offsets],
                [not special and e > skip for (_, e), special in zip(offsets, specials, strict=True)],
            )
            for ids, offsets, specials in zip(
                batch["input_ids"], batch["offset_mapping"], batch["special_tokens_mask"], strict=True
            )
        ]

    @torch.inference_mode()
    def run(
        self,
        sentences: Sequence[TokenizedSentence],
        layers: Sequence[int] | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> Iterator[tuple[int, torch.Tensor]]:
        """(position in `sentences`, float32 [layers, tokens, dim]) for every sentence, batch by batch.

        `layers` indexes ``hidden_states`` (0 = embeddings, -1 = last); all of them by default.
        """
        chosen = list(range(self.layers)) if layers is None else list(layers)
        lengths = [len(s.input_ids) for s in sentences]
        for batch in token_budget_batches(lengths, self.max_tokens):
            padded = self.loaded.tokenizer.pad(
                {"input_ids": [sentences[i].input_ids for i in batch]},
                padding_side="right",
                return_tensors="pt",
            ).to(self.device)
            hidden = self.loaded.model(**padded, output_hidden_states=True).hidden_states
            stacked = torch.stack([hidden[layer] for layer in chosen]).float()
            for row, i in enumerate(batch):
                yield i, stacked[:, row, : lengths[i]]
            if progress:
                progress(len(batch))
