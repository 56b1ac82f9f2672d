"""The CLI parses and calls: the logic it called moved into its modules (reference.current/create, upgrade.outcome and
write_pr_body, drift.declared_outputs and interpreter) and is tested there, without a rebuilt env."""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from kernodeck.dossier import new_reference
from kernodeck.errors import Interrupted, KernodeckError, ManifestError
from kernodeck.exitcodes import ExitCode
from kernodeck.inenv.protocol import Status
from kernodeck.lock.lockdiff import LockDiff, LockSide
from kernodeck.measure import drift_map
from kernodeck.project.config import load_project
from kernodeck.project.platforms import resolve_platform
from kernodeck.upgrade import pullrequest
from kernodeck.upgrade import relock as upgrade
from kernodeck.verify.record import Step, Verdict
from kernodeck.verify.report import Report
from tests.helpers.project import copy_project
from tests.helpers.workflows import platform_result

ROOT = Path(__file__).resolve().parents[2]


CLI = (ROOT / "kernodeck" / "__main__.py", *sorted((ROOT / "kernodeck" / "cli").glob("*.py")))


def _command_lengths(paths: tuple[Path, ...]) -> dict[str, int]:
    found: dict[str, int] = {}
    for path in paths:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found |= {f"{path.name}:{f.name}": (f.end_lineno or f.lineno) - f.lineno for f in tree.body
                  if isinstance(f, ast.FunctionDef) and f.name.startswith("cmd_")}
    return found


def test_no_command_holds_more_than_a_screen_of_logic() -> None:
    lengths = _command_lengths(CLI)
    assert len(lengths) >= 16 and max(lengths.values()) <= 25, lengths


def test_the_length_rule_finds_a_long_command(tmp_path: Path) -> None:
    body = "".join(f"    x = {i}\n" for i in range(30))
    (tmp_path / "long.py").write_text(f"def cmd_long() -> int:\n{body}    return x\n", encoding="utf-8")
    assert _command_lengths((tmp_path / "long.py",)) == {"long.py:cmd_long": 31}


# What a CLI module may import when it loads: the parser's needs. Everything a command does is imported when it runs,
# so `--help` and `lock --check` load none of the other commands (tests/unit/test_speed.py measures that).
PARSING = {"__future__", "argparse", "sys", "collections.abc", "pathlib", "typing", "kernodeck", "kernodeck.tips",
           "kernodeck.errors", "kernodeck.sources", "kernodeck.project.config", "kernodeck.project.platforms",
           "os", "kernodeck.exitcodes",  # os: the caller's folder; exitcodes: an enum, the codes main returns
           "kernodeck.lock.inputs"}  # RESOLVERS, the choices of --resolver, defined once there (light: no index client)


def _loaded_imports(paths: tuple[Path, ...]) -> dict[str, set[str]]:
    """The modules each file imports at load time (``if TYPE_CHECKING:`` blocks and function bodies aside)."""
    found: dict[str, set[str]] = {}
    for path in paths:
        names: set[str] = set()
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Import):
                names |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                names.add(node.module)
        found[path.name] = {n for n in names if n not in PARSING and not n.startswith("kernodeck.cli")}
    return found


def test_the_cli_loads_only_what_parsing_needs(tmp_path: Path) -> None:
    assert {name: extra for name, extra in _loaded_imports(CLI).items() if extra} == {}
    (tmp_path / "eager.py").write_text("from kernodeck.verify import verify\n", encoding="utf-8")
    assert _loaded_imports((tmp_path / "eager.py",)) == {"eager.py": {"kernodeck.verify"}}


def test_main_parses_calls_and_is_the_error_boundary() -> None:
    """__main__ holds no command: it parses, calls the one named and turns an error into ERROR + TIP."""
    tree = ast.parse(CLI[0].read_text(encoding="utf-8"))
    assert [f.name for f in tree.body if isinstance(f, ast.FunctionDef)] == ["main"]


@pytest.mark.parametrize(("error", "code"), [
    (Interrupted("stopped by SIGTERM", tip="nox -s verify"), ExitCode.INTERRUPTED),
    (KernodeckError("the lock is stale", tip="nox -s lock"), ExitCode.ERROR)])
def test_an_interrupted_command_exits_with_the_tables_code(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], error: KernodeckError, code: int) -> None:
    """An interruption (upgrade's, bisect's, reference's) is the exit-code table's 130, not an ERROR's 2 (red-team
    pass 57: a SIGTERM'd reference exited 2); each still says ERROR and TIP."""
    from kernodeck import __main__ as entry

    def raising(_args: object) -> int:
        raise error

    monkeypatch.setattr(entry, "dispatch", raising)
    monkeypatch.setattr(entry, "parse", lambda argv: argv)
    assert entry.main(["verify"]) == code
    err = capsys.readouterr().err
    assert err.startswith(f"ERROR: {error}") and f"TIP: {error.tip}" in err


def test_an_interrupted_reference_run_is_an_interruption(tmp_path: Path) -> None:
    project = load_project(copy_project(tmp_path / "p"))
    report = Report(platform="p", steps=[Step("application", Status.FAILED, error="stopped", layer="application")],
                    meta={"interrupted": {"signal": "SIGTERM", "step": "application"}})
    assert report.verdict is Verdict.INTERRUPTED
    with pytest.raises(Interrupted, match="nothing was written to the reference"):
        new_reference.create(project, resolve_platform(project), report, tmp_path / "run", None)
    failed = Report(platform="p", steps=[Step("application", Status.FAILED, error="boom", layer="application")])
    with pytest.raises(KernodeckError) as refused:  # control: a failure is an ERROR (2), not an interruption
        new_reference.create(project, resolve_platform(project), failed, tmp_path / "run", None)
    assert not isinstance(refused.value, Interrupted)


def test_a_reference_is_replaced_only_when_asked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project = load_project(copy_project(tmp_path / "p"))
    with pytest.raises(ManifestError, match="a new identity is made only when asked") as refused:
        new_reference.current(project, new=False)
    assert refused.value.tip == "nox -s reference -- --new"
    old = new_reference.current(project, new=True)
    assert old is not None and old.id.startswith("sha256:")
    (project.reference / "manifest.toml").write_text("id = [\n", encoding="utf-8")  # unusable: replaced, logged
    assert new_reference.current(project, new=False) is None
    assert "the current reference is unusable" in capsys.readouterr().err
    shutil.rmtree(project.reference)
    assert new_reference.current(project, new=False) is None


def test_a_failed_reference_run_writes_nothing(tmp_path: Path) -> None:
    project = load_project(copy_project(tmp_path / "p"))
    before = (project.reference / "manifest.toml").read_bytes()
    plat = resolve_platform(project, None)
    failed = Step("backend", Status.FAILED, error="no  device\nfound", layer="device", details={"tip": "nox -s x"})
    report = Report(platform=plat.id, steps=[Step("settings", Status.PASSED), failed])
    with pytest.raises(KernodeckError, match="failed at backend: no device found; nothing was written") as raised:
        new_reference.create(project, plat, report, tmp_path / "run", None)
    assert raised.value.tip == "nox -s x"
    assert (project.reference / "manifest.toml").read_bytes() == before


def test_a_reference_is_refused_when_its_sources_changed_during_the_run(tmp_path: Path) -> None:
    """The manifest fingerprints the declared sources as the in-env side ran them (the run's run-config.json)."""
    from kernodeck.project import app_contract

    project = load_project(copy_project(tmp_path / "p"))
    app = app_contract.load(project.root)
    run = tmp_path / "run"
    run.mkdir()
    config = {"application": {"sources": app.fingerprints(project.root)}}
    (run / "run-config.json").write_text(json.dumps(config), encoding="utf-8")
    new_reference.require_sources_as_run(project, app, run)  # the control: the bytes that ran are the files now
    (project.root / "checks" / "app.py").write_text("# changed while the run ran\n", encoding="utf-8")
    with pytest.raises(KernodeckError, match=r"sources changed during the reference run: checks/app.py; nothing was"):
        new_reference.require_sources_as_run(project, app, run)
    (run / "run-config.json").unlink()  # no record of what ran: nothing is taken on trust
    with pytest.raises(KernodeckError, match="sources changed during the reference run"):
        new_reference.require_sources_as_run(project, app, run)


def test_an_application_resumes_train_file_is_compared_as_the_run_was_given_it(tmp_path: Path) -> None:
    """The run checks the application's train file (a resume's entry) though `code` need not list it: the reference's
    check compares the same set, so an unchanged train file is no change (red-team pass 10: every reference of such
    a project was refused) and a changed one still is."""
    from kernodeck.project import app_contract
    from kernodeck.verify import runbuild

    project = load_project(copy_project(tmp_path / "p"))
    app = app_contract.load(project.root)
    (project.root / "checks" / "train.py").write_text("def train(app): pass\n", encoding="utf-8")
    config: dict[str, Any] = {"application": {}, "resume_application": {"entry": {"file": "checks/train.py"}}}
    runbuild.add_in_env_inputs(config, project.root, app)
    assert "checks/train.py" in config["application"]["sources"] and "checks/train.py" not in app.fingerprints(
        project.root)
    run = tmp_path / "run"
    run.mkdir()
    (run / "run-config.json").write_text(json.dumps(config), encoding="utf-8")
    new_reference.require_sources_as_run(project, app, run)
    (project.root / "checks" / "train.py").write_text("def train(app): return 1\n", encoding="utf-8")
    with pytest.raises(KernodeckError, match=r"sources changed during the reference run: checks/train.py;"):
        new_reference.require_sources_as_run(project, app, run)


def _result(tmp_path: Path, drift_: upgrade.Drift) -> upgrade.UpgradeResult:
    side = LockSide(label="old", body_digest="a", as_of="", packages=0)
    return upgrade.UpgradeResult(platform="cp311-linux_x86_64-cpu", lock=tmp_path / "lockfiles" / "new.txt",
                                 old_lock=tmp_path / "runs" / "old.txt", folder=tmp_path / "runs" / "up",
                                 diff=LockDiff(side, side, (), 0), drift=drift_, markdown="")


@pytest.mark.parametrize(("outputs", "failure", "code", "said"), [
    ((True,), "", 0, "criterion still holds"),
    ((False,), "", 1, "OUT OF TOLERANCE"),
    ((), "backend: no device", 3, "NOT VERIFIED (backend failed)"),
])
def test_the_upgrade_outcome_names_the_next_command(tmp_path: Path, outputs: tuple[bool, ...], failure: str,
                                                    code: int, said: str) -> None:
    project = load_project(copy_project(tmp_path / "p"))
    plat = resolve_platform(project, None)
    drifts = tuple(upgrade.OutputDrift("embeddings", "cosine", ok, 0.0, 1.0, None, "cosine >= 0.99", "")
                   for ok in outputs)
    result = _result(project.root, upgrade.Drift(drifts, None, failure))
    text, exit_code = upgrade.outcome(result, plat, project.root)
    assert exit_code == code and f"upgrade {plat.id}: {said}; new lock lockfiles/new.txt" in text
    assert text.startswith(f"### Against the reference: {plat.id}\n")
    assert ("next: nox -s bisect -- --platform" in text) == (code == 1)
    assert ("next: read " in text) == (code == 3)


def test_the_pr_body_is_written_for_the_named_platforms(tmp_path: Path) -> None:
    platform_result(tmp_path, "cp311-linux_x86_64-cpu", holds=True)
    body = pullrequest.write_pr_body(tmp_path, "cp311-linux_x86_64-cpu, cp311-linux_x86_64-cu130")
    assert (tmp_path / "pr-body.md").read_text(encoding="utf-8") == body
    assert "| cp311-linux_x86_64-cu130 | — | **no result**" in body  # named, not found: said
    assert "cp311-linux_x86_64-cu130" not in pullrequest.write_pr_body(tmp_path, "")  # none named: the folders found


def test_drift_needs_declared_outputs_and_an_interpreter(tmp_path: Path) -> None:
    with pytest.raises(KernodeckError, match="no declared outputs") as none:
        drift_map.declared_outputs(None, [tmp_path])
    assert none.value.tip == "cd PROJECT && nox -s drift -- A B C"
    project = load_project(copy_project(tmp_path / "p"))
    assert "embeddings" in drift_map.declared_outputs(project, [])
    assert drift_map.interpreter(None, Path("/some/python")) == Path("/some/python")
    with pytest.raises(KernodeckError, match="no rebuilt env here"):
        drift_map.interpreter(None, None)


def test_what_reference_prints_names_the_identity_and_the_changes() -> None:
    made = new_reference.Created(new_id="sha256:b", old_id="sha256:a", unchanged=False, changes=("outputs: x", "data"))
    assert made.lines() == ["reference: sha256:a -> sha256:b", "  changed: outputs: x", "  changed: data"]
    assert new_reference.Created("sha256:b", None, False, ()).lines() == ["reference: new sha256:b"]
    kept = new_reference.Created("sha256:a", "sha256:a", True, ()).lines()
    assert kept == ["reference unchanged: sha256:a (same content; nothing written)"]
