"""The ablation report of examples/benchmarks/bench_train.py on hand-made runs: a table per budget, each
arm's mean ± sd, the difference of the means, and the hard-negatives verdict against the seed spread."""

from __future__ import annotations

import sys

import pytest

from tests.helpers import REPO

sys.path.insert(0, str(REPO / "examples" / "benchmarks"))
bench = pytest.importorskip("bench_train")
HARD = bench.ABLATIONS["hard-negatives"]


def run(arm: str, budget: str, seed: int, dev: float, tatoeba: float) -> dict:
    """A run whose every dev pair scores `dev` at transferred thresholds and every language `tatoeba`."""
    ev = {f"transfer/{p}": dev for p in bench.BUCC_PAIRS} | {
        f"tatoeba/{x}": tatoeba for x in bench.TATOEBA_LANGS
    }
    ev |= {f"xsim/{x}": 0.5 for x in bench.FLORES_LANGS}
    train = {"steps": 10, "train_minutes": 1.0}
    if arm == bench.HARD_NEGATIVES_ARM:
        train["hard_negatives"] = {"n": 3, "refresh": 100, "pool": 2000, **bench.miner_totals([])}
    return {"arm": arm, "budget": budget, "seed": seed, "train": train, "eval": ev}


@pytest.mark.parametrize(
    ("dev", "tatoeba", "word"),
    [
        ((1.0, 0.2), (0.5, 0.1), "**pays**"),
        ((1.0, 0.2), (0.1, 0.1), "**does not pay (within seed spread)**"),
        ((-1.0, 0.2), (0.5, 0.1), "**does not pay (a loss beyond the seed spread)**"),
    ],
)
def test_hard_negatives_pay_only_when_both_gains_exceed_twice_the_larger_sd(dev, tatoeba, word):
    assert word in bench.transfer_verdict("Hard negatives change")({bench.DEV: dev, bench.TATOEBA: tatoeba})


def test_the_report_has_a_table_per_budget_with_means_the_difference_and_the_verdict():
    runs = [
        run("contrastive", "10 min", 0, 90.0, 80.0),
        run("contrastive", "10 min", 1, 90.2, 80.2),
        run(bench.HARD_NEGATIVES_ARM, "10 min", 0, 91.0, 81.0),
        run(bench.HARD_NEGATIVES_ARM, "10 min", 1, 91.2, 81.2),
        run("contrastive", "122 steps", 0, 90.0, 80.0),
    ]
    text = "\n".join(bench.ablation_report(HARD, runs))
    ten, steps = text.split("### 10 min")[1].split("### 122 steps")
    assert "| **contrastive, mean ± sd** | seeds: 2 |  |  | 90.10 ± 0.14 |" in ten
    assert "| **difference of means** (larger sd) |  |  |  | +1.00 (sd 0.14) |" in ten
    assert "**pays**" in ten and "pool 2,000 pairs" in ten
    assert "Not every arm has a seed yet." in steps and "difference of means" not in steps


def test_runs_saved_before_budgets_were_recorded_count_their_steps():
    assert bench.budget_of({"train": {"steps": 30}}) == "30 steps"
    assert str(bench.Budget(minutes=10.0)) == "10 min" and str(bench.Budget(steps=122)) == "122 steps"


@pytest.fixture
def trained(monkeypatch) -> list[tuple[dict, int]]:
    """(row spec, seed) of each run trained, with training, evaluation and saving stubbed out."""
    runs = []
    monkeypatch.setattr(
        bench, "train_row", lambda spec, out, **kw: runs.append((spec, kw["seed"])) or {"steps": 1}
    )
    monkeypatch.setattr(bench, "evaluate", lambda out, full=False: {})
    monkeypatch.setattr(bench, "stamped", lambda row: {**row, "commit": "now"})
    monkeypatch.setattr(bench, "report", lambda results: "")
    monkeypatch.setattr(bench, "save_rows", lambda store, results: None)
    return runs


@pytest.mark.parametrize("resume", [False, True])
def test_a_resumed_ablation_runs_only_what_is_not_recorded(tmp_path, trained, resume):
    recorded = {HARD.key.format(arm=arm, budget="3 steps", seed=0): {"commit": "before"} for arm in HARD.arms}
    results = dict(recorded)
    bench.run_ablation(HARD, [bench.Budget(steps=3)], [0, 1], results, tmp_path / "r.json", resume)
    assert [seed for _, seed in trained] == [0, 0, 1, 1][2 * resume :]
    assert all((results[key] == {"commit": "before"}) == resume for key in recorded)


def test_an_ablation_never_reruns_the_control_runs_it_borrows(tmp_path, trained):
    lr = bench.ABLATIONS["lr"]
    budget = bench.Budget(minutes=30)
    control = lr.run_key("contrastive", budget, 0)
    results = {control: {"commit": "before"}}
    bench.run_ablation(lr, [budget], [0, 1], results, tmp_path / "r.json", resume=False)
    treatment = lr.arms[next(arm for arm in lr.arms if arm != "contrastive")]
    assert trained == [(treatment, 0), (lr.arms["contrastive"], 1), (treatment, 1)]
    assert results[control] == {"commit": "before"}


@pytest.mark.parametrize(
    ("name", "changed", "verdict"),
    [("margin", "options", "A margin of 0.3 changes"), ("lr", "lr", "Learning rate 5e-05 changes")],
)
def test_the_mining_recipe_ablations_share_the_hard_negatives_control_runs(
    name: str, changed: str, verdict: str
):
    ablation = bench.ABLATIONS[name]
    treated = next(arm for arm in ablation.arms if arm != "contrastive")
    budget = bench.Budget(minutes=30)
    assert ablation.run_key("contrastive", budget, 1) == HARD.key.format(
        arm="contrastive", budget=budget, seed=1
    )
    assert ablation.run_key(treated, budget, 1) == f"{name}: {treated}, 30 min, seed 1"
    assert ablation.arms["contrastive"] == HARD.arms["contrastive"]
    control, treatment = ablation.arms["contrastive"], ablation.arms[treated]
    assert [key for key in treatment if treatment[key] != control[key]] == [changed]
    results = {
        HARD.run_key(arm, budget, seed): run(arm, "30 min", seed, 90.0 + seed, 80.0)
        for arm in HARD.arms
        for seed in (0, 1)
    }
    assert ablation.runs(results) == {}
    results[HARD.key.format(arm="contrastive", budget="10 min", seed=0)] = run(
        "contrastive", "10 min", 0, 1, 1
    )
    results |= {
        ablation.run_key(treated, budget, s): run(treated, "30 min", s, 92.0 + s, 81.0) for s in (0, 1)
    }
    assert sorted(r["arm"] for r in ablation.runs(results).values()) == sorted(["contrastive", treated] * 2)
    text = bench.report(results)
    section = text.split(f"## {ablation.title}")[1]
    assert "| **difference of means** (larger sd) |  |  |  | +2.00 (sd 0.71) |" in section
    assert f"{verdict} average dev F1" in section


def objective_run(seed: int, dev: float, tatoeba: float) -> dict:
    """An objective row's run whose dev pairs score `dev` and every Tatoeba language `tatoeba`."""
    ev = {f"bucc/{p}": dev for p in bench.BUCC_PAIRS} | {f"tatoeba/{x}": tatoeba for x in bench.TATOEBA_LANGS}
    train = {"steps": 100 + seed, "train_minutes": 10.0, "pairs_per_s": 20.0, "first_loss": 2, "last_loss": 1}
    return {"train": train, "eval": ev, "seed": seed}


def test_objective_rows_report_their_mean_and_sd_over_seeds_and_weigh_the_lead_against_it():
    results = {
        "base": {"eval": objective_run(0, 90.0, 80.0)["eval"]},
        "contrastive": objective_run(0, 94.0, 85.0),
        bench.row_key("contrastive", 1): objective_run(1, 94.2, 85.2),
        "contrastive+xtr": objective_run(0, 94.1, 84.0),
        bench.row_key("contrastive+xtr", 2): objective_run(2, 94.5, 84.0),
        "contrastive+xtrx, seed 1": objective_run(1, 0.0, 0.0),  # another row's name, not a seed of xtr's
    }
    text = "\n".join(bench.objectives_report(results))
    assert "| contrastive | 2 | 10.0 | 100-101 | 20.0 | 2 -> 1 | 94.10 ± 0.14 | 94.10 ± 0.14 |" in text
    assert "| 85.10 ± 0.14 | +4.10 / +5.10 |" in text
    assert "| base | - | - | - | - | - | 90.00 | 90.00 | 90.00 |" in text
    assert "contrastive+xtr gained the most average dev F1 (+4.30 points" in text
    assert "Its lead over contrastive (+0.20) is within twice the larger seed sd (0.57)." in text
    assert list(bench.row_runs(results, "contrastive+xtr")) == ["contrastive+xtr", "contrastive+xtr, seed 2"]


def test_a_resumed_row_trains_only_the_seeds_not_recorded_and_the_base_once(tmp_path, trained):
    results = {"contrastive": {"commit": "before"}}
    bench.run_row("contrastive", [0, 1, 2], results, tmp_path / "r.json", 10.0, True, None)
    bench.run_row("base", [0, 1, 2], results, tmp_path / "r.json", 10.0, True, None)
    assert trained == [(bench.ROWS["contrastive"], 1), (bench.ROWS["contrastive"], 2)]
    assert results["contrastive"] == {"commit": "before"}
    assert results["contrastive, seed 2"]["seed"] == 2 and results["base"]["eval"] == {}
    assert sorted(results) == ["base", "contrastive", "contrastive, seed 1", "contrastive, seed 2"]
