"""The Python API from end to end on a BUCC-format split: the workspace steps (encode, index, calibrate,
mine), scoring what was mined, and the in-memory helpers (load an encoder, embed, mine two arrays).

    python examples/python_api.py --model ../shared/models/multilingual-e5-small-q4 \
        --bucc ../shared/data/bucc-like/de-en --work /tmp/api-work --sentences 1000

`calibrate` stores its threshold in the workspace's threshold store (the model dir is only read). The
encoding's progress goes to stderr (show_progress_bar=True). It prints the calibrated F1, the F1 of
the mined file (equal: the workspace steps and calibration score the same float16 vectors) and the
in-memory pairs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import bitextmine as bm


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True, help="a sentence-transformers model dir")
    parser.add_argument("--bucc", type=Path, required=True, help="folder with de-en.dev.{de,en,gold}")
    parser.add_argument("--work", type=Path, required=True, help="workspace (created)")
    parser.add_argument("--sentences", type=int, default=1000, help="about this many sentences a side")
    args = parser.parse_args()

    work = bm.Workspace(args.work)
    model = args.model
    split = bm.sample_split(bm.read_bucc(args.bucc, "de-en", "dev"), args.sentences)

    # The workspace steps: one text file a language in, mined pairs out.
    for lang, side in (("de", split.src), ("en", split.tgt)):
        corpus = work.root / "input" / f"{lang}.txt"
        corpus.parent.mkdir(parents=True, exist_ok=True)
        corpus.write_text("".join(f"{sentence}\n" for sentence in side.sentences), encoding="utf-8")
        encoded = bm.encode(work, corpus, lang, model, show_progress_bar=True)
        info = bm.index(work, lang)
        print(f"{lang}: {encoded.rows:,} sentences encoded, index {info.factory}")

    encoder = bm.load_encoder(str(model))
    calibration = bm.calibrate(work, split, encoder)
    result = calibration.result
    print(f"calibrated: threshold {result.threshold:.4f}, F1 {100 * result.scores.f1:.2f}")
    mined = bm.mine(work, "de", "en", bm.MineOptions(threshold="auto"))
    scores = bm.score_mined_file(mined.output, split)
    print(f"mined: {mined.kept:,} pairs -> {mined.output}, F1 {100 * scores.f1:.2f}")

    # In memory: sentences to unit vectors, two arrays to scored one-to-one pairs.
    src = bm.embed(encoder, split.src.sentences, show_progress_bar=True)
    tgt = bm.embed(encoder, split.tgt.sentences, show_progress_bar=True)
    pairs = bm.mine_arrays(src, tgt).above(result.threshold)
    print(f"in memory: {len(pairs):,} pairs at the calibrated threshold")
    for source, target, score in pairs[:3]:
        print(f"  {score:.4f}  {split.src.sentences[source][:60]}  |  {split.tgt.sentences[target][:60]}")


if __name__ == "__main__":
    main()
