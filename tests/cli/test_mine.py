"""`index`, `mine`, `calibrate` and `eval bucc` end to end on a tiny model and a tiny BUCC-format split."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import faiss
import pytest

from tests.helpers import eval_bucc_dev, read_mined, run, sentences, write_bucc

pytestmark = pytest.mark.integration  # the CLI end to end (docs: make test-fast leaves these out)


def test_index_then_mine_finds_the_identical_sentences(workspace):
    work, shared = workspace
    for lang in ("de", "en"):
        code, output = run("index", lang, "-w", str(work))
        assert code == 0 and "Flat" in output, output
        info = json.loads((work / "index" / f"{lang}.json").read_text())
        assert info["count"] == (25 if lang == "de" else 22) and info["recall"] == 1.0
        assert info["recall_source"] == ("en" if lang == "de" else "de")
        assert f"with {info['recall_source']} queries" in " ".join(output.split())
    code, output = run("index", "de", "-w", str(work), "--queries-from", "self")
    assert code == 0 and "with self queries" in " ".join(output.split()), output
    code, output = run("index", "de", "-w", str(work), "--queries-from", "xx")
    assert code == 1 and "no embeddings for 'xx'" in output, output
    code, output = run("mine", "de", "en", "-w", str(work), "--threshold", "1.0", "--filters", "none")
    assert code == 0, output
    rows = read_mined(work / "mined" / "de-en.tsv.zst")
    scores = [float(r[0]) for r in rows]
    assert scores == sorted(scores, reverse=True) and min(scores) >= 1.0
    identical = [r for r in rows if r[1] == r[2]]
    assert {r[1] for r in identical} == set(shared)
    de_file, en_file = (str(work.parent / f"{lang}.txt") for lang in ("de", "en"))
    assert {r[3] for r in identical} == {f"{de_file}:{i + 1}" for i in range(10)}
    assert {r[4] for r in identical} == {f"{en_file}:{i + 13}" for i in range(10)}
    stats = json.loads((work / "mined" / "de-en.stats.json").read_text())
    assert stats["counts"]["src_sentences"] == 25 and stats["counts"]["kept"] == len(rows)
    assert sum(stats["score_histogram"]["counts"]) == stats["counts"]["one_to_one_candidates"]


def test_list_size_builds_n_over_l_lists_that_mine_the_same_pairs(workspace):
    work, shared = workspace
    code, output = run("index", "de", "-w", str(work), "--list-size", "5", "--factory", "Flat")
    assert code == 1 and "give --factory or --list-size, not both" in output, output
    for lang in ("de", "en"):
        code, output = run("index", lang, "-w", str(work), "--list-size", "5")
        assert code == 0, output
        assert json.loads((work / "index" / f"{lang}.json").read_text())["factory"] == "IVF1,Flat"
    code, output = run("mine", "de", "en", "-w", str(work), "--threshold", "1.0", "--filters", "none")
    assert code == 0, output
    assert {r[1] for r in read_mined(work / "mined" / "de-en.tsv.zst") if r[1] == r[2]} == set(shared)


def test_max_codes_caps_the_rows_each_query_scans(workspace):
    """One IVF list holds each side in row order, so --max-codes 3 lets a query see the first 3 rows."""
    work, _ = workspace
    for lang in ("de", "en"):
        assert run("index", lang, "-w", str(work), "--list-size", "25")[0] == 0
    assert run("mine", "de", "en", "-w", str(work))[0] == 0
    reference = (work / "mined" / "de-en.tsv.zst").read_bytes()
    code, output = run("mine", "de", "en", "-w", str(work), "--max-codes", "25")
    assert code == 0, output
    assert (work / "mined" / "de-en.tsv.zst").read_bytes() == reference
    code, output = run("mine", "de", "en", "-w", str(work), "--max-codes", "3")
    assert code == 0, output
    rows = read_mined(work / "mined" / "de-en.tsv.zst")
    first_three = {"1", "2", "3"}  # line numbers: ids are INPUT-PATH:LINE
    assert rows and all(
        r[3].rsplit(":", 1)[1] in first_three or r[4].rsplit(":", 1)[1] in first_three for r in rows
    )


def test_missing_steps_and_mismatches_are_one_line_errors(workspace, tiny_model_dir, tmp_path):
    work, _ = workspace
    code, output = run("mine", "de", "en", "-w", str(work))
    assert code == 1 and "run `bitextmine index de`" in output
    code, output = run("mine", "de", "fr", "-w", str(work))
    assert code == 1 and "bitextmine encode FILE... --lang fr" in output
    run("index", "de", "-w", str(work))
    run("index", "en", "-w", str(work))
    code, output = run("mine", "de", "en", "-w", str(work), "--threshold", "auto")
    assert code == 1 and "no calibrated threshold for de-en" in output and "bitextmine calibrate" in output
    code, output = run("mine", "de", "en", "-w", str(work), "--k", "50")  # k beyond both corpora: clamped
    assert code == 0, output
    path = tmp_path / "fr.txt"
    path.write_text("\n".join(sentences(5, seed=9)) + "\n")
    run(
        "encode",
        "--lid",
        "off",
        str(path),
        "-l",
        "fr",
        "-m",
        str(tiny_model_dir("xlm-roberta")),
        "-w",
        str(work),
    )
    run("index", "fr", "-w", str(work))
    code, output = run("mine", "de", "fr", "-w", str(work))
    assert code == 1 and "encode both with the same model" in output and "Traceback" not in output


def test_mining_a_language_against_itself_is_refused(indexed_workspace):
    """`mine de de` wrote every sentence paired with itself, without a word."""
    work, _ = indexed_workspace
    code, output = run("mine", "de", "de", "-w", str(work))
    assert code == 1 and "error: mine de de: the source and the target are one corpus" in output, output
    assert not (work / "mined").exists() or not list((work / "mined").glob("de-de*"))


def test_calibrate_stores_a_threshold_that_mine_and_eval_use(tmp_path, tiny_model_dir):
    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir("bert"), model)
    bucc = tmp_path / "bucc"
    bucc.mkdir()
    shared = sentences(8, seed=4)
    write_bucc(bucc, shared)
    work = str(tmp_path / "w")
    code, output = run("calibrate", "--bucc", str(bucc), "--pair", "de-en", "--model", str(model), "-w", work)
    assert code == 0, output
    [record] = json.loads((Path(work) / "thresholds.json").read_text())["thresholds"]  # not in the model dir
    threshold = record["value"]

    report = tmp_path / "eval.json"
    code, output = eval_bucc_dev(
        bucc,
        "--model",
        str(model),
        "-w",
        work,
        "--threshold",
        "auto",
        "--json",
        str(report),
    )
    assert code == 0, output
    result = json.loads(report.read_text())
    assert result["threshold"] == threshold and result["f1"] == 100.0 and result["recall"] == 100.0

    for side, lines in (("de", bucc / "de-en.dev.de"), ("en", bucc / "de-en.dev.en")):
        corpus = tmp_path / f"{side}.txt"
        corpus.write_text("".join(line.split("\t", 1)[1] for line in lines.read_text().splitlines(True)))
        assert run("encode", "--lid", "off", str(corpus), "-l", side, "-m", str(model), "-w", work)[0] == 0
        assert run("index", side, "-w", work)[0] == 0
    code, output = run("mine", "de", "en", "-w", work, "--k", "16", "--threshold", "auto")
    assert code == 1 and "no calibrated threshold for de-en (ratio margin, k=16)" in output, output
    for fmt in ("tsv.zst", "jsonl", "parquet"):  # every format mine writes, translation column too
        code, output = run(
            "mine", "de", "en", "-w", work, "--threshold", "auto", "--format", fmt, "--filters", "none"
        )
        assert code == 0 and "with k=4, strategy max (best F1 100.00)" in " ".join(output.split()), output
        mined = Path(work) / "mined" / f"de-en.{fmt}"
        code, output = eval_bucc_dev(bucc, "--mined", str(mined), "--json", str(report))
        assert code == 0, output
        assert json.loads(report.read_text())["f1"] == 100.0, fmt


def test_eval_bucc_bad_split_is_a_one_line_error(tmp_path, tiny_model_dir):
    bucc = tmp_path / "bucc"
    bucc.mkdir()
    write_bucc(bucc, sentences(3, seed=1))
    with open(bucc / "de-en.dev.gold", "a") as fh:
        fh.write("de-999999999\ten-000000001\n")
    code, output = eval_bucc_dev(
        bucc,
        "--model",
        str(tiny_model_dir("bert")),
        "--threshold",
        "oracle",
        "-w",
        str(tmp_path / "w"),
    )
    assert code == 1 and "de-en.dev.gold:4: unknown de id de-999999999" in output


def test_eval_tatoeba_and_xsim_commands_write_tables_and_json(tmp_path, tiny_model_dir):
    lines = sentences(6, seed=11)
    tatoeba, flores = tmp_path / "tatoeba", tmp_path / "flores"
    tatoeba.mkdir()
    flores.mkdir()
    for lang in ("deu", "fra"):
        (tatoeba / f"tatoeba.{lang}-eng.{lang}").write_text("\n".join(lines) + "\n")
        (tatoeba / f"tatoeba.{lang}-eng.eng").write_text("\n".join(lines) + "\n")
    for lang in ("deu", "eng", "fra"):
        (flores / f"{lang}.dev").write_text("\n".join(lines) + "\n")
    model, work = str(tiny_model_dir("bert")), str(tmp_path / "w")
    report = tmp_path / "t.json"
    code, output = run(
        "eval", "tatoeba", "--data", str(tatoeba), "--model", model, "-w", work, "--json", str(report)
    )
    assert code == 0 and "average" in output, output
    result = json.loads(report.read_text())
    assert [row["lang"] for row in result["rows"]] == ["deu", "fra"] and result["average"] == 100.0
    code, output = run(
        "eval",
        "xsim",
        "--data",
        str(flores),
        "--langs",
        "deu,fra",
        "--model",
        model,
        "-w",
        work,
        "--json",
        str(report),
    )
    assert code == 0, output
    assert json.loads(report.read_text())["average"] == 0.0
    code, output = run(
        "eval", "tatoeba", "--data", str(tatoeba), "--langs", "xyz", "--model", model, "-w", work
    )
    assert code == 1 and "no Tatoeba data for xyz" in output


def test_sharded_indexes_small_jobs_and_submitit_jobs_mine_the_same_pairs(workspace):
    """--max-memory splits the index into shards, --job-rows cuts the queries into blocks, and
    --launcher submitit-local runs the shard jobs as processes: the mined file stays byte-identical."""
    work, _ = workspace
    for lang in ("de", "en"):
        assert run("index", lang, "-w", str(work))[0] == 0
    assert run("mine", "de", "en", "-w", str(work))[0] == 0
    reference = (work / "mined" / "de-en.tsv.zst").read_bytes()

    for lang in ("de", "en"):  # 32-d IVF-Flat: 136 B a vector, so 1 kB holds 7 rows; one list: exact
        code, output = run(
            "index", lang, "-w", str(work), "--max-memory", "0.000001", "--factory", "IVF1,Flat"
        )
        assert code == 0 and "shards" in output, output
        assert len(json.loads((work / "index" / f"{lang}.json").read_text())["shards"]) >= 3
    assert not (work / "index" / "de.faiss").exists()
    code, output = run("mine", "de", "en", "-w", str(work), "--job-rows", "6")
    assert code == 0, output
    assert (work / "mined" / "de-en.tsv.zst").read_bytes() == reference
    blocks = list((work / "mined" / ".neighbours").glob("de-en-*/*.npy"))
    assert len(blocks) == 5 + 4  # 25 de rows and 22 en rows in blocks of 6

    code, output = run(
        "mine", "de", "en", "-w", str(work), "--job-rows", "10", "--launcher", "submitit-local"
    )
    assert code == 0, output
    assert (work / "mined" / "de-en.tsv.zst").read_bytes() == reference
    assert list((work / "logs" / "mine").glob("*_log.err"))


def test_the_jobs_of_one_mine_read_each_index_once(workspace, monkeypatch):
    """Mine's jobs run in this process share the index read last (mine owns the cache): each language's
    index is read once, not once a job."""
    work, _ = workspace
    for lang in ("de", "en"):
        assert run("index", lang, "-w", str(work), "--factory", "IVF1,Flat")[0] == 0
    reads, read = [], faiss.read_index
    monkeypatch.setattr(faiss, "read_index", lambda path: reads.append(Path(path).name) or read(path))
    code, output = run("mine", "de", "en", "-w", str(work), "--job-rows", "6")
    assert code == 0, output
    assert len(list((work / "mined" / ".neighbours").glob("de-en-*/*.npy"))) == 5 + 4
    assert reads == ["en.faiss", "de.faiss"]


def test_query_blocks_follow_the_searched_index_and_its_nprobe():
    from bitextmine.search.index_files import IndexInfo
    from bitextmine.steps.mine import MineOptions, search_block_rows

    def info(factory: str, nprobe: int | None) -> IndexInfo:
        return IndexInfo("de", factory, 384, 10**6, nprobe, "f", 0, 4, 0, None, 0.0, False)

    assert search_block_rows(MineOptions(), info("IVF2732_HNSW32,Flat", 8)) == 174_848
    assert search_block_rows(MineOptions(nprobe=16), info("IVF2732_HNSW32,Flat", 8)) == 87_424
    assert search_block_rows(MineOptions(), info("Flat", None)) == 65_536
    assert search_block_rows(MineOptions(block_rows=100), info("IVF2732_HNSW32,Flat", 8)) == 100


def _one_error_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    assert "Traceback" not in output and lines[-1].startswith("error: "), output
    return " ".join(output[output.index("error: ") :].split())


@pytest.mark.parametrize(
    ("damaged", "expected"),
    [
        ("emb/de/manifest.json", "and encode 'de' again"),
        ("corpora/de/manifest.json", "; delete it to rebuild"),
        ("index/de.json", "; rerun `bitextmine index de`"),
        ("emb/de/shard-00001.json", "embeddings of 'de' cover 18 of 25 sentences: rerun `bitextmine encode`"),
    ],
)
def test_a_truncated_workspace_file_is_a_one_line_error_and_encode_or_index_mends_it(
    workspace, tiny_model_dir, tmp_path, damaged, expected
):
    """Truncating a manifest or a shard record made `mine` print a traceback."""
    work, _ = workspace
    for lang in ("de", "en"):
        assert run("index", lang, "-w", str(work))[0] == 0
    assert run("mine", "de", "en", "-w", str(work))[0] == 0
    reference = (work / "mined" / "de-en.tsv.zst").read_bytes()
    path = work / damaged
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])
    code, output = run("mine", "de", "en", "-w", str(work))
    line = _one_error_line(output)
    assert code == 1 and expected in line and (f"{damaged}:" in line or "shard" in damaged), output
    assert "invalid JSON (" in line or "shard" in damaged
    if damaged.endswith("shard-00001.json"):  # the shard whose record is unreadable is encoded again
        model = str(tiny_model_dir("bert"))
        args = ["-l", "de", "--lid", "off", "-m", model, "-w", str(work), "--shard-size", "7"]
        code, output = run("encode", str(tmp_path / "de.txt"), *args)
        assert code == 0 and "1 encoded now" in " ".join(output.split()), output
    if damaged.startswith("index"):
        assert run("index", "de", "-w", str(work))[0] == 0
    if damaged.startswith(("index", "emb/de/shard")):
        assert run("mine", "de", "en", "-w", str(work))[0] == 0
        assert (work / "mined" / "de-en.tsv.zst").read_bytes() == reference


def test_reencoding_a_same_size_corpus_rebuilds_a_sharded_index(tmp_path, tiny_model_dir):
    """The sharded plan id covered the model, not the vectors, so after re-encoding a corpus of
    the same size `index --max-memory` kept the old shard files and `mine` searched the old vectors."""
    model = str(tiny_model_dir("bert"))
    first, second, en = sentences(20, seed=21), sentences(20, seed=22), sentences(20, seed=23)
    for name, lines in (("first.de", first), ("second.de", second), ("en", en)):
        (tmp_path / f"{name}.txt").write_text("\n".join(lines) + "\n")

    def build(work: Path, de_files: list[str]) -> bytes:
        for number, de in enumerate(de_files):
            args = [
                "encode",
                str(tmp_path / f"{de}.txt"),
                "-l",
                "de",
                "--lid",
                "off",
                "-m",
                model,
                "-w",
                str(work),
            ]
            assert run(*args, *(["--overwrite"] if number else []))[0] == 0
            if number == 0:
                assert (
                    run(
                        "encode",
                        "--lid",
                        "off",
                        str(tmp_path / "en.txt"),
                        "-l",
                        "en",
                        "-m",
                        model,
                        "-w",
                        str(work),
                    )[0]
                    == 0
                )
                assert run("index", "en", "-w", str(work), "--max-memory", "0.000001")[0] == 0
            assert run("index", "de", "-w", str(work), "--max-memory", "0.000001")[0] == 0
        assert run("mine", "de", "en", "-w", str(work))[0] == 0
        return (work / "mined" / "de-en.tsv.zst").read_bytes()

    assert build(tmp_path / "reencoded", ["first.de", "second.de"]) == build(
        tmp_path / "fresh", ["second.de"]
    )


def test_eval_bucc_applies_the_pair_filters(tmp_path, tiny_model_dir):
    """The split's gold pairs are identical sentences: the copies filter drops every one."""
    bucc = tmp_path / "bucc"
    bucc.mkdir()
    write_bucc(bucc, sentences(8, seed=4))
    report = tmp_path / "eval.json"
    model = str(tiny_model_dir("bert"))
    common = ["--model", model, "-w", str(tmp_path / "w"), "--threshold", "0", "--json", str(report)]
    assert eval_bucc_dev(bucc, *common)[0] == 0
    assert json.loads(report.read_text())["recall"] == 100.0
    code, output = eval_bucc_dev(bucc, *common, "--filter", "copies")
    assert code == 0, output
    result = json.loads(report.read_text())
    assert result["recall"] == 0.0 and result["filtered"] == {"copies": 8}
    assert "copies" in output and "dropped by the filters" in " ".join(output.split())


def test_without_a_threshold_the_summary_says_nothing_was_thresholded_and_how_to_calibrate(indexed_workspace):
    """`mine` without --threshold kept every candidate and its summary said nothing of it."""
    work, _ = indexed_workspace
    code, output = run("mine", "de", "en", "-w", str(work))
    assert code == 0, output
    stats = json.loads((work / "mined" / "de-en.stats.json").read_text())
    candidates, kept = stats["counts"]["one_to_one_candidates"], stats["counts"]["kept"]
    flat = " ".join(output.split())
    assert (
        f"no threshold: the {candidates} one-to-one candidates were not thresholded, so pairs of unrelated "
        f"sentences are among the {kept} written" in flat
    )
    assert "`bitextmine calibrate --bucc DIR --pair de-en --model M`" in flat and "--threshold auto" in flat
    code, output = run("mine", "de", "en", "-w", str(work), "--threshold", "1.0")
    assert code == 0 and "no threshold" not in output, output


def test_a_threshold_calibrated_on_a_far_smaller_split_is_reported_as_such(workspace):
    """The workspace has 47 sentences; a threshold calibrated on 4 is used on 10 times its split or more."""
    from dataclasses import replace

    from bitextmine.calibration.thresholds import store_threshold
    from tests.helpers import DE_EN

    work, _ = workspace
    fingerprint = json.loads((work / "emb" / "de" / "manifest.json").read_text())["model"]["fingerprint"]
    for calibrated_on, warned in ((5, False), (4, True)):
        store_threshold(
            work / "thresholds.json", replace(DE_EN, fingerprint=fingerprint, sentences=calibrated_on)
        )
        for lang in ("de", "en"):
            assert run("index", lang, "-w", str(work))[0] == 0
        code, output = run("mine", "de", "en", "-w", str(work), "--threshold", "auto")
        assert code == 0, output
        note = json.loads((work / "mined" / "de-en.stats.json").read_text())["threshold"]["note"]
        assert (note is not None) == warned and ("calibrated on 4 sentences" in output) == warned, output
        if warned:
            assert note.startswith("the threshold was calibrated on 4 sentences and this corpus has 47")
