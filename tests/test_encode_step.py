"""The encode step's jobs: what one job on another node may and may not do to a language's shards."""

from __future__ import annotations

import pytest

from bitextmine.encoder.spec import EncoderSpec
from bitextmine.errors import BitextmineError
from bitextmine.steps.encode import EncodeOptions, encode, encode_shard_job
from bitextmine.workspace.corpus import load_manifest
from bitextmine.workspace.embeddings import EmbeddingStore
from bitextmine.workspace.layout import Workspace
from tests.helpers import sentences


@pytest.mark.integration
def test_a_job_at_another_precision_than_the_shards_is_refused(tmp_path, tiny_model_dir):
    """Issue 22: a job resolved `--precision auto` on its own node and only the fingerprint was checked,
    so one language could hold bf16 and fp32 shards recorded as one."""
    model = str(tiny_model_dir("bert"))
    source = tmp_path / "de.txt"
    source.write_text("".join(f"{line}\n" for line in sentences(5, seed=3)))
    work = Workspace(tmp_path / "w")
    encode([source], "de", work, EncoderSpec(model, precision="fp32"), EncodeOptions(shard_size=3))
    text_shard = load_manifest(work.corpus_dir("de")).shards[0]
    store = EmbeddingStore(work.embedding_dir("de"), "de")
    store.remove_shards({"shard-00000"})
    with pytest.raises(BitextmineError, match="runs the encoder at bf16, the shards here are fp32"):
        encode_shard_job(EncoderSpec(model, precision="bf16"), work.root, "de", text_shard)
    assert encode_shard_job(EncoderSpec(model, precision="fp32"), work.root, "de", text_shard) > 0
