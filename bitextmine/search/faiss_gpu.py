"""FAISS on GPUs (`index --gpu`): whether this FAISS build can use them, and an index moved onto them
to train and fill, then back to the CPU. Which torch device a run uses is bitextmine/devices.py."""

from __future__ import annotations

from collections.abc import Callable

import faiss

from bitextmine.errors import BitextmineError


def on_device(index: faiss.Index, gpu: bool) -> tuple[faiss.Index, Callable[[], faiss.Index]]:
    """(what to train and fill, a function returning the CPU index once done). With `gpu`: a GPU clone,
    unless the IVF coarse quantizer is not flat (FAISS has no GPU HNSW); then the CPU index itself,
    its k-means assigning on the GPUs."""
    if not gpu:
        return index, lambda: index
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is None or isinstance(faiss.downcast_index(ivf.quantizer), faiss.IndexFlat):
        work = faiss.index_cpu_to_all_gpus(index)
        return work, lambda: faiss.index_gpu_to_cpu(work)
    assigner = faiss.index_cpu_to_all_gpus(faiss.IndexFlat(ivf.d, ivf.metric_type))
    ivf.clustering_index = assigner  # FAISS does not own it: `done` keeps it alive

    def done() -> faiss.Index:
        ivf.clustering_index = None
        assigner.reset()  # frees its centroids on the GPUs
        return index

    return index, done


def check_gpu() -> None:
    """Raise a one-line BitextmineError unless this FAISS build has GPU support and sees a GPU."""
    if not hasattr(faiss, "index_gpu_to_cpu"):
        raise BitextmineError("cannot build on GPU: this FAISS build has no GPU support (install faiss-gpu)")
    if faiss.get_num_gpus() == 0:
        raise BitextmineError("cannot build on GPU: FAISS sees no GPU")
