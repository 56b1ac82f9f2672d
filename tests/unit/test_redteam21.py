"""Red-team pass 21 (issue 29's "PASSED means proven", after pass 20's fixes: power.search's blocks, power.Rows's
donors): each finding reproduced, marked ``xfail(strict=True)`` with its id while it stands (a plain test once fixed),
beside a control that passes today (notes: /work/notes/redteam21.md).

FF1 (the criterion's power, FALSE FAILURE): on a float output (logits, probabilities, a score) every row differs
bitwise from every other, so "a donor of another kind" is any row and the changed rows trade values by distance among
themselves. Where a half, or the search's loose blocks, hold rows of one class (the majority class of an imbalanced
binary task), each changed row takes a row of its own class and every item stays right: a binary classifier right on
every item, judged by "every item right", is refused as "it does not judge them". The search picks such blocks (a
block of the majority class passes), so an imbalanced sample (90/10) of 40 or 100 rows is refused in nearly every
draw. The same criterion on a labels output is accepted (the control).
FF2 (the criterion's power, FALSE FAILURE): a half's rows trade values among themselves; on a tiny regression sample a
half of three neighbouring values changes little, and a perfect regressor judged by R^2 >= 0.9 passes it (5 rows):
refused. 40 rows: accepted (the control).
FF3 (the criterion's power, FALSE FAILURE by the rule): a retrieval criterion (each labelled query's nearest neighbour
is its pair) whose unlabelled rows (the corpus, the distractors) are more than about half the sample is refused: this
repository's own criterion on 4 of its pairs and its 16 unlabelled sentences. Its full 40-row reference is accepted,
10 loose rows where 20 refuse (the control).
FP4 (the criterion's power, FALSE PASS): the search stops where every block of a level of SPREAD=16 fails; a spot check
of a random subsample hits all 16 blocks once it holds a few dozen rows, at any n: 100 random rows of 1000 (10%), 100
of 10000 (1%), or every 10th row, are accepted. 12 of 40 is refused (the control).
COST5 (the criterion's power, cost): Rows.donors is a Python loop over the changed rows, recomputed in every call: ~15 s
of Kernodeck's own time for the controls on 10000 rows of 384 floats, linear in n (a stated limit; a cost is the
bench's to measure, not a timed test's: its strict xfail flipped with the machine's load).
FP6 (the criterion's power, FALSE PASS, rare): on a sample of one value (an int output of one class), no corruption
applies and failing every half counts as the evidence; a criterion that checks only that the rows agree with each
other fails every half (the changed rows take another value) and is accepted, though an output of another value on
every row passes it. A check of the value itself is accepted too (the control).
Fixed: a donor is the row of the sample differing in the most codes (a float output's argmax or sign among them:
its class), the farthest of those (FF1, FF2); the search stops only where every block of a level failing is too
unlikely for a criterion ignoring half the rows (FP4's random 100 of 1000); FF3's 4 pairs among 16 distractors are
accepted. Stated limits, strict xfails: FP4 beyond the budget (every 10th, a random 300 of 1000), FP6; COST5 in docs.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kernodeck.inenv import judge, power

ROOT = Path(__file__).resolve().parents[2]


def _unable(found: dict[str, Any]) -> str:
    """judge._unable's ERROR for the controls ``found`` (no first sight: power's own verdict)."""
    return judge._unable({**found, "first_sight": {}})


# --- FF1: a float output of a classifier, judged by each item's class ------------------------------------------------


def _classifier(rows: int, seed: int, majority: float) -> tuple[Any, Any]:
    """Labels (class 1 with probability ``majority``) and logits whose argmax is each label: a model right on all."""
    rng = np.random.default_rng(seed)
    labels = (rng.random(rows) < majority).astype(np.int64)
    logits = rng.standard_normal((rows, 2)).astype(np.float32)
    logits[np.arange(rows), labels] = logits.max(axis=1) + 1 + rng.random(rows).astype(np.float32)
    return labels, logits


def _every_item_right(truth: Any, name: str, cut: float = 0.0) -> Any:
    def criterion(outputs: dict[str, Any]) -> tuple[bool, str]:
        got = outputs[name]
        got = got.argmax(axis=1) if got.ndim == 2 else (got > cut).astype(np.int64) if got.dtype.kind == "f" else got
        return bool((got == truth).all()), f"{int((got == truth).sum())} of {len(truth)} right"
    return criterion


@pytest.mark.parametrize("rows", [40, 100])
def test_ff1_control_the_same_criterion_on_a_labels_output_is_accepted(rows: int) -> None:
    labels, _ = _classifier(rows, 0, 0.9)
    assert power.criterion_controls(_every_item_right(labels, "labels"), {"labels": labels})["able_to_fail"]


@pytest.mark.parametrize("rows", [40, 100])
def test_ff1_an_imbalanced_binary_classifiers_logits_judged_by_every_item_are_accepted(rows: int) -> None:
    """Today: refused by the search, its loose rows all of class 1, each given a row of class 1 (every item right)."""
    labels, logits = _classifier(rows, 0, 0.9)
    found = power.criterion_controls(_every_item_right(labels, "logits"), {"logits": logits})
    assert found["able_to_fail"], _unable(found)


@pytest.mark.parametrize("kind", ["score", "probabilities"])
def test_ff1_an_imbalanced_binary_score_judged_by_its_sign_is_accepted(kind: str) -> None:
    """Today: refused (a 1-D score or a positive-class probability, 90% positives, 100 rows, every item right)."""
    rng = np.random.default_rng(0)
    labels = (rng.random(100) < 0.9).astype(np.int64)
    score = np.where(labels == 1, 1.0, -1.0) * (0.5 + rng.random(100))
    output = (score if kind == "score" else 1 / (1 + np.exp(-score))).astype(np.float32)
    found = power.criterion_controls(_every_item_right(labels, "x", 0.0 if kind == "score" else 0.5), {"x": output})
    assert found["able_to_fail"], _unable(found)


def test_ff1_a_balanced_binary_classifier_of_8_rows_is_accepted() -> None:
    """Today: refused by 3 of 10 halves (8 of 8 right); 4 of the 8 seeds 0-7 are refused, the same criterion on the
    labels output never."""
    labels, logits = _classifier(8, 4, 0.5)
    found = power.criterion_controls(_every_item_right(labels, "logits"), {"logits": logits})
    assert found["able_to_fail"], _unable(found)


# --- FF2: a tiny regression sample -----------------------------------------------------------------------------------


def _r2_at_least(truth: Any, bound: float) -> Any:
    def criterion(outputs: dict[str, Any]) -> tuple[bool, str]:
        pred = outputs["pred"].astype(np.float64)
        r2 = 1 - ((pred - truth) ** 2).sum() / ((truth - truth.mean()) ** 2).sum()
        return bool(r2 >= bound), f"R2 {r2:.3f}"
    return criterion


def test_ff2_control_a_perfect_regressor_of_40_rows_judged_by_r2_is_accepted() -> None:
    truth = np.random.default_rng(2).standard_normal(40)
    assert power.criterion_controls(_r2_at_least(truth, 0.9), {"pred": truth.astype(np.float32)})["able_to_fail"]


def test_ff2_a_perfect_regressor_of_5_rows_judged_by_r2_is_accepted() -> None:
    """Today: refused; split 1's first half holds 0.19, -0.52, -0.41, which trade places: R2 0.905."""
    truth = np.random.default_rng(2).standard_normal(5)
    found = power.criterion_controls(_r2_at_least(truth, 0.9), {"pred": truth.astype(np.float32)})
    assert found["able_to_fail"], _unable(found)


# --- FF3: a retrieval criterion over a labelled minority ------------------------------------------------------------


def _this_repositorys_criterion(keep: list[int]) -> tuple[Any, Any]:
    spec = importlib.util.spec_from_file_location("redteam21_checks_app", ROOT / "checks" / "app.py")
    assert spec is not None and spec.loader is not None
    app = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(app)
    lines = (ROOT / "dossier" / "reference" / "sample.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    records = [records[i] for i in keep]
    ids = [r["id"] for r in records]
    embeddings = np.load(ROOT / "dossier" / "reference" / "embeddings.npy")[keep]

    def criterion(outputs: dict[str, Any]) -> tuple[bool, str]:
        said = app.criterion(outputs, ids, records, {})
        return bool(said["passed"]), str(said["summary"])
    assert criterion({"embeddings": embeddings})[0]
    return criterion, embeddings


def _labelled(pairs: int) -> list[int]:
    lines = (ROOT / "dossier" / "reference" / "sample.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    labelled = [i for i, r in enumerate(records) if r.get("pair")]
    return labelled[: 2 * pairs] + [i for i, r in enumerate(records) if not r.get("pair")]


def test_ff3_control_this_repositorys_reference_is_accepted_with_10_of_40_loose() -> None:
    criterion, embeddings = _this_repositorys_criterion(list(range(40)))
    found = power.criterion_controls(criterion, {"embeddings": embeddings})
    assert found["able_to_fail"] and found["search"]["changed"] < 20, found["search"]


def test_ff3_this_repositorys_criterion_on_4_pairs_and_16_distractors_is_accepted() -> None:
    """Today: refused, 14 of 24 rows loose (need 12), every one an unlabelled distractor."""
    criterion, embeddings = _this_repositorys_criterion(_labelled(4))
    found = power.criterion_controls(criterion, {"embeddings": embeddings})
    assert found["able_to_fail"], _unable(found)


# --- FP4: a random subsample hits every block of a level ------------------------------------------------------------


def _spot(truth: Any, checked: Any) -> Any:
    def criterion(outputs: dict[str, Any]) -> tuple[bool, str]:
        return bool(np.array_equal(outputs["x"][checked], truth[checked])), f"{len(checked)} rows right"
    return criterion


def test_fp4_control_a_random_12_of_40_is_refused() -> None:
    truth = np.random.default_rng(40).standard_normal((40, 4)).astype(np.float32)
    checked = np.random.default_rng(0).choice(40, 12, replace=False)
    assert not power.criterion_controls(_spot(truth, checked), {"x": truth})["able_to_fail"]


@pytest.mark.parametrize("checked", ["random 100", *(pytest.param(name, marks=pytest.mark.xfail(
    strict=True, reason="FP4 (stated limit): a spot check of a share of 1000 rows that 256 calls do not sort out"))
    for name in ("every 10th", "random 300"))])
def test_fp4_a_spot_check_of_a_subsample_of_1000_rows_is_refused(checked: str) -> None:
    """Today: accepted (search stopped "everywhere" after 30 calls, no row loose; every half holds checked rows)."""
    truth = np.random.default_rng(1000).standard_normal((1000, 4)).astype(np.float32)
    rows = {"random 100": np.random.default_rng(0).choice(1000, 100, replace=False),
            "every 10th": np.arange(0, 1000, 10),
            "random 300": np.random.default_rng(1).choice(1000, 300, replace=False)}[checked]
    found = power.criterion_controls(_spot(truth, rows), {"x": truth})
    assert not found["able_to_fail"], found["search"]


# --- FP6: a one-valued sample, where failing every half is the evidence ----------------------------------------------


def _alike(outputs: dict[str, Any]) -> tuple[bool, str]:
    y = outputs["y"]
    return bool((y == y[0]).all()), "every row alike"


def test_fp6_control_a_check_of_each_rows_value_on_a_one_valued_sample_is_accepted() -> None:
    y = np.ones(10, dtype=np.int64)
    assert power.criterion_controls(lambda o: (bool((o["y"] == 1).all()), "every row 1"), {"y": y})["able_to_fail"]


@pytest.mark.xfail(strict=True, reason="FP6 (stated limit): on one value, a check that the rows agree fails every half")
def test_fp6_a_check_that_the_rows_agree_on_a_one_valued_sample_is_refused() -> None:
    """Today: accepted (no corruption applies; every half fails, each changed row given another value), though an
    output of 0 on every row passes it."""
    y = np.ones(10, dtype=np.int64)
    assert _alike({"y": np.zeros_like(y)})[0]
    assert not power.criterion_controls(_alike, {"y": y})["able_to_fail"]
