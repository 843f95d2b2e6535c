"""Scratch folders of running commands, inside the workspace (WORK/scratch), never in $TMPDIR.

Each run's folder, NAME-RANDOM/, is held by an exclusive flock on NAME-RANDOM.lock next to it for as
long as the run uses it, and removed when the run ends; the folder of a killed run (its lock free) is
removed by the next run that takes a scratch folder. Runs side by side each have their own.
"""

from __future__ import annotations

import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bitextmine.errors import BitextmineError
from bitextmine.files import refuse_linked_folders
from bitextmine.workspace.layout import Workspace
from bitextmine.workspace.locks import file_lock


@contextmanager
def scratch_folder(workspace: Workspace, name: str) -> Iterator[Path]:
    """A new, empty folder WORK/scratch/NAME-RANDOM for this run, removed when the block ends."""
    root = workspace.scratch_dir()
    refuse_linked_folders(workspace.root)
    root.mkdir(parents=True, exist_ok=True)
    remove_abandoned(root)
    folder = root / f"{name}-{secrets.token_hex(6)}"
    lock = folder.with_name(f"{folder.name}.lock")
    pending = folder.with_name(f"{folder.name}.pending")  # locked before `remove_abandoned` can see it
    with file_lock(pending, exclusive=True, what=str(folder)):
        pending.rename(lock)
        folder.mkdir()
        try:
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)
            lock.unlink(missing_ok=True)


def remove_abandoned(root: Path) -> None:
    """Remove the scratch folders in `root` whose run has ended (their lock is free)."""
    for lock in root.glob("*.lock"):
        try:
            with file_lock(lock, exclusive=True):
                shutil.rmtree(lock.with_suffix(""), ignore_errors=True)
                lock.unlink(missing_ok=True)
        except BitextmineError:
            continue  # in use by a run: its folder stays
