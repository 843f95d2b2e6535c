"""`bitextmine index`: parsing and printing (work: steps/index.py)."""

from __future__ import annotations

from typing import Annotated

import typer

from bitextmine.cli.app import (
    JsonOption,
    ThreadsOption,
    WorkdirOption,
    app,
    bound_threads,
    checked_by,
    info,
    out,
    positive,
    user_errors,
)
from bitextmine.cli.launcher_options import NO_FLAGS, LauncherFlags, with_launcher_options
from bitextmine.cli.output import ProgressDisplay, emit_json, json_target
from bitextmine.text.languages import check_lang
from bitextmine.workspace.layout import DEFAULT_WORKDIR, Workspace


@app.command()
@with_launcher_options
def index(
    lang: Annotated[
        str, typer.Argument(help="Language whose embeddings to index.", callback=checked_by(check_lang))
    ],
    workdir: WorkdirOption = DEFAULT_WORKDIR,
    factory: Annotated[
        str | None,
        typer.Option(
            help="FAISS factory string, e.g. 'IVF4096,Flat'; 'Flat' is exact search by matrix products "
            "\\[default: Flat where mining takes at most --exact-budget, else IVF-Flat of lists of 1,000 "
            "vectors probed 16 at a time (1 in 32 above 512 lists), OPQ+IVF-PQ above 4M vectors]."
        ),
    ] = None,
    list_size: Annotated[
        int | None,
        typer.Option(
            help="Vectors per IVF list: N / L lists (behind an HNSW coarse quantizer above 4,096), so "
            "the lists a query scans at a given --nprobe do not lengthen as N grows (k-means training "
            "grows with the list count; refused where the 4 GiB training sample gives under 39 vectors a "
            "list) \\[default: 1,000 up to 4M vectors; above, about 16 sqrt(N) lists, at most 64 training "
            "vectors a list in 4 GiB: 32,768 lists at 384-d].",
            min=1,
        ),
    ] = None,
    nprobe: Annotated[
        int | None,
        typer.Option(
            help="IVF lists probed per query \\[default: 16 for the default IVF-Flat, or 1 list in 32 "
            "above 512 lists; else tuned for --target-recall].",
            min=1,
        ),
    ] = None,
    queries_from: Annotated[
        str | None,
        typer.Option(
            help="Language whose vectors measure recall and tune nprobe, or 'self' for LANG's own rows "
            "\\[default: en, else another encoded language].",
            callback=checked_by(check_lang),
        ),
    ] = None,
    target_recall: Annotated[
        float | None,
        typer.Option(
            help="Recall@4 that nprobe is tuned to reach \\[default: 0.95].",
            max=1.0,
            callback=checked_by(positive),
        ),
    ] = None,
    fetch: Annotated[
        int | None,
        typer.Option(help="Hits fetched per query and re-ranked exactly \\[default: 4, 64 for PQ].", min=1),
    ] = None,
    gpu: Annotated[
        bool, typer.Option("--gpu", help="Train (and, unsharded, populate) on GPU (needs faiss GPU).")
    ] = False,
    seed: Annotated[int, typer.Option(help="Seed of the training and query samples.", min=0)] = 0,
    max_memory: Annotated[
        float | None,
        typer.Option(
            help="GB one index shard may take in RAM: a larger index is split into row-range shards, "
            "built and searched one at a time \\[default: one index].",
            callback=checked_by(positive),
        ),
    ] = None,
    exact_budget: Annotated[
        float | None,
        typer.Option(
            help="Seconds of exact mining (both directions, against the other language), as measured here "
            "on a sample, up to which the index is exact \\[default: 60].",
            min=0.0,
        ),
    ] = None,
    threads: ThreadsOption = None,
    json_path: JsonOption = None,
    cluster: LauncherFlags = NO_FLAGS,
) -> None:
    """Build the inner-product index of LANG's embedding shards: exact, or FAISS IVF.

    Reads WORK/emb/LANG/ and writes WORK/index/LANG.json (factory, nprobe, count, model fingerprint,
    recall@4 against exact search, search speed) and, for IVF, WORK/index/LANG.faiss. Exact search
    (Flat: `mine` multiplies the float16 shards in bf16 or fp16 and re-ranks in float32, no file) is
    chosen while its measured time for mining stays within --exact-budget; above it IVF-Flat with lists
    of 1,000 vectors probed 16 at a time, 1 in 32 above 512 lists (which kept 99% of exact mining's
    pairs on real text up to 1M; Flat where IVF searches slower), above 4M vectors OPQ+IVF+PQ with
    exact re-ranking. Recall is measured with another encoded language's vectors, as mining searches;
    an IVF index of a given factory is tuned on them. An unsharded IVF index is populated in parts of
    1M rows saved as they complete, so a rerun after a kill resumes from the trained index and the
    parts done. --json gets WORK/index/LANG.json's content.
    """
    from bitextmine.search.cost import EXACT_BUDGET_SECONDS
    from bitextmine.steps.index import IndexOptions
    from bitextmine.steps.index import index as index_language

    workspace = Workspace(workdir)
    bound_threads(threads)
    with user_errors():
        json_out = json_target(json_path, workspace=workspace)
        options = IndexOptions(
            factory=factory,
            list_size=list_size,
            nprobe=nprobe,
            queries_from=queries_from,
            target_recall=target_recall,
            fetch=fetch,
            gpu=gpu,
            seed=seed,
            max_memory_gb=max_memory,
            exact_budget=EXACT_BUDGET_SECONDS if exact_budget is None else exact_budget,
        )
        config = cluster.config("index", workspace.logs_dir("index"))
        with ProgressDisplay() as progress:
            built = index_language(workspace, lang, options, progress, launcher=config)
    out.print(_index_line(built, workspace), highlight=False)
    if built.note:
        info(f"note: {built.note}")
    emit_json(json_out, built.to_json())


def _index_line(built, workspace: Workspace) -> str:
    """What was built, in one line: the search settings that apply to it (an exact index has no nprobe),
    its recall and speed, and the file it is in (an exact index: its record, LANG.json)."""
    from bitextmine.search.factory import EXACT

    settings = [built.factory, f"{built.count:,} vectors"]
    if built.nprobe is not None:
        settings.append(f"nprobe {built.nprobe}")
    if built.fetch is not None:
        settings.append(f"fetch {built.fetch}")
    recall = "n/a" if built.recall is None else f"{built.recall:.4f}"
    speed = (
        ""
        if built.search_ms_per_1000 is None
        else f", {built.search_ms_per_1000:,.0f} ms per 1000 queries (exact {built.exact_ms_per_1000:,.0f})"
    )
    if built.imbalance is not None:
        speed += f", list imbalance {built.imbalance:.2f}"
    if built.shards:
        where = f"{len(built.shards)} shards {workspace.index_dir() / built.lang}.{built.plan}.*.faiss"
    else:
        where = workspace.index_dir() / f"{built.lang}.{'json' if built.factory == EXACT else 'faiss'}"
    return (
        f"index {built.lang}: {', '.join(settings)}, recall@{built.recall_k} {recall} with "
        f"{built.recall_source} queries{speed}, built in {built.build_seconds:.1f} s -> {where}"
    )
