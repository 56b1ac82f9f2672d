"""Issue 25, day one in a user's repository: the quick start as written, reused session venvs, the user's own line
in a failure, every declared output compared, exit codes through nox, no leftovers in the project.

Fast tests here; the real quick start (README's block run literally) and the regression example's compare are the
slow tests at the end.
"""

from __future__ import annotations

import json
from importlib import metadata
from pathlib import Path
from typing import Any

import nox
import nox._options
import pytest

from kernodeck import noxsessions
from kernodeck.project import init
from tests.helpers.project import ROOT as ROOT_DIR


def _dist(tmp_path: Path, direct_url: dict[str, object] | None) -> metadata.Distribution:
    info = tmp_path / "site" / "kernodeck-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: kernodeck\nVersion: 0.1.0\n", encoding="utf-8")
    if direct_url is not None:
        (info / "direct_url.json").write_text(json.dumps(direct_url), encoding="utf-8")
    return metadata.PathDistribution(info)


@pytest.mark.parametrize(
    ("direct_url", "expected"),
    [
        ({"url": "file:///home/me/kernodeck", "dir_info": {}}, "/home/me/kernodeck"),
        ({"url": "file:///home/me/kernodeck", "dir_info": {"editable": True}}, "/home/me/kernodeck"),
        ({"url": "file:///tmp/w/kernodeck-0.1.0-py3-none-any.whl", "archive_info": {}},
         "/tmp/w/kernodeck-0.1.0-py3-none-any.whl"),
        ({"url": "https://example.org/kernodeck.git", "vcs_info": {"vcs": "git", "commit_id": "abc123"}},
         "kernodeck @ git+https://example.org/kernodeck.git@abc123"),
        ({"url": "https://example.org/kernodeck-0.1.0.tar.gz", "archive_info": {}},
         "kernodeck @ https://example.org/kernodeck-0.1.0.tar.gz"),
        (None, "kernodeck==0.1.0"),  # from an index: no direct_url.json, the same version from the index
    ],
)
def test_installed_source_reads_pep610_direct_url(tmp_path: Path, direct_url: dict[str, object] | None,
                                                  expected: str) -> None:
    assert noxsessions.installed_source(_dist(tmp_path, direct_url)) == expected


def test_sessions_install_the_kernodeck_beside_nox_unless_overridden(tmp_path: Path) -> None:
    beside = lambda: "/opt/kernodeck-checkout"  # noqa: E731
    # the quick start: no variable, Kernodeck installed beside nox from a folder -> that folder, not the bare pin
    assert noxsessions.kernodeck_source("kernodeck==0.1.0", {}, beside) == "/opt/kernodeck-checkout"
    assert noxsessions.kernodeck_source("kernodeck==0.1.0", {}, lambda: None) == "kernodeck==0.1.0"
    assert noxsessions.kernodeck_source(None, {}, beside) is None  # Kernodeck's own checkout installs nothing
    override = {"KERNODECK_SOURCE": str(tmp_path)}
    assert noxsessions.kernodeck_source("kernodeck==0.1.0", override, beside) == str(tmp_path)


def test_init_says_which_kernodeck_the_sessions_install_and_what_comes_next(tmp_path: Path) -> None:
    lines = init.summary([], {"KERNODECK_SOURCE": str(tmp_path)})
    text = "\n".join(lines)
    assert f"install Kernodeck from {tmp_path.resolve()} ($KERNODECK_SOURCE)" in text
    # the template passes as it is: the sessions come first; edits then need a NEW reference
    assert text.index(init.NEXT) < text.index("then edit") < text.index("reference -- --new")


class _Venv:
    def __init__(self, location: Path | None) -> None:
        self.location = str(location) if location else None


class _Session:
    venv_backend = "virtualenv"

    def __init__(self, location: Path | None) -> None:
        self.virtualenv = _Venv(location)
        self.installed: list[tuple[str, ...]] = []
        self.logged: list[str] = []

    def install(self, *args: str) -> None:
        self.installed.append(args)
        if self.virtualenv.location:  # as pip would: the dist-info appears
            site = Path(self.virtualenv.location) / "lib" / "python3.11" / "site-packages"
            (site / "kernodeck-0.1.0.dist-info").mkdir(parents=True, exist_ok=True)

    def log(self, message: str) -> None:
        self.logged.append(message)


def test_reused_session_venv_reinstalls_kernodeck_only_when_its_source_changed(tmp_path: Path) -> None:
    source = tmp_path / "checkout"
    (source / "kernodeck").mkdir(parents=True)
    (source / "pyproject.toml").write_text("[project]\nname = 'kernodeck'\n", encoding="utf-8")
    module = source / "kernodeck" / "x.py"
    module.write_text("A = 1\n", encoding="utf-8")
    venv = tmp_path / "venv"
    venv.mkdir()
    session = _Session(venv)
    assert noxsessions.install_kernodeck(session, str(source))
    assert session.installed == [("--no-deps", "--force-reinstall", str(source))]
    assert not noxsessions.install_kernodeck(session, str(source))
    assert len(session.installed) == 1 and "not reinstalling" in session.logged[-1]
    module.write_text("A = 2  # edited\n", encoding="utf-8")  # yesterday's code must not stay
    assert noxsessions.install_kernodeck(session, str(source))
    (source / "kernodeck" / "new.py").write_text("", encoding="utf-8")
    assert noxsessions.install_kernodeck(session, str(source))
    assert not noxsessions.install_kernodeck(session, str(source))
    # another source (a requirement) is another install; a venv without the distribution always installs
    assert noxsessions.install_kernodeck(session, "kernodeck==0.1.0")
    for info in venv.glob("lib/*/site-packages/kernodeck-*.dist-info"):
        info.rmdir()
    assert noxsessions.install_kernodeck(session, "kernodeck==0.1.0")


def test_register_reuses_venvs_under_current_nox_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    """nox's defaults are "no"/"virtualenv", not None: register() must still choose reuse and uv."""
    fresh = nox._options.NoxfileOptions()
    assert fresh.reuse_venv == "no" and fresh.default_venv_backend == "virtualenv"
    monkeypatch.setattr(nox, "options", fresh)
    noxsessions.register(pin="kernodeck==0.1.0", only=())
    assert (fresh.reuse_venv, fresh.default_venv_backend) == ("yes", "uv|virtualenv")
    # a noxfile's own choice stays
    mine = nox._options.NoxfileOptions()
    mine.reuse_venv = "never"
    mine.default_venv_backend = "venv"
    monkeypatch.setattr(nox, "options", mine)
    noxsessions.register(pin="kernodeck==0.1.0", only=())
    assert (mine.reuse_venv, mine.default_venv_backend) == ("never", "venv")


# --- the user's own errors keep their place (item 4) ------------------------------------------------------------------

USER_APP = '''def _epochs(params):
    return params["epoch"]


def run(app):
    total = _epochs(app.params)
    return total
'''


def test_an_exception_in_the_users_code_names_the_users_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kernodeck.inenv import _common, application

    app_file = tmp_path / "checks" / "app.py"
    app_file.parent.mkdir()
    app_file.write_text(USER_APP, encoding="utf-8")
    module = _common.load_file(app_file, "kernodeck_test_user_app")
    # this test stands for Kernodeck's in-env caller: its frame is trimmed as _call_entry's would be
    monkeypatch.setattr(_common, "HERE", Path(__file__).resolve().parent)
    with pytest.raises(KeyError) as caught:
        module.run(type("App", (), {"params": {}})())
    failure = application._raised("the entry", caught.value, tmp_path)
    assert str(failure) == "the entry raised KeyError: 'epoch' at checks/app.py:2 in _epochs"
    assert failure.layer == "application" and failure.details["raised_at"] == "checks/app.py:2 in _epochs"
    trace = failure.details["traceback"].splitlines()
    assert trace == ["  checks/app.py:6 in run", "    total = _epochs(app.params)",
                     "  checks/app.py:2 in _epochs", '    return params["epoch"]', "KeyError: 'epoch'"]


def test_an_exception_in_the_users_criterion_names_the_users_line(tmp_path: Path) -> None:
    """The criterion is called through _judge (also for the able-to-fail controls): its exception keeps the frame."""
    from kernodeck.inenv import _common, application

    app_file = tmp_path / "checks" / "app.py"
    app_file.parent.mkdir()
    app_file.write_text("def criterion(outputs, ids, records, params):\n    return outputs[\"missing\"]\n",
                        encoding="utf-8")
    module = _common.load_file(app_file, "kernodeck_test_user_criterion")
    with pytest.raises(_common.CheckFailed) as caught:
        application._judge(module.criterion, {}, [{"id": "a"}], {}, tmp_path)
    assert str(caught.value) == "the criterion raised KeyError: 'missing' at checks/app.py:2 in criterion"
    assert caught.value.details["raised_at"] == "checks/app.py:2 in criterion"


def test_an_exception_outside_the_project_has_no_user_line(tmp_path: Path) -> None:
    from kernodeck.inenv import _common

    try:
        json.loads("{")
    except ValueError as exc:
        where = _common.user_traceback(exc, tmp_path)
    assert "raised_at" not in where and "JSONDecodeError" in where["traceback"]


# --- leftovers (item 7) -----------------------------------------------------------------------------------------------


def test_the_in_env_runner_writes_no_bytecode_into_the_project(tmp_path: Path) -> None:
    import subprocess
    import sys

    from tests.helpers.project import ROOT

    user = tmp_path / "checks" / "app.py"
    user.parent.mkdir()
    user.write_text("def run(app):\n    return 1\n", encoding="utf-8")
    code = ("import runpy, sys; from pathlib import Path; runpy.run_path(sys.argv[1]);"
            " from kernodeck_inenv._common import load_file; load_file(Path(sys.argv[2]), 'user_app')")
    runner = ROOT / "kernodeck" / "inenv" / "runner.py"
    subprocess.run([sys.executable, "-I", "-c", code, str(runner), str(user)], check=True, timeout=60)
    assert not (user.parent / "__pycache__").exists()
    # the control: the import machinery's own load by path (what load_file did before it compiled verified bytes)
    # leaves __pycache__/ in the project
    control = ("import importlib.util, sys; s = importlib.util.spec_from_file_location('user_app', sys.argv[1]);"
               " s.loader.exec_module(importlib.util.module_from_spec(s))")
    subprocess.run([sys.executable, "-I", "-c", control, str(user)], check=True, timeout=60)
    assert (user.parent / "__pycache__").is_dir()


def test_a_rerun_on_a_subset_must_write_one_row_per_given_record() -> None:
    import numpy as np

    from kernodeck.inenv import application
    from kernodeck.inenv._common import CheckFailed

    records = [{"id": f"r{i}"} for i in range(3)]
    good = {"x": (np.zeros((3, 2)), ["r0", "r1", "r2"])}
    assert application._rows_for(records, good) is good
    whole_sample = {"x": (np.zeros((5, 2)), ["r0", "r1", "r2", "r3", "r4"])}  # ignores app.records
    with pytest.raises(CheckFailed, match="given 3 records, the entry wrote 5 rows of x"):
        application._rows_for(records, whole_sample)
    other_ids = {"x": (np.zeros((3, 2)), ["r0", "r2", "r1"])}
    with pytest.raises(CheckFailed, match="not the ids given"):
        application._rows_for(records, other_ids)


def test_provenance_in_a_repository_without_commits_says_so(tmp_path: Path) -> None:
    import subprocess

    from kernodeck.runformat import recording

    assert recording.git_revision(tmp_path)["commit"] == "unavailable (not a git checkout)"
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    assert recording.git_revision(tmp_path) == {
        "commit": "none (a git repository without commits: nothing is committed yet)", "dirty": True}
    (tmp_path / "a.txt").write_text("a\n", encoding="utf-8")
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "add", "a.txt"], check=True)
    subprocess.run([*git, "commit", "-qm", "a"], check=True)
    found = recording.git_revision(tmp_path)
    assert len(found["commit"]) == 40 and found["dirty"] is False


# --- compare: every declared output under its kind (item 3) ----------------------------------------------------------

DECLARED = {
    "vectors": {"kind": "cosine", "dtype": "float32", "cosine-min": 0.999, "max-abs": 1e-3, "justification": "j"},
    "values": {"kind": "allclose", "dtype": "float32", "rtol": 1e-4, "atol": 1e-4, "justification": "j"},
    "labels": {"kind": "exact", "dtype": "int64", "justification": "j"},
    "votes": {"kind": "agreement", "dtype": "int64", "min-share": 0.5, "justification": "j"},
}


def _declared_dossier(folder: Path, outputs: dict[str, object], shift: float = 0.0) -> Path:
    import numpy as np

    out = folder / "outputs"
    out.mkdir(parents=True)
    (folder / "report.json").write_text(json.dumps({"status": "passed", "platform": "p", "steps": []}))
    (folder / "run-config.json").write_text(json.dumps({"application": {"outputs": outputs}}))
    ids = ["r0", "r1", "r2", "r3"]
    arrays = {
        "vectors": np.arange(12, dtype=np.float32).reshape(4, 3) + 1,
        "values": np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32) + np.float32(shift),
        "labels": np.array([0, 1, 2, 3], dtype=np.int64),
        "votes": np.array([1, 1, 0, 0], dtype=np.int64),
    }
    for name in outputs:
        np.save(out / f"{name}.npy", arrays[name])
        (out / f"{name}.ids.json").write_text(json.dumps(ids))
    return folder


def _compare(tmp_path: Path, a: Path, b: Path, *extra: str) -> tuple[dict[str, Any], str]:
    """``kernodeck compare`` run from ``tmp_path`` (no project there), Kernodeck from this checkout."""
    import os
    import subprocess
    import sys

    from tests.helpers.project import ROOT

    out = tmp_path / "cmp"
    proc = subprocess.run([sys.executable, "-m", "kernodeck", "compare", str(a), str(b), "--out", str(out), *extra],
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, text=True, capture_output=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads((out / "compare.json").read_text())["outputs"], (out / "compare.md").read_text()


def test_compare_judges_every_declared_output_under_its_kind(tmp_path: Path) -> None:
    import sys

    a = _declared_dossier(tmp_path / "a", DECLARED)
    b = _declared_dossier(tmp_path / "b", DECLARED)
    out, text = _compare(tmp_path, a, b, "--python", sys.executable)
    assert set(out["per_output"]) == set(DECLARED)
    for name, kind in (("vectors", "cosine"), ("values", "allclose"), ("labels", "exact"), ("votes", "agreement")):
        verdict = out["per_output"][name]
        assert verdict["compared"] and verdict["kind"] == kind and verdict["passed"], verdict
        assert f"- `{name}` ({kind}): within its declared tolerance" in text
    # beyond the declared allclose tolerance: said so, under the same code verify uses
    c = _declared_dossier(tmp_path / "c", DECLARED, shift=0.01)
    out, text = _compare(tmp_path, a, c, "--python", sys.executable)
    assert out["per_output"]["values"]["passed"] is False
    assert "- `values` (allclose): BEYOND its declared tolerance: 4 values in 4 rows exceed" in text


def test_compare_says_when_the_declared_outputs_differ(tmp_path: Path) -> None:
    import sys

    a = _declared_dossier(tmp_path / "a", {k: DECLARED[k] for k in ("values", "labels")})
    other = {"values": {**DECLARED["values"], "atol": 1e-2}, "votes": DECLARED["votes"]}
    b = _declared_dossier(tmp_path / "b", other)
    out, text = _compare(tmp_path, a, b, "--python", sys.executable)
    assert out["only_in_a"] == ["labels"] and out["only_in_b"] == ["votes"]
    assert out["declared_differently"] == ["values"] and set(out["per_output"]) == {"values"}
    assert "DIFFERENT DECLARED OUTPUTS: only in A: labels; only in B: votes (not compared)" in text
    assert "`values` is declared differently in A and B" in text


def test_compare_without_an_env_to_compare_in_says_so(tmp_path: Path) -> None:
    a = _declared_dossier(tmp_path / "a", DECLARED)
    b = _declared_dossier(tmp_path / "b", DECLARED)
    out, text = _compare(tmp_path, a, b)  # tmp_path is no project: no rebuilt env
    assert out["available"] is False and out["per_output"] == {}
    assert "not compared: no rebuilt env here to compare in" in text


# --- a lock refused for its body digest names what changed (item 6, second half) -------------------------------------


def test_a_lock_refused_for_its_digest_names_the_pins_that_changed_against_the_twin(tmp_path: Path) -> None:
    import re
    import shutil

    from kernodeck.errors import LockfileError
    from kernodeck.lock import lockfile
    from tests.helpers.project import ROOT

    source = ROOT / "examples" / "regression" / "lockfiles"
    lock = tmp_path / "cp311-linux_x86_64-cpu.txt"
    shutil.copy(source / lock.name, lock)
    lockfile.read(lock)  # the control: as committed, it is accepted
    committed = lock.read_text(encoding="utf-8")
    # a bad merge: one hash of numpy replaced, the digest left as it was
    first_hash = re.search(r"numpy==2\.4\.6 \\\n\s+--hash=sha256:([0-9a-f]{64})", committed)
    assert first_hash is not None
    lock.write_text(committed.replace(first_hash.group(1), "0" * 64), encoding="utf-8")
    with pytest.raises(LockfileError, match="no longer match the header's body-digest") as without_twin:
        lockfile.read(lock)
    assert "numpy" not in str(without_twin.value)  # no twin beside it: nothing to name the change against
    shutil.copy(source / f"pylock.{lock.stem}.toml", tmp_path)
    with pytest.raises(LockfileError) as refused:
        lockfile.read(lock)
    message = str(refused.value)
    assert f"Against pylock.{lock.stem}.toml: numpy 2.4.6: other hashes in {lock.name}" in message
    assert "scikit-learn" not in message and "torch" not in message  # only what changed


# --- exit codes through nox (item 7 of the issue) --------------------------------------------------------------------


def test_passed_through_codes() -> None:
    assert [noxsessions.passed_through(c) for c in (None, 0, 1, 2, 3, 130)] == [None, None, None, 2, 3, 130]


def test_nox_exits_2_where_kernodeck_says_error_and_tip(tmp_path: Path) -> None:
    """A real `nox -s verify` in an init-made project (the session run in place: no venv, nothing installed)."""
    import os
    import subprocess
    import sys

    from tests.helpers.project import ROOT

    env = {**os.environ, "PYTHONPATH": str(ROOT), "KERNODECK_SOURCE": str(ROOT),
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])}
    subprocess.run([sys.executable, "-m", "kernodeck", "init"], cwd=tmp_path, env=env, check=True,
                   capture_output=True, timeout=60)
    in_place = [sys.executable, "-m", "nox", "--force-venv-backend", "none", "--no-install"]
    proc = subprocess.run([*in_place, "-s", "verify", "--", "--out", str(tmp_path)], cwd=tmp_path, env=env,
                          text=True, capture_output=True, timeout=120, check=False)
    said = proc.stdout + proc.stderr
    assert "ERROR: --out" in said and "TIP: " in said
    assert proc.returncode == 2, proc.stderr[-2000:]  # nox alone would say 1
    listed = subprocess.run([*in_place, "-l"], cwd=tmp_path, env=env, text=True, capture_output=True, timeout=120,
                            check=False)
    assert listed.returncode == 0


def test_compare_takes_a_reference_folder_as_its_manifest_declares_it(tmp_path: Path) -> None:
    import shutil
    import sys

    source = ROOT_DIR / "examples" / "regression" / "dossier" / "reference"
    ref = tmp_path / "reference"
    shutil.copytree(source, ref)
    run = tmp_path / "run"
    outputs = {"predictions": {"kind": "allclose", "dtype": "float32", "rtol": 1e-4, "atol": 1e-4},
               "band": {"kind": "exact", "dtype": "int64"}}
    (run / "outputs").mkdir(parents=True)
    (run / "report.json").write_text(json.dumps({"status": "passed", "platform": "cp311-linux_x86_64-cpu",
                                                 "steps": []}))
    (run / "run-config.json").write_text(json.dumps({"application": {"outputs": outputs}}))
    for name in outputs:
        shutil.copy(source / f"{name}.npy", run / "outputs")
        shutil.copy(source / f"{name}.ids.json", run / "outputs")
    out, text = _compare(tmp_path, ref, run, "--python", sys.executable)
    assert set(out["per_output"]) == {"predictions", "band"} and out["declared_differently"] == []
    assert all(v["compared"] and v["passed"] and v["bitwise_equal"] for v in out["per_output"].values())
    assert "- status: reference vs passed" in text
