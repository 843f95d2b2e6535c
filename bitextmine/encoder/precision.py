"""Numeric precision of the encoder's forward: fp32, bf16 weights, or int8 linear layers (CPU).

- bf16 (every weight and activation in bfloat16, pooling and normalisation in fp32): the fastest, with
  vectors all but equal to fp32's; oneDNN runs the GEMMs on AMX tiles. torch.autocast(bf16) is slower,
  as it casts the weights on every call.
- int8 dynamic quantisation of the linear layers: the activations entering the attention and FFN output
  projections have outliers that one scale per tensor cannot hold, so those two stay in fp32, which
  costs a little of int8's speed and keeps the vectors closer to fp32's.
So bf16 is the default wherever the hardware runs it natively. Figures:
examples/benchmarks/results/bench_encode.md (speed and dev F1) and constants.md (the variants weighed).
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path

import numpy as np
import torch
from torch import nn

from bitextmine.errors import BitextmineError
from bitextmine.files import write_json

PRECISIONS = ("fp32", "bf16", "int8")
# Linear layers whose inputs carry outlier activations: kept in fp32 by the int8 scheme.
INT8_SKIPPED_SUFFIX = "output.dense"
CHECK_FILE = "precision-checks.json"


@dataclass
class PrecisionCheck:
    """How close a precision's vectors are to fp32 on the built-in sample (cosines)."""

    precision: str
    mean_cosine: float
    min_cosine: float
    sentences: int
    cached: bool = False  # True when read back from an earlier run

    def describe(self) -> str:
        return (
            f"{self.precision} self-check vs fp32 on {self.sentences} built-in sentences: mean cosine "
            f"{self.mean_cosine:.6f}, min {self.min_cosine:.6f}"
        )


def resolve_precision(name: str, device: torch.device) -> str:
    """`auto` is bf16 on GPUs and CPUs with native bf16 arithmetic, else fp32; others are validated."""
    if name == "auto":
        return "bf16" if bf16_is_native(device) else "fp32"
    if name not in PRECISIONS:
        raise BitextmineError(f"unknown precision {name!r}: use auto, {', '.join(PRECISIONS)}")
    if name == "int8" and device.type != "cpu":
        raise BitextmineError(f"int8 runs on CPU only (device {device}): use --precision bf16 on GPU")
    return name


def bf16_is_native(device: torch.device) -> bool:
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return device.type == "cpu" and bool({"avx512_bf16", "amx_bf16"} & cpu_flags())


@cache
def cpu_flags() -> frozenset[str]:
    """The x86 feature flags of /proc/cpuinfo (empty elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def convert_model(model: nn.Module, precision: str) -> None:
    """Put `model` (fp32, in place) into `precision`."""
    if precision == "bf16":
        model.to(torch.bfloat16)
    elif precision == "int8":
        _quantize_int8(model)


def _quantize_int8(model: nn.Module) -> None:
    """Dynamic int8 (per-channel weights, per-batch activation scales) for the linear layers."""
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    layers = {
        name: per_channel_dynamic_qconfig
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear) and not name.endswith(INT8_SKIPPED_SUFFIX)
    }
    with warnings.catch_warnings():
        # torch.ao eager quantization is deprecated in favour of torchao, which is not a dependency;
        # the eager API is the maintained path in the torch versions bitextmine supports (<2.14).
        warnings.simplefilter("ignore")
        quantize_dynamic(model, layers, dtype=torch.qint8, inplace=True)


def compare(precision: str, reference: np.ndarray, vectors: np.ndarray) -> PrecisionCheck:
    """Cosines between each row of `vectors` and the fp32 `reference` row."""
    a = reference / np.linalg.norm(reference, axis=1, keepdims=True)
    b = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    cos = (a * b).sum(1)
    return PrecisionCheck(precision, round(float(cos.mean()), 6), round(float(cos.min()), 6), len(cos))


def _check_path() -> Path:
    root = os.environ.get("BITEXTMINE_CACHE") or Path(
        os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache", "bitextmine"
    )
    return Path(root) / CHECK_FILE


def _check_key(fingerprint: str, precision: str, device: torch.device) -> str:
    return f"{fingerprint}:{precision}:{device.type}"


def recorded_check(fingerprint: str, precision: str, device: torch.device) -> PrecisionCheck | None:
    """The self-check an earlier run recorded for this model, precision and device type."""
    try:
        entry = json.loads(_check_path().read_text())[_check_key(fingerprint, precision, device)]
    except (OSError, ValueError, KeyError):
        return None
    return PrecisionCheck(**{**entry, "cached": True})


def record_check(fingerprint: str, device: torch.device, check: PrecisionCheck) -> None:
    """Remember a self-check so later runs skip it; an unwritable cache only costs a re-check."""
    path = _check_path()
    try:
        checks = json.loads(path.read_text()) if path.is_file() else {}
        checks[_check_key(fingerprint, check.precision, device)] = asdict(check) | {"cached": False}
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, checks)
    except (OSError, ValueError):
        pass


# The built-in self-check sample: short and long sentences in several scripts.
CHECK_SENTENCES = (
    "The committee approved the budget after a long debate.",
    "Heavy rain is expected in the north of the country tomorrow.",
    "She said the results would be published next week.",
    "Prices rose by 3.2 percent in October, the fastest pace in a decade.",
    "Die Regierung hat am Mittwoch ein neues Gesetz zum Klimaschutz vorgestellt.",
    "Nach Angaben der Polizei wurde niemand verletzt.",
    "Der Zug nach Berlin hatte wegen eines Stellwerksausfalls zwei Stunden Verspätung.",
    "Le président a annoncé une réforme des retraites lors de son discours télévisé.",
    "Les négociations reprendront lundi à Bruxelles.",
    "La ville prévoit de planter dix mille arbres d'ici 2030.",
    "Правительство объявило о новых мерах поддержки малого бизнеса.",
    "В Москве в выходные ожидается до тридцати градусов тепла.",
    "Компания сообщила о росте прибыли на пятнадцать процентов.",
    "中国国家统计局周一公布了第三季度经济数据。",
    "这座桥梁预计将于明年年底通车。",
    "研究人员发现了一种新的治疗方法。",
    "El partido ganó las elecciones con una mayoría absoluta.",
    "La exposición estará abierta al público hasta finales de enero.",
    "Il governo ha approvato il decreto nella notte.",
    "O jogo terminou empatado depois de noventa minutos intensos.",
    "Rząd zapowiedział obniżkę podatków od przyszłego roku.",
    "政府は来年度の予算案を閣議決定した。",
    "Ok.",
    "A much longer sentence, with several clauses, numbers such as 1,250 and 3.5 million, and names "
    "like the European Central Bank, tests that precision holds over many tokens and not only short ones.",
)
