"""VMSST objective: the KL in closed form, annealing and its resume, the alternation of the semantic
input, the decoder's NLL against an independent loop, where the latent enters, the assembled loss,
gradients, learning on real pairs with the shared model, and the CLI."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from safetensors import safe_open
from transformers import AutoModel, AutoTokenizer
from typer.testing import CliRunner

from bitextmine.cli import app
from bitextmine.train.model import EncodedSide, TrainContext, TrainEncoder
from bitextmine.train.objectives.base import ObjectiveInputs
from bitextmine.train.objectives.settings import VmsstSettings
from bitextmine.train.objectives.vmsst import VMSST, LatentDecoder, alternate, gaussian_kl, kl_weight
from tests.helpers import TRAINING_TEXT, require_shared

LANGUAGES = ["de", "en"]
GERMAN, ENGLISH = TRAINING_TEXT[1::2], TRAINING_TEXT[0::2]


def context(encoder: TrainEncoder, tokenizer, languages=LANGUAGES) -> TrainContext:
    return TrainContext(
        encoder=encoder,
        mask_token_id=tokenizer.mask_token_id,
        special_ids=frozenset(tokenizer.all_special_ids),
        vocab_size=len(tokenizer),
        languages=list(languages),
        generator=torch.Generator().manual_seed(0),
    )


def build(model_dir: Path, **settings):
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    torch.manual_seed(0)
    encoder = TrainEncoder(AutoModel.from_pretrained(model_dir)).eval()
    return (
        tokenizer,
        encoder,
        VMSST(encoder.model, LANGUAGES, VmsstSettings(**settings)),
        context(encoder, tokenizer),
    )


def encode(encoder: TrainEncoder, tokenizer, texts: list[str], lang: str) -> EncodedSide:
    ids = tokenizer(texts)["input_ids"]
    stream = torch.tensor([t for s in ids for t in s])
    return encoder.encode(stream, [len(s) for s in ids], torch.full((len(texts),), LANGUAGES.index(lang)))


def pair(encoder: TrainEncoder, tokenizer, n: int = 4) -> tuple[EncodedSide, EncodedSide]:
    return encode(encoder, tokenizer, GERMAN[:n], "de"), encode(encoder, tokenizer, ENGLISH[:n], "en")


# --- KL, annealing, alternation ------------------------------------------------------------------------


def test_gaussian_kl_is_the_closed_form_for_diagonal_gaussians():
    mu = torch.tensor([[0.5, -1.0, 2.0], [0.0, 0.0, 0.0]])
    logvar = torch.tensor([[0.2, -0.3, 0.0], [0.0, 0.0, 0.0]])
    # KL(N(m, s^2) || N(0, 1)) = log(1 / s) + (s^2 + m^2) / 2 - 1/2 per dimension
    by_hand = [
        sum(-0.5 * lv + (math.exp(lv) + m * m) / 2 - 0.5 for m, lv in zip(ms, lvs, strict=True))
        for ms, lvs in zip(mu.tolist(), logvar.tolist(), strict=True)
    ]
    assert gaussian_kl(mu, logvar).tolist() == pytest.approx(by_hand, rel=1e-6)
    assert by_hand[1] == 0.0  # the prior itself
    normal = torch.distributions.Normal(mu, torch.exp(0.5 * logvar))
    prior = torch.distributions.Normal(torch.zeros(3), torch.ones(3))
    expected = torch.distributions.kl_divergence(normal, prior).sum(-1)
    torch.testing.assert_close(gaussian_kl(mu, logvar), expected)


def test_kl_weight_rises_linearly_from_zero_to_one():
    assert [kl_weight(t, 4) for t in range(7)] == [0.0, 0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    assert kl_weight(0, 0) == kl_weight(5, 0) == 1.0  # no annealing


def test_alternation_takes_even_pairs_from_the_source_and_odd_ones_from_the_target():
    source = torch.arange(10.0).view(5, 2)
    target = -torch.arange(10.0).view(5, 2)
    mixed = alternate(source, target)
    for k in range(5):
        assert mixed[k].tolist() == (source[k] if k % 2 == 0 else target[k]).tolist()


def test_annealing_counts_training_batches_and_survives_a_checkpoint(tiny_model_dir):
    tokenizer, encoder, obj, ctx = build(tiny_model_dir("bert"), vmsst_kl_steps=4, vmsst_lambda=0.5)
    weights = []
    for _ in range(3):
        out = obj(ObjectiveInputs(*pair(encoder, tokenizer), ctx))
        t = out.terms
        assert out.loss.item() == pytest.approx(
            t["translation"] + 0.5 * (t["reconstruction"] + t["kl_weight"] * t["kl"]), rel=1e-5
        )
        weights.append(t["kl_weight"])
    assert weights == [0.0, 0.25, 0.5] and int(obj.batches) == 3
    with torch.no_grad():  # evaluation passes are not training batches
        assert obj(ObjectiveInputs(*pair(encoder, tokenizer), ctx)).terms["kl_weight"] == 0.75
    obj.eval()
    obj(ObjectiveInputs(*pair(encoder, tokenizer), ctx))
    assert int(obj.batches) == 3
    torch.manual_seed(1)
    resumed = VMSST(encoder.model, LANGUAGES, VmsstSettings(vmsst_lambda=0.5, vmsst_kl_steps=4))
    resumed.load_state_dict(obj.state_dict())
    assert resumed(ObjectiveInputs(*pair(encoder, tokenizer), ctx)).terms["kl_weight"] == 0.75
    assert int(resumed.batches) == 4


# --- the decoder -----------------------------------------------------------------------------------------


def reference_nll(
    decoder: LatentDecoder, words: torch.Tensor, targets: list[int], lang: int, z: torch.Tensor
):
    """-log p(targets | z) for one sentence, written out: explicit causal mask, softmax and a loop over
    the tokens."""
    n = len(targets)
    if n == 0:
        return 0.0
    inputs = torch.stack([decoder.language.weight[lang], *(words[t] for t in targets[:-1])])
    x = F.layer_norm(
        inputs + decoder.positions.weight[:n],
        inputs.shape[1:],
        decoder.norm.weight,
        decoder.norm.bias,
        decoder.norm.eps,
    )
    zs = z.expand(n, -1)
    future = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
    for layer in decoder.layers:
        q, k, v = F.linear(x, layer.qkv.weight, layer.qkv.bias).chunk(3, dim=1)
        heads, width = layer.heads, x.shape[1] // layer.heads
        context_rows = []
        for h in range(heads):
            cols = slice(h * width, (h + 1) * width)
            scores = q[:, cols] @ k[:, cols].T / math.sqrt(width)
            scores = scores.masked_fill(future, float("-inf"))
            context_rows.append(torch.softmax(scores, dim=1) @ v[:, cols])
        attended = F.linear(torch.cat(context_rows, 1), layer.attention_out.weight, layer.attention_out.bias)
        x = layer.attention_norm(x + attended)
        x = layer.latent_norm(x + F.linear(torch.cat([x, zs], 1), layer.latent.weight, layer.latent.bias))
        first, _, second = layer.ffn
        x = layer.ffn_norm(x + second(F.gelu(first(x))))
    logits = torch.cat([x, zs], 1) @ decoder.output.weight.T @ words.T
    return sum(-torch.log_softmax(logits[i], dim=0)[t].item() for i, t in enumerate(targets))


def test_decoder_nll_matches_an_independent_loop(tiny_model_dir):
    tokenizer, encoder, _, ctx = build(tiny_model_dir("bert"))
    torch.manual_seed(3)
    decoder = LatentDecoder(encoder.config, len(LANGUAGES), latent=6, layers=2)
    for p in decoder.parameters():  # far from the small initialisation, so that every part matters
        torch.nn.init.normal_(p, std=0.3)
    texts = [GERMAN[0], ENGLISH[1], "", GERMAN[2][:12]]  # "" has no token to predict
    ids = tokenizer(texts)["input_ids"]
    langs = torch.tensor([0, 1, 1, 0])
    latents = torch.randn(4, 6)
    with torch.no_grad():
        nll = decoder(torch.tensor([t for s in ids for t in s]), [len(s) for s in ids], langs, latents, ctx)
        words = encoder.model.get_input_embeddings().weight
        expected = [
            reference_nll(decoder, words, [t for t in s if t not in ctx.special_ids], int(lang), z)
            for s, lang, z in zip(ids, langs, latents, strict=True)
        ]
    assert nll.shape == (4,) and nll[2] == 0.0
    assert nll.tolist() == pytest.approx(expected, rel=1e-5)


def test_latent_enters_every_decoder_layer_and_the_logits(tiny_model_dir):
    tokenizer, encoder, _, ctx = build(tiny_model_dir("bert"))
    torch.manual_seed(0)
    hidden = encoder.config.hidden_size
    decoder = LatentDecoder(encoder.config, len(LANGUAGES), latent=8, layers=3)
    ids = tokenizer(GERMAN[:2])["input_ids"]
    stream, seqlens = torch.tensor([t for s in ids for t in s]), [len(s) for s in ids]

    def latent_gradient(keep_layers: set[int], keep_output: bool) -> float:
        with torch.no_grad():
            for i, layer in enumerate(decoder.layers):
                layer.latent.weight[:, hidden:] *= float(i in keep_layers)
            decoder.output.weight[:, hidden:] *= float(keep_output)
        z = torch.randn(2, 8, requires_grad=True)
        decoder(stream, seqlens, torch.tensor([0, 0]), z, ctx).sum().backward()
        return float(z.grad.abs().sum())

    state = {k: v.clone() for k, v in decoder.state_dict().items()}
    cases = {"all": ({0, 1, 2}, True), "output only": (set(), True)}
    cases |= {f"layer {i} only": ({i}, False) for i in range(3)}
    for what, (layers, output) in cases.items():
        decoder.load_state_dict(state)
        assert latent_gradient(layers, output) > 0, what
    decoder.load_state_dict(state)
    assert latent_gradient(set(), False) == 0.0  # no other path from z


def test_shapes_and_initial_semantic_mean(tiny_model_dir):
    tokenizer, encoder, obj, ctx = build(tiny_model_dir("xlm-roberta"))
    hidden = encoder.config.hidden_size
    with torch.no_grad():
        src, tgt = pair(encoder, tokenizer, n=3)
        mu, logvar = obj.semantic(src.pooled)
        ids, seqlens = torch.cat([src.input_ids, tgt.input_ids]), src.seqlens + tgt.seqlens
        lang_mu, lang_logvar = obj.language_encoder(ids, seqlens, torch.cat([src.langs, tgt.langs]), ctx)
    assert mu.shape == logvar.shape == (3, hidden)  # latents have the hidden size by default
    assert lang_mu.shape == lang_logvar.shape == (6, hidden)
    torch.testing.assert_close(mu, src.pooled)  # W_mu starts as the identity
    assert len(obj.decoder.layers) == 1 and len(obj.language_encoder.layers) == 2
    settings = VmsstSettings(vmsst_latent_dim=5, vmsst_language_layers=1, vmsst_decoder_layers=2)
    small = VMSST(encoder.model, LANGUAGES, settings)
    assert small.semantic.mean.out_features == 5 and small.decoder.output.in_features == hidden + 10
    assert len(small.language_encoder.layers) == 1 and len(small.decoder.layers) == 2


def test_language_encoder_starts_as_the_encoders_bottom_layers(tiny_model_dir):
    tokenizer, encoder, obj, ctx = build(tiny_model_dir("bert"), vmsst_language_layers=2)
    with torch.no_grad():
        src = encode(encoder, tokenizer, GERMAN[:3], "de")
        mu, _ = obj.language_encoder(src.input_ids, src.seqlens, src.langs, ctx)
        expected = obj.language_encoder.head.mean(src.pooled)  # the tiny encoder has 2 layers
    torch.testing.assert_close(mu, expected, rtol=1e-4, atol=1e-5)
    shared = obj.language_encoder.layers[0].attention.self.query.weight
    assert shared.data_ptr() != encoder.model.encoder.layer[0].attention.self.query.weight.data_ptr()


# --- the assembled objective -------------------------------------------------------------------------------


def test_loss_assembles_translation_and_elbo_with_the_alternated_semantic_input(tiny_model_dir):
    """Per pair: -log p(x_s | [mu_sem(x_t); 0]) - log p(x_t | [mu_sem(x_s); 0]) plus
    λ(-log p(x_s | [z_sem; z_ls]) - log p(x_t | [z_sem; z_lt]) + β KL), z_sem from x_s for even pairs and
    from x_t for odd ones; here one sentence at a time, with the noise replayed from the generator."""
    tokenizer, encoder, obj, ctx = build(tiny_model_dir("bert"), vmsst_kl_steps=0, vmsst_lambda=0.3)
    obj.eval()
    n = 3
    with torch.no_grad():
        src, tgt = pair(encoder, tokenizer, n)
        replay = torch.Generator()
        replay.set_state(ctx.generator.get_state())
        out = obj(ObjectiveInputs(src, tgt, ctx))

        def one(side: EncodedSide, k: int) -> tuple[torch.Tensor, list[int], torch.Tensor]:
            start = sum(side.seqlens[:k])
            return side.input_ids[start : start + side.seqlens[k]], [side.seqlens[k]], side.langs[k : k + 1]

        def nll(ids, seqlens, langs, latent) -> float:
            return float(obj.decoder(ids, seqlens, langs, latent[None], ctx)[0])

        mu_s, logvar_s = obj.semantic(src.pooled)
        mu_t, logvar_t = obj.semantic(tgt.pooled)
        sem_mu = torch.stack([(mu_s if k % 2 == 0 else mu_t)[k] for k in range(n)])
        sem_logvar = torch.stack([(logvar_s if k % 2 == 0 else logvar_t)[k] for k in range(n)])
        ids, seqlens = torch.cat([src.input_ids, tgt.input_ids]), src.seqlens + tgt.seqlens
        lang_mu, lang_logvar = obj.language_encoder(ids, seqlens, torch.cat([src.langs, tgt.langs]), ctx)
        z_sem = sem_mu + torch.exp(0.5 * sem_logvar) * torch.randn(sem_mu.shape, generator=replay)
        z_lang = lang_mu + torch.exp(0.5 * lang_logvar) * torch.randn(lang_mu.shape, generator=replay)
        zero = torch.zeros_like(z_lang[0])
        translation, reconstruction, kl = [], [], []
        for k in range(n):
            translation.append(
                nll(*one(src, k), torch.cat([mu_t[k], zero])) + nll(*one(tgt, k), torch.cat([mu_s[k], zero]))
            )
            reconstruction.append(
                nll(*one(src, k), torch.cat([z_sem[k], z_lang[k]]))
                + nll(*one(tgt, k), torch.cat([z_sem[k], z_lang[n + k]]))
            )
            kl.append(
                float(
                    gaussian_kl(sem_mu[k : k + 1], sem_logvar[k : k + 1])
                    + gaussian_kl(lang_mu[[k, n + k]], lang_logvar[[k, n + k]]).sum()
                )
            )
    mean = lambda values: sum(values) / len(values)  # noqa: E731
    assert out.terms["translation"] == pytest.approx(mean(translation), rel=1e-5)
    assert out.terms["reconstruction"] == pytest.approx(mean(reconstruction), rel=1e-5)
    assert out.terms["kl"] == pytest.approx(mean(kl), rel=1e-5)
    assert out.terms["kl_weight"] == 1.0
    expected = mean(translation) + 0.3 * (mean(reconstruction) + mean(kl))
    assert out.loss.item() == pytest.approx(expected, rel=1e-5)


def test_gradients_reach_the_encoder_and_every_part(tiny_model_dir):
    tokenizer, encoder, obj, ctx = build(tiny_model_dir("bert"), vmsst_kl_steps=0)
    obj(ObjectiveInputs(*pair(encoder, tokenizer), ctx)).loss.backward()
    model = encoder.model
    reached = {
        "encoder layers": model.encoder.layer[0].attention.self.query.weight,
        "shared word embeddings": model.embeddings.word_embeddings.weight,
        "semantic mean": obj.semantic.mean.weight,
        "semantic log-variance": obj.semantic.logvar.weight,
        "language encoder": obj.language_encoder.layers[0].output.dense.weight,
        "language embeddings": obj.language_encoder.language.weight,
        "language log-variance": obj.language_encoder.head.logvar.weight,
        "decoder": obj.decoder.layers[0].qkv.weight,
        "decoder latent input": obj.decoder.layers[0].latent.weight,
        "decoder language start": obj.decoder.language.weight,
        "output projection": obj.decoder.output.weight,
    }
    for what, parameter in reached.items():
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0, what


def test_languages_must_match_the_context(tiny_model_dir):
    tokenizer, encoder, obj, _ = build(tiny_model_dir("bert"))
    with pytest.raises(ValueError, match="languages"):
        obj(ObjectiveInputs(*pair(encoder, tokenizer), context(encoder, tokenizer, ["de", "en", "fr"])))


# --- learning ---------------------------------------------------------------------------------------------


def test_a_few_steps_on_real_pairs_lower_the_loss(e5_dir):
    """The shared e5-small on four short de-en pairs: the fixed batch and noise give a deterministic loss."""
    corpus = require_shared("data/parallel/de-en")
    lines = {
        lang: (corpus / f"multi30k.{lang}").read_text(encoding="utf-8").splitlines()[:64]
        for lang in LANGUAGES
    }
    pairs = sorted(zip(lines["de"], lines["en"], strict=True), key=lambda p: len(p[0]) + len(p[1]))[:4]
    tokenizer, encoder, obj, ctx = build(e5_dir, vmsst_kl_steps=0)
    optimizer = torch.optim.Adam([*encoder.parameters(), *obj.parameters()], lr=3e-4)
    losses = []
    for _ in range(3):
        ctx.generator.manual_seed(0)
        src = encode(encoder, tokenizer, [de for de, _ in pairs], "de")
        tgt = encode(encoder, tokenizer, [en for _, en in pairs], "en")
        out = obj(ObjectiveInputs(src, tgt, ctx))
        optimizer.zero_grad()
        out.loss.backward()
        optimizer.step()
        losses.append(out.loss.item())
    assert all(math.isfinite(v) for v in losses)
    assert losses[2] < losses[1] < losses[0] and losses[-1] < 0.9 * losses[0], losses


# --- the command line --------------------------------------------------------------------------------------


@pytest.mark.integration
def test_train_command_with_vmsst_resumes_exactly_with_its_annealing(tiny_model_dir, tmp_path):
    (tmp_path / "toy.de").write_text("\n".join(f"{s} {i}" for i, s in enumerate(GERMAN * 6)) + "\n")
    (tmp_path / "toy.en").write_text("\n".join(f"{s} {i}" for i, s in enumerate(ENGLISH * 6)) + "\n")
    args = ["train", "--data", str(tmp_path / "toy.de"), "--base", str(tiny_model_dir("xlm-roberta"))]
    args += ["--objectives", "vmsst,contrastive", "--vmsst-lambda", "0.5", "--vmsst-kl-steps", "4"]
    args += ["--max-tokens", "120", "--bf16", "off", "--checkpoint-every", "1", "--device", "cpu"]
    runner = CliRunner()
    resumed, straight = tmp_path / "resumed", tmp_path / "straight"
    for out, steps in ((resumed, "2"), (resumed, "3"), (straight, "3")):
        result = runner.invoke(app, [*args, "--out", str(out), "--max-steps", steps])
        assert result.exit_code == 0, result.output

    def log(out: Path) -> list[dict]:
        return [r for r in map(json.loads, (out / "train_log.jsonl").read_text().splitlines()) if "loss" in r]

    assert [r["vmsst/kl_weight"] for r in log(resumed)] == [0.0, 0.25, 0.5]
    assert [r["loss"] for r in log(resumed)] == [r["loss"] for r in log(straight)]
    state = torch.load(resumed / "checkpoints" / "step-00000003.pt", weights_only=False)
    assert int(state["objectives"]["vmsst.batches"]) == 3
    training = json.loads((resumed / "bitextmine.json").read_text())["training"]
    assert training["options"]["vmsst_lambda"] == 0.5 and training["options"]["vmsst_kl_steps"] == 4
    with safe_open(resumed / "model.safetensors", "pt") as weights:  # only the encoder is the model
        assert not [k for k in weights.keys() if "decoder" in k or "language" in k]  # noqa: SIM118
