"""Layer-wise alignment of an encoder's token vectors: `eval words` (Gaschi et al.) and `eval tokens`
(MEXMA §5.5) for the shared e5 model and, with --trained DIR, a model trained by `bitextmine train`.

  words   de-en (5,000 word pairs) and zh-en (2,000: the shared zh-en news holds 2,273 distinct pairs),
          10 samplings, CSLS k = 10, weak and strong alignment per layer, sentence retrieval table
  tokens  FLORES dev, the first --token-sentences English sentences x 3 tokens, 5 nearest tokens among
          all tokens of --token-langs languages, classified same language / sentence / translation / other

Each run is a `bitextmine eval` command whose --json lands in results/analysis/, stamped there with its
date, machine and commit; a JSON already there is reused (delete it to measure again). The report is
results/bench_analysis.md. Quality numbers, not timings: runs may share the machine.

Usage: python examples/benchmarks/bench_analysis.py [--trained DIR] [--only words|tokens]
       python examples/benchmarks/bench_analysis.py --report-only   (from the JSON there, e5 and trained)
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

from benchlib import BITEXTMINE, MODEL, RESULTS, SHARED, runs_table, stamped

ANALYSIS = RESULTS / "analysis"
WORD_PAIRS = {"de-en": 5000, "zh-en": 2000}
TOKEN_LANGS = "eng,deu,fra,rus,zho_simpl,ces,spa,ara,hin,jpn"


def run(args: list[str], out: Path) -> dict:
    """The JSON of a `bitextmine eval` run, made now (and stamped: date, machine, commit) unless an earlier
    run left it (rerun to report)."""
    if not out.is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        command = [*BITEXTMINE, "eval", *args, "--json", str(out)]
        print(" ".join(command), flush=True)
        subprocess.run(command, check=True)
        write_json(out, stamped(json.loads(out.read_text())))
    return json.loads(out.read_text())


def write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def words(model: Path, name: str, pair: str) -> dict:
    x = pair.split("-")[0]
    return run(
        [
            "words", "--pair", pair, "--model", str(model),
            "--parallel", str(SHARED / "data" / "parallel" / pair / "news"),
            "--dict", str(SHARED / "data" / "dictionaries" / f"{x}-en.txt"),
            "--pairs", str(WORD_PAIRS[pair]), "--sentence-pairs", "5000", "--samplings", "10", "--k", "10",
        ],
        ANALYSIS / f"{name}-words-{pair}.json",
    )  # fmt: skip


def tokens(model: Path, name: str, langs: str, sentences: int) -> dict:
    return run(
        [
            "tokens", "--model", str(model), "--flores", str(SHARED / "data" / "flores101" / "dev"),
            "--langs", langs, "--query-sentences", str(sentences),
        ],
        ANALYSIS / f"{name}-tokens.json",
    )  # fmt: skip


def _cell(entry: dict) -> str:
    return f"{entry['mean']:.1f} ± {entry['std']:.1f}"


def words_table(result: dict) -> list[str]:
    x, y = result["pair"].split("-")
    fwd, bwd = f"{x}->{y}", f"{y}->{x}"
    weak, strong = result["words"]["weak"]["layers"], result["words"]["strong"]["layers"]
    lines = [
        f"| layer | weak {fwd} | weak {bwd} | strong {fwd} | strong {bwd} |",
        "|---:|---:|---:|---:|---:|",
    ]
    for w, s in zip(weak, strong, strict=True):
        lines.append(
            f"| {w['layer']} | {_cell(w[fwd])} | {_cell(w[bwd])} | {_cell(s[fwd])} | {_cell(s[bwd])} |"
        )
    return lines


def best_layers(result: dict) -> dict[str, int]:
    x, y = result["pair"].split("-")
    best = {}
    for kind in ("weak", "strong"):
        layers = result["words"][kind]["layers"]
        score = [(e[f"{x}->{y}"]["mean"] + e[f"{y}->{x}"]["mean"]) / 2 for e in layers]
        best[kind] = layers[max(range(len(score)), key=score.__getitem__)]["layer"]
    return best


def sentence_table(result: dict) -> list[str]:
    x, y = result["pair"].split("-")
    lines = [f"| pooling | layer | {x}->{y} | {y}->{x} |", "|---|---:|---:|---:|"]
    for pooling in ("cls", "mean"):
        layers = result["sentences"][pooling]["layers"]
        score = [(e[f"{x}->{y}"]["mean"] + e[f"{y}->{x}"]["mean"]) / 2 for e in layers]
        best = max(range(len(score)), key=score.__getitem__)
        for label, index in (("first", 0), ("best", best), ("last", len(layers) - 1)):
            e = layers[index]
            lines.append(
                f"| {pooling.upper() if pooling == 'cls' else pooling} {label} | {e['layer']} "
                f"| {_cell(e[f'{x}->{y}'])} | {_cell(e[f'{y}->{x}'])} |"
            )
    return lines


def tokens_table(results: dict[str, dict]) -> list[str]:
    categories = ("same_language", "same_sentence", "translation", "other")
    lines = [
        "| model | " + " | ".join(c.replace("_", " ") for c in categories) + " |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, result in results.items():
        shares = result["percent"]
        lines.append(f"| {name} | " + " | ".join(f"{shares[c]:.1f}" for c in categories) + " |")
    return lines


def _weak_curve(result: dict) -> list[float]:
    x, y = result["pair"].split("-")
    return [(e[f"{x}->{y}"]["mean"] + e[f"{y}->{x}"]["mean"]) / 2 for e in result["words"]["weak"]["layers"]]


def findings(words_results: dict) -> list[str]:
    """The layer curves against Gaschi et al.'s (Fig. 6, Table III), read off the numbers above."""
    lines = ["## Against the paper", ""]
    for (name, pair), result in words_results.items():
        curve = _weak_curve(result)
        last = len(curve) - 1
        inner = [i for i in range(1, last) if curve[i - 1] < curve[i] > curve[i + 1]]
        peak = max(inner, key=curve.__getitem__) if inner else None
        best = max(range(len(curve)), key=curve.__getitem__)
        text = (
            f"- {name} {pair}: weak alignment (both directions averaged) rises from {curve[0]:.1f} at the "
            f"input embeddings to {max(curve[: last // 2 + 1]):.1f} by layer {last // 2}"
        )
        if peak is not None:
            dip = min(curve[peak:])
            text += f", peaks in the middle at layer {peak} ({curve[peak]:.1f}), dips to {dip:.1f}"
        text += f"; the best layer is {best} ({curve[best]:.1f}), the last {last} ({curve[last]:.1f})."
        lines.append(text)
    for (name, pair), result in words_results.items():
        base = words_results.get(("e5", pair))
        if name == "e5" or base is None:
            continue
        delta = [t - b for t, b in zip(_weak_curve(result), _weak_curve(base), strict=True)]
        moved = [i for i, d in enumerate(delta) if abs(d) >= 1.0]
        top = max(range(len(delta)), key=delta.__getitem__)
        bottom = max(abs(d) for d in delta[:4])
        lines.append(
            f"- {name} vs e5, {pair}: weak alignment moved by a point or more at layers "
            f"{', '.join(map(str, moved)) or 'none'} (largest change {delta[top]:+.1f} at layer {top}); "
            f"the input embeddings and layers 1-3 stay within {bottom:.1f}."
        )
    e5_last_best = all(
        max(range(len(c := _weak_curve(r))), key=c.__getitem__) == len(c) - 1
        for (name, _), r in words_results.items()
        if name == "e5"
    )
    lines.append(
        "- Gaschi et al. (Fig. 6, Table III) find, for encoders pre-trained without parallel data, that the "
        "lower layers align worst and the middle-upper layers best, the last layers being worse again "
        "(XLM-R Base de-en weak: best 87.7, last 77.2; mBERT 94.1 vs 87.9), which they attribute to "
        "language-specific components that masked-word prediction needs near the output. "
        + (
            "The e5 curves rise the same way, but their last layer is the best: e5 starts from a "
            "multilingual pre-trained encoder and is then trained contrastively on text pairs with the "
            "mean of the last layer as its sentence vector, so that layer is where training pulls "
            "translations together; a middle peak followed by a dip, where the lines above show one, is "
            "what remains of the pre-trained shape. Gaschi et al.'s finding holds for the middle "
            "layers of the curve, not for the end of a contrastively trained encoder."
            if e5_last_best
            else "For e5 the best layer is not always the last one (see the lines above)."
        )
    )
    mean_wins = all(
        m[d]["mean"] >= c[d]["mean"]
        for r in words_results.values()
        for c, m in zip(r["sentences"]["cls"]["layers"], r["sentences"]["mean"]["layers"], strict=True)
        for d in c
        if d != "layer"
    )
    lines.append(
        "- Sentence retrieval: mean pooling "
        + (
            "is at least as good as the first-token (CLS) vector at every layer"
            if mean_wins
            else "loses to CLS at some layer"
        )
        + ", as in the paper's Table I (at layer 0 the first token is the same for every sentence, "
        "so CLS scores 0)."
    )
    below = all(
        s[d]["mean"] <= w[d]["mean"]
        for result in words_results.values()
        for w, s in zip(result["words"]["weak"]["layers"], result["words"]["strong"]["layers"], strict=True)
        for d in w
        if d != "layer"
    )
    lines += [
        "- Strong alignment (the translation nearer than every same-language word) is "
        + ("at or below weak alignment at every layer" if below else "ABOVE weak alignment at some layer")
        + ", as the paper's Tables III and IV show for its models.",
        "",
    ]
    return lines


def token_findings(token_results: dict[str, dict]) -> list[str]:
    """Which of MEXMA §5.5's three behaviours each model's token neighbours show."""
    lines = []
    for name, result in token_results.items():
        shares = result["percent"]
        top = max(("same_language", "same_sentence", "translation"), key=shares.__getitem__)
        cluster = {
            "same_language": "XLM-RoBERTa's lexical behaviour (same-language matches dominate)",
            "same_sentence": "LaBSE / DAP / no-tok-MEXMA's behaviour (many translation matches, but even "
            "more matches with tokens of the same sentence: tokens carry much context), the behaviour the "
            "paper sees in encoders trained with a sentence-level contrastive loss",
            "translation": "NLLB / SONAR / MEXMA's behaviour (translation matches dominate)",
        }[top]
        lines.append(
            f"- {name}: {shares['same_sentence']:.1f}% same sentence, {shares['translation']:.1f}% "
            f"translation, {shares['same_language']:.1f}% same language, {shares['other']:.1f}% other: "
            f"{cluster}."
        )
    return [
        *lines,
        "- MEXMA's Table 9 figures are missing from our copy of the paper (only its text survives), so the "
        "comparison is with the behaviours the text describes. Setting differences: FLORES-101 dev instead "
        "of FLORES-200 test, and the languages listed above instead of the paper's 81.",
        "",
    ]


def describe_trained(model_dir: Path) -> None:
    """Keep what the trained model is (from the training summary `bitextmine train` saved with it) in
    analysis/trained-model.json, so that the report can be rewritten without the model."""
    summary = json.loads((model_dir / "bitextmine.json").read_text()).get("training", {})
    about = {
        "model": model_dir.name,
        "objectives": list(summary.get("objectives", {})),
        "steps": summary.get("steps"),
    }
    write_json(ANALYSIS / "trained-model.json", stamped(about))


def trained_note() -> str:
    """What the trained model is, and its scores where they were measured (see `scores_note`)."""
    path = ANALYSIS / "trained-model.json"
    if not path.is_file():
        return "not evaluated"
    about = json.loads(path.read_text())
    objectives = ", ".join(about["objectives"]) or "?"
    note = f"`{about['model']}`, trained by `bitextmine train` ({objectives}, {about['steps'] or '?'} steps)"
    return note + scores_note(ANALYSIS / "trained-eval.json", about["model"])


def scores_note(path: Path, model_name: str) -> str:
    """The trained model's dev F1 and Tatoeba accuracy, from `bitextmine eval ... --json` outputs collected
    in `path` (`model`, `bucc_dev`: pair -> eval bucc JSON, `tatoeba`: eval tatoeba JSON) when they are
    this model's, next to the base model's row in bench_train.json."""
    scores = json.loads(path.read_text()) if path.is_file() else {}
    if Path(scores.get("model", "")).name != model_name:
        return ""
    base = json.loads((RESULTS / "bench_train.json").read_text())["base"]["eval"]
    tatoeba = [v for key, v in base.items() if key.startswith("tatoeba/")]
    f1 = ", ".join(f"{pair} {r['f1']:.2f}" for pair, r in scores["bucc_dev"].items())
    base_f1 = ", ".join(f"{pair} {base[f'bucc/{pair}']:.2f}" for pair in scores["bucc_dev"])
    return (
        f"; bucc-like dev F1 (oracle threshold, bf16) {f1}, Tatoeba average "
        f"{scores['tatoeba']['average']:.2f} (`{path.name}`; base e5 in bench_train.json: {base_f1}, "
        f"Tatoeba {sum(tatoeba) / len(tatoeba):.2f})"
    )


def report(words_results: dict, token_results: dict) -> str:
    lines = [
        "# bench_analysis: word-level alignment and token matching",
        "",
        "Produced by `examples/benchmarks/bench_analysis.py` (`make bench-analysis`); raw numbers, each "
        "run's date, machine and commit in `results/analysis/*.json`. Models: `e5` = the shared "
        f"multilingual-e5-small-q4; `trained` = {trained_note()}. Word pairs from the shared news pairs "
        "and MUSE dictionaries, identical dictionary entries (names, numbers) dropped as in the authors' "
        "code; the paper's "
        "figures come from other sentences (WMT19), so compare shapes, not decimals.",
        "",
    ]
    for (name, pair), result in words_results.items():
        best = best_layers(result)
        lines += [
            f"## {name}: words {pair} (% of {result['settings']['pairs']:,} word pairs, mean ± std over "
            f"{result['settings']['samplings']} samplings; best layer weak {best['weak']}, "
            f"strong {best['strong']})",
            "",
            *words_table(result),
            "",
            f"Sentence retrieval (CSLS, {result['settings']['sentence_pairs']:,} pairs per sampling):",
            "",
            *sentence_table(result),
            "",
        ]
    if words_results:
        lines += findings(words_results)
    if token_results:
        first = next(iter(token_results.values()))
        lines += [
            f"## Token matching (MEXMA §5.5): % of the {first['settings']['neighbors']} nearest tokens",
            "",
            f"Languages: {', '.join(first['langs'])} ({first['sentences_per_language']} FLORES dev sentences "
            f"each, {first['candidate_tokens']:,} candidate tokens); {first['queries']:,} English query "
            "tokens from the first sentences, last layer.",
            "",
            *tokens_table(token_results),
            "",
            *token_findings(token_results),
        ]
    runs = [
        {**json.loads(path.read_text()), "file": path.name}
        for path in sorted(ANALYSIS.glob("*.json"))
        if path.name != "trained-model.json"
    ]
    return "\n".join([*lines, *runs_table(runs, lambda r: r["file"])]) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trained", type=Path, help="a model dir from `bitextmine train`")
    parser.add_argument("--only", choices=("words", "tokens"), action="append")
    parser.add_argument("--token-langs", default=TOKEN_LANGS)
    parser.add_argument("--token-sentences", type=int, default=250)
    parser.add_argument("--report-only", action="store_true", help="rewrite the .md from the JSON there")
    args = parser.parse_args()
    if not args.report_only:
        if args.trained:
            describe_trained(args.trained)
        only = set(args.only or ("words", "tokens"))
        for name, model in {"e5": MODEL, **({"trained": args.trained} if args.trained else {})}.items():
            if "words" in only:
                for pair in WORD_PAIRS:
                    words(model, name, pair)
            if "tokens" in only:
                tokens(model, name, args.token_langs, args.token_sentences)
    (RESULTS / "bench_analysis.md").write_text(saved_report())
    print((RESULTS / "bench_analysis.md").read_text())


def saved_report() -> str:
    """The report of every model's JSON in analysis/ (the trained model's where trained-model.json is)."""
    names = ["e5", *(["trained"] if (ANALYSIS / "trained-model.json").is_file() else [])]
    words_results = {
        (name, pair): json.loads(path.read_text())
        for name in names
        for pair in WORD_PAIRS
        if (path := ANALYSIS / f"{name}-words-{pair}.json").is_file()
    }
    token_results = {
        name: json.loads(path.read_text())
        for name in names
        if (path := ANALYSIS / f"{name}-tokens.json").is_file()
    }
    return report(words_results, token_results)


if __name__ == "__main__":
    main()
