"""The workspace directory: where every step reads and writes, so commands need no paths.

This is the one place that knows the layout; everything else asks it for paths:

    WORK/corpora/L/        text shards and their manifest (workspace/corpus.py)
    WORK/corpus-parts/L/   one part per input file, merged into the text shards (corpus/parts.py)
    WORK/emb/L/            embedding shards, their records and manifest (workspace/embeddings.py)
    WORK/index/            L.json and L.faiss, or L.PLAN.NNN.faiss shards (search/index_files.py)
    WORK/mined/            PAIR.tsv.zst (or another format), PAIR.stats.json; .neighbours/ (steps/mine.py)
    WORK/cache/embeddings/ vectors of evaluation sets, by model and text (encoder/cache.py)
    WORK/thresholds.json   calibrated thresholds by model, margin and pair (calibration/thresholds.py)
    WORK/locks/            advisory locks (workspace/locks.py)
    WORK/logs/STEP/        logs of jobs run through a cluster launcher
    WORK/scratch/          scratch folders of running commands (workspace/scratch.py)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bitextmine.text.languages import check_lang

DEFAULT_WORKDIR = Path("bitextmine-work")


@dataclass(frozen=True)
class Workspace:
    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    def corpus_dir(self, lang: str) -> Path:
        return self.root / "corpora" / check_lang(lang)

    def corpus_parts_dir(self, lang: str) -> Path:
        return self.root / "corpus-parts" / check_lang(lang)

    def embedding_dir(self, lang: str) -> Path:
        return self.root / "emb" / check_lang(lang)

    def encoded_languages(self) -> list[str]:
        """Languages with an embeddings manifest, sorted."""
        root = self.root / "emb"
        return sorted(p.parent.name for p in root.glob("*/manifest.json")) if root.is_dir() else []

    def index_dir(self) -> Path:
        return self.root / "index"

    def mined_dir(self) -> Path:
        return self.root / "mined"

    def mined_file(self, src: str, tgt: str, fmt: str = "tsv.zst") -> Path:
        return self.mined_dir() / f"{check_lang(src)}-{check_lang(tgt)}.{fmt}"

    def stats_file(self, src: str, tgt: str) -> Path:
        return self.mined_dir() / f"{check_lang(src)}-{check_lang(tgt)}.stats.json"

    def neighbours_dir(self) -> Path:
        """Saved neighbour lists of `mine`, one folder a pair and search plan (kept for reruns)."""
        return self.mined_dir() / ".neighbours"

    def embedding_cache_dir(self) -> Path:
        return self.root / "cache" / "embeddings"

    def thresholds_file(self) -> Path:
        """The threshold store `calibrate` writes and `--threshold auto` reads (unless --thresholds FILE)."""
        return self.root / "thresholds.json"

    def locks_dir(self) -> Path:
        return self.root / "locks"

    def logs_dir(self, step: str) -> Path:
        return self.root / "logs" / step

    def scratch_dir(self) -> Path:
        return self.root / "scratch"

    def own_paths(self) -> list[Path]:
        """Every folder and file above: a path a user names for output may not lie in one of them."""
        folders = ["corpora", "corpus-parts", "emb", "index", "mined", "cache", "locks", "logs", "scratch"]
        return [self.root / name for name in folders] + [self.thresholds_file()]

    def input_files(self) -> list[Path]:
        """Every file the workspace was built from (workspace/inputs.py): never an output."""
        from bitextmine.workspace.inputs import recorded_inputs  # numpy: `bitextmine.Workspace` stays light

        return recorded_inputs(self.root)


def check_workspace(value: object, step: str) -> None:
    """Every step takes its workspace first: anything else there is a TypeError naming the step."""
    if not isinstance(value, Workspace):
        raise TypeError(f"{step}: the first argument is a bitextmine.Workspace, not a {type(value).__name__}")
