"""Language identification of lines: py3langid's model (140 languages, shipped in its wheel), loaded once.

`encode`'s two rules (`LidFilter.keeps`): "reject" (the default) drops a line only when it is confidently
another language (`is_other_language` at 0.8), has no letter of the language's script (`in_script`: a
Chinese line without Han, a Russian one without Cyrillic) or has no word (`has_words`: numbers, codes,
URLs); "accept" keeps only the lines `is_language` finds in the language (bench_filters measures both).

`is_language` keeps a line whose top language is the wanted one with a probability of at least a floor;
the default 0.2 passes almost every genuine line (hardly fewer than no floor) while junk (numbers, codes,
URLs) stays under it: examples/benchmarks/results/bench_lid.md. `is_other_language` is the pair filters'
test, the other way round: a line confidently in another language, which turns away fewer genuine lines
than `is_language` would (examples/benchmarks/results/constants.md, language identification).
"""

from __future__ import annotations

import functools
import importlib.metadata
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import regex

from bitextmine.errors import BitextmineError, os_error_message

DEFAULT_MIN_CONFIDENCE = 0.2
DEFAULT_OTHER_CONFIDENCE = 0.5  # is_other_language's default
LID_RULES = ("reject", "accept")  # LidFilter.rule; the CLI adds "off"
DEFAULT_LID_RULE = "reject"
RULE_CONFIDENCE = {"reject": 0.8, "accept": DEFAULT_MIN_CONFIDENCE}  # each rule's default floor
UNDETERMINED = "und"  # the label of an empty line

# ISO 639-3, 639-2/B and corpus codes (Tatoeba's cmn, FLORES's zho_simpl) of the identifier's two-letter
# labels; its three-letter labels (wuu, yue, ...) and two-letter ones stand for themselves.
_ALIASES = {
    "afr": "af", "amh": "am", "arg": "an", "ara": "ar", "arb": "ar", "asm": "as", "aze": "az",
    "azj": "az", "bak": "ba", "bel": "be", "bul": "bg", "ben": "bn", "bre": "br", "bos": "bs",
    "cat": "ca", "ces": "cs", "cze": "cs", "cym": "cy", "wel": "cy", "dan": "da", "deu": "de",
    "ger": "de", "dzo": "dz", "ell": "el", "gre": "el", "eng": "en", "epo": "eo", "spa": "es",
    "est": "et", "ekk": "et", "eus": "eu", "baq": "eu", "fas": "fa", "per": "fa", "pes": "fa",
    "fin": "fi", "fao": "fo", "fra": "fr", "fre": "fr", "fry": "fy", "gle": "ga", "gla": "gd",
    "glg": "gl", "guj": "gu", "hau": "ha", "heb": "he", "hin": "hi", "hrv": "hr", "hat": "ht",
    "hun": "hu", "hye": "hy", "arm": "hy", "ind": "id", "ibo": "ig", "isl": "is", "ice": "is",
    "ita": "it", "jpn": "ja", "jav": "jv", "kat": "ka", "geo": "ka", "kaz": "kk", "khm": "km",
    "kan": "kn", "kor": "ko", "kur": "ku", "kmr": "ku", "kir": "ky", "lat": "la", "ltz": "lb",
    "lug": "lg", "lin": "ln", "lao": "lo", "lit": "lt", "lav": "lv", "lvs": "lv", "mlg": "mg",
    "plt": "mg", "mkd": "mk", "mac": "mk", "mal": "ml", "mon": "mn", "khk": "mn", "mar": "mr",
    "msa": "ms", "may": "ms", "zsm": "ms", "mlt": "mt", "mya": "my", "bur": "my", "nep": "ne",
    "npi": "ne", "nld": "nl", "dut": "nl", "nno": "nn", "nor": "no", "nob": "no", "nb": "no",
    "oci": "oc", "orm": "om", "gaz": "om", "ori": "or", "ory": "or", "pan": "pa", "pol": "pl",
    "pus": "ps", "pbt": "ps", "por": "pt", "que": "qu", "ron": "ro", "rum": "ro", "rus": "ru",
    "kin": "rw", "san": "sa", "sme": "se", "sin": "si", "slk": "sk", "slo": "sk", "slv": "sl",
    "sna": "sn", "som": "so", "sqi": "sq", "alb": "sq", "als": "sq", "srp": "sr", "sot": "st",
    "swe": "sv", "swa": "sw", "swh": "sw", "tam": "ta", "tel": "te", "tgk": "tg", "tha": "th",
    "tuk": "tk", "tgl": "tl", "fil": "tl", "tur": "tr", "tat": "tt", "uig": "ug", "ukr": "uk",
    "urd": "ur", "uzb": "uz", "uzn": "uz", "vie": "vi", "vol": "vo", "wln": "wa", "xho": "xh",
    "yor": "yo", "zho": "zh", "chi": "zh", "cmn": "zh", "zul": "zu",
}  # fmt: skip
# Chinese written by Wu and Cantonese speakers counts as Chinese, and Nigerian Pidgin as English: py3langid
# labels some news Mandarin wuu and some English headlines pcm (examples/benchmarks/results/constants.md).
_VARIETIES = {"zh": ("zh", "wuu", "yue"), "en": ("en", "pcm")}
_SUFFIX = re.compile(r"[_-].*")  # deu_Latn, zho_simpl, pt-BR: the language is the part before
_URL_OR_EMAIL = re.compile(r"(?:https?://|www\.)\S+|\S+@\S+\.\S+", re.IGNORECASE)
# The scripts each identifier label is written in (Unicode script names, as `regex` spells them), for
# `in_script`; a label not listed (zxx, grc, ...) has no script test. Languages written in more than one
# script list each (Serbian, Uzbek, Kurdish, ...). Not from CLDR's likely subtags (langcodes): they give one
# script a language, and would turn away Latin Serbian.
_BY_SCRIPT = {
    "Latin": "af an az br bs ca cs cy da de en eo es et eu fi fo fr fy ga gd gl ha hr ht hu id ig is it "
    "jv ku la lb lg ln lt lv mg ms mt nl nn no oc om pl pt qu ro rw se sk sl sn so sq sr st sv sw tk tl tr "
    "tt uz vi vo wa xh yo zu ace bcl crh ext fuv gcf gcr gug guw kab kik lij ltg nso pcm vec",
    "Cyrillic": "az ba be bg bs crh kk ky mk mn ru sr tg tk tt uk uz",
    "Greek": "el",
    "Han": "ja ko wuu yue zh",
    "Hiragana": "ja",
    "Katakana": "ja",
    "Hangul": "ko",
    "Arabic": "ar ary arz fa ha ku ms pa ps sdh ug ur uzs",
    "Hebrew": "he",
    "Devanagari": "gom hi mr ne sa",
    "Bengali": "as bn",
    "Gurmukhi": "pa",
    "Gujarati": "gu",
    "Oriya": "or",
    "Tamil": "ta",
    "Telugu": "te",
    "Kannada": "kn",
    "Malayalam": "ml",
    "Sinhala": "si",
    "Thai": "th",
    "Lao": "lo",
    "Khmer": "km",
    "Myanmar": "my",
    "Georgian": "ka",
    "Armenian": "hy",
    "Ethiopic": "am",
    "Tibetan": "dz",
}


@functools.cache
def _identifier() -> Any:
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    try:
        return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    except OSError as exc:  # py3langid unpacks its model into a temporary file first
        raise BitextmineError(
            f"py3langid cannot unpack its model into a temporary file: {os_error_message(exc)}"
        ) from None


def model_id() -> str:
    """The identifier and its version, e.g. "py3langid 0.4.0": what a corpus filtered with it records."""
    return f"py3langid {importlib.metadata.version('py3langid')}"


@dataclass(frozen=True)
class LidFilter:
    """`encode`'s language filter of `lang` (the identifier's code): with `rule` "accept", keep the rows
    identified as `lang` with at least `min_confidence`; with "reject", drop the rows identified as another
    language with at least `min_confidence`, with no letter of `lang`'s script, or with no word."""

    lang: str
    min_confidence: float
    model: str  # the identifier and its version (`model_id`): another one rebuilds the corpus
    rule: str = "accept"  # a corpus built before the rules were named used "accept"

    def keeps(self, texts: Sequence[str]) -> np.ndarray:
        if self.rule == "accept":
            return is_language(texts, self.lang, self.min_confidence)
        words = np.fromiter((has_words(text) for text in texts), dtype=bool, count=len(texts))
        return ~is_other_language(texts, self.lang, self.min_confidence) & in_script(texts, self.lang) & words


def lid_code(lang: str) -> str:
    """The identifier's label for a language code as users write it: de, deu, cmn, zho_simpl, deu_Latn."""
    code = _label(lang)
    if code not in _identifier().labels:
        raise BitextmineError(
            f"language identification does not know the language {lang!r} (codes it knows: ISO 639-1 or "
            "639-3, e.g. de or deu)"
        )
    return code


def knows(lang: str) -> bool:
    """Whether `lid_code` maps `lang` to one of the identifier's labels."""
    return _label(lang) in _identifier().labels


def _label(lang: str) -> str:
    base = _SUFFIX.sub("", lang.lower())
    return _ALIASES.get(base, base)


def in_script(texts: Sequence[str], lang: str) -> np.ndarray:
    """Where a text has a letter of a script `lang` is written in (everywhere if none is listed for it)."""
    pattern = _script_pattern(lid_code(lang))
    if pattern is None:
        return np.ones(len(texts), dtype=bool)
    return np.fromiter((pattern.search(text) is not None for text in texts), dtype=bool, count=len(texts))


@functools.cache
def _script_pattern(code: str) -> regex.Pattern[str] | None:
    scripts = [script for script, codes in _BY_SCRIPT.items() if code in codes.split()]
    if not scripts:
        return None
    return regex.compile("|".join(rf"\p{{Script={script}}}" for script in scripts))


def has_words(text: str) -> bool:
    """True if, URLs and e-mail addresses removed, some token has two letters or more and more letters
    than digits: false for numbers, dates, times, phone numbers and product codes. An East Asian wide
    letter counts two: one ideograph can be a word ("好。")."""
    for token in _URL_OR_EMAIL.sub(" ", text).split():
        letters = sum(1 + (unicodedata.east_asian_width(c) in "WF") for c in token if c.isalpha())
        if letters >= 2 and letters > sum(1 for c in token if c.isdigit()):
            return True
    return False


def identify(texts: Sequence[str]) -> tuple[list[str], np.ndarray]:
    """The most likely language of each text and its probability (float32 in [0, 1]); "und", 0 if empty."""
    classify = _identifier().classify
    labels: list[str] = []
    confidence = np.zeros(len(texts), dtype=np.float32)
    for i, text in enumerate(texts):
        if text.strip():
            label, confidence[i] = classify(text)
        else:
            label = UNDETERMINED
        labels.append(label)
    return labels, confidence


def is_language(
    texts: Sequence[str], lang: str, min_confidence: float = DEFAULT_MIN_CONFIDENCE
) -> np.ndarray:
    """Where a text's most likely language is `lang` (mapped by `lid_code`) at `min_confidence` or more."""
    return accepts(*identify(texts), lang, min_confidence)


def is_other_language(
    texts: Sequence[str], lang: str, min_confidence: float = DEFAULT_OTHER_CONFIDENCE
) -> np.ndarray:
    """Where a text's most likely language is not `lang` (nor a variety of it), at `min_confidence` or
    more: confidently another language (a line too short or too odd to tell is not)."""
    labels, confidence = identify(texts)
    return ~_named(labels, lang) & (confidence >= min_confidence)


def accepts(labels: Sequence[str], confidence: np.ndarray, lang: str, min_confidence: float) -> np.ndarray:
    """`is_language` on what `identify` returned: the label is `lang` (or a variety) at the floor or above."""
    return _named(labels, lang) & (np.asarray(confidence) >= min_confidence)


def _named(labels: Sequence[str], lang: str) -> np.ndarray:
    code = lid_code(lang)
    wanted = _VARIETIES.get(code, (code,))
    return np.fromiter((label in wanted for label in labels), dtype=bool, count=len(labels))
