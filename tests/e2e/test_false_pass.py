"""Issue 11, "wrong passed": each case shows the lie first, then what is reported instead."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest

from tests.helpers.builtenv import refingerprint
from tests.helpers.project import ROOT, kd

rel = pytest.mark.reliability


def _npy(path: Path, rows: list[list[float]]) -> None:
    """A float32 .npy written without numpy (the test session has none)."""
    header = f"{{'descr': '<f4', 'fortran_order': False, 'shape': ({len(rows)}, {len(rows[0])}), }}"
    header += " " * (63 - (len(header) + 10) % 64) + "\n"
    data = b"".join(struct.pack(f"<{len(r)}f", *r) for r in rows)
    path.write_bytes(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode("latin1") + data)


def _dossier(folder: Path, rows: list[list[float]]) -> None:
    (folder / "outputs").mkdir(parents=True)
    (folder / "report.json").write_text(json.dumps({"status": "passed", "platform": "p", "steps": []}))
    (folder / "inventory.txt").write_text("numpy==2.4.6\n")
    (folder / "system.json").write_text("{}")
    _npy(folder / "outputs" / "embeddings.npy", rows)
    (folder / "outputs" / "ids.json").write_text(json.dumps([f"s{i}" for i in range(len(rows))]))


@rel(
    28,
    "`nox -s compare` where one dossier has NaN rows (37 of 40)",
    "the non-finite rows counted and named; never `max abs difference 0; min cosine 1.0`",
)
@pytest.mark.parametrize("nan_rows", [37, 40])
def test_compare_reports_non_finite_rows(tmp_path: Path, nan_rows: int) -> None:
    nan = float("nan")
    good = [[1.0, 0.0, 0.5]] * 40
    bad = [[nan, nan, nan]] * nan_rows + good[nan_rows:]
    _dossier(tmp_path / "a", good)
    _dossier(tmp_path / "b", bad)
    proc = kd(ROOT, "compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "cmp"))
    assert proc.returncode == 0, proc.stderr
    out = json.loads((tmp_path / "cmp" / "compare.json").read_text())["outputs"]
    assert len(out["non_finite_items"]) == nan_rows and out["non_finite_items"]["s0"] == {"b": 3}
    assert out["finite_items"] == 40 - nan_rows
    text = (tmp_path / "cmp" / "compare.md").read_text()
    assert f"NON-FINITE values (NaN/Inf) in {nan_rows} of 40 items" in text
    if nan_rows == 40:
        assert out["min_cosine"] is None and out["max_abs"] is None and "undefined" in text
    else:
        assert "3 finite items; max abs difference 0;" in text
    assert "40 items; max abs difference 0" not in text


def test_compare_without_non_finite_rows_is_unchanged(tmp_path: Path) -> None:
    _dossier(tmp_path / "a", [[1.0, 0.0], [0.0, 1.0]])
    _dossier(tmp_path / "b", [[1.0, 0.0], [0.0, 0.5]])
    proc = kd(ROOT, "compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "cmp"))
    assert proc.returncode == 0, proc.stderr
    out = json.loads((tmp_path / "cmp" / "compare.json").read_text())["outputs"]
    assert out["non_finite_items"] == {} and out["max_abs"] == 0.5 and out["min_cosine"] == pytest.approx(1.0)
    assert "2 items; max abs difference 0.5" in (tmp_path / "cmp" / "compare.md").read_text()


# --- item 5: the declared tolerance is the contract, not the manifest's copy -----------------------------------------

TOL_LINE = "max-abs = 1e-4\n"


def _refused(project: Path, out: Path, *needles: str) -> None:
    proc = kd(project, "verify", "--out", str(out))
    assert proc.returncode != 0 and "ERROR:" in proc.stderr
    assert "TIP: " in proc.stderr and "nox -s reference -- --new" in proc.stderr
    for needle in needles:
        assert needle in proc.stderr, proc.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    steps = {s["name"]: s for s in report["steps"]}
    assert report["status"] == "failed" and report["first_failure"] == "reference-manifest"
    assert steps["reference-manifest"]["layer"] == "reference"
    assert steps["rebuild"]["status"] == "not-run" and steps["compare"]["status"] == "not-run"


def test_contract_table_differences_are_generic() -> None:
    from kernodeck.runformat.manifest import table_differences

    declared = {"cosine-min": 0.9999, "max-abs": 1e-4}
    same = {"cosine_min": 0.9999, "max_abs": 0.0001, "justification": "why"}
    assert table_differences(declared, same, frozenset({"justification"})) == []
    loose = {"cosine_min": 0.0, "max_abs": 10.0, "justification": "why"}
    assert table_differences(declared, loose, frozenset({"justification"})) == [
        "cosine_min: 0.0 -> declared 0.9999",
        "max_abs: 10.0 -> declared 0.0001",
    ]
    assert table_differences(declared, {"cosine_min": 0.9999}, frozenset()) == [
        "max_abs: '(missing)' -> declared 0.0001"
    ]
    assert table_differences({"kind": "a"}, {"kind": "a", "extra": 1}, frozenset()) == [
        "extra: 1 -> declared '(not declared)'"
    ]


@rel(
    25,
    "the reference manifest's tolerance loosened (cosine-min 0.0, max-abs 10.0), its id recomputed; or its criterion "
    "changed; or a declared tolerance loose enough to flip a neighbour copied into it",
    "verify refuses the reference before rebuilding, naming the difference from pyproject's declaration "
    "(or the flip bound), with `TIP: nox -s reference -- --new`",
)
@pytest.mark.parametrize("edit", ["loosened-manifest", "criterion", "flip-bound"])
def test_verify_holds_the_declared_contract(tmp_path: Path, edit: str) -> None:
    from tests.helpers.project import copy_project

    project = copy_project(tmp_path / "project")
    if edit == "loosened-manifest":
        refingerprint(project, **{"outputs.embeddings": {"cosine-min": 0.0, "max-abs": 10.0}})
        _refused(project, tmp_path / "run", "cosine_min: 0.0 -> declared 0.9999", "max_abs: 10.0 -> declared 0.0001")
    elif edit == "criterion":
        refingerprint(project, application={"criterion": "checks/anything_goes.py:criterion"})
        _refused(project, tmp_path / "run", "criterion: 'checks/anything_goes.py:criterion' -> declared 'checks/app.py")
    else:
        # pyproject AND the manifest agree on a tolerance that could flip a nearest neighbour: still refused
        pyproject = project / "pyproject.toml"
        assert TOL_LINE in pyproject.read_text()
        pyproject.write_text(pyproject.read_text().replace(TOL_LINE, TOL_LINE.replace("1e-4", "1e-2")))
        refingerprint(project, **{"outputs.embeddings": {"max-abs": 1e-2}})
        _refused(project, tmp_path / "run", "could flip a nearest neighbour", "declared max-abs 0.01")


# --- item 4: a reused env is observed on every verify, by its own interpreter ----------------------------------------

PLATFORM = "cp311-linux_x86_64-cpu"


def _wheel(folder: Path, name: str, version: str) -> Path:
    """A minimal pure-Python wheel, made here (no index, no network)."""
    import base64
    import hashlib
    import zipfile

    files = {
        f"{name}/__init__.py": b"",
        f"{name}-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{name}-{version}.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = ""
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record += f"{path},sha256={digest},{len(data)}\n"
    record += f"{name}-{version}.dist-info/RECORD,,\n"
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, data in files.items():
            zf.writestr(path, data)
        zf.writestr(f"{name}-{version}.dist-info/RECORD", record)
    return wheel


def _own_env(tiny_referenced: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the session's referenced tiny project (tests/helpers/tinyapp.py: the verdict is Kernodeck's, the
    same for any application) and an env of its own to install into: the built env's files copied as they are
    (``cp -a``, what a rebuild would install again from the same lock, at a third of its cost). ``--python`` reads
    an env as it is; the copy's link to the shared env is removed, so nothing can reach that one."""
    import subprocess

    from tests.helpers.tinyapp import copy_referenced

    project = copy_referenced(tiny_referenced, tmp_path)
    shared = project / ".venv-rebuild"  # links to the session's built env (tests/helpers/builtenv.share_env)
    built = (shared / PLATFORM / "current").resolve()
    shutil.rmtree(shared)  # the links, not what they name
    env = tmp_path / "env"
    subprocess.run(["cp", "-a", str(built), str(env)], check=True)
    return project, env / "bin" / "python"


def _site(python: Path) -> Path:
    return next(python.parent.parent.glob("lib/python*/site-packages"))


def _tiny_env(tmp_path: Path, *names: str) -> tuple[Path, Path, dict[str, str]]:
    """A project whose lock pins pip and tiny wheels ``name==version`` (tests/helpers/tinylock.py), rebuilt offline:
    (project, its env's interpreter, the environment to run it in). The inventory's and the seal's checks are the
    same for any locked package; a real torch env costs two full rebuilds where these cases need none."""
    from tests.helpers.tinylock import locked_tiny_project, offline_env, pip_wheel, write_wheel

    links = tmp_path / "links"
    wheels = [pip_wheel(links), *(write_wheel(links, *name.split("==")) for name in names)]
    project, _ = locked_tiny_project(tmp_path / "own", wheels)
    env = offline_env(PIP_FIND_LINKS=str(links), UV_CACHE_DIR=str(tmp_path / "uv-cache"))
    proc = kd(project, "rebuild", env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return project, project / ".venv-rebuild" / PLATFORM / "current" / "bin" / "python", env


@pytest.mark.slow
@rel(
    23,
    "packages installed into the current env after it was built (`pip install` of an added and a changed package; "
    "an editable install), then `verify` and `verify -- --no-rebuild`",
    "the inventory step observes the env by its own interpreter and fails naming what was added or changed; "
    "the dossier's inventory.txt shows what is really there",
)
def test_changed_env_fails_at_inventory(tmp_path: Path) -> None:
    import subprocess

    project, python, env = _tiny_env(tmp_path, "mdurl==0.1.2", "kdtiny-alpha==1.0")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    six, mdurl = _wheel(wheels, "six", "1.0.0"), _wheel(wheels, "mdurl", "0.0.1")
    subprocess.run(
        [str(python), "-m", "pip", "install", "--no-index", "--no-deps", "--quiet", str(six), str(mdurl)], check=True
    )
    # an editable install, as `pip install -e` leaves it: a dist-info whose direct_url.json says editable
    info = _site(python) / "localapp-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: localapp\nVersion: 0.1\n")
    (info / "direct_url.json").write_text(json.dumps({"url": "file:///src/localapp", "dir_info": {"editable": True}}))
    (info / "RECORD").write_text("localapp-0.1.dist-info/METADATA,,\n")
    for args in ([], ["--no-rebuild"]):
        out = tmp_path / f"run{len(args)}"
        proc = kd(project, "verify", *args, "--out", str(out), env=env)
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert "TIP: nox -s rebuild -- --fresh" in proc.stderr
        report = json.loads((out / "report.json").read_text())
        steps = {s["name"]: s for s in report["steps"]}
        assert report["first_failure"] == "inventory" and steps["inventory"]["layer"] == "install"
        delta = steps["inventory"]["details"]["vs_lock"]
        assert delta["added"]["six"] == "@ " + six.as_uri()
        assert delta["added"]["localapp"] == "-e file:///src/localapp"
        assert delta["changed"]["mdurl"]["observed"] == "@ " + mdurl.as_uri()
        error = steps["inventory"]["error"]
        assert "+six @ file://" in error and "mdurl 0.1.2 -> @ file://" in error
        assert steps["settings"]["status"] == "not-run"
        text = (out / "inventory.txt").read_text()
        assert f"six @ {six.as_uri()}" in text and "-e file:///src/localapp" in text and "mdurl==0.1.2" not in text
    # `nox -s rebuild` does not call it up to date either
    proc = kd(project, "rebuild", env=env)
    assert proc.returncode == 2 and "was changed after it was built" in proc.stderr and "+six" in proc.stderr
    assert "TIP: nox -s rebuild -- --fresh" in proc.stderr


@pytest.mark.slow
@rel(
    24,
    "files of the current env damaged after it was built (`torch/__init__.py` deleted)",
    "detected before any check runs, as an install-layer failure naming the file, with "
    "`TIP: nox -s rebuild -- --fresh` (which repairs it); `rebuild` no longer reuses it as complete",
)
def test_damaged_env_is_an_install_failure(tmp_path: Path) -> None:
    """The env's locked package named torch is a tiny wheel here (_tiny_env): what is checked is the file that its
    RECORD lists and the env lacks now, not what torch does."""
    project, python, env = _tiny_env(tmp_path, "torch==2.9.1", "kdtiny-alpha==1.0")
    (_site(python) / "torch" / "__init__.py").unlink()
    for args in ([], ["--no-rebuild"]):
        out = tmp_path / f"run{len(args)}"
        proc = kd(project, "verify", *args, "--out", str(out), env=env)
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert "torch/__init__.py (missing)" in proc.stderr and "TIP: nox -s rebuild -- --fresh" in proc.stderr
        report = json.loads((out / "report.json").read_text())
        steps = {s["name"]: s for s in report["steps"]}
        assert report["first_failure"] == "inventory" and steps["inventory"]["layer"] == "install"
        assert steps["inventory"]["details"]["damaged"] == {"torch": ["torch/__init__.py (missing)"]}
        assert steps["settings"]["status"] == "not-run"
    proc = kd(project, "rebuild", env=env)
    assert proc.returncode == 2 and "torch/__init__.py (missing)" in proc.stderr
    assert kd(project, "rebuild", "--fresh", env=env).returncode == 0
    assert (_site(project / ".venv-rebuild" / PLATFORM / "current" / "bin" / "python") / "torch/__init__.py").exists()


# --- item 10: --python says what it did and did not establish -------------------------------------------------------


def test_verdict_model() -> None:
    from kernodeck.inenv.protocol import Status
    from kernodeck.verify.record import Step, Verdict
    from kernodeck.verify.report import Report
    from tests.helpers.reports import complete_steps

    steps = complete_steps()
    assert Report("p", steps).verdict is Verdict.PASSED
    steps = complete_steps()  # --python: the env is not the lock's, declared
    steps[1].details["vs_lock"] = {"added": {"six": "1.0.0"}, "removed": {}, "changed": {}}
    assert Report("p", steps).verdict is Verdict.FAILED  # undeclared, the same record fails
    unlocked = Report("p", steps, not_established=["that the environment is the lock's (+six==1.0.0)"])
    assert unlocked.verdict is Verdict.PASSED_UNLOCKED and unlocked.status is Status.PASSED
    assert unlocked.as_dict()["status"] == "passed-unlocked" and "+six==1.0.0" in unlocked.verdict_line()
    from kernodeck.verify.markdown import render_markdown

    text = render_markdown(unlocked)
    assert text.startswith("# Kernodeck verify: PASSED-UNLOCKED") and "NOT established" in text
    failed = Report("p", [Step("inventory", Status.FAILED)], not_established=["x"])
    assert failed.verdict is Verdict.FAILED and failed.as_dict()["status"] == "failed"


@pytest.mark.slow
@rel(
    27,
    "`verify -- --python PATH` on an env that is not the lock's (a package added), or with no lock at all",
    "the top-level status is `passed-unlocked` with a verdict naming what was not established (exit 0, documented); "
    "`--strict` fails on any difference from the lock, or on a missing lock",
)
def test_existing_interpreter_verdict_and_strict(tiny_referenced: Path, tmp_path: Path) -> None:
    import subprocess

    project, python = _own_env(tiny_referenced, tmp_path)
    six = _wheel(tmp_path, "six", "1.0.0")
    subprocess.run([str(python), "-m", "pip", "install", "--no-index", "--no-deps", "--quiet", str(six)], check=True)
    out = tmp_path / "run"
    proc = kd(project, "verify", "--python", str(python), "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    assert report["status"] == "passed-unlocked" and report["status"] != "passed"
    (missing,) = report["verdict"]["not_established"]
    assert "that the environment is the lock's" in missing and "+six @ file://" in missing
    assert "PASSED-UNLOCKED" in proc.stdout and "NOT established" in (out / "report.md").read_text()
    proc = kd(project, "verify", "--python", str(python), "--strict", "--out", str(tmp_path / "strict"))
    assert proc.returncode == 2 and "--strict" in proc.stderr and "+six @ file://" in proc.stderr
    assert json.loads((tmp_path / "strict" / "report.json").read_text())["first_failure"] == "inventory"
    (project / "lockfiles" / f"{PLATFORM}.txt").unlink()
    proc = kd(project, "verify", "--python", str(python), "--strict", "--out", str(tmp_path / "nolock"))
    assert proc.returncode == 2 and "TIP: nox -s lock" in proc.stderr
    assert json.loads((tmp_path / "nolock" / "report.json").read_text())["first_failure"] == "lock-check"


# --- negative control: `nox -s reference` refuses a tolerance loose enough to flip a neighbour -----------------------


@pytest.mark.slow
@rel(
    29,
    "a declared tolerance loose enough to flip a nearest neighbour (max-abs 1e-2), then `nox -s reference -- --new`",
    "the new reference is refused, naming the bound and the margin; the committed reference untouched",
)
def test_reference_refuses_a_tolerance_that_could_flip(built_project: Path, tmp_path: Path) -> None:
    from tests.helpers.builtenv import sibling

    project = sibling(built_project, tmp_path)
    manifest = (project / "dossier/reference/manifest.toml").read_bytes()
    pyproject = project / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace(TOL_LINE, TOL_LINE.replace("1e-4", "1e-2")))
    proc = kd(project, "reference", "--new", "--out", str(tmp_path / "ref"))
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "declared max-abs 0.01 of embeddings allows cosine changes up to 0.392" in proc.stderr
    assert "could flip a" in proc.stderr and "TIP: lower max-abs" in proc.stderr
    assert (project / "dossier/reference/manifest.toml").read_bytes() == manifest
    assert not (project / "dossier/reference/history").exists()


# --- item 6: a lock edited by hand is caught ------------------------------------------------------------------------

CPU_LOCK = f"lockfiles/{PLATFORM}.txt"
CPU_TWIN = f"lockfiles/pylock.{PLATFORM}.toml"


def _lock_refused(project: Path, tmp_path: Path, *needles: str) -> None:
    check = kd(project, "lock", "--check")
    assert check.returncode == 2, check.stdout + check.stderr
    proc = kd(project, "verify", "--out", str(tmp_path / "run"))
    assert proc.returncode == 2 and "nox -s lock" in proc.stderr.split("TIP: ", 1)[-1], proc.stderr[-2000:]
    for needle in needles:
        assert needle in check.stdout + check.stderr and needle in proc.stderr, (needle, check.stdout, proc.stderr)
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    steps = {s["name"]: s for s in report["steps"]}
    assert report["first_failure"] == "lock-check" and steps["lock-check"]["layer"] == "lock"
    assert steps["rebuild"]["status"] == "not-run"


@rel(
    26,
    "a lock edited by hand: `numpy==2.4.6` -> `2.0.0` (old hashes kept), the same edit with its digest recomputed, "
    "or the PEP 751 twin's version edited",
    "`lock --check` and verify's lock-check fail before anything is built: the body no longer matches the header's "
    "body-digest, or the .txt and its twin disagree (named)",
)
@pytest.mark.parametrize("edit", ["body", "resealed-body", "twin"])
def test_hand_edited_lock_is_refused(tmp_path: Path, edit: str) -> None:
    from kernodeck.lock import lockfile
    from tests.helpers.project import copy_project

    project = copy_project(tmp_path / "project")
    lock, twin = project / CPU_LOCK, project / CPU_TWIN
    assert kd(project, "lock", "--check").returncode == 0
    if edit == "twin":
        text = twin.read_text()
        assert text.count('name = "numpy"\nversion = "2.4.6"') == 1
        twin.write_text(text.replace('name = "numpy"\nversion = "2.4.6"', 'name = "numpy"\nversion = "2.0.0"'))
        # packaging.pylock refuses the twin itself: its numpy wheels' file names say 2.4.6, its version 2.0.0
        _lock_refused(project, tmp_path, f"pylock.{PLATFORM}.toml: is not a valid PEP 751 lock",
                      "is not consistent with package version '2.0.0'")
        return
    text = lock.read_text().replace("\nnumpy==2.4.6 \\", "\nnumpy==2.0.0 \\")
    assert text != lock.read_text()
    if edit == "body":
        lock.write_text(text)
        _lock_refused(project, tmp_path,
                      "the pins (or the file names it records) no longer match the header's body-digest")
    else:  # whoever recomputes the digest still meets the twin, which was written for the lock as it was
        lock.write_text(lockfile.seal(text))
        _lock_refused(project, tmp_path, f"numpy: 2.0.0 in {PLATFORM}.txt, 2.4.6 in pylock.{PLATFORM}.toml",
                      f"pylock.{PLATFORM}.toml was not written for this {PLATFORM}.txt")


def test_lock_body_digest_round_trip(tmp_path: Path) -> None:
    from kernodeck.errors import LockfileError
    from kernodeck.lock import lockfile

    committed = (ROOT / CPU_LOCK).read_text()
    assert lockfile.seal(committed) == committed  # the committed lock is sealed, and sealing is idempotent
    header, body = lockfile.split(committed)
    assert header[-2].startswith("# body-digest: sha256:") and header[-1] == "#" and body.startswith("annotated-doc")
    path = tmp_path / f"{PLATFORM}.txt"
    path.write_text(committed.replace("# body-digest: ", "# body-digest-was: "))
    with pytest.raises(LockfileError, match="records no body-digest"):
        lockfile.read(path)
    path.write_text(committed + "six==1.17.0 \\\n    --hash=sha256:" + "a" * 64 + "\n")
    with pytest.raises(LockfileError, match="header declares 47 packages but 48"):
        lockfile.read(path)  # the package count is checked first; a count fixed by hand meets the digest
    path.write_text(committed.replace("# packages: 47", "# packages: 48") + "six==1.17.0 \\\n    --hash=sha256:" +
                    "a" * 64 + "\n")
    with pytest.raises(LockfileError, match="no longer match the header's body-digest"):
        lockfile.read(path)


def test_pylock_places_files_by_name_and_version_not_hash_alone(tmp_path: Path) -> None:
    """A hand edit numpy==2.4.6 -> 2.0.0 with the old hashes never yields version 2.0.0 beside numpy-2.4.6 files."""
    from kernodeck.errors import LockFailed
    from kernodeck.lock import lockfile, pylock
    from kernodeck.lock import twin as lock_twin
    from kernodeck.project.config import load_project
    from kernodeck.project.platforms import parse_platform_id

    plat = parse_platform_id(load_project(ROOT), PLATFORM)
    known = lock_twin.known_files(ROOT / CPU_TWIN)
    text = (ROOT / CPU_LOCK).read_text()
    assert pylock.build(text, ROOT / CPU_LOCK, plat, [], no_index=True, known=known) == (
        text, (ROOT / CPU_TWIN).read_text())  # no file at a URL naming none: the lock records no name
    edited = lockfile.seal(text.replace("\nnumpy==2.4.6 \\", "\nnumpy==2.0.0 \\"))
    with pytest.raises(LockFailed, match=r"numpy==2.0.0: its hash sha256:\w+… is the file numpy-2\.4\.6-"):
        pylock.build(edited, ROOT / CPU_LOCK, plat, [], no_index=True, known=known)
