"""Calibrated thresholds in the model dir: a pair's threshold serves that pair only."""

from __future__ import annotations

import json

import pytest

from bitextmine.errors import BitextmineError
from bitextmine.evaluation.thresholds import calibrated_threshold, store_threshold


def test_a_pair_never_takes_another_pairs_threshold(tmp_path):
    store_threshold(tmp_path, "ratio", "zh-en", 1.20)
    store_threshold(tmp_path, "ratio", "de-en", 1.03)
    assert calibrated_threshold(tmp_path, "ratio", "zh-en") == 1.20
    assert calibrated_threshold(tmp_path, "ratio", "de-en") == 1.03
    with pytest.raises(
        BitextmineError, match=r"no calibrated ratio threshold for fr-en .*\(calibrated: de-en, zh-en\)"
    ):
        calibrated_threshold(tmp_path, "ratio", "fr-en")
    with pytest.raises(BitextmineError, match="no calibrated distance threshold for de-en"):
        calibrated_threshold(tmp_path, "distance", "de-en")


def test_the_old_default_entry_is_ignored_and_dropped(tmp_path):
    """bitextmine 0.1 also stored the last calibration as "default", which every other pair then took."""
    config = {"encoder": {"pooling": "mean"}, "thresholds": {"ratio": {"de-en": 1.03, "default": 1.03}}}
    (tmp_path / "bitextmine.json").write_text(json.dumps(config))
    with pytest.raises(BitextmineError, match="no calibrated ratio threshold for fr-en"):
        calibrated_threshold(tmp_path, "ratio", "fr-en")
    store_threshold(tmp_path, "ratio", "fr-en", 1.05)
    stored = json.loads((tmp_path / "bitextmine.json").read_text())
    assert stored == {"encoder": {"pooling": "mean"}, "thresholds": {"ratio": {"de-en": 1.03, "fr-en": 1.05}}}
