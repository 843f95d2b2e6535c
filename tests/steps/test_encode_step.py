"""The encode step's jobs: what one job on another node may and may not do to a language's shards."""

from __future__ import annotations

import pickle

import pytest

from bitextmine.encoder.encoder import SentenceEncoder
from bitextmine.encoder.spec import EncoderSpec, LoadedEncoder
from bitextmine.errors import BitextmineError
from bitextmine.steps.encode import EncodeOptions, encode, encode_shard_job
from bitextmine.workspace.corpus import load_manifest
from bitextmine.workspace.embeddings import EmbeddingStore
from bitextmine.workspace.layout import Workspace
from tests.helpers import sentences


@pytest.mark.integration
def test_a_job_at_another_precision_than_the_shards_is_refused(tmp_path, tiny_model_dir):
    """A job resolved `--precision auto` on its own node and only the fingerprint was checked,
    so one language could hold bf16 and fp32 shards recorded as one."""
    model = str(tiny_model_dir("bert"))
    source = tmp_path / "de.txt"
    source.write_text("".join(f"{line}\n" for line in sentences(5, seed=3)))
    work = Workspace(tmp_path / "w")
    encode(work, [source], "de", EncoderSpec(model, precision="fp32"), EncodeOptions(shard_size=3))
    text_shard = load_manifest(work.corpus_dir("de")).shards[0]
    store = EmbeddingStore(work.embedding_dir("de"), "de")
    store.remove_shards({"shard-00000"})
    with pytest.raises(BitextmineError, match="runs the encoder at bf16, the shards here are fp32"):
        encode_shard_job(LoadedEncoder(EncoderSpec(model, precision="bf16")), work.root, "de", text_shard)
    assert (
        encode_shard_job(LoadedEncoder(EncoderSpec(model, precision="fp32")), work.root, "de", text_shard) > 0
    )


@pytest.mark.integration
def test_the_step_loads_the_encoder_once_for_the_jobs_it_runs_and_keeps_none(
    tmp_path, tiny_model_dir, monkeypatch
):
    """The step's encoder serves its shard jobs run here (it was kept in a module-level dict that the
    step had to clear); nothing stays loaded after the step, so the next one loads the model again."""
    loads, load = [], SentenceEncoder.load
    monkeypatch.setattr(
        SentenceEncoder, "load", lambda *args, **kwargs: loads.append(1) or load(*args, **kwargs)
    )
    source = tmp_path / "de.txt"
    source.write_text("".join(f"{line}\n" for line in sentences(5, seed=3)))
    work, spec = Workspace(tmp_path / "w"), EncoderSpec(str(tiny_model_dir("bert")), precision="fp32")
    assert encode(work, [source], "de", spec, EncodeOptions(shard_size=2)).shards_encoded == 3
    assert len(loads) == 1
    encode(work, [source], "de", spec, EncodeOptions(shard_size=2, overwrite=True))
    assert len(loads) == 2


def test_a_loaded_encoder_sent_to_another_process_carries_its_spec_alone():
    spec = EncoderSpec("some/model", precision="bf16")
    held = LoadedEncoder(spec, encoder=object())  # the weights: they stay in this process
    copy = pickle.loads(pickle.dumps(held))
    assert copy.spec == spec and copy._encoder is None
