"""The threshold store: records keyed by fingerprint, margin, k and pair; `--threshold` parsed and
resolved (a pair never takes another pair's threshold unless asked, auto:PAIR, nor one of another k or
margin); records without k read as k=4; the model dir's old bitextmine.json still read; concurrent
calibrations all survive."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from bitextmine.calibration.thresholds import (
    ThresholdChoice,
    ThresholdKey,
    parse_threshold,
    read_thresholds,
    resolve_threshold,
    size_drift_note,
    store_threshold,
)
from bitextmine.errors import BitextmineError
from tests.helpers import DE_EN


def resolve(
    spec,
    store: Path,
    pair: str = "de-en",
    model_dir: Path | None = None,
    fingerprint: str = "f1",
    k: int = 4,
    margin: str = "ratio",
):
    return resolve_threshold(
        spec, store=store, fingerprint=fingerprint, margin=margin, k=k, pair=pair, model_dir=model_dir
    )


def test_store_keeps_one_record_per_fingerprint_margin_k_and_pair(tmp_path):
    store = tmp_path / "thresholds.json"
    records = [
        DE_EN,
        replace(DE_EN, pair="zh-en", value=1.2),
        replace(DE_EN, margin="distance", value=0.1),
        replace(DE_EN, fingerprint="f2", value=1.1),
        replace(DE_EN, k=100, value=1.3),
    ]
    for record in records:
        store_threshold(store, record)
    store_threshold(store, replace(DE_EN, value=1.04))  # a recalibration replaces its record
    assert sorted(read_thresholds(store), key=lambda r: r.value) == sorted(
        [replace(DE_EN, value=1.04), *records[1:]], key=lambda r: r.value
    )
    assert resolve("auto", store).value == 1.04
    assert resolve("auto", store, fingerprint="f2").value == 1.1
    assert resolve("auto", store, k=100).value == 1.3
    entry = json.loads(store.read_text())["thresholds"][0]
    assert set(entry) == {
        *("fingerprint", "model", "margin", "pair", "value", "split"),
        *("precision", "recall", "f1", "rule", "date", "k", "strategy", "sentences"),
    }


def test_a_calibration_of_another_k_is_never_used_and_the_error_lists_those_that_exist(tmp_path):
    """`calibrate --k 100000` replaced the k=4 threshold, and `mine --k 16 --threshold auto`
    used the k=4 one."""
    store = tmp_path / "thresholds.json"
    store_threshold(store, DE_EN)
    store_threshold(store, replace(DE_EN, k=100000, value=1.5, strategy="max"))
    assert resolve("auto", store).value == DE_EN.value  # the k=4 threshold survives the k=100000 one
    assert resolve("auto", store, k=100000).source.startswith("calibrated for de-en on dev with k=100000,")
    with pytest.raises(BitextmineError) as error:
        resolve("auto", store, k=16)
    message = str(error.value)
    assert message.startswith(
        "no calibrated threshold for de-en (ratio margin, k=16) with model fingerprint f1"
    )
    assert "(calibrated: de-en ratio k=4, de-en ratio k=100000)" in message
    assert "--pair de-en --margin ratio --k 16" in message and "auto:" not in message and "\n" not in message
    with pytest.raises(BitextmineError, match=r"for de-en \(distance margin, k=4\)"):
        resolve("auto", store, margin="distance")


def test_the_source_says_the_setting_its_scores_were_measured_with(tmp_path):
    store = tmp_path / "thresholds.json"
    store_threshold(store, replace(DE_EN, k=16, strategy="intersect"))
    source = resolve("auto", store, k=16).source
    assert source == f"calibrated for de-en on dev with k=16, strategy intersect (best F1 95.75) in {store}"


def test_a_record_written_before_k_was_recorded_reads_as_k4(tmp_path):
    store = tmp_path / "thresholds.json"
    store_threshold(store, DE_EN)
    data = json.loads(store.read_text())
    for entry in data["thresholds"]:
        del entry["k"], entry["strategy"]
    store.write_text(json.dumps(data))
    [record] = read_thresholds(store)
    assert (record.key, record.strategy) == (ThresholdKey("f1", "ratio", 4, "de-en"), None)
    assert resolve("auto", store).source == f"calibrated for de-en on dev with k=4 (best F1 95.75) in {store}"
    with pytest.raises(BitextmineError, match=r"\(calibrated: de-en ratio k=4\)"):
        resolve("auto", store, k=8)


def test_a_threshold_used_on_a_corpus_ten_times_its_calibration_split_or_more_says_so(tmp_path):
    store = tmp_path / "thresholds.json"
    store_threshold(store, replace(DE_EN, sentences=16_800))
    choice = resolve("auto", store)
    assert choice.calibrated_on == 16_800
    assert size_drift_note(choice, 167_999) is None
    note = size_drift_note(choice, 168_000)
    assert note.startswith("the threshold was calibrated on 16,800 sentences and this corpus has 168,000")
    assert size_drift_note(resolve("1.03", store), 10**9) is None  # a number given: nothing is known
    assert size_drift_note(None, 10**9) is None
    store_threshold(store, DE_EN)  # recorded without its split's size, as before it was recorded
    assert resolve("auto", store).calibrated_on is None


def test_resolve_numbers_own_pair_and_another_pairs(tmp_path):
    store = tmp_path / "thresholds.json"
    store_threshold(store, DE_EN)
    assert resolve(None, store) is None
    assert resolve("1.5", store) == ThresholdChoice(1.5, "de-en", "given on the command line")
    assert resolve(1.5, store, pair="fr-en") == ThresholdChoice(1.5, "fr-en", "given on the command line")
    own = resolve("auto", store)
    assert own == ThresholdChoice(
        1.03, "de-en", f"calibrated for de-en on dev with k=4 (best F1 95.75) in {store}"
    )
    borrowed = resolve("auto:de-en", store, pair="fr-en")
    assert (borrowed.value, borrowed.pair) == (1.03, "de-en") and "calibrated for de-en" in borrowed.source
    target = replace(DE_EN, pair="ru-en", rule="precision >= 0.98", precision=98.2, recall=80.5)
    store_threshold(store, target)
    assert "(precision >= 0.98: precision 98.20, recall 80.50)" in resolve("auto", store, pair="ru-en").source


def test_a_pair_never_silently_takes_another_pairs_threshold(tmp_path):
    store = tmp_path / "thresholds.json"
    store_threshold(store, DE_EN)
    store_threshold(store, replace(DE_EN, pair="zh-en", value=1.2))
    store_threshold(store, replace(DE_EN, pair="ru-en", fingerprint="other-model"))
    with pytest.raises(BitextmineError) as error:
        resolve("auto", store, pair="fr-en")
    message = str(error.value)
    assert "no calibrated threshold for fr-en (ratio margin, k=4) with model fingerprint f1" in message
    assert "(calibrated: de-en ratio k=4, zh-en ratio k=4)" in message  # not ru-en
    command = "bitextmine calibrate --bucc DIR --pair fr-en --margin ratio --k 4 --model MODEL --thresholds"
    assert f"{command} {store}" in message
    assert "--threshold auto:de-en" in message and "\n" not in message
    with pytest.raises(BitextmineError, match=r"no calibrated threshold for fr-en \(ratio") as error:
        resolve("auto:fr-en", store, pair="de-en")
    assert "auto:de-en" not in str(error.value)
    with pytest.raises(
        BitextmineError, match=r"for de-en \(ratio margin, k=4\) with model fingerprint f9 .*: run"
    ):
        resolve("auto", store, fingerprint="f9")  # nothing calibrated for that model
    with pytest.raises(BitextmineError, match="for de-en"):
        resolve("auto", tmp_path / "missing.json")


def test_the_model_dirs_old_thresholds_are_read_when_the_store_has_none(tmp_path):
    """bitextmine 0.1 wrote {"thresholds": {margin: {pair: t, "default": t}}} into MODEL/bitextmine.json."""
    model = tmp_path / "model"
    model.mkdir()
    config = {"encoder": {"pooling": "mean"}, "thresholds": {"ratio": {"de-en": 1.01, "default": 1.01}}}
    (model / "bitextmine.json").write_text(json.dumps(config))
    store = tmp_path / "thresholds.json"
    old = resolve("auto", store, model_dir=model)
    assert (old.value, old.pair) == (1.01, "de-en")
    assert old.source == f"calibrated for de-en in {model}/bitextmine.json (in the model dir, where " + (
        "bitextmine 0.1 kept thresholds)"
    )
    assert resolve("auto:de-en", store, pair="fr-en", model_dir=model).value == 1.01
    with pytest.raises(BitextmineError, match=r"for fr-en .*\(calibrated: de-en ratio k=4\)"):
        resolve("auto", store, pair="fr-en", model_dir=model)  # "default" is ignored
    with pytest.raises(BitextmineError, match=r"for de-en \(ratio margin, k=16\)"):
        resolve("auto", store, model_dir=model, k=16)  # 0.1 calibrated with k=4
    store_threshold(store, DE_EN)
    assert resolve("auto", store, model_dir=model).value == 1.03  # the store comes first
    assert json.loads((model / "bitextmine.json").read_text()) == config  # never written


@pytest.mark.parametrize(
    ("given", "parsed"),
    [(None, None), ("auto", "auto"), (" auto ", "auto"), ("auto:de-en", "auto:de-en"), ("1.05", 1.05)],
)
def test_parse_threshold(given, parsed):
    assert parse_threshold(given) == parsed


@pytest.mark.parametrize("given", ["", "abc", "nan", "inf", "auto:", "auto:de", "auto:de-de", "automatic"])
def test_parse_threshold_refuses_anything_else_in_one_line(given):
    with pytest.raises(BitextmineError, match="--threshold") as error:
        parse_threshold(given)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{oops", r"thresholds.json:1: invalid JSON"),
        ("[1, 2]", r'not a threshold store \(no "thresholds" list\)'),
        ('{"thresholds": [{"pair": "de-en"}]}', "threshold 1 has no valid 'fingerprint'"),
        ('{"thresholds": [7]}', "threshold 1 has no valid 'fingerprint'"),
        (json.dumps({"thresholds": [{**asdict(DE_EN), "k": 0}]}), "threshold 1 has no valid 'k'"),
        (json.dumps({"thresholds": [{**asdict(DE_EN), "k": 4.5}]}), "threshold 1 has no valid 'k'"),
        (json.dumps({"thresholds": [{**asdict(DE_EN), "k": None}]}), "threshold 1 has no valid 'k'"),
        (json.dumps({"thresholds": [{**asdict(DE_EN), "strategy": "best"}]}), "no valid 'strategy'"),
    ],
)
def test_a_malformed_store_is_a_one_line_error_naming_it(tmp_path, content, message):
    store = tmp_path / "thresholds.json"
    store.write_text(content)
    for action in (lambda: resolve("auto", store), lambda: store_threshold(store, DE_EN)):
        with pytest.raises(BitextmineError, match=message) as error:
            action()
        assert str(store) in str(error.value) and "\n" not in str(error.value)


def test_a_record_with_a_wrong_type_is_refused(tmp_path):
    store = tmp_path / "thresholds.json"
    store_threshold(store, DE_EN)
    data = json.loads(store.read_text())
    data["thresholds"][0]["value"] = "1.03"
    store.write_text(json.dumps(data))
    with pytest.raises(BitextmineError, match="threshold 1 has no valid 'value'"):
        read_thresholds(store)


WRITER = """
import sys, time
from dataclasses import asdict, replace
from pathlib import Path
from tests.helpers import DE_EN
from bitextmine.calibration.thresholds import store_threshold

store, prefix, start = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
while not start.exists():
    time.sleep(0.001)
for i in range(40):
    store_threshold(store, replace(DE_EN, pair=f"{prefix}{i}-en", value=float(i)))
"""


@pytest.mark.integration
def test_concurrent_calibrations_of_different_pairs_all_survive(tmp_path):
    """Two processes storing 40 pairs each into one store at the same moment: all 80 records remain."""
    store, start = tmp_path / "thresholds.json", tmp_path / "go"
    root = Path(__file__).resolve().parents[2]
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(store), prefix, str(start)], cwd=root)
        for prefix in ("a", "b")
    ]
    start.touch()
    assert [writer.wait(timeout=60) for writer in writers] == [0, 0]
    pairs = {record.pair for record in read_thresholds(store)}
    assert pairs == {f"{prefix}{i}-en" for prefix in "ab" for i in range(40)}
