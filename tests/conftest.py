"""Shared fixtures: the ../shared model (skip or fail when absent), tiny random models, an encoded
workspace; the helpers they use are in tests/helpers.py."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers import build_tiny_model, require_shared, run, sentences


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that load the shared model (the `e5_dir` fixture) are integration tests."""
    for item in items:
        if "e5_dir" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(autouse=True, scope="session")
def private_cache(tmp_path_factory) -> None:
    """Precision self-checks are recorded in a per-session cache, never in the user's ~/.cache."""
    os.environ["BITEXTMINE_CACHE"] = str(tmp_path_factory.mktemp("bitextmine-cache"))


@pytest.fixture(scope="session")
def e5_dir() -> Path:
    return require_shared("models/multilingual-e5-small-q4")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Callable[[str], Path]:
    cache: dict[str, Path] = {}

    def make(kind: str) -> Path:
        if kind not in cache:
            cache[kind] = build_tiny_model(kind, tmp_path_factory.mktemp(f"tiny-{kind}"))
        return cache[kind]

    return make


@pytest.fixture
def workspace(tmp_path, tiny_model_dir):
    """de and en corpora sharing 10 identical sentences (perfect 'translations'), encoded (without language
    identification: the sentences are English word salad under both labels)."""
    shared = sentences(10, seed=0)
    de = shared + sentences(15, seed=1)
    en = sentences(12, seed=2) + shared
    work = tmp_path / "work"
    model = str(tiny_model_dir("bert"))
    for lang, lines in (("de", de), ("en", en)):
        path = tmp_path / f"{lang}.txt"
        path.write_text("\n".join(lines) + "\n")
        args = ["-l", lang, "-m", model, "-w", str(work), "--shard-size", "7", "--lid", "off"]
        code, output = run("encode", str(path), *args)
        assert code == 0, output
    return work, shared


@pytest.fixture
def indexed_workspace(workspace):
    """`workspace`, with both languages indexed."""
    work, shared = workspace
    for lang in ("de", "en"):
        code, output = run("index", lang, "-w", str(work))
        assert code == 0, output
    return work, shared


@pytest.fixture(scope="module")
def one_thread():
    """Small indexes: OpenMP threads only add overhead, and much of it on a busy machine (OPQ: 40x)."""
    import faiss

    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    yield
    faiss.omp_set_num_threads(threads)
