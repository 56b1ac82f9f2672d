"""Issue 19 items 2-3 (and issue 25 item 5), end to end as a user runs them: "passed" means proven.

Each case shows the hole first (the bad input), then that verify (or reference, lock --check, rebuild) fails on it,
naming the cause, with its TIP; the good input passes (the clean verify of tests/e2e/test_verify_e2e.py).
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from kernodeck._fs import sha256_file
from tests.helpers.builtenv import refingerprint
from tests.helpers.project import copy_project, kd
from tests.helpers.reports import read_report, statuses

rel = pytest.mark.reliability
PLATFORM = "cp311-linux_x86_64-cpu"
TWIN = f"lockfiles/pylock.{PLATFORM}.toml"
APP = "checks/app.py"
TINY_APP = "tiny/app.py"  # the tiny application's code file (tests/helpers/tinyapp.py)


def _edit_app(project: Path, old: str, new: str, app: str = APP) -> None:
    path = project / app
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new), encoding="utf-8")


# --- a changed code file fails at the reference, named (fast: before anything is built) -----------------------------


@rel(
    51,
    "a declared code file changed since the reference (checks/app.py edited; or a file newly declared in `code`)",
    "verify fails at the reference (step reference-manifest, layer reference) before anything is built, with one "
    "ERROR naming the files and `TIP: nox -s reference -- --new`",
)
@pytest.mark.parametrize("edit", ["edited", "newly-declared"])
def test_changed_code_fails_at_the_reference(tmp_path: Path, edit: str) -> None:
    project = copy_project(tmp_path / "project")
    if edit == "edited":
        _edit_app(project, '"pairs_checked": len(nearest),', '"pairs_checked": len(nearest) + 0,')
        named = APP
    else:
        (project / "checks/helper.py").write_text("X = 1\n")
        pyproject = project / "pyproject.toml"
        pyproject.write_text(pyproject.read_text().replace('code = ["checks/app.py"]',
                                                           'code = ["checks/app.py", "checks/helper.py"]'))
        named = "checks/helper.py"
    out = tmp_path / "run"
    proc = kd(project, "verify", "--out", str(out))
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1 and f"code differs from the reference's fingerprint: {named}" in errors[0]
    assert "TIP: nox -s reference -- --new" in proc.stderr
    report = read_report(out)
    steps = {s["name"]: s for s in report["steps"]}  # type: ignore[union-attr]
    assert report["first_failure"] == "reference-manifest" and steps["reference-manifest"]["layer"] == "reference"
    assert named in steps["reference-manifest"]["error"]
    assert steps["reference-manifest"]["details"]["changed_code"] == [named]
    assert steps["rebuild"]["status"] == "not-run" and steps["compare"]["status"] == "not-run"


# --- the lock check is one function: lock --check, rebuild and verify refuse alike ----------------------------------


@rel(
    55,
    "the lock's PEP 751 twin deleted, or stale (its recorded lock digest edited)",
    "`lock --check`, `rebuild` and verify's lock-check all fail with the same ERROR naming the twin and a "
    "`TIP: nox -s lock ...`; nothing is built",
)
@pytest.mark.parametrize("edit", ["deleted", "stale"])
def test_missing_or_stale_twin_fails_every_lock_check(tmp_path: Path, edit: str) -> None:
    project = copy_project(tmp_path / "project")
    twin = project / TWIN
    if edit == "deleted":
        twin.unlink()
        needle = f"pylock.{PLATFORM}.toml (its PEP 751 lock) is missing"
    else:
        text = twin.read_text()
        digest = sha256_file(project / f"lockfiles/{PLATFORM}.txt")
        assert text.count(digest) == 1
        twin.write_text(text.replace(digest, "0" * 64))
        needle = f"pylock.{PLATFORM}.toml was not written for this {PLATFORM}.txt"
    errors = []
    for args in (["lock", "--check"], ["rebuild"], ["verify", "--out", str(tmp_path / "run")]):
        proc = kd(project, *args)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr[-2000:])
        (error,) = [line for line in proc.stderr.splitlines() if line.startswith("ERROR:")]
        assert needle in error and "TIP: nox -s lock -- --platform" in proc.stderr, (args, proc.stderr)
        errors.append(error)
    assert len(set(errors)) == 1  # exactly as lock --check fails
    report = read_report(tmp_path / "run")
    assert report["first_failure"] == "lock-check" and statuses(report)["rebuild"] == "not-run"
    assert not (project / ".venv-rebuild" / PLATFORM / "current").exists()  # nothing built


# --- with the real environment ---------------------------------------------------------------------------------------


def _sibling(built: Path, tmp_path: Path) -> Path:
    from tests.helpers.builtenv import sibling

    return sibling(built, tmp_path)


ALWAYS = '"passed": share >= params["min-accuracy"]'  # the tiny application's criterion (tests/helpers/tinyapp.py)
# finite values, one row per id, a spread above zero: nothing that ties a row to its input or judges its values
VACUOUS = ("bool(np.isfinite(outputs['logits']).all()) and len(outputs['logits']) == len(ids) and "
           "float(np.ptp(outputs['logits'])) > 0")


@pytest.mark.slow
@rel(
    50,
    "the criterion edited to check only finite values, the row count and a spread above zero (and the manifest's "
    "code fingerprint recomputed)",
    "verify fails at the criterion step: it fails only the constant and cannot see rows permuted against their ids "
    "nor noise of the outputs' own scale (each named); `nox -s reference -- --new` refuses it with ERROR + TIP; "
    "nothing written",
)
def test_a_criterion_unable_to_fail_is_refused(tiny_referenced: Path, tmp_path: Path) -> None:
    """Issue 29's nearly vacuous criterion: it fails the constant corruption, which the former rule took for able
    to fail; it passes the permuted rows and the noise. The controls are Kernodeck's, the same for every
    application: the tiny one's criterion made vacuous (a copy of the session's referenced tiny project,
    tests/helpers/tinyapp.py), where MiniLM's model would only add its load and its runs to the verify and the
    reference."""
    from tests.helpers.tinyapp import copy_referenced

    project = copy_referenced(tiny_referenced, tmp_path)
    _edit_app(project, ALWAYS, f'"passed": {VACUOUS}', TINY_APP)
    refingerprint(project)
    out = tmp_path / "run"
    proc = kd(project, "verify", "--out", str(out))
    assert proc.returncode == 1, proc.stderr[-3000:]
    report = read_report(out)
    step = next(s for s in report["steps"] if s["name"] == "criterion")  # type: ignore[union-attr]
    assert report["first_failure"] == "criterion" and statuses(report)["compare"] == "passed"
    assert step["error"].startswith("the criterion is unable to fail: it cannot see rows permuted against their ids")
    assert "it fails only the outputs replaced by a constant" in step["error"] and step["layer"] == "application"
    controls = step["details"]["controls"]
    assert controls["failed"] == ["constant"] and controls["cannot_see"] == ["permuted", "noise"]
    assert controls["noise_margin"]["logits"]["found"] is False
    assert "TIP: make the criterion judge the outputs" in proc.stderr
    manifest = (project / "dossier/reference/manifest.toml").read_bytes()
    proc = kd(project, "reference", "--new", "--out", str(tmp_path / "ref"))
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "ERROR: the reference run failed at criterion: the criterion is unable to fail" in proc.stderr
    assert "TIP: make the criterion judge the outputs" in proc.stderr
    assert (project / "dossier/reference/manifest.toml").read_bytes() == manifest


@pytest.mark.slow
@rel(
    52,
    "`verify -- --allow-code-change` with a changed code file",
    "every check runs; the verdict is `passed-with-changed-code` naming the file (exit 1), never `passed`",
)
def test_allow_code_change_is_never_a_pass(tiny_referenced: Path, tmp_path: Path) -> None:
    # the code fingerprint and the verdict are Kernodeck's, the same for every application: the tiny one's declared
    # code file changed (a copy of the session's referenced tiny project, tests/helpers/tinyapp.py), where MiniLM's
    # model would only add its load and its runs
    from tests.helpers.tinyapp import copy_referenced

    project = copy_referenced(tiny_referenced, tmp_path)
    _edit_app(project, '"margin": share - 0.5}', '"margin": share - 0.5 + 0}', TINY_APP)
    out = tmp_path / "run"
    proc = kd(project, "verify", "--allow-code-change", "--out", str(out))
    assert proc.returncode == 1, proc.stderr[-3000:]
    report = read_report(out)
    assert set(statuses(report).values()) == {"passed"}  # every check ran and passed ...
    assert report["status"] == "passed-with-changed-code"  # ... no pass
    assert report["verdict"]["changed_code"] == [TINY_APP]
    assert TINY_APP in report["verdict"]["line"] and "PASSED-WITH-CHANGED-CODE" in proc.stdout
    ref_step = next(s for s in report["steps"] if s["name"] == "reference")  # type: ignore[union-attr]
    assert ref_step["details"]["code"] == {"files": [TINY_APP], "changed": [TINY_APP], "allowed": True}
    assert not next(c for c in report["claims"] if c["id"] == "reference-current")["established"]  # type: ignore[union-attr]
    assert (out / "report.md").read_text().startswith("# Kernodeck verify: PASSED-WITH-CHANGED-CODE")


@pytest.mark.slow
@rel(
    53,
    "the manifest's `[criterion.flip_bound]` table removed and `max-abs = 0.05` declared (pyproject and manifest), "
    "its id recomputed",
    "the flip bound is derived again in the env from the margin and the dimension: verify fails at the criterion "
    "step, naming the bound and the margin",
)
def test_flip_bound_holds_without_its_table(built_project: Path, tmp_path: Path) -> None:
    project = _sibling(built_project, tmp_path)
    pyproject = project / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace("max-abs = 1e-4\n", "max-abs = 0.05\n"))
    refingerprint(project, **{"outputs.embeddings": {"max-abs": 0.05}, "criterion.flip_bound": {}})
    assert "flip_bound" not in tomllib.loads((project / "dossier/reference/manifest.toml").read_text())["criterion"]
    out = tmp_path / "run"
    proc = kd(project, "verify", "--out", str(out))
    assert proc.returncode == 1, proc.stderr[-3000:]
    report = read_report(out)
    step = next(s for s in report["steps"] if s["name"] == "criterion")  # type: ignore[union-attr]
    assert report["first_failure"] == "criterion", step
    assert "declared max-abs 0.05 of embeddings allows cosine changes up to 1.96" in step["error"]
    assert "could flip a nearest neighbour" in step["error"] and "TIP: lower max-abs" in proc.stderr


@pytest.mark.slow
@rel(
    54,
    "a NaN in the backend probe's softmax (torch.softmax returning NaN), where `nan > 1e-6` is False",
    "the backend step fails, named non-finite, in layer operator:softmax; nothing computed after it",
)
def test_nan_in_the_backend_probe_is_non_finite(built_project: Path, tmp_path: Path) -> None:
    from tests.helpers.faults import inject, wrap_around

    project = _sibling(built_project, tmp_path)
    inject(project, "backend", wrap_around(
        "run",
        """
        import torch
        _softmax = torch.softmax
        torch.softmax = lambda *a, **k: _softmax(*a, **k) * float("nan")
        """,
        "torch.softmax = _softmax",
    ))
    out = tmp_path / "run"
    proc = kd(project, "verify", "--out", str(out))
    assert proc.returncode == 1, proc.stderr[-3000:]
    report = read_report(out)
    step = next(s for s in report["steps"] if s["name"] == "backend")  # type: ignore[union-attr]
    assert report["first_failure"] == "backend" and step["layer"] == "operator:softmax", step
    assert "softmax on cpu: non-finite" in step["error"] and statuses(report)["application"] == "not-run"
    assert json.dumps(step["details"]).count("NaN") >= 1


@pytest.mark.slow
@rel(
    57,
    "a NaN only in the determinism step's run without the settings (the settings' cost run)",
    "the determinism step fails, named non-finite, naming the run and the output (no max abs hides it)",
)
def test_nan_in_the_settings_cost_run_is_non_finite(tiny_referenced: Path, tmp_path: Path) -> None:
    # the determinism step's runs and its finiteness check are Kernodeck's, the same for every application: the tiny
    # one's logits (a copy of the session's referenced tiny project, tests/helpers/tinyapp.py), where MiniLM's model
    # would only add its load and its runs
    from tests.helpers.faults import inject, wrap_after
    from tests.helpers.tinyapp import copy_referenced

    project = copy_referenced(tiny_referenced, tmp_path)
    # the run without the settings is the one call of the entry with deterministic algorithms off (a count of calls
    # would not do: the first rerun loads the app's module afresh, with a fresh counter)
    inject(project, "tiny/app", wrap_after(
        "run",
        """
        import torch as _torch
        if not _torch.are_deterministic_algorithms_enabled():
            _arr, _ids = args[0].written["logits"]
            _arr = _arr.copy()
            _arr[1, 2] = float("nan")
            args[0].written["logits"] = (_arr, _ids)
        """,
    ))
    refingerprint(project)
    out = tmp_path / "run"
    proc = kd(project, "verify", "--out", str(out), "--settings-cost")  # the cost run: a verify's only where asked
    assert proc.returncode == 1, proc.stderr[-3000:]
    report = read_report(out)
    step = next(s for s in report["steps"] if s["name"] == "determinism")  # type: ignore[union-attr]
    assert report["first_failure"] == "determinism", step
    assert "non-finite" in step["error"] and "the run without the settings: logits (1 values)" in step["error"], \
        step["error"]
    assert statuses(report)["criterion"] == "passed"


TINY_AGREEMENT = "min-share = 1.0"


@pytest.mark.slow
@rel(
    56,
    "a declared tolerance that cannot fail (`min-share = 0.0` of an agreement output), then "
    "`nox -s reference -- --new`",
    "the reference is refused at the compare step: the output moved past the tolerance still passes compare (named), "
    "ERROR + TIP; nothing written",
)
def test_reference_refuses_a_tolerance_unable_to_fail(built_project: Path, tmp_path: Path) -> None:
    from tests.helpers.tinyapp import tiny_app_project

    project = tiny_app_project(built_project, tmp_path)
    pyproject = project / "pyproject.toml"
    assert pyproject.read_text().count(TINY_AGREEMENT) == 1
    pyproject.write_text(pyproject.read_text().replace(TINY_AGREEMENT, "min-share = 0.0"))
    manifest = (project / "dossier/reference/manifest.toml").read_bytes()
    proc = kd(project, "reference", "--new", "--out", str(tmp_path / "ref"))
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "ERROR: the reference run failed at compare: a declared tolerance is unable to fail" in proc.stderr
    assert "labels min-share" in proc.stderr and "TIP: declare a tolerance a moved output can exceed" in proc.stderr
    assert (project / "dossier/reference/manifest.toml").read_bytes() == manifest
