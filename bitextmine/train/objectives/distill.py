"""Multilingual knowledge distillation (Reimers & Gurevych 2020): the student learns to put both
sentences of a pair at a frozen teacher's vector of the English sentence.

For a pair (s, e) with English side e and teacher vector t = T(e), the loss is

    (||S(s) - t||^2 + ||S(e) - t||^2) / 2, averaged over the batch,

where S is the student's sentence vector as `encode` computes it (the pooled states, normalised when the
model's settings normalise). The squared distance is summed over the dimensions (the paper's MSELoss
times the dimension), so the scale does not shrink with the vector size and a weight next to
`contrastive` means what it says: for unit vectors each term is 2 - 2 cos.

The teacher is a `SentenceEncoder` run without gradients; `TeacherVectors` encodes each distinct
sentence once and keeps the vectors on disk (keyed by the teacher's fingerprint and the sentence), so a
resumed or repeated run into the same OUT does not encode them again.
"""

from __future__ import annotations

import hashlib
import zipfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from bitextmine.encoder.encoder import SentenceEncoder
from bitextmine.errors import BitextmineError
from bitextmine.files import atomic_open
from bitextmine.train.objectives.base import Objective, ObjectiveInputs, ObjectiveOutput, ObjectiveSetup
from bitextmine.train.objectives.settings import DistillSettings

TEACHER_DIR = "teacher"  # in OUT: one folder of vector shards per teacher fingerprint
_KEY_BYTES = 16


class TeacherVectors:
    """A frozen teacher's vectors of sentences, each encoded once and saved in shards under `folder`.

    `teacher` is a `SentenceEncoder` (or anything with its `encode`, `dim`, `fingerprint`, `precision`).
    """

    def __init__(self, teacher: SentenceEncoder, folder: Path) -> None:
        self.teacher = teacher
        self.dim = teacher.dim
        fingerprint = f"{teacher.fingerprint}:{teacher.precision}"
        self.folder = Path(folder) / hashlib.sha256(fingerprint.encode()).hexdigest()[:16]
        self._vectors: dict[bytes, np.ndarray] = {}
        self._unsaved: list[bytes] = []
        for shard in sorted(self.folder.glob("*.npz")):
            self._load(shard)

    def vectors(self, sentences: Sequence[str]) -> np.ndarray:
        """float32 [n, dim]: the teacher's vector of each sentence, encoding those not seen before."""
        keys = [_key(s) for s in sentences]
        new = {k: s for k, s in zip(keys, sentences, strict=True) if k not in self._vectors}
        if new:
            encoded = np.asarray(self.teacher.encode(list(new.values())).vectors, dtype=np.float32)
            self._vectors.update(zip(new, encoded, strict=True))
            self._unsaved += new
        return np.stack([self._vectors[k] for k in keys]) if keys else np.empty((0, self.dim), np.float32)

    def save(self) -> None:
        """Write the vectors encoded since the last save as one more shard (atomically)."""
        if not self._unsaved:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        keys = np.frombuffer(b"".join(self._unsaved), dtype=np.uint8).reshape(-1, _KEY_BYTES)
        vectors = np.stack([self._vectors[k] for k in self._unsaved])
        number = 1 + max((int(p.stem) for p in self.folder.glob("*.npz")), default=-1)
        with atomic_open(self.folder / f"{number:06d}.npz", "wb") as fh:
            np.savez(fh, keys=keys, vectors=vectors)
        self._unsaved = []

    def _load(self, shard: Path) -> None:
        try:
            with np.load(shard) as data:
                keys, vectors = data["keys"], data["vectors"].astype(np.float32)
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
            raise BitextmineError(
                f"{shard}: unreadable teacher vectors ({exc}); delete it to encode again"
            ) from None
        if vectors.shape != (len(keys), self.dim):
            raise BitextmineError(
                f"{shard}: vectors of shape {vectors.shape}, expected ({len(keys)}, {self.dim})"
            )
        self._vectors.update(zip((bytes(k) for k in keys), vectors, strict=True))


def _key(sentence: str) -> bytes:
    return hashlib.blake2b(sentence.encode(), digest_size=_KEY_BYTES).digest()


def load_teacher(model: str, device: torch.device, folder: Path) -> TeacherVectors:
    """The `SentenceEncoder` of `model` (fp32, no gradients) behind a cache of its vectors in `folder`."""
    teacher = SentenceEncoder.load(model, device=str(device), precision="fp32")
    teacher.loaded.model.requires_grad_(False).eval()
    return TeacherVectors(teacher, folder)


def distill_loss(
    student_src: torch.Tensor, student_en: torch.Tensor, teacher: torch.Tensor, normalize: bool = True
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(loss, non-English term, English term): mean squared distances of both sides to the teacher."""
    src, en = student_src.float(), student_en.float()
    if normalize:
        src, en = F.normalize(src, dim=-1), F.normalize(en, dim=-1)
    src_term = (src - teacher).pow(2).sum(-1).mean()
    en_term = (en - teacher).pow(2).sum(-1).mean()
    return (src_term + en_term) / 2, src_term, en_term


class Distill(Objective):
    Settings = DistillSettings

    def __init__(self, teacher: TeacherVectors, student_dim: int, normalize: bool = True) -> None:
        super().__init__()
        if teacher.dim != student_dim:
            raise BitextmineError(
                f"distill: the teacher's vectors have {teacher.dim} dimensions, the student's {student_dim}; "
                "pass a --teacher whose vectors are the student's size"
            )
        self.teacher = teacher  # not a submodule: no parameters to train, nothing in the checkpoints
        self.normalize = normalize

    @classmethod
    def build(cls, settings: DistillSettings, setup: ObjectiveSetup) -> Distill:
        if setup.teacher is None:
            raise ValueError("the distill objective needs its teacher's vectors")
        return cls(setup.teacher, setup.encoder.config.hidden_size, normalize=setup.normalize)

    def forward(self, inputs: ObjectiveInputs) -> ObjectiveOutput:
        src, tgt, english = inputs.src, inputs.tgt, inputs.english
        if len(english) != len(src.pooled):
            raise ValueError(
                f"distill needs the batch's {len(src.pooled)} English sentences, got {len(english)}"
            )
        device = src.pooled.device
        with torch.autocast(device.type, enabled=False):  # the teacher runs in fp32 inside a bf16 step
            target = torch.from_numpy(self.teacher.vectors(english)).to(device)
        loss, src_term, en_term = distill_loss(src.pooled, tgt.pooled, target, self.normalize)
        return ObjectiveOutput(loss, {"distill": loss.item(), "xx": src_term.item(), "en": en_term.item()})
