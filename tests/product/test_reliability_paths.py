"""Where the tool writes: the one rule of files.output_target for every `--json` and `-o` path (a FIFO, a
device, a link or `/dev/stdout` written through as a stream, never renamed over; never an input or a
workspace file of another role; no folder created outside the workspace), lock files never opened
through links, no folder of the workspace a link, and scratch inside the workspace."""

from __future__ import annotations

import ast
import json
import os
import shutil
import stat
import threading
from pathlib import Path

import pytest
import zstandard

import bitextmine
import bitextmine.mining.arrays as arrays
from bitextmine.calibration.thresholds import store_threshold
from bitextmine.errors import BitextmineError
from bitextmine.files import OutputTarget, output_target
from bitextmine.train.loop import LOCK_FILE, TrainConfig, train
from bitextmine.workspace.layout import Workspace
from bitextmine.workspace.locks import file_lock
from bitextmine.workspace.scratch import scratch_folder
from tests.helpers import DE_EN, read_mined, run, sentences, write_bucc


@pytest.fixture
def indexed(indexed_workspace) -> Path:
    return indexed_workspace[0]


def _one_line_error(code: int, output: str, *needles: str) -> None:
    message = " ".join(output.split())  # rich wraps long lines
    assert code == 1 and message.count("error: ") == 1 and "Traceback" not in output, output
    assert all(needle in message for needle in needles), output


class _Reader(threading.Thread):
    """Reads a FIFO (or a pipe's read end) to its end, as `cat FIFO` would."""

    def __init__(self, path: Path | None = None, fd: int | None = None) -> None:
        super().__init__(daemon=True)
        self.path, self.fd, self.data = path, fd, b""

    def run(self) -> None:
        with open(self.path if self.path is not None else self.fd, "rb") as fh:
            self.data = fh.read()


def _char_device(path: Path) -> Path:
    """A node like /dev/null (character device 1,3), made where the test runs; skipped where not permitted."""
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except (PermissionError, AttributeError) as exc:
        pytest.skip(f"cannot make a device node here: {exc}")
    return path


# ---------------------------------------------------------------------------------------------------
# not regular files: written through, never renamed over


def test_output_target_says_which_paths_are_written_through_and_refuses_the_rest(tmp_path):
    (tmp_path / "file").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "file")
    os.mkfifo(tmp_path / "fifo")
    assert output_target(tmp_path / "file") == OutputTarget(tmp_path / "file", through=False)
    assert output_target(tmp_path / "new") == OutputTarget(tmp_path / "new", through=False)
    assert output_target(tmp_path / "link").through and output_target(tmp_path / "fifo").through
    assert output_target(Path("/dev/null")).through
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "folder").mkdir()
    for name, says in [("dangling", "a link to a missing file"), ("folder", "is a folder")]:
        with pytest.raises(BitextmineError, match=says):
            output_target(tmp_path / name)
    assert not (tmp_path / "nowhere").exists()


@pytest.mark.integration  # an encoded workspace: seconds
def test_mine_writes_its_json_through_a_character_device(indexed, tmp_path):
    """`--json X` on a device node left X a regular file (as root, `--json /dev/null` replaced it)."""
    device = _char_device(tmp_path / "null")
    code, output = run("mine", "de", "en", "-w", str(indexed), "--json", str(device))
    assert code == 0, output
    assert stat.S_ISCHR(device.lstat().st_mode)


@pytest.mark.integration  # an encoded workspace: seconds
def test_mine_writes_pairs_and_json_through_fifos(indexed, tmp_path):
    """`-o FIFO` replaced the FIFO with a file and its reader waited forever."""
    pairs_fifo, json_fifo = tmp_path / "pairs.tsv.zst", tmp_path / "stats.json"
    readers = []
    for fifo in (pairs_fifo, json_fifo):
        os.mkfifo(fifo)
        readers.append(_Reader(fifo))
        readers[-1].start()
    code, output = run(
        "mine", "de", "en", "-w", str(indexed), "-o", str(pairs_fifo), "--json", str(json_fifo)
    )
    assert code == 0, output
    for reader in readers:
        reader.join(timeout=30)
    assert stat.S_ISFIFO(pairs_fifo.lstat().st_mode) and stat.S_ISFIFO(json_fifo.lstat().st_mode)
    text = zstandard.ZstdDecompressor().decompressobj().decompress(readers[0].data).decode()
    assert len(text.splitlines()) == json.loads(readers[1].data)["counts"]["kept"] > 0


@pytest.mark.integration  # an encoded workspace: seconds
def test_mine_writes_through_symlinks_and_a_dev_stdout_like_link(indexed, tmp_path):
    """`-o` on a symlink replaced the link; on /proc/self/fd/N (what /dev/stdout is) nothing arrived."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "pairs.tsv.zst").write_bytes(b"old")
    link = tmp_path / "pairs.tsv.zst"
    link.symlink_to(elsewhere / "pairs.tsv.zst")
    read_end, write_end = os.pipe()
    stdout_like = Path(f"/proc/self/fd/{write_end}")
    if not stdout_like.is_symlink():
        pytest.skip("no /proc/self/fd here")
    reader = _Reader(fd=read_end)
    reader.start()
    try:
        code, output = run(
            "mine", "de", "en", "-w", str(indexed), "-o", str(link), "--json", str(stdout_like)
        )
    finally:
        os.close(write_end)
    reader.join(timeout=30)
    assert code == 0, output
    assert link.is_symlink() and len(read_mined(link)) == json.loads(reader.data)["counts"]["kept"] > 0


# ---------------------------------------------------------------------------------------------------
# outputs over inputs and over the workspace's own files


def test_score_refuses_to_write_over_its_input(tmp_path, tiny_model_dir):
    bitext = tmp_path / "a.tsv"
    bitext.write_text("".join(f"{s}\t{s}\n" for s in sentences(4, seed=3)))
    before = bitext.read_bytes()
    common = ["--src", "de", "--tgt", "en", "-m", str(tiny_model_dir("bert")), "-w", str(tmp_path / "w")]
    code, output = run("score", str(bitext), *common, "-o", str(bitext))
    _one_line_error(code, output, f"{bitext}: the same file as {bitext}")
    code, output = run("score", str(bitext), *common, "-o", str(tmp_path / "s.tsv"), "--json", str(bitext))
    _one_line_error(code, output, f"{bitext}: the same file as")
    assert bitext.read_bytes() == before and not (tmp_path / "s.tsv").exists()


@pytest.mark.integration  # an encoded workspace: seconds
@pytest.mark.parametrize(
    "option, target",
    [
        ("-o", "corpora/de/shard-00000.tsv"),
        ("-o", "mined/de-en.stats.json"),
        ("-o", "thresholds.json"),
        ("--json", "emb/de/manifest.json"),
        ("--json", "mined/de-en.tsv.zst"),
    ],
)
def test_mine_refuses_outputs_over_the_workspace_s_own_files(indexed, option, target):
    """They damaged the corpus, lost the pairs (the stats overwrote them) or broke the language."""
    path = indexed / target
    before = path.read_bytes() if path.exists() else None
    code, output = run("mine", "de", "en", "-w", str(indexed), option, str(path), "--format", "tsv")
    _one_line_error(code, output, str(path), "which the workspace keeps for its own files")
    assert (path.read_bytes() if path.exists() else None) == before


@pytest.mark.integration  # an encoded workspace: seconds
@pytest.mark.parametrize("way", ["as recorded", "relative", "symlink", "hard link", "api"])
def test_mine_refuses_to_write_over_a_corpus_the_workspace_read(indexed, tmp_path, monkeypatch, way):
    """`mine de en -o de.txt` replaced the user's corpus with pairs and exited 0."""
    corpus = tmp_path / "de.txt"
    before = corpus.read_bytes()
    named = {"as recorded": corpus, "relative": Path("de.txt"), "api": corpus}.get(way, tmp_path / "alias")
    if way == "symlink":
        named.symlink_to(corpus)
    elif way == "hard link":
        os.link(corpus, named)
    monkeypatch.chdir(tmp_path)
    if way == "api":
        options = bitextmine.MineOptions(output=named, format="tsv")
        with pytest.raises(BitextmineError, match=r"which the workspace .* was built from"):
            bitextmine.mine(Workspace(indexed), "de", "en", options)
    else:
        code, output = run("mine", "de", "en", "-w", str(indexed), "-o", str(named), "--format", "tsv")
        _one_line_error(code, output, f"{named}: the same file as {corpus}", "the workspace")
    assert corpus.read_bytes() == before and not (indexed / "mined" / "de-en.stats.json").exists()


@pytest.mark.integration  # an encoded workspace: seconds
def test_mine_may_write_its_own_pairs_in_another_format(indexed):
    code, output = run("mine", "de", "en", "-w", str(indexed), "-o", str(indexed / "mined" / "de-en.tsv"))
    assert code == 0, output
    assert (indexed / "mined" / "de-en.tsv").read_text().count("\n") > 0


@pytest.mark.integration  # an encoded workspace: seconds
def test_a_link_planted_at_the_pairs_own_name_in_the_workspace_is_not_written_through(indexed, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    planted = indexed / "mined" / "de-en.tsv"
    planted.parent.mkdir(exist_ok=True)
    planted.symlink_to(victim)
    code, output = run("mine", "de", "en", "-w", str(indexed), "-o", str(planted))
    _one_line_error(code, output, str(planted), "a link or device inside the workspace")
    assert victim.read_text() == "precious\n" and planted.is_symlink()


@pytest.mark.integration  # an encoded workspace: seconds
def test_a_json_path_in_a_missing_folder_outside_the_workspace_is_refused(indexed, tmp_path):
    """`--json /nonexistent/dir/x.json` silently created /nonexistent/dir."""
    report = tmp_path / "missing" / "dir" / "x.json"
    code, output = run("index", "de", "-w", str(indexed), "--json", str(report))
    _one_line_error(code, output, str(report), "create it first")
    assert not (tmp_path / "missing").exists()
    inside = indexed / "reports" / "de.json"  # the workspace's folders are the tool's to create
    code, output = run("index", "de", "-w", str(indexed), "--json", str(inside))
    assert code == 0 and json.loads(inside.read_text())["lang"] == "de", output


@pytest.mark.integration  # the CLI encodes: seconds
def test_encode_refuses_to_read_the_text_shard_it_would_delete(workspace, tiny_model_dir):
    """`encode W/corpora/de/shard-00000.tsv --lang de` deleted the shard, then said it was missing."""
    work, _ = workspace
    shard = work / "corpora" / "de" / "shard-00000.tsv"
    before = shard.read_bytes()
    args = ["encode", str(shard), "--lang", "de", "--text-column", "3", "-m", str(tiny_model_dir("bert"))]
    code, output = run(*args, "-w", str(work))
    _one_line_error(code, output, str(shard), "which encoding 'de' rebuilds")
    assert shard.read_bytes() == before


# ---------------------------------------------------------------------------------------------------
# locks and workspace folders never lead outside


@pytest.mark.integration  # an encoded workspace: seconds
@pytest.mark.parametrize("dangling", [False, True], ids=["to a file", "dangling"])
def test_a_lock_file_planted_as_a_symlink_is_refused_and_its_target_untouched(indexed, tmp_path, dangling):
    """Locks were opened O_RDWR|O_CREAT, then truncated and written: through a link, outside."""
    victim = tmp_path / "victim.txt"
    if not dangling:
        victim.write_text("precious\n")
    lock = indexed / "locks" / "index-de.lock"
    lock.unlink(missing_ok=True)
    lock.symlink_to(victim)
    code, output = run("index", "de", "-w", str(indexed))
    _one_line_error(code, output, str(lock), "not a regular file")
    assert victim.read_text() == "precious\n" if not dangling else not victim.exists()


# every module that calls file_lock, and where its lock lies in a folder W (workspace_locks' locks, in
# W/locks, are tested above)
_LOCK_FILES = {
    "bitextmine/workspace/locks.py": "locks/index-de.lock",
    "bitextmine/workspace/scratch.py": "scratch/calibrate-0a1b2c3d4e5f.lock",
    "bitextmine/calibration/thresholds.py": ".thresholds.json.lock",
    "bitextmine/train/loop.py": LOCK_FILE,
}


def test_every_lock_is_taken_through_the_one_helper_and_each_taker_is_tested_below():
    """The threshold store's lock was opened by an `os.open` of its own, without O_NOFOLLOW."""
    package = Path(bitextmine.__file__).parent
    flocks, takers = set(), set()
    for source in package.rglob("*.py"):
        name = source.relative_to(package.parent).as_posix()
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                callee = getattr(node.func, "attr", getattr(node.func, "id", None))
                flocks.update([name] if callee == "flock" else [])
                takers.update([name] if callee == "file_lock" else [])
    assert flocks == {"bitextmine/workspace/locks.py"}
    assert takers == set(_LOCK_FILES)


@pytest.mark.parametrize("dangling", [False, True], ids=["to a file", "dangling"])
@pytest.mark.parametrize("kind", ["scratch", "thresholds", "train"])
def test_no_lock_file_is_opened_through_a_planted_link(tmp_path, kind, dangling):
    victim = tmp_path / "victim.txt"
    if not dangling:
        victim.write_text("precious\n")
    work = tmp_path / "w"
    lock = work / next(where for module, where in _LOCK_FILES.items() if kind in module)
    lock.parent.mkdir(parents=True)
    lock.symlink_to(victim)
    if kind == "scratch":  # a folder whose lock cannot be taken is another run's: left alone
        with scratch_folder(Workspace(work), "eval"):
            pass
        assert lock.is_symlink()
    else:
        with pytest.raises(BitextmineError, match="not a regular file"):
            if kind == "thresholds":
                store_threshold(work / "thresholds.json", DE_EN)
            else:
                train(TrainConfig(data=[], out=work, objectives={"contrastive": 1}, base="m", max_steps=1))
    assert victim.read_text() == "precious\n" if not dangling else not victim.exists()


@pytest.mark.integration  # an encoded workspace: seconds
@pytest.mark.parametrize("folder", ["index", "mined/.neighbours"])
def test_a_workspace_folder_that_is_a_symlink_is_refused(indexed, tmp_path, folder):
    """Steps wrote through a link at W/index or W/mined/.neighbours into wherever it pointed."""
    linked = indexed / folder
    outside = tmp_path / "outside"
    if linked.exists():
        shutil.move(linked, outside)
    else:
        outside.mkdir()
    linked.parent.mkdir(parents=True, exist_ok=True)
    linked.symlink_to(outside)
    before = sorted(outside.rglob("*"))
    command = ["index", "de"] if folder == "index" else ["mine", "de", "en"]
    code, output = run(*command, "-w", str(indexed))
    _one_line_error(code, output, f"{linked}: a symlink inside {indexed} to the folder {outside}")
    assert sorted(outside.rglob("*")) == before


# ---------------------------------------------------------------------------------------------------
# scratch inside the workspace


def test_a_scratch_folder_of_a_killed_run_is_removed_by_the_next_and_a_live_one_kept(tmp_path):
    workspace = Workspace(tmp_path / "w")
    root = workspace.scratch_dir()
    root.mkdir(parents=True)
    for name in ("calibrate-dead", "calibrate-live"):
        (root / name).mkdir()
        (root / name / "run-0.npy").write_bytes(b"scratch")
        (root / f"{name}.lock").write_text("")
    with file_lock(root / "calibrate-live.lock", exclusive=True), scratch_folder(workspace, "eval") as mine:
        assert mine.parent == root and mine.is_dir()
        assert not (root / "calibrate-dead").exists() and not (root / "calibrate-dead.lock").exists()
        assert (root / "calibrate-live" / "run-0.npy").exists()
    assert not mine.exists() and sorted(p.name for p in root.iterdir()) == [
        "calibrate-live",
        "calibrate-live.lock",
    ]


def test_mine_arrays_keeps_its_scratch_where_it_is_told(tmp_path, monkeypatch):
    import numpy as np

    seen = []
    real = arrays.select_candidates
    monkeypatch.setattr(arrays, "select_candidates", lambda *a: seen.append(a[-1]) or real(*a))
    vectors = np.eye(4, dtype=np.float32)
    assert len(arrays.mine_arrays(vectors, vectors, k=2, scratch=tmp_path)) == 4
    assert seen[0].parent == tmp_path and not seen[0].exists()


@pytest.mark.integration
def test_calibrate_keeps_its_selection_scratch_in_the_workspace(tmp_path, tiny_model_dir, monkeypatch):
    """`calibrate` and `eval bucc` made $TMPDIR/bitextmine-selection-*, left there by a kill."""
    bucc = tmp_path / "bucc"
    bucc.mkdir()
    write_bucc(bucc, sentences(8, seed=4))
    work = tmp_path / "w"
    seen = []
    real = arrays.select_candidates
    monkeypatch.setattr(arrays, "select_candidates", lambda *a: seen.append(a[-1]) or real(*a))
    model = str(tiny_model_dir("bert"))
    code, output = run("calibrate", "--bucc", str(bucc), "--pair", "de-en", "-m", model, "-w", str(work))
    assert code == 0, output
    assert seen and seen[0].is_relative_to(work / "scratch")
    assert not any((work / "scratch").iterdir())
