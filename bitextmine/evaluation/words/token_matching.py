"""Token matching analysis of MEXMA (Janeiro et al. 2024), §5.5 and Table 9.

What do an encoder's last-layer token vectors encode? Every token of every sentence of an N-way
parallel set (FLORES) in every language is encoded; three random tokens of each of the first 250
English sentences are queries, and each query's five nearest tokens by cosine among all tokens of all
sentences, the query itself excluded, are classified by the sentence they belong to:

- same sentence: a token of the query's own English sentence (context dominates the token);
- translation: a token of a translation of that sentence in another language (cross-lingual alignment);
- same language: an English token of another sentence (lexical information: the paper describes
  these as the same token in another sentence; ``same_language_same_token`` counts those of them that
  are the query's own vocabulary entry);
- other: a token of a sentence in another language that is not a translation.

Special tokens and the tokens of the model's prefix are neither queries nor candidates. The paper used
FLORES-200 devtest in 81 languages; the sentence, language, query and neighbour counts are parameters.
Candidates are streamed: only the running top-k of each query is kept, so memory does not grow with
the number of languages. `TokenMatchingEvaluator` runs the analysis on the model of a `SentenceEncoder`,
under the evaluator contract (evaluation/evaluator.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from bitextmine.encoder.encoder import SentenceEncoder
from bitextmine.evaluation.evaluator import Evaluator
from bitextmine.evaluation.retrieval import check_aligned, check_known, flores_languages, read_flores
from bitextmine.evaluation.words.hidden_states import HiddenStates, TokenizedSentence

CATEGORIES = ("other", "same_language", "same_sentence", "translation")  # Table 9's column order
LANG, LINE, POSITION, TOKEN = range(4)  # columns of a token key
_FLUSH_TOKENS = 8192


@dataclass(frozen=True)
class TokenMatchSettings:
    query_sentences: int = 250
    tokens_per_sentence: int = 3
    neighbors: int = 5
    seed: int = 0


class RunningTopK:
    """The k most cosine-similar candidates of each query over candidate chunks, the query excluded.

    Keys are int64 rows (language, line, position, token id); a candidate whose first three columns
    equal the query's is the query itself. Until k candidates have been seen, the missing neighbours
    have similarity -inf and key -1.
    """

    def __init__(self, queries: torch.Tensor, query_keys: torch.Tensor, k: int) -> None:
        self.queries = F.normalize(queries.float(), dim=-1)
        self.query_keys = query_keys
        self.sims = torch.full((len(queries), k), -torch.inf)
        self.keys = torch.full((len(queries), k, 4), -1, dtype=torch.int64)

    def add(self, vectors: torch.Tensor, keys: torch.Tensor) -> None:
        sims = self.queries @ F.normalize(vectors.float(), dim=-1).T
        itself = (keys[None, :, : POSITION + 1] == self.query_keys[:, None, : POSITION + 1]).all(dim=-1)
        kept = self.sims.shape[1]
        best = torch.topk(torch.cat([self.sims, sims.masked_fill(itself, -torch.inf)], dim=1), kept, dim=1)
        from_kept = torch.gather(self.keys, 1, best.indices.clamp(max=kept - 1)[..., None].expand(-1, -1, 4))
        from_new = keys[(best.indices - kept).clamp(min=0)]
        self.sims = best.values
        self.keys = torch.where((best.indices < kept)[..., None], from_kept, from_new)

    @property
    def found(self) -> torch.Tensor:
        """[queries, k] True where a neighbour was found."""
        return self.sims > -torch.inf


def categorize(query_keys: torch.Tensor, neighbour_keys: torch.Tensor, query_lang: int) -> torch.Tensor:
    """Index into CATEGORIES of every neighbour ([queries, k] from [queries, 4] and [queries, k, 4])."""
    same_lang = neighbour_keys[..., LANG] == query_lang
    same_line = neighbour_keys[..., LINE] == query_keys[:, None, LINE]
    category = torch.zeros(same_lang.shape, dtype=torch.int64)  # other
    category[same_lang & ~same_line] = CATEGORIES.index("same_language")
    category[same_lang & same_line] = CATEGORIES.index("same_sentence")
    category[~same_lang & same_line] = CATEGORIES.index("translation")
    return category


@dataclass
class TokenMatchResult:
    langs: list[str]
    sentences: int  # lines per language
    settings: TokenMatchSettings
    queries: int
    candidates: int  # tokens searched
    counts: dict[str, int]
    same_language_same_token: int
    model: str | None = None  # the name the model was loaded by (None: vectors built by hand)

    @property
    def matches(self) -> int:
        return sum(self.counts.values())

    def percent(self, category: str) -> float:
        return 100.0 * self.counts[category] / self.matches if self.matches else 0.0

    def metrics(self) -> dict[str, float]:
        """`tokens/CATEGORY`: the percentage of the neighbours found in each category."""
        return {f"tokens/{c}": round(self.percent(c), 2) for c in CATEGORIES}

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "benchmark": "tokens",
            "langs": self.langs,
            "sentences_per_language": self.sentences,
            "settings": asdict(self.settings),
            "queries": self.queries,
            "candidate_tokens": self.candidates,
            "matches": self.matches,
            "percent": {c: self.percent(c) for c in CATEGORIES},
            "counts": self.counts,
            "same_language_same_token": self.same_language_same_token,
        }


def summarize(
    top: RunningTopK,
    langs: list[str],
    sentences: int,
    settings: TokenMatchSettings,
    candidates: int,
    model: str | None = None,
) -> TokenMatchResult:
    """Category counts of the neighbours found; the queries are in langs[0]; `model`: its name."""
    category = categorize(top.query_keys, top.keys, 0).masked_fill(~top.found, -1)
    same_token = top.keys[..., TOKEN] == top.query_keys[:, None, TOKEN]
    same_language = category == CATEGORIES.index("same_language")
    return TokenMatchResult(
        langs,
        sentences,
        settings,
        len(top.query_keys),
        candidates,
        {c: int((category == i).sum()) for i, c in enumerate(CATEGORIES)},
        int((same_language & same_token).sum()),
        model,
    )


def read_nway(
    directory: Path, langs: Sequence[str], english: str, split: str, sentences: int | None
) -> dict[str, list[str]]:
    """English first, then the other languages, each cut to its first `sentences` lines."""
    chosen = [english, *(lang for lang in langs if lang != english)]
    check_known("FLORES", directory, chosen, flores_languages(directory, split))
    texts = {lang: read_flores(directory, lang, split) for lang in chosen}
    for lang, text in texts.items():
        check_aligned(
            directory / f"{lang}.{split}", len(text), directory / f"{english}.{split}", len(texts[english])
        )
    return {lang: text[:sentences] for lang, text in texts.items()}


def pick_queries(
    tokenized: Sequence[TokenizedSentence], per_sentence: int, rng: np.random.Generator
) -> list[tuple[int, int]]:
    """(line, position) of `per_sentence` random content tokens of each sentence (all when fewer)."""
    queries = []
    for line, sentence in enumerate(tokenized):
        positions = sentence.content_positions()
        chosen = rng.choice(positions, size=min(per_sentence, len(positions)), replace=False)
        queries += [(line, int(p)) for p in sorted(chosen)]
    return queries


def evaluate_token_matching(
    texts: dict[str, list[str]],
    model: HiddenStates,
    settings: TokenMatchSettings = TokenMatchSettings(),
    progress: Callable[[int], None] | None = None,
    on_plan: Callable[[int], None] | None = None,
) -> TokenMatchResult:
    """Table 9 for `model` on line-aligned `texts` (read_nway: the query language first); `on_plan`
    gets the number of sentences to encode before encoding."""
    order = list(texts)
    query_lines = model.tokenize(texts[order[0]][: settings.query_sentences])
    if on_plan:
        on_plan(len(query_lines) + sum(map(len, texts.values())))
    top = _query_top_k(model, query_lines, settings, progress)
    candidates = 0
    for index, lang in enumerate(order):
        candidates += _search(model, model.tokenize(texts[lang]), index, top, progress)
    return summarize(top, order, len(texts[order[0]]), settings, candidates, model.loaded.name)


@dataclass
class TokenMatchingEvaluator(Evaluator):
    """`evaluate_token_matching` on the last layer of the encoder's model (`HiddenStates.of`).

    The primary metric is the share of translation neighbours, tokens matched to their equivalent in a
    translation of their sentence: the paper's sign of tokens aligned across languages, and the column
    its encoders are ranked by for that. The other categories tell what else the tokens encode (their
    context, their word form), which the paper weighs model by model rather than as better or worse.
    """

    texts: dict[str, list[str]]  # line-aligned, the query language first (`read_nway`)
    settings: TokenMatchSettings = TokenMatchSettings()
    progress: Callable[[int], None] | None = None  # sentences encoded
    on_plan: Callable[[int], None] | None = None  # sentences to encode, before encoding

    primary_metric = "tokens/translation"

    def __call__(self, encoder: SentenceEncoder) -> TokenMatchResult:
        states = HiddenStates.of(encoder)
        return evaluate_token_matching(self.texts, states, self.settings, self.progress, self.on_plan)


def _query_top_k(
    model: HiddenStates,
    tokenized: list[TokenizedSentence],
    settings: TokenMatchSettings,
    progress: Callable[[int], None] | None,
) -> RunningTopK:
    queries = pick_queries(tokenized, settings.tokens_per_sentence, np.random.default_rng(settings.seed))
    by_line: dict[int, list[int]] = {}
    for line, position in queries:
        by_line.setdefault(line, []).append(position)
    vectors = torch.zeros(len(queries), model.dim)
    keys = torch.tensor(
        [(0, line, p, tokenized[line].input_ids[p]) for line, p in queries], dtype=torch.int64
    )
    row_of = {(line, p): row for row, (line, p) in enumerate(queries)}
    for line, states in model.run(tokenized, layers=[-1], progress=progress):
        for p in by_line.get(line, ()):
            vectors[row_of[line, p]] = states[0, p]
    return RunningTopK(vectors, keys, settings.neighbors)


def _search(
    model: HiddenStates,
    tokenized: list[TokenizedSentence],
    lang: int,
    top: RunningTopK,
    progress: Callable[[int], None] | None,
) -> int:
    """Feed every content token of `tokenized` (language index `lang`) to `top`; the token count."""
    vectors, keys, buffered, total = [], [], 0, 0
    for line, states in model.run(tokenized, layers=[-1], progress=progress):
        positions = tokenized[line].content_positions()
        ids = [tokenized[line].input_ids[p] for p in positions]
        vectors.append(states[0, positions])
        rows = [(lang, line, p, t) for p, t in zip(positions, ids, strict=True)]
        keys.append(torch.tensor(rows, dtype=torch.int64).reshape(-1, 4))
        buffered += len(positions)
        if buffered >= _FLUSH_TOKENS:
            top.add(torch.cat(vectors), torch.cat(keys))
            total, vectors, keys, buffered = total + buffered, [], [], 0
    if buffered:
        top.add(torch.cat(vectors), torch.cat(keys))
    return total + buffered
