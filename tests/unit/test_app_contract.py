"""The application contract: the declaration, the tolerance kinds (each with a negative control), the flip bound."""

from __future__ import annotations

import copy
import json
import math
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kernodeck.errors import ConfigError, ManifestError
from kernodeck.inenv import tolerance
from kernodeck.project import app_contract
from kernodeck.project.config import load_project, owned_folders
from kernodeck.runformat import manifest as dossier_manifest
from kernodeck.runformat import recording

ROOT = Path(__file__).resolve().parents[2]
IDS = [f"r{i}" for i in range(6)]


def _declared_table() -> dict[str, Any]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return copy.deepcopy(data["tool"]["kernodeck"]["application"])


# --- the declaration -------------------------------------------------------------------------------------------------


def test_this_repository_declares_its_application_like_any_user() -> None:
    app = app_contract.load(ROOT)
    assert str(app.entry) == "checks/app.py:run" and str(app.criterion) == "checks/app.py:criterion"
    assert app.outputs["embeddings"].kind == "cosine"
    assert app.outputs["embeddings"].tolerance == {"cosine-min": 0.9999, "max-abs": 1e-4}
    assert "checks/app.py" in app.code and app.weights is not None


def test_the_declared_smoke_checks_files_are_among_the_sources() -> None:
    """A smoke check's file is part of what the reference describes (app_contract.from_tool): fingerprinted with the
    application's code; without an extension declared (the control), the sources are the application's own."""
    table = _declared_table()
    tool = {"application": table, "extensions": {
        "kdext": {"module": "kdext._C", "smoke": "checks/ext.py:smoke", "rtol": 0.0, "atol": 0.0},
        "other": {"module": "other._C", "smoke": "checks/ext.py:other", "rtol": 0.0, "atol": 0.0}}}
    app = app_contract.from_tool(tool)
    assert app.smoke == ("checks/ext.py",) and app.sources[-1] == "checks/ext.py"
    assert app_contract.from_tool({"application": table}).sources == app_contract.from_table(table).sources
    assert "checks/ext.py" not in app_contract.from_table(table).sources


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda t: t.update(entry="checks/app.py"), "path/to/file.py:function"),
        (lambda t: t.update(entry="../elsewhere.py:run"), "inside the project"),
        (lambda t: t.pop("sample"), "sample"),
        (lambda t: t.update(outputs={}), "declares no outputs"),
        (lambda t: t["outputs"]["embeddings"].update(kind="close-enough"), "is not one of"),
        (lambda t: t["outputs"]["embeddings"].pop("max-abs"), "needs a number max-abs"),
        (lambda t: t["outputs"]["embeddings"].update(rtol=0.1), "rtol not used by kind cosine"),
        (lambda t: t["outputs"]["embeddings"].update(dtype="float33"), "dtype"),
        (lambda t: t["outputs"]["embeddings"].update(justification=" "), "justification"),
        (lambda t: t["outputs"]["embeddings"].update({"cosine-min": 1.5}), "outside"),
    ],
)
def test_bad_declarations_are_named(edit: Any, message: str) -> None:
    table = _declared_table()
    app_contract.from_table(table)  # the control: the declaration as committed is accepted
    edit(table)
    with pytest.raises(ConfigError, match=message):
        app_contract.from_table(table)


def test_each_kind_takes_its_tolerance_fields() -> None:
    base = {"dtype": "float32", "justification": "why"}
    cases = {
        "cosine": {"cosine-min": 0.99, "max-abs": 1e-3},
        "allclose": {"rtol": 1e-5, "atol": 1e-6},
        "exact": {},
        "agreement": {"min-share": 0.98},
    }
    for kind, tol in cases.items():
        table = {"entry": "app.py:run", "sample": "s.jsonl", "outputs": {"x": {**base, "kind": kind, **tol}}}
        assert app_contract.from_table(table).outputs["x"].tolerance == tol


# --- the tolerance kinds, each with a negative control ----------------------------------------------------------------


def _verdict(decl: dict[str, Any], ours: Any, ref: Any) -> dict[str, Any]:
    return tolerance.compare(decl, np.asarray(ours), np.asarray(ref), IDS)


def test_cosine_passes_within_and_fails_beyond() -> None:
    rng = np.random.default_rng(0)
    ref = rng.normal(size=(6, 8)).astype(np.float32)
    decl = {"kind": "cosine", "cosine-min": 0.9999, "max-abs": 1e-4}
    assert _verdict(decl, ref + np.float32(1e-6), ref)["passed"]
    moved = ref.copy()
    moved[2, 3] += 1e-3  # cosine still ~1, but max abs beyond
    verdict = _verdict(decl, moved, ref)
    assert not verdict["passed"] and verdict["max_abs"] > 1e-4
    turned = ref.copy()
    turned[4] = -turned[4]  # same magnitudes, opposite direction
    verdict = _verdict({**decl, "max-abs": 100.0}, turned, ref)
    assert not verdict["passed"] and verdict["worst_id"] == "r4" and verdict["min_cosine"] < 0


def test_allclose_passes_within_and_fails_beyond() -> None:
    ref = np.linspace(-3, 3, 24, dtype=np.float32).reshape(6, 4)
    decl = {"kind": "allclose", "rtol": 1e-3, "atol": 1e-5}
    assert _verdict(decl, ref * np.float32(1 + 5e-4), ref)["passed"]
    moved = ref.copy()
    moved[5, 0] *= 1.01
    verdict = _verdict(decl, moved, ref)
    assert not verdict["passed"] and verdict["rows_over"] == ["r5"] and verdict["values_over"] == 1


def test_exact_passes_equal_and_fails_one_change() -> None:
    ref = np.arange(6, dtype=np.int64)
    decl = {"kind": "exact"}
    assert _verdict(decl, ref.copy(), ref)["passed"]
    moved = ref.copy()
    moved[1] = 9
    verdict = _verdict(decl, moved, ref)
    assert not verdict["passed"] and verdict["first_unequal"] == ["r1"]


def test_agreement_passes_at_the_share_and_fails_below() -> None:
    ref = np.array([0, 1, 2, 3, 4, 5])
    decl = {"kind": "agreement", "min-share": 5 / 6}
    one_off = ref.copy()
    one_off[0] = 7
    assert _verdict(decl, one_off, ref)["passed"]
    two_off = one_off.copy()
    two_off[1] = 7
    verdict = _verdict(decl, two_off, ref)
    assert not verdict["passed"] and math.isclose(verdict["equal_share"], 4 / 6)


@pytest.mark.parametrize(
    "decl",
    [
        {"kind": "cosine", "cosine-min": -1.0, "max-abs": 1e9},
        {"kind": "allclose", "rtol": 1e9, "atol": 1e9},
        {"kind": "agreement", "min-share": 0.0},
    ],
)
def test_non_finite_values_are_reported_never_hidden(decl: dict[str, Any]) -> None:
    ref = np.ones((6, 3), dtype=np.float32)
    assert _verdict(decl, ref.copy(), ref)["passed"]  # the control: the loosest tolerance passes finite values
    bad = ref.copy()
    bad[3, 1] = np.nan
    verdict = _verdict(decl, bad, ref)
    assert not verdict["passed"] and verdict["non_finite"]["output"] == ["r3"] and "non-finite" in verdict["summary"]
    verdict = _verdict(decl, ref, bad)
    assert not verdict["passed"] and verdict["non_finite"]["reference"] == ["r3"]


def test_shape_mismatch_fails_every_kind() -> None:
    for decl in ({"kind": "exact"}, {"kind": "cosine", "cosine-min": 0.0, "max-abs": 1.0}):
        verdict = _verdict(decl, np.zeros((6, 3)), np.zeros((6, 4)))
        assert not verdict["passed"] and "shape" in verdict["summary"]


# --- the reference: flip bound, declaration drift, shapes ----------------------------------------------------------


def test_flip_bound_applies_only_to_nearest_neighbours_of_a_cosine_output() -> None:
    app = app_contract.load(ROOT)
    crit = {"passed": True, "margin": 0.3, "neighbours_of": "embeddings"}
    record = recording.flip_bound(app, crit, {"embeddings": [40, 384]})
    assert record is not None and record["bound"] == pytest.approx(2 * math.sqrt(384) * 1e-4)
    with pytest.raises(ManifestError, match="could flip a nearest neighbour"):
        recording.flip_bound(app, {**crit, "margin": 0.005}, {"embeddings": [40, 384]})
    # Not a nearest-neighbour criterion (e.g. an accuracy margin): the rule does not apply.
    assert recording.flip_bound(app, {"passed": True, "margin": 0.005}, {"embeddings": [40, 384]}) is None


def test_a_declaration_that_moved_since_the_reference_is_named() -> None:
    manifest = dossier_manifest.load(load_project(ROOT)).manifest
    app = app_contract.load(ROOT)
    assert dossier_manifest.declaration_differences(manifest, app) == []
    table = _declared_table()
    table["outputs"]["embeddings"]["max-abs"] = 1e-2
    table["params"]["batch-size"] = 8
    found = dossier_manifest.declaration_differences(manifest, app_contract.from_table(table))
    assert any("outputs.embeddings.max_abs: 0.0001 -> declared 0.01" in f for f in found)
    assert any("application.params" in f for f in found)


def test_npy_shape_read_without_numpy(tmp_path: Path) -> None:
    np.save(tmp_path / "a.npy", np.zeros((5, 7, 2), dtype=np.float32))
    assert recording.npy_shape(tmp_path / "a.npy") == [5, 7, 2]
    (tmp_path / "b.npy").write_text(json.dumps([1, 2]))
    with pytest.raises(ManifestError, match=r"not a \.npy"):
        recording.npy_shape(tmp_path / "b.npy")


def test_the_distribution_ships_the_inenv_side() -> None:
    """Everything run inside the env ships in the distribution: every package folder under kernodeck/ is listed."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    listed = set(data["tool"]["setuptools"]["packages"])
    folders = {
        ".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "kernodeck").rglob("__init__.py")
    }
    assert "kernodeck.inenv" in folders and folders <= listed
    from kernodeck.verify.steps import in_env

    assert in_env.RUNNER == ROOT / "kernodeck" / "inenv" / "runner.py" and in_env.RUNNER.is_file()


def test_a_bounded_determinism_run_says_so_in_the_report() -> None:
    from kernodeck.inenv.protocol import Status
    from kernodeck.verify.record import Step
    from kernodeck.verify.summaries import step_result

    details = {"bitwise_identical": True, "repeats": 2, "records": 64, "of": 2048, "subset": "the first 64 records"}
    line = step_result(Step("determinism", Status.PASSED, details=details))
    assert "the first 64 records (64 of 2048 records)" in line
    whole = step_result(Step("determinism", Status.PASSED, details={**details, "records": 40, "of": 40}))
    assert "records" not in whole


# --- the sample (read inside the env) --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (['{"id": "a"}', "[1, 2, 3]"], 'sample.jsonl:2: not a JSON object but a JSON array (each line is an object'),
        (['"a"'], "sample.jsonl:1: not a JSON object but a JSON string"),
        (["null"], "sample.jsonl:1: not a JSON object but a JSON null"),
        (['{"id": 7}'], "sample.jsonl:1: each line needs a string field id (its id is 7)"),
        (['{"text": "x"}'], "sample.jsonl:1: each line needs a string field id (it has no field id)"),
        (['{"id": "a"}', '{"id": "b"}', "", '{"id": "a"}'], 'sample.jsonl:4: duplicate id "a" (first on line 1)'),
    ],
)
def test_a_bad_sample_line_is_named_for_what_it_is(tmp_path: Path, lines: list[str], message: str) -> None:
    from kernodeck.inenv._common import CheckFailed, load_sample

    path = tmp_path / "sample.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(CheckFailed) as refused:
        load_sample(path)
    assert str(refused.value).startswith(message), refused.value
    assert refused.value.layer == "data-loading"


def test_a_sample_of_objects_with_unique_string_ids_is_read(tmp_path: Path) -> None:
    """The control: the same reader takes a good sample (and ids that differ only in case are distinct)."""
    from kernodeck.inenv._common import load_sample

    path = tmp_path / "sample.jsonl"
    path.write_text('{"id": "a", "x": [1, 2]}\n\n{"id": "A"}\n', encoding="utf-8")
    assert [item["id"] for item in load_sample(path)] == ["a", "A"]


# --- globs: never into the folders Kernodeck writes in the project ----------------------------------------------------

OWN = ["runs/20261202-100000-cp311-linux_x86_64-cpu/outputs/x.npy", "dossier/reference/x.npy",
       ".venv-rebuild/cp311-linux_x86_64-cpu/env-1/lib/python3.11/site-packages/t.py",
       ".nox/tests/lib/python3.11/site-packages/k.py", ".wheelhouse/cp311/w.py", ".git/hooks/h.py",
       "out/kd-runs/1/outputs/y.npy", "src/mypkg/__pycache__/util.py"]


def _tree(tmp_path: Path) -> Path:
    for rel in ["src/mypkg/util.py", "data/a.npy", "app.py", *OWN]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"x")
    return tmp_path


def test_a_broad_glob_never_takes_in_kernodecks_own_folders(tmp_path: Path) -> None:
    """``code = ["**/*.py"]``, ``files = ["**/*.npy"]``: every run's outputs, the reference's, the envs and nox's
    venvs lie inside the project; taken in, each run would be a "code change" (red-team pass 13). The folders come
    from the project's config (here runs = "out/kd-runs"), hidden ones (.git, .nox, .wheelhouse) besides."""
    root = _tree(tmp_path)
    found = app_contract.expand(["**/*.py"], "code", root) + app_contract.expand(["**/*.npy"], "files", root)
    assert found == ["app.py", "src/mypkg/util.py", "data/a.npy", "out/kd-runs/1/outputs/y.npy"]
    # runs elsewhere: out/kd-runs is Kernodeck's, runs/ a folder of the project's like any other
    owned = owned_folders({"runs": "out/kd-runs"})
    assert app_contract.expand(["**/*.npy"], "files", root, owned) == [
        "data/a.npy", "runs/20261202-100000-cp311-linux_x86_64-cpu/outputs/x.npy"]


@pytest.mark.parametrize(("pattern", "expected"), [
    ("runs/*/outputs/*.npy", ["runs/20261202-100000-cp311-linux_x86_64-cpu/outputs/x.npy"]),
    ("dossier/reference/*.npy", ["dossier/reference/x.npy"]),
    (".nox/**/*.py", [".nox/tests/lib/python3.11/site-packages/k.py"]),
    ("**/.git/**/*.py", [".git/hooks/h.py"]),
])
def test_a_pattern_that_names_such_a_folder_still_reaches_it(tmp_path: Path, pattern: str, expected: list[str]) -> None:
    assert app_contract.expand([pattern], "files", _tree(tmp_path)) == expected


def test_the_project_load_reads_the_folders_from_its_config(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    table = {"entry": "app.py:run", "sample": "sample.jsonl", "code": ["**/*.py"], "files": ["**/*.npy"],
             "outputs": {"x": {"kind": "exact", "dtype": "int64", "justification": "labels"}}}
    (root / "pyproject.toml").write_text(
        "[tool.kernodeck]\n" + 'runs = "out/kd-runs"\n' + "[tool.kernodeck.application]\n"
        + "".join(f"{key} = {json.dumps(value)}\n" for key, value in table.items() if key != "outputs")
        + '[tool.kernodeck.application.outputs.x]\nkind = "exact"\ndtype = "int64"\njustification = "labels"\n',
        encoding="utf-8")
    assert app_contract.load(root).sources == (
        "app.py", "src/mypkg/util.py", "data/a.npy", "runs/20261202-100000-cp311-linux_x86_64-cpu/outputs/x.npy")
