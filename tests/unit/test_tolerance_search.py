"""calibrate: the margin search (in-env side, on synthetic outputs with a known threshold), the verdicts, the
proposal, the plan of variations, the SVG chart and `--write` into pyproject. Fast: numpy only, no torch."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kernodeck.inenv import margin
from kernodeck.measure import analysis, calibration, svg, variations
from kernodeck.measure import tolerance_search as cal

SVG = "{http://www.w3.org/2000/svg}"


# --- the margin search ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("threshold", [3.7e-3, 2.5e-7, 41.0])
def test_bisect_scale_finds_a_known_threshold(threshold: float) -> None:
    found = margin.bisect_scale(lambda s: s >= threshold)
    assert found["passes"] < threshold <= found["fails"]
    assert found["fails"] / found["passes"] < 1.001


def test_bisect_scale_says_when_nothing_fails() -> None:
    found = margin.bisect_scale(lambda s: False)
    assert found["fails"] is None and found["passes"] >= margin.LAST_SCALE / margin.GRID


@pytest.mark.parametrize("k", [1, 7, 100])
def test_bisect_rows_finds_the_smallest_failing_count(k: int) -> None:
    assert margin.bisect_rows(lambda n: n >= k, 100)["fails"] == k
    assert margin.bisect_rows(lambda n: False, 100)["fails"] is None


def _refs() -> dict[str, Any]:
    rng = np.random.default_rng(0)
    return {"emb": rng.standard_normal((40, 16)).astype(np.float32), "labels": np.arange(100, dtype=np.int64) % 10}


def test_margin_of_a_float_output_is_where_the_criterion_starts_failing() -> None:
    refs = _refs()
    ids = [str(i) for i in range(40)]
    declared = {"kind": "cosine", "cosine-min": 0.9999, "max-abs": 1e-4}

    def use(outputs: dict[str, Any]) -> bool:  # a user who tolerates any component moving by < 0.05
        return bool(np.abs(outputs["emb"].astype(np.float64) - refs["emb"]).max() < 0.05)

    found = margin.margin_of("emb", declared, refs, ids, use)
    assert found["found"] and found["test"] == "the application's criterion"
    assert found["passes"]["max_abs"] < 0.05 <= found["fails"]["max_abs"] < 0.0501
    assert 0 < found["fails"]["one_minus_cos"] < 1
    assert found["resolution"]["max_abs"] < 1e-6  # one unit in the last place of float32


def test_margin_of_labels_counts_changed_rows() -> None:
    refs = _refs()
    ids = [str(i) for i in range(100)]
    truth = refs["labels"].copy()

    def use(outputs: dict[str, Any]) -> bool:  # accuracy against the truth >= 0.9 (the reference is perfect)
        return bool((outputs["labels"] == truth).mean() >= 0.9)

    found = margin.margin_of("labels", {"kind": "agreement", "min-share": 0.99}, refs, ids, use)
    assert found["found"] and found["search"]["fails"] == 11
    assert found["fails"]["disagreement"] == pytest.approx(0.11)
    assert found["resolution"]["disagreement"] == pytest.approx(0.01)


def test_a_criterion_that_ignores_the_output_falls_back_to_the_top1_stand_in() -> None:
    refs = _refs()
    ids = [str(i) for i in range(40)]
    found = margin.margin_of("emb", {"kind": "allclose", "rtol": 1e-3, "atol": 1e-3}, refs, ids,
                                lambda outputs: True)
    assert found["found"] and found["test"].startswith("stand-in: the top-1")
    gaps = np.sort(refs["emb"], axis=1)
    smallest_gap = float((gaps[:, -1] - gaps[:, -2]).min())
    # some top-1 flips once the noise is of the order of the smallest lead (never far below half of it)
    assert found["fails"]["max_abs"] >= smallest_gap / 2 * 0.5


def test_a_reference_failing_its_own_criterion_has_no_margin() -> None:
    refs = _refs()
    found = margin.margin_of("labels", {"kind": "exact"}, refs, [str(i) for i in range(100)], lambda o: False)
    assert not found["found"] and "reference outputs themselves fail" in found["why"]


# --- verdicts and proposals -----------------------------------------------------------------------------------------


def test_verdicts() -> None:
    assert analysis.verdict(declared=1e-7, noise=1e-6, margin=1e-2) is analysis.Verdict.TOO_TIGHT
    assert analysis.verdict(declared=1e-1, noise=1e-6, margin=1e-2) is analysis.Verdict.TOO_LOOSE
    assert analysis.verdict(declared=1e-2, noise=1e-6, margin=1e-2) is analysis.Verdict.TOO_LOOSE  # at the margin
    assert analysis.verdict(declared=1e-4, noise=1e-6, margin=1e-2) is analysis.Verdict.OK
    assert analysis.verdict(declared=1e-6, noise=1e-6, margin=1e-2) is analysis.Verdict.OK  # noise passes at equality
    assert analysis.verdict(declared=1e-4, noise=1e-2, margin=1e-3) is analysis.Verdict.NO_ROOM
    assert analysis.verdict(declared=1e-4, noise=1e-6, margin=None) is analysis.Verdict.OK
    for member in analysis.Verdict:
        assert member.says()


def test_proposal_is_the_geometric_mean_with_the_resolution_as_floor() -> None:
    assert analysis.propose(1e-6, 0.0, 1e-2) == pytest.approx(1e-4)
    assert analysis.propose(0.0, 1e-8, 1e-2) == pytest.approx(1e-5)  # no noise: one ulp stands in for it
    assert analysis.propose(1e-2, 0.0, 1e-3) is None
    assert analysis.propose(1e-6, 0.0, None) is None


def _margin(fails: dict[str, float], resolution: dict[str, float]) -> dict[str, Any]:
    return {"found": True, "test": "the application's criterion", "fails": fails, "resolution": resolution}


def test_analyse_cosine_output_tight_and_loose_negative_controls() -> None:
    noise = {"declared": {"max_abs": 1e-6, "one_minus_cos": 1e-12}, "threads-1": {"max_abs": 3e-6,
                                                                                 "one_minus_cos": 2e-12}}
    margin = _margin({"max_abs": 1e-2, "one_minus_cos": 1e-1}, {"max_abs": 6e-8, "one_minus_cos": 1e-14})
    tight = analysis.analyse_output("emb", "cosine", {"max-abs": 1e-6, "cosine-min": 0.9999}, noise, margin)
    assert tight.axes[0].verdict is analysis.Verdict.TOO_TIGHT and tight.axes[0].noise == 3e-6
    assert "too tight" in tight.overall()
    loose = analysis.analyse_output("emb", "cosine", {"max-abs": 0.5, "cosine-min": 0.5}, noise, margin)
    assert [a.verdict for a in loose.axes] == [analysis.Verdict.TOO_LOOSE, analysis.Verdict.TOO_LOOSE]
    good = analysis.analyse_output("emb", "cosine", {"max-abs": 1e-4, "cosine-min": 0.9999}, noise, margin)
    assert good.overall() == "ok"
    assert good.proposed_tolerance == {"max-abs": pytest.approx(1.7e-4), "cosine-min": pytest.approx(1 - 4.5e-7)}
    ratios = good.axes[0].ratios()
    assert ratios["proposal_over_noise"] == pytest.approx(ratios["margin_over_proposal"])


def test_flip_bound_lowers_the_max_abs_margin() -> None:
    noise = {"declared": {"max_abs": 1e-7, "one_minus_cos": 0.0}}
    margin = _margin({"max_abs": 1e-2, "one_minus_cos": 0.4}, {"max_abs": 6e-8, "one_minus_cos": 1e-14})
    flip = {"reference_min_margin": 0.32, "dim": 384}
    out = analysis.analyse_output("emb", "cosine", {"max-abs": 1e-2, "cosine-min": 0.9999}, noise, margin, flip)
    limit = 0.32 / (4 * math.sqrt(384))
    assert out.axes[0].margin == pytest.approx(limit) and out.axes[0].margin_source.startswith("flip bound")
    assert out.axes[0].verdict is analysis.Verdict.TOO_LOOSE  # 1e-2 is above the flip bound (~4e-3)
    assert out.axes[1].margin == pytest.approx(0.32**2 / 32)  # tighter than the random direction's 0.4
    assert out.axes[1].verdict is analysis.Verdict.OK  # 1 - 0.9999 = 1e-4 < 3.2e-3


def test_cosine_flip_bound_holds_on_real_vectors() -> None:
    """No nearest neighbour flips when every row stays within 1 - c < lead**2/32 of its reference (random trials)."""
    rng = np.random.default_rng(3)
    for _ in range(200):
        ref = rng.standard_normal((6, 5))
        ref /= np.linalg.norm(ref, axis=1, keepdims=True)
        sims = ref @ ref.T
        np.fill_diagonal(sims, -np.inf)
        top = np.sort(sims, axis=1)
        lead = float((top[:, -1] - top[:, -2]).min())
        limit, _ = analysis.flip_limit("one_minus_cos", {"reference_min_margin": lead, "dim": 5}) or (0.0, "")
        angle = math.acos(1 - limit * 0.999)
        moved = np.empty_like(ref)
        for i, row in enumerate(ref):  # rotate each row by just under the allowed angle, in a random direction
            other = rng.standard_normal(5)
            other -= other @ row * row
            other /= np.linalg.norm(other)
            moved[i] = math.cos(angle) * row + math.sin(angle) * other
        new = moved @ moved.T
        np.fill_diagonal(new, -np.inf)
        assert (np.argmax(new, axis=1) == np.argmax(sims, axis=1)).all()


def test_allclose_proposal_scales_atol_and_rtol_together() -> None:
    noise = {"declared": {"max_abs": 1e-5, "allclose_ratio": 0.01}}
    margin = _margin({"max_abs": 0.2, "allclose_ratio": 100.0}, {"max_abs": 2e-6, "allclose_ratio": 1e-4})
    out = analysis.analyse_output("logits", "allclose", {"rtol": 1e-3, "atol": 1e-3}, noise, margin)
    assert out.axes[0].verdict is analysis.Verdict.OK and out.axes[0].proposal == pytest.approx(1.0)
    assert out.proposed_tolerance == {"rtol": 1e-3, "atol": 1e-3}
    shown = out.axes[1]
    assert shown.key == "max_abs" and shown.declared is None and shown.verdict is None and shown.margin == 0.2
    tight = analysis.analyse_output("logits", "allclose", {"rtol": 1e-3, "atol": 1e-3},
                               {"threads-1": {"max_abs": 5e-3, "allclose_ratio": 2.5}}, margin)
    assert tight.axes[0].verdict is analysis.Verdict.TOO_TIGHT


def test_exact_labels_with_noise_are_too_tight_and_get_no_number() -> None:
    margin = _margin({"disagreement": 0.05}, {"disagreement": 0.01})
    quiet = analysis.analyse_output("labels", "exact", {}, {"declared": {"disagreement": 0.0}}, margin)
    assert quiet.overall() == "ok" and quiet.proposed_tolerance is None
    noisy = analysis.analyse_output("labels", "exact", {}, {"isa-default": {"disagreement": 0.02}}, margin)
    assert noisy.overall() == "too tight"


def test_exact_output_is_counted_in_rows_and_says_plainly_there_is_no_tolerance_to_propose() -> None:
    """The regression example's bands: the criterion (R² of the predictions) never reads them. In-env, a criterion
    that ignores a label output finds no margin; the orchestrator says so in rows, proposes nothing, and a noise of
    a few rows makes exact too tight."""
    band = np.arange(120, dtype=np.int64) % 4
    refs = {"band": band, "predictions": np.linspace(1.0, 26.0, 120, dtype=np.float32)}
    ids = [str(i) for i in range(120)]
    searched = margin.margin_of("band", {"kind": "exact"}, refs, ids, lambda outputs: True)
    assert not searched["found"] and searched["rows"] == 120 and searched["test"] == "the application's criterion"
    assert "still passes at 120" in searched["why"]
    quiet = analysis.analyse_output("band", "exact", {}, {"declared": {"disagreement": 0.0},
                                                        "isa-default": {"disagreement": 0.0}}, searched)
    (axis,) = quiet.axes
    assert quiet.overall() == "ok" and quiet.proposed_tolerance is None and axis.proposal is None
    said = quiet.notes[-1]
    assert said.startswith("exact: no tolerance to propose") and "0 of 120 rows differed in 2 variations" in said
    assert "does not react to this output" in said
    text = calibration.render(_calibration([quiet]))
    assert "Declared: every row equal" in text and "no margin of use to judge it against" in text
    assert "between the noise and the margin" not in text

    # a criterion that reads the bands: the margin in rows; 3 rows of noise make exact too tight
    def use(outputs: dict[str, Any]) -> bool:
        return bool((outputs["band"] == band).mean() >= 0.95)

    searched = margin.margin_of("band", {"kind": "exact"}, refs, ids, use)
    assert searched["found"] and searched["search"]["fails"] == 7  # 7 of 120 changed: 0.9417 < 0.95
    noisy = analysis.analyse_output("band", "exact", {}, {"isa-avx2": {"disagreement": 3 / 120}}, searched)
    assert noisy.overall() == "too tight" and noisy.proposed_tolerance is None and noisy.axes[0].proposal is None
    said = noisy.notes[-1]
    assert "3 of 120 rows differed (isa-avx2)" in said and "agreement" in said
    assert "the criterion fails once 7 of 120 rows change" in said
    assert "TOO TIGHT" in calibration.render(_calibration([noisy]))


def _calibration(outputs: list[analysis.OutputCalibration]) -> calibration.Calibration:
    return calibration.Calibration("cp311-test", "sha256:0", [], outputs, {}, "now")


def test_no_margin_found_is_a_note_not_a_verdict_of_loose() -> None:
    out = analysis.analyse_output("labels", "agreement", {"min-share": 0.5}, {"declared": {"disagreement": 0.0}},
                             {"found": False, "why": "no test of use applies", "resolution": {"disagreement": 0.01}})
    assert out.axes[0].verdict is analysis.Verdict.OK and out.axes[0].margin is None
    assert out.notes and "no margin of use found" in out.notes[0]


# --- the plan of variations -------------------------------------------------------------------------------------------


def test_plan_lists_what_the_machine_lacks_as_unavailable() -> None:
    flags = variations.cpu_flags("processor : 0\nflags : fpu sse4_2 avx avx2 fma\n")
    assert flags is not None
    plan = {v.name: v for v in variations.plan(flags, 1, "cpu", "x86_64")}
    assert plan["isa-avx2"].available and plan["isa-default"].available
    assert not plan["isa-avx512"].available and "avx512f" in plan["isa-avx512"].why
    assert plan["threads-1"].available
    assert not plan["threads-all"].available and "one CPU" in plan["threads-all"].why
    assert not plan["tf32"].available and "GPU" in plan["tf32"].why
    avx512 = {"avx512f", "avx512bw", "avx512vl", "avx512dq"}
    full = {v.name: v for v in variations.plan(flags | avx512, 8, "cuda", "x86_64")}
    assert full["isa-avx512"].available and full["tf32"].available and full["threads-8"].available
    assert full["isa-avx512"].env() == {"ATEN_CPU_CAPABILITY": "avx512", "MKL_ENABLE_INSTRUCTIONS": "AVX512",
                                        "ONEDNN_MAX_CPU_ISA": "AVX512_CORE", "DNNL_MAX_CPU_ISA": "AVX512_CORE"}
    assert full["threads-8"].env() == {"OMP_NUM_THREADS": "8"}
    arm = {v.name: v for v in variations.plan(set(), 4, "mps", "arm64")}
    assert arm["isa-default"].available and not arm["isa-avx2"].available and "arm64" in arm["isa-avx2"].why

    names = [v.name for v in variations.plan(flags, 1, "cpu", "x86_64")]
    assert len(names) == len(set(names))  # one folder each


# --- the picture ----------------------------------------------------------------------------------------------------


def test_calibration_chart_is_valid_svg_with_the_declared_line() -> None:
    panels = [svg.Panel("emb: max abs (ok)", [("declared", 1e-7), ("isa-default", 0.0)], margin=4e-3,
                        declared=1e-4, proposal=2e-5, floor=6e-8)]
    text = svg.calibration_chart(panels)
    root = ET.fromstring(text)
    lines = {el.get("class"): el for el in root.iter(f"{SVG}line") if el.get("class")}
    assert {"declared", "margin", "proposal"} <= set(lines)
    x_declared, x_margin = float(lines["declared"].get("x1", "")), float(lines["margin"].get("x1", ""))
    assert x_declared < x_margin  # log scale: 1e-4 left of 4e-3
    assert len([c for c in root.iter(f"{SVG}circle") if c.get("class") == "noise"]) == 2
    assert text == svg.calibration_chart(panels)  # deterministic
    bare = ET.fromstring(svg.calibration_chart([svg.Panel("x", [("a", 1e-3)], margin=None, declared=None)]))
    assert not [el for el in bare.iter(f"{SVG}line") if el.get("class") in ("declared", "margin")]


def test_heatmap_is_valid_svg_with_one_cell_per_pair() -> None:
    hm = svg.Heatmap("emb", ["a", "b", "c"], {(0, 0): ("-", 0.0), (0, 1): ("1e-7", 0.01), (1, 0): ("1e-7", 0.01),
                                               (1, 2): ("2.0", 2.0), (2, 1): ("2.0", 2.0)})
    root = ET.fromstring(svg.heatmap([hm]))
    cells = [el for el in root.iter(f"{SVG}rect") if el.get("class") == "cell"]
    assert len(cells) == 5
    assert {c.get("fill") for c in cells} >= {svg.RED}


# --- --write ----------------------------------------------------------------------------------------------------------


def test_write_proposal_keeps_comments_and_records_the_numbers(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        '[tool.kernodeck.application.outputs.emb]\n# why cosine: retrieval\nkind = "cosine"\ndtype = "float32"\n'
        'cosine-min = 0.9\nmax-abs = 0.5  # far too loose\njustification = "old words"\n', encoding="utf-8")
    noise = {"declared": {"max_abs": 1e-6, "one_minus_cos": 1e-12}}
    margin = _margin({"max_abs": 1e-2, "one_minus_cos": 1e-1}, {"max_abs": 6e-8, "one_minus_cos": 1e-14})
    out = analysis.analyse_output("emb", "cosine", {"max-abs": 0.5, "cosine-min": 0.9}, noise, margin)
    result = calibration.Calibration("cp311-test", "sha256:x", [], [out], {}, "2026-01-01")
    assert calibration.write_proposal(pyproject, result) == ["emb"]
    text = pyproject.read_text(encoding="utf-8")
    assert "# why cosine: retrieval" in text
    import tomllib

    table = tomllib.loads(text)["tool"]["kernodeck"]["application"]["outputs"]["emb"]
    assert table["max-abs"] == pytest.approx(1e-4) and table["cosine-min"] < 1
    assert table["justification"].startswith("old words") and "Calibrated by `nox -s calibrate`" in text
    assert "noise 1e-06" in table["justification"]
    calibration.write_proposal(pyproject, result)  # again: one calibration paragraph, not two
    assert pyproject.read_text(encoding="utf-8").count("Calibrated by") == 1


def test_only_tolerance_edits_are_calibrated_without_a_new_reference() -> None:
    assert cal.tolerance_only([])
    assert cal.tolerance_only(["outputs.logits.rtol: 0.001 -> declared 1e-07",
                               "outputs.emb.cosine_min: 0.9999 -> declared 0.9",
                               "outputs.emb.justification: 'a' -> 'b'"])
    assert not cal.tolerance_only(["outputs.logits.kind: 'allclose' -> declared 'exact'"])
    assert not cal.tolerance_only(["outputs.logits.dtype: 'float32' -> declared 'float64'"])
    assert not cal.tolerance_only(["application.params: {} -> declared {'seed': 1}"])
    assert not cal.tolerance_only(["output extra: not in the reference"])


def test_top1_worst_case_closes_the_smallest_lead_and_no_more() -> None:
    ref = np.array([[3.0, 1.0, 0.0], [2.0, 1.9, 0.0], [0.0, 5.0, 1.0]], dtype=np.float32)
    worst = margin.top1_worst_case(ref)
    assert (margin.top1(worst) != margin.top1(ref)).tolist() == [False, True, False]
    assert float(np.abs(worst - ref).max()) == pytest.approx(0.05, rel=1e-3)  # half the 0.1 lead
    found = margin.margin_of("x", {"kind": "allclose", "rtol": 0.0, "atol": 1e-3}, {"x": ref},
                                ["a", "b", "c"], lambda outputs: True)
    assert found["fails"]["max_abs"] == pytest.approx(0.05, rel=1e-3) and "worst_case" in found


def test_calibrate_without_a_reference_says_what_to_run(tmp_path: Path) -> None:
    import shutil

    from tests.helpers.project import copy_project, kd

    project = copy_project(tmp_path / "p")
    shutil.rmtree(project / "dossier" / "reference")
    proc = kd(project, "calibrate")
    assert proc.returncode == 2, proc.stderr
    assert "ERROR: no reference manifest" in proc.stderr and "TIP: make the reference first" in proc.stderr
    assert not (project / "runs").exists() or not any((project / "runs").iterdir())  # nothing half-written


def test_calibrate_out_on_the_projects_sources_is_refused(tmp_path: Path) -> None:
    from tests.helpers.project import copy_project, kd

    project = copy_project(tmp_path / "p")
    before = sorted(p.name for p in (project / "checks").iterdir())
    proc = kd(project, "calibrate", "--out", str(project / "checks"))
    assert proc.returncode == 2 and "ERROR:" in proc.stderr and "TIP: nox -s calibrate -- --out" in proc.stderr
    assert sorted(p.name for p in (project / "checks").iterdir()) == before
    assert not (project / ".venv-rebuild").exists()  # refused before any rebuild
