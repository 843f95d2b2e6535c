"""VMSST (Wieting et al., ACL 2023): a variational source-separation model plus translation terms.

Paper: "Beyond Contrastive Learning: A Variational Generative Model for Multilingual Retrieval",
arXiv:2212.10726 (docs/references.md); the decoder follows the BGT code the paper builds on
(§5, "we follow the approach of Wieting et al. (2020)"; jwieting/bilingual-generative-transformer).

Generative model (§3): a semantic variable z_sem and a language variable z_l per sentence, both with
prior N(0, I), generate each sentence of a pair: p(x_s, x_t | z_sem, z_ls, z_lt) = p(x_s | z_sem, z_ls)
p(x_t | z_sem, z_lt). Inference networks (§4-§5), each a mean-pool followed by linear maps to a mean and
a log-variance (`GaussianHead`):
- q(z_sem | x): the encoder being trained; its pooled sentence vector u gives mu_sem = W_mu u and
  logvar_sem = W_var u. Only this encoder is saved as the model; the paper uses mu_sem as the sentence
  vector (§5), which is linear in u, and W_mu starts as the identity so that mu_sem starts as u.
- q(z_l | x, l): one language encoder for all languages (§5, §7.2) that shares only the word-embedding
  table with the encoder being trained. Its input is word + position + language embedding (the
  language embedding is added at every position, as BERT adds its token type); its layers, positions and
  LayerNorm start as copies of the encoder's bottom layers, and every language embedding as the
  encoder's token-type vector, so it starts as the encoder's first `vmsst_language_layers` layers.
- one decoder for all languages without cross-attention (§5, `LatentDecoder`): the latent
  [z_sem; z_l] enters every layer in place of cross-attention (BGT: the sub-layer x + W[x; z],
  post-LayerNorm) and the logits (BGT: the output projection sees [h; z]). The first decoder input is
  a language embedding of the sentence to generate (§7.2), the next ones the shared word embeddings
  of the previous tokens.

Objective (§4), per pair (x_s, x_t), with mu_sem(x) the semantic mean of x:

    L = -log p(x_s | mu_sem(x_t)) - log p(x_t | mu_sem(x_s))                         (translation)
        + λ [ -log p(x_s | z_sem, z_ls) - log p(x_t | z_sem, z_lt)                   (-ELBO: reconstruction
              + β_t (KL(q_sem || p) + KL(q_ls || p) + KL(q_lt || p)) ]                  and annealed KL)

The translation terms condition on the semantic mean only: their language variable is the prior
mean, 0. The ELBO's z_sem, z_ls, z_lt are reparameterised samples mu + exp(logvar / 2) * eps, with
eps drawn from the loop's checkpointed generator. "For each translation pair, we alternate which of
the two parallel sentences is fed into the semantic encoder within a batch for the ELBO term" (§5):
pair k uses its non-English sentence when k is even, its English one when k is odd.
Log-likelihoods are summed over a sentence's tokens and KLs over the latent dimensions (as in the BGT
criterion), and L is averaged over the pairs, so the loss is on the scale of a sentence's NLL; at that
scale the paper's VMSST CONTRASTIVE weighs "the VMSST loss" by 0.0005 next to a contrastive loss
(§6.3-§6.4, pretrained). Targets are the non-special tokens (CLS, SEP, PAD, ... are neither predicted
nor fed), as in the other objectives.

Settings (§6.4): λ = 0.025 (pretrained; 0.1 from random initialisation); the KL weight β_t rises
linearly from 0 to 1 over `vmsst_kl_steps` = 1,000,000 updates (the paper trains 100,000 steps). Here t counts
the training batches this objective has seen (a buffer, so it is checkpointed with the weights and
survives a resume; it is the optimizer step when grad_accum = 1). No dropout in the decoder (§6.4: none
for VMSST); the language encoder's copied layers keep the encoder's dropout, as the encoder does.

Sizes: the paper's latents have the hidden size d (§7.1 footnote 13: the output projection is 3d x V),
and so do they here by default. Its pretrained setting uses the whole mT5 encoder and decoder; on CPU
the language encoder has `vmsst_language_layers` = 2 layers and the decoder `vmsst_decoder_layers` = 1 (the
ablation's best decoder, Table 4 "1L dec.", also BGT's default), with the encoder's width, heads and
feed-forward size. The output layer is factored (Table 4 "fact."): [h; z] -> d, then the shared word
embeddings as the vocabulary matrix (tied), since the full 3d x V projection would be 3 x 384 x 132k =
152M fresh parameters for e5-small and triple the vocabulary FLOPs, which already dominate a step: every
token is decoded four times (two translation terms, two reconstructions).
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from bitextmine.encoder.packed import packed_positions
from bitextmine.train.model import TrainContext, TrainEncoder, is_special, pool, sentence_of_tokens
from bitextmine.train.objectives.base import Objective, ObjectiveInputs, ObjectiveOutput, ObjectiveSetup
from bitextmine.train.objectives.settings import VmsstSettings

LOGIT_ELEMENTS = 1 << 26  # [rows, vocab] logits computed at once: 256 MB in float32


class VMSST(Objective):
    Settings = VmsstSettings
    needs_bert_heads = True

    def __init__(self, encoder_model: nn.Module, languages: list[str], settings: VmsstSettings) -> None:
        super().__init__()
        model = encoder_model.model if isinstance(encoder_model, TrainEncoder) else encoder_model
        hidden = model.config.hidden_size
        latent = settings.vmsst_latent_dim or hidden
        self.languages = list(languages)
        self.elbo_weight = settings.vmsst_lambda
        self.kl_steps = settings.vmsst_kl_steps
        self.semantic = GaussianHead(hidden, latent)
        if latent == hidden:
            nn.init.eye_(self.semantic.mean.weight)
            nn.init.zeros_(self.semantic.mean.bias)
        n_languages = len(self.languages)
        self.language_encoder = LanguageEncoder(model, n_languages, settings.vmsst_language_layers, latent)
        self.decoder = LatentDecoder(model.config, n_languages, 2 * latent, settings.vmsst_decoder_layers)
        self.register_buffer("batches", torch.zeros((), dtype=torch.long))

    @classmethod
    def build(cls, settings: VmsstSettings, setup: ObjectiveSetup) -> VMSST:
        return cls(setup.encoder.model, setup.ctx.languages, settings)

    def forward(self, inputs: ObjectiveInputs) -> ObjectiveOutput:
        src, tgt, ctx = inputs.src, inputs.tgt, inputs.ctx
        if list(ctx.languages) != self.languages:
            raise ValueError(
                f"VMSST was built for languages {self.languages}, the batch uses {ctx.languages}"
            )
        pairs = len(src.seqlens)
        ids, seqlens = torch.cat([src.input_ids, tgt.input_ids]), src.seqlens + tgt.seqlens
        langs = torch.cat([src.langs, tgt.langs])
        mu, logvar = self.semantic(torch.cat([src.pooled, tgt.pooled]))
        sem_mu, sem_logvar = alternate(mu[:pairs], mu[pairs:]), alternate(logvar[:pairs], logvar[pairs:])
        lang_mu, lang_logvar = self.language_encoder(ids, seqlens, langs, ctx)
        z_sem = reparameterise(sem_mu, sem_logvar, ctx.generator)
        z_lang = reparameterise(lang_mu, lang_logvar, ctx.generator)
        other_mean = torch.cat([mu[pairs:], mu[:pairs]]).float()  # x_s decoded from mu_sem(x_t), and back
        latents = torch.cat(
            [
                torch.cat([other_mean, torch.zeros_like(z_lang)], 1),
                torch.cat([torch.cat([z_sem, z_sem]), z_lang], 1),
            ]
        )
        # rows: x_s and x_t by translation, then x_s and x_t by reconstruction
        nll = self.decoder(ids.repeat(2), seqlens * 2, langs.repeat(2), latents, ctx).view(4, pairs)
        lang_kl = gaussian_kl(lang_mu, lang_logvar).view(2, pairs)
        kl = (gaussian_kl(sem_mu, sem_logvar) + lang_kl[0] + lang_kl[1]).mean()
        return self._output((nll[0] + nll[1]).mean(), (nll[2] + nll[3]).mean(), kl)

    def _output(
        self, translation: torch.Tensor, reconstruction: torch.Tensor, kl: torch.Tensor
    ) -> ObjectiveOutput:
        """translation + λ (reconstruction + β_t KL); counts the batch when it trains."""
        beta = kl_weight(int(self.batches), self.kl_steps)
        if self.training and torch.is_grad_enabled():
            self.batches += 1
        loss = translation + self.elbo_weight * (reconstruction + beta * kl)
        terms = {"translation": translation, "reconstruction": reconstruction, "kl": kl}
        return ObjectiveOutput(loss, {**{k: float(v.detach()) for k, v in terms.items()}, "kl_weight": beta})


class GaussianHead(nn.Module):
    """Mean and log-variance of a diagonal Gaussian, each a linear map of a pooled vector (§5)."""

    def __init__(self, hidden: int, latent: int) -> None:
        super().__init__()
        self.mean = nn.Linear(hidden, latent)
        self.logvar = nn.Linear(hidden, latent)

    def forward(self, pooled: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.mean(pooled), self.logvar(pooled)


class LanguageEncoder(nn.Module):
    """q(z_l | x, l): word (shared) + position + language embeddings, a few layers, mean-pool, heads."""

    def __init__(self, model: nn.Module, languages: int, layers: int, latent: int) -> None:
        super().__init__()
        embeddings = model.embeddings
        self.positions = copy.deepcopy(embeddings.position_embeddings)
        self.language = nn.Embedding(languages, model.config.hidden_size)
        with torch.no_grad():
            self.language.weight.copy_(embeddings.token_type_embeddings.weight[0].expand(languages, -1))
        self.norm = copy.deepcopy(embeddings.LayerNorm)
        self.layers = nn.ModuleList(copy.deepcopy(layer) for layer in model.encoder.layer[:layers])
        self.head = GaussianHead(model.config.hidden_size, latent)

    def forward(
        self, ids: torch.Tensor, seqlens: list[int], langs: torch.Tensor, ctx: TrainContext
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(mu, logvar), each [sentences, latent], of the packed sentences `ids`."""
        packer = ctx.encoder.packer
        positions = packed_positions(seqlens, packer.position_offset, ids.device)
        owner = sentence_of_tokens(seqlens, ids.device)
        words = ctx.encoder.model.get_input_embeddings()(ids)
        hidden = self.norm(words + self.positions(positions) + self.language(langs)[owner])
        hidden = packer.run_layers(self.layers, hidden, seqlens)
        return self.head(pool(hidden, seqlens, "mean"))


class LatentDecoder(nn.Module):
    """p(x | z): a causal decoder without cross-attention, z fed to every layer and to the output."""

    def __init__(self, config, languages: int, latent: int, layers: int) -> None:
        super().__init__()
        hidden, eps = config.hidden_size, config.layer_norm_eps
        self.language = nn.Embedding(languages, hidden)
        self.positions = nn.Embedding(config.max_position_embeddings, hidden)
        self.norm = nn.LayerNorm(hidden, eps=eps)
        self.layers = nn.ModuleList(
            DecoderLayer(hidden, config.num_attention_heads, config.intermediate_size, latent, eps)
            for _ in range(layers)
        )
        self.output = nn.Linear(hidden + latent, hidden, bias=False)
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=config.initializer_range)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

    def forward(
        self,
        ids: torch.Tensor,
        seqlens: list[int],
        langs: torch.Tensor,
        latents: torch.Tensor,
        ctx: TrainContext,
    ) -> torch.Tensor:
        """-log p(sentence | its latent) for every packed sentence of `ids`: [sentences]."""
        words = ctx.encoder.model.get_input_embeddings()
        kept = ~is_special(ids, ctx.special_ids)
        targets, owner = ids[kept], sentence_of_tokens(seqlens, ids.device)[kept]
        if not len(targets):
            return latents.sum(1) * 0.0
        lengths = torch.bincount(owner, minlength=len(seqlens))
        positions = packed_positions(lengths.tolist(), 0, ids.device)
        previous = torch.where((positions == 0)[:, None], self.language(langs)[owner], words(targets.roll(1)))
        hidden = self.norm(previous + self.positions(positions))
        latent = latents[owner]
        for layer in self.layers:
            hidden = layer(hidden, latent, lengths)
        states = self.output(torch.cat([hidden, latent.to(hidden.dtype)], 1))
        per_token = token_nll(states, words.weight, targets)
        return per_token.new_zeros(len(seqlens)).index_add(0, owner, per_token)


class DecoderLayer(nn.Module):
    """Post-LayerNorm block: causal self-attention, then x + W[x; z] (BGT's stand-in for
    cross-attention, no activation), then the feed-forward network."""

    def __init__(self, hidden: int, heads: int, ffn: int, latent: int, eps: float) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.attention_out = nn.Linear(hidden, hidden)
        self.attention_norm = nn.LayerNorm(hidden, eps=eps)
        self.latent = nn.Linear(hidden + latent, hidden)
        self.latent_norm = nn.LayerNorm(hidden, eps=eps)
        self.ffn = nn.Sequential(nn.Linear(hidden, ffn), nn.GELU(), nn.Linear(ffn, hidden))
        self.ffn_norm = nn.LayerNorm(hidden, eps=eps)

    def forward(self, hidden: torch.Tensor, latent: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        attended = causal_attention(self.qkv(hidden), lengths, self.heads)
        hidden = self.attention_norm(hidden + self.attention_out(attended))
        hidden = self.latent_norm(hidden + self.latent(torch.cat([hidden, latent.to(hidden.dtype)], 1)))
        return self.ffn_norm(hidden + self.ffn(hidden))


def causal_attention(qkv: torch.Tensor, lengths: torch.Tensor, heads: int) -> torch.Tensor:
    """Packed [tokens, 3 * hidden] -> [tokens, hidden]: each token attends to its own sentence up to
    itself. Sentences are right-padded, so a causal mask never lets a real token see padding."""
    sentences, width = len(lengths), int(lengths.max())
    hidden = qkv.shape[1] // 3
    real = torch.arange(width, device=qkv.device)[None, :] < lengths[:, None]
    padded = qkv.new_zeros(sentences, width, 3 * hidden)
    padded[real] = qkv
    q, k, v = padded.view(sentences, width, 3, heads, hidden // heads).permute(2, 0, 3, 1, 4)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return out.transpose(1, 2).reshape(sentences, width, hidden)[real]


def token_nll(states: torch.Tensor, vocabulary: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """-log softmax(states @ vocabulary.T)[target] per row. A batch decodes every token four times, so
    the logits are made a chunk of rows at a time and recomputed in the backward pass: only one chunk's
    [rows, vocab] matrix is ever held."""
    rows = max(1, LOGIT_ELEMENTS // vocabulary.shape[0])
    chunks = [
        checkpoint(_chunk_nll, states[i : i + rows], vocabulary, targets[i : i + rows], use_reentrant=False)
        for i in range(0, len(targets), rows)
    ]
    return torch.cat(chunks)


def _chunk_nll(states: torch.Tensor, vocabulary: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(F.linear(states, vocabulary).float(), targets, reduction="none")


def gaussian_kl(mu: torch.Tensor, logvar: torch.Tensor) -> torch.Tensor:
    """KL(N(mu, diag exp(logvar)) || N(0, I)) per row: 0.5 * sum(mu^2 + exp(logvar) - 1 - logvar)."""
    mu, logvar = mu.float(), logvar.float()
    return 0.5 * (mu.pow(2) + logvar.exp() - 1 - logvar).sum(-1)


def reparameterise(mu: torch.Tensor, logvar: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """mu + exp(logvar / 2) * eps, eps ~ N(0, I) from `generator` (float32)."""
    eps = torch.randn(mu.shape, generator=generator, device=generator.device).to(mu.device)
    return mu.float() + torch.exp(0.5 * logvar.float()) * eps


def kl_weight(batches: int, steps: int) -> float:
    """β_t: linear from 0 (first batch) to 1 after `steps` batches; 1 throughout when steps = 0."""
    return min(1.0, batches / steps) if steps > 0 else 1.0


def alternate(from_source: torch.Tensor, from_target: torch.Tensor) -> torch.Tensor:
    """Row k from the non-English side when k is even, from the English side when k is odd (§5)."""
    even = torch.arange(len(from_source), device=from_source.device) % 2 == 0
    return torch.where(even[:, None], from_source, from_target)
