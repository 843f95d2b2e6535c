"""Language identification: which library, how accurate on short lines, how fast, how big; which floor.

Candidates, each measured in its own process (load time, peak RSS): py3langid through bitextmine's own
`bitextmine.text.lid.identify` (all 140 languages), lingua in its high- and low-accuracy modes built from
all 75 of its languages, and, as references only, both built from the 21 languages measured here (a
filter must also see languages outside that set, so the product cannot restrict itself). A fastText LID
model (lid.176) is named when one is on this machine; there was none, and none can be downloaded here.

Data (../shared/data): the Tatoeba test sentences (short) and FLORES-101 dev of de fr ru zh cs en and the
third languages of noisy-bucc (nl da sv it es pt ca uk bg be mk ja ko vi th); and the x sides of the
noisy-bucc dev splits, each line labelled as a genuine x sentence (it is in the bucc-like split),
untranslated English, a third-language translation (a FLORES line) or junk (numbers, URLs, boilerplate).

Reports: accuracy (top language right) a dataset and language, on lines of at most SHORT characters too;
lines/s of each dataset; and, for every confidence floor, the share of genuine lines that `is_language`
keeps, the share of lines accepted as a language they are not, and what it does to noisy-bucc's x sides.
Writes results/bench_lid.json (a run replaces all rows: they are compared with each other) and rewrites
results/bench_lid.md; --report-only rewrites the report from the JSON.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from benchlib import (
    RESULTS,
    SHARED,
    load_rows,
    peak_rss_mb,
    produced_by,
    runs_table,
    save_results,
    stamped,
    table,
)

# measured on purpose: bitextmine's language identifier (py3langid with its rule and floor) itself
from bitextmine.text.lid import DEFAULT_MIN_CONFIDENCE, _identifier, accepts, identify

DATA = SHARED / "data"
SCRIPT = "examples/benchmarks/bench_lid.py"
JSON = RESULTS / "bench_lid.json"
# ISO 639-1 -> (Tatoeba file code, FLORES-101 file code)
LANGS = {
    "de": ("deu", "deu"), "fr": ("fra", "fra"), "ru": ("rus", "rus"), "zh": ("cmn", "zho_simpl"),
    "cs": ("ces", "ces"), "en": ("eng", "eng"), "nl": ("nld", "nld"), "da": ("dan", "dan"),
    "sv": ("swe", "swe"), "it": ("ita", "ita"), "es": ("spa", "spa"), "pt": ("por", "por"),
    "ca": ("cat", "cat"), "uk": ("ukr", "ukr"), "bg": ("bul", "bul"), "be": ("bel", "bel"),
    "mk": ("mkd", "mkd"), "ja": ("jpn", "jpn"), "ko": ("kor", "kor"), "vi": ("vie", "vie"),
    "th": ("tha", "tha"),
}  # fmt: skip
THIRD = {"de": "nl da sv it", "fr": "it es pt ca", "ru": "uk bg be mk", "zh": "ja ko vi th"}  # noisy-bucc
SHORT = 30  # characters: a "short line"
FLOORS = (0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
PRODUCT = "py3langid"
CANDIDATES = {  # name -> (package, how it is built)
    "py3langid": ("py3langid", "bitextmine.text.lid.identify: all 140 languages, probabilities"),
    "lingua-high": ("lingua-language-detector", "high-accuracy mode, all 75 languages"),
    "lingua-low": ("lingua-language-detector", "low-accuracy mode, all 75 languages"),
    "lingua-high-21": ("lingua-language-detector", "high-accuracy mode, only the 21 languages here"),
    "py3langid-21": ("py3langid", "py3langid's classify restricted to the 21 languages here"),
}
Predict = Callable[[Sequence[str]], tuple[list[str], np.ndarray]]


# ---------------------------------------------------------------------------------------------------- data


def lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def tatoeba(lang: str) -> list[str]:
    code = LANGS[lang][0]
    pair = "deu" if lang == "en" else code  # English: the English side of the German pairs
    return lines(DATA / "tatoeba" / f"tatoeba.{pair}-eng.{code}")


def flores(lang: str) -> list[str]:
    return lines(DATA / "flores101" / "dev" / f"{LANGS[lang][1]}.dev")


def bucc_texts(path: Path) -> list[str]:
    return [line.split("\t", 1)[1] for line in lines(path)]


def noisy(x: str) -> tuple[list[str], list[str]]:
    """The x side of noisy-bucc's x-en dev split and each line's origin: x, en, third or junk."""
    genuine = set(bucc_texts(DATA / "bucc-like" / f"{x}-en" / f"{x}-en.dev.{x}"))
    english = set(bucc_texts(DATA / "bucc-like" / f"{x}-en" / f"{x}-en.dev.en"))
    third = {text for lang in THIRD[x].split() for text in flores(lang)}
    texts = bucc_texts(DATA / "noisy-bucc" / f"{x}-en" / f"{x}-en.dev.{x}")
    origin = [
        "x" if t in genuine else "en" if t in english else "third" if t in third else "junk" for t in texts
    ]
    return texts, origin


def datasets() -> dict[str, tuple[list[str], list[str]]]:
    """name -> (texts, the true language or origin of each)."""
    sets: dict[str, tuple[list[str], list[str]]] = {}
    for name, read in (("tatoeba", tatoeba), ("flores", flores)):
        texts, truth = [], []
        for lang in LANGS:
            got = read(lang)
            texts += got
            truth += [lang] * len(got)
        sets[name] = (texts, truth)
    for x in THIRD:
        sets[f"noisy-{x}"] = noisy(x)
    return sets


# ----------------------------------------------------------------------------------------------- measuring


def py3langid_21() -> Predict:
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    identifier.set_languages(list(LANGS))

    def predict(texts: Sequence[str]) -> tuple[list[str], np.ndarray]:
        results = [identifier.classify(t) for t in texts]
        return [r[0] for r in results], np.array([r[1] for r in results], dtype=np.float32)

    return predict


def lingua(low: bool, only: Sequence[str] | None) -> Predict:
    from lingua import IsoCode639_1, LanguageDetectorBuilder

    if only:
        builder = LanguageDetectorBuilder.from_iso_codes_639_1(
            *(getattr(IsoCode639_1, c.upper()) for c in only)
        )
    else:
        builder = LanguageDetectorBuilder.from_all_languages()
    if low:
        builder = builder.with_low_accuracy_mode()
    detector = builder.with_preloaded_language_models().build()

    def predict(texts: Sequence[str]) -> tuple[list[str], np.ndarray]:
        best = [values[0] for values in detector.compute_language_confidence_values_in_parallel(list(texts))]
        labels = [b.language.iso_code_639_1.name.lower() if b.value > 0 else "und" for b in best]
        return labels, np.array([b.value for b in best], dtype=np.float32)

    return predict


def load(name: str) -> Predict:
    if name == "py3langid":
        _identifier()  # the model, loaded once a process
        return identify
    if name == "py3langid-21":
        return py3langid_21()
    return lingua(low=name == "lingua-low", only=list(LANGS) if name.endswith("-21") else None)


def measure(name: str, out: Path) -> None:
    """In this process: load `name`, identify every dataset, write labels, confidences and times to `out`."""
    sets = datasets()
    started = time.perf_counter()
    predict = load(name)
    result: dict = {"load_s": time.perf_counter() - started, "sets": {}}
    for set_name, (texts, _) in sets.items():
        started, cpu_started = time.perf_counter(), time.process_time()
        labels, confidence = predict(texts)
        result["sets"][set_name] = {
            "seconds": time.perf_counter() - started,
            "cpu_seconds": time.process_time() - cpu_started,  # all threads: steadier on a shared machine
            "labels": labels,
            "confidence": confidence.tolist(),
        }
    result["peak_rss_mb"] = peak_rss_mb()
    out.write_text(json.dumps(result))


def run_candidate(name: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        subprocess.run([sys.executable, __file__, "--measure", name, str(out)], check=True)
        return json.loads(out.read_text())


def installed_mb(package: str) -> float:
    files = importlib.metadata.distribution(package).files or []
    return sum(f.locate().stat().st_size for f in files if f.locate().is_file()) / 1e6


# ------------------------------------------------------------------------------------------------- scoring


def accuracy_rows(name: str, result: dict, sets: dict) -> list[dict]:
    rows = []
    for set_name in ("tatoeba", "flores"):
        texts, truth = sets[set_name]
        got = result["sets"][set_name]
        truth_arr = np.array(truth, dtype=object)
        right = right_language(_predicted(result, set_name), truth_arr, 0.0)
        short = np.array([len(t) <= SHORT for t in texts])
        rows.append(
            {
                "kind": "accuracy",
                "identifier": name,
                "dataset": set_name,
                "lines": len(texts),
                "accuracy": round(float(right.mean()), 4),
                "short_lines": int(short.sum()),
                "short_accuracy": round(float(right[short].mean()), 4),
                "by_lang": {lang: round(float(right[truth_arr == lang].mean()), 4) for lang in LANGS},
                "lines_per_s": round(len(texts) / got["seconds"]),
                "lines_per_cpu_s": round(len(texts) / got["cpu_seconds"]),
                "noisy_lines_per_s": noisy_speed(result, sets),
                "load_s": round(result["load_s"], 2),
                "peak_rss_mb": round(result["peak_rss_mb"]),
                "installed_mb": round(installed_mb(CANDIDATES[name][0]), 1),
                "build": CANDIDATES[name][1],
            }
        )
    return rows


def floor_rows(name: str, result: dict, sets: dict) -> list[dict]:
    rows = []
    for floor in FLOORS:
        row: dict = {"kind": "floor", "identifier": name, "floor": floor}
        for set_name in ("tatoeba", "flores"):
            _, truth = sets[set_name]
            predicted = _predicted(result, set_name)
            truth_arr = np.array(truth, dtype=object)
            right = right_language(predicted, truth_arr, floor)
            kept = {lang: float(right[truth_arr == lang].mean()) for lang in LANGS}
            worst = min(kept, key=kept.__getitem__)
            wrong = sum(accepts(*predicted, lang, floor) & (truth_arr != lang) for lang in LANGS)
            row[set_name] = {
                "kept": round(float(np.mean(list(kept.values()))), 4),
                "kept_worst": round(kept[worst], 4),
                "worst_lang": worst,
                "wrong_accepted": round(float(wrong.mean()), 4),
            }
        row["noisy"] = noisy_effect(result, sets, floor)
        rows.append(stamped(row))
    return rows


def right_language(predicted: tuple[np.ndarray, np.ndarray], truth: np.ndarray, floor: float) -> np.ndarray:
    """Where `is_language`'s rule at `floor` accepts each line as its true language."""
    right = np.zeros(len(truth), dtype=bool)
    for lang in LANGS:
        right |= accepts(*predicted, lang, floor) & (truth == lang)
    return right


def noisy_effect(result: dict, sets: dict, floor: float) -> dict:
    """Share of each origin's lines of noisy-bucc's x sides (pooled) that `is_language(x)` keeps, and share
    of the junk lines whose top language (any) reaches the floor."""
    kept: dict[str, list[bool]] = {"x": [], "en": [], "third": [], "junk": [], "junk_any": []}
    for x in THIRD:
        predicted = _predicted(result, f"noisy-{x}")
        origins = np.array(sets[f"noisy-{x}"][1], dtype=object)
        passed = accepts(*predicted, x, floor)
        for origin in ("x", "en", "third", "junk"):
            kept[origin] += passed[origins == origin].tolist()
        kept["junk_any"] += (predicted[1][origins == "junk"] >= floor).tolist()
    return {origin: round(float(np.mean(values)), 4) for origin, values in kept.items()}


def _predicted(result: dict, set_name: str) -> tuple[np.ndarray, np.ndarray]:
    got = result["sets"][set_name]
    return np.array(got["labels"], dtype=object), np.array(got["confidence"], dtype=np.float32)


def noisy_speed(result: dict, sets: dict) -> int:
    names = [f"noisy-{x}" for x in THIRD]
    return round(sum(len(sets[n][0]) for n in names) / sum(result["sets"][n]["seconds"] for n in names))


# -------------------------------------------------------------------------------------------------- report


def pct(value: float) -> str:
    return f"{100 * value:.1f}"


def report(rows: list[dict]) -> str:
    accuracy = [r for r in rows if r["kind"] == "accuracy"]
    floors = [r for r in rows if r["kind"] == "floor"]
    names = list(dict.fromkeys(r["identifier"] for r in accuracy))
    by = {(r["identifier"], r["dataset"]): r for r in accuracy}
    lines = [
        "# bench_lid: language identification on short lines: accuracy, speed, size; the confidence floor",
        "",
        produced_by(SCRIPT, "bench-lid"),
        "",
        f"Data: Tatoeba test sentences and FLORES-101 dev of {len(LANGS)} languages ({' '.join(LANGS)}; "
        "English: the English side of Tatoeba's German pairs), and the x sides of noisy-bucc's dev splits. "
        "Accuracy: the top language is the right one (for zh, as `is_language` counts it: zh, wuu or yue). "
        "Lines/s: identifying the whole dataset in one call (lingua's `*_in_parallel` API uses every core; "
        "py3langid one); lines per CPU s counts the CPU time of all threads, steadier when other work shares "
        "the machine. No fastText LID model (lid.176) is on this machine, and none can be downloaded "
        "here, so fastText is not measured.",
        "",
        "## Which identifier?",
        "",
        _choice_sentence(by, names),
        "",
        *table(
            f"identifier | built from | Tatoeba % | Tatoeba ≤ {SHORT} chars % | FLORES % | Tatoeba lines/s "
            "| FLORES lines/s | FLORES lines per CPU s | load s | peak RSS MB | installed MB",
            "llrrrrrrrrr",
            (
                f"{n} | {by[n, 'tatoeba']['build']} | {pct(by[n, 'tatoeba']['accuracy'])} "
                f"| {pct(by[n, 'tatoeba']['short_accuracy'])} ({by[n, 'tatoeba']['short_lines']:,} lines) "
                f"| {pct(by[n, 'flores']['accuracy'])} | {by[n, 'tatoeba']['lines_per_s']:,} "
                f"| {by[n, 'flores']['lines_per_s']:,} | {by[n, 'flores']['lines_per_cpu_s']:,} "
                f"| {by[n, 'tatoeba']['load_s']} | {by[n, 'tatoeba']['peak_rss_mb']:,} "
                f"| {by[n, 'tatoeba']['installed_mb']}"
                for n in names
            ),
        ),
        "",
        "## Accuracy by language (Tatoeba / FLORES, %)",
        "",
        *table(
            "language | " + " | ".join(names),
            "l" + "r" * len(names),
            (
                f"{lang} | "
                + " | ".join(
                    f"{pct(by[n, 'tatoeba']['by_lang'][lang])} / {pct(by[n, 'flores']['by_lang'][lang])}"
                    for n in names
                )
                for lang in LANGS
            ),
        ),
    ]
    for name in names:
        lines += ["", *_floor_section(name, [r for r in floors if r["identifier"] == name])]
    return "\n".join([*lines, "", *runs_table(rows, lambda r: r["identifier"])]) + "\n"


def _choice_sentence(by: dict, names: list[str]) -> str:
    def facts(n: str) -> str:
        t, f = by[n, "tatoeba"], by[n, "flores"]
        return (
            f"{n} {pct(t['short_accuracy'])}% / {pct(f['accuracy'])}% at {t['lines_per_s']:,} / "
            f"{f['lines_per_s']:,} lines/s, {t['installed_mb']} MB, {t['peak_rss_mb']:,} MB RSS"
        )

    usable = [n for n in names if not n.endswith("-21")]
    return (
        "The builds a product can use (all their languages): accuracy on Tatoeba lines of at most "
        f"{SHORT} characters / on FLORES, lines/s on Tatoeba / FLORES, installed size, peak RSS: "
        + "; ".join(facts(n) for n in usable)
        + f". bitextmine uses {PRODUCT} (docs/design.md, Language identification)."
    )


def _floor_section(name: str, rows: list[dict]) -> list[str]:
    title = f"## {name}: what a confidence floor keeps"
    if name == PRODUCT:
        title += f" (bitextmine's default floor: {DEFAULT_MIN_CONFIDENCE})"
    return [
        title,
        "",
        "Kept: share of a language's genuine lines whose top language is theirs at the floor or above (mean "
        "over languages; the worst language). Wrong: share of all lines accepted as another language of the "
        "set. noisy-bucc: share of each kind of x-side line (pooled over de, fr, ru, zh) that "
        "`is_language(x)` keeps: genuine x sentences, untranslated English, third-language translations, "
        "junk and boilerplate; junk at floor: share of the junk whose top language, whichever, reaches the "
        "floor (the English boilerplate among it is English).",
        "",
        *table(
            "floor | Tatoeba kept % (worst) | FLORES kept % (worst) | Tatoeba wrong % | FLORES wrong % "
            "| noisy x kept % | noisy English kept % | noisy third-language kept % | noisy junk kept % "
            "| noisy junk at floor %",
            "rllrrrrrrr",
            map(_floor_cells, rows),
        ),
    ]


def _floor_cells(r: dict) -> str:
    kept = [
        f"{pct(r[s]['kept'])} ({r[s]['worst_lang']} {pct(r[s]['kept_worst'])})" for s in ("tatoeba", "flores")
    ]
    wrong = [pct(r[s]["wrong_accepted"]) for s in ("tatoeba", "flores")]
    noisy = [pct(r["noisy"][origin]) for origin in ("x", "en", "third", "junk", "junk_any")]
    return " | ".join([str(r["floor"]), *kept, *wrong, *noisy])


# ---------------------------------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", nargs="*", choices=list(CANDIDATES), help="candidates to measure [all]")
    parser.add_argument("--report-only", action="store_true", help="rewrite the report from the JSON")
    parser.add_argument("--measure", nargs=2, metavar=("NAME", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        measure(args.measure[0], Path(args.measure[1]))
        return
    if args.report_only:
        rows = load_rows(JSON)
        JSON.with_suffix(".md").write_text(report(rows))
        print(f"wrote {JSON.with_suffix('.md')}")
        return
    sets = datasets()
    measured = args.only or list(CANDIDATES)
    rows = [r for r in load_rows(JSON) if r["identifier"] not in measured]  # --only keeps the others' rows
    for name in measured:
        print(f"measuring {name}", flush=True)
        result = run_candidate(name)
        rows += [stamped(r) for r in accuracy_rows(name, result, sets)] + floor_rows(name, result, sets)
    save_results(JSON, rows, report(rows))


if __name__ == "__main__":
    main()
