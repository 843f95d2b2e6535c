"""`train`'s flags as one typed object, by their Python names: what a recipe fills in where the command line
gave none (cli/train.py), and what the TrainConfig is made of, each flag passed by name to its field."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bitextmine.train.objectives.names import parse_objectives
from bitextmine.train.objectives.settings import DistillSettings, RtlSettings, VmsstSettings

if TYPE_CHECKING:
    from bitextmine.train.loop import TrainConfig


@dataclass(frozen=True)
class TrainFlags:
    """Every `train` flag but the run's own (--recipe, --threads, --json), as given or defaulted."""

    data: list[str]
    out_dir: Path
    objectives: str
    base: str | None
    from_scratch: bool
    exclude: list[str] | None
    min_score: float | None
    weight_by_score: bool
    max_steps: int | None
    max_minutes: float | None
    lr: float
    warmup_steps: int
    grad_accum: int
    clip: float
    bf16: str
    seed: int
    max_tokens: int
    max_pairs: int
    max_length: int
    checkpoint_every: int
    eval_every: int
    eval_bucc: list[Path] | None
    eval_tatoeba: Path | None
    eval_langs: str
    eval_max_sentences: int | None
    temperature: float
    margin: float
    projection: bool
    hard_negatives: int
    hard_negative_refresh: int
    hard_negative_pool: int
    mask_ratio: float
    no_token_gradients: bool
    mexma_alignment: str
    rtl_layers: int
    vmsst_lambda: float
    vmsst_kl_steps: int
    vmsst_latent_dim: int | None
    vmsst_language_layers: int
    vmsst_decoder_layers: int
    teacher: str | None
    vocab_size: int
    layers: int
    hidden: int
    heads: int
    padded: bool
    device: str

    def config(self) -> TrainConfig:
        """The TrainConfig of these flags (which checks them)."""
        from bitextmine.train.evaluation import EvalSets
        from bitextmine.train.loop import TrainConfig

        return TrainConfig(
            data=self.data,
            out=self.out_dir,
            objectives=parse_objectives(self.objectives),
            base=self.base,
            from_scratch=self.from_scratch,
            exclude=self.exclude or [],
            min_score=self.min_score,
            weight_by_score=self.weight_by_score,
            max_steps=self.max_steps,
            max_minutes=self.max_minutes,
            lr=self.lr,
            warmup_steps=self.warmup_steps,
            grad_accum=self.grad_accum,
            clip=self.clip,
            bf16=self.bf16,
            seed=self.seed,
            max_tokens=self.max_tokens,
            max_pairs=self.max_pairs,
            max_length=self.max_length,
            checkpoint_every=self.checkpoint_every,
            eval_every=self.eval_every,
            eval_sets=EvalSets(
                list(self.eval_bucc or []),
                self.eval_tatoeba,
                [x.strip() for x in self.eval_langs.split(",") if x.strip()],
                self.eval_max_sentences,
            ),
            packed=not self.padded,
            device=self.device,
            options=self.objective_options(),
            scratch={
                "vocab_size": self.vocab_size,
                "layers": self.layers,
                "hidden": self.hidden,
                "heads": self.heads,
            },
            hard_negatives=self.hard_negatives,
            hard_negative_refresh=self.hard_negative_refresh,
            hard_negative_pool=self.hard_negative_pool,
        )

    def objective_options(self) -> dict[str, Any]:
        """The objectives' settings, by option name."""
        options = {
            "temperature": self.temperature,
            "margin": self.margin,
            "projection": self.projection,
            "mask_ratio": self.mask_ratio,
            "token_gradients": not self.no_token_gradients,
            "mexma_alignment": self.mexma_alignment,
            "vmsst_lambda": self.vmsst_lambda,
            "vmsst_kl_steps": self.vmsst_kl_steps,
        }
        # the settings of later flags only where they differ from their defaults, so that checkpoints of runs
        # from before those flags still resume
        later = {
            "teacher": (self.teacher, DistillSettings.teacher),
            "rtl_layers": (self.rtl_layers, RtlSettings.rtl_layers),
            "vmsst_latent_dim": (self.vmsst_latent_dim, VmsstSettings.vmsst_latent_dim),
            "vmsst_language_layers": (self.vmsst_language_layers, VmsstSettings.vmsst_language_layers),
            "vmsst_decoder_layers": (self.vmsst_decoder_layers, VmsstSettings.vmsst_decoder_layers),
        }
        return options | {name: value for name, (value, default) in later.items() if value != default}
