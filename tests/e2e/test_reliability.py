"""The reliability suite: each case shows the failure, then what was kept; docs/reliability.md's table comes from
these markers."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernodeck.lock import lockfile
from tests.helpers import tinyapp
from tests.helpers.builtenv import in_env, reseal, sibling
from tests.helpers.project import copy_project, kd
from tests.helpers.reports import read_report, statuses

PLATFORM = "cp311-linux_x86_64-cpu"
LOCK = f"lockfiles/{PLATFORM}.txt"
rel = pytest.mark.reliability


@pytest.fixture(scope="module")
def own_built(tiny_referenced: Path, module_tmp: Path) -> Path:
    """A project copy with its OWN rebuilt env, not the session's ``built_project`` (these cases break and kill
    rebuilds beside it), built once for the module: cases 1 and 2 share it. Each leaves it as it found it, which is
    what each asserts (the tampered lock is put back; the failed or killed build is gone, the good env still current
    and the only one); one that fails may leave the next with a broken env, and its own failure names why. It is a
    copy of the session's referenced tiny project (tests/helpers/tinyapp.py; its links to the shared env removed):
    what is tried is the rebuild, and the verify that follows it then runs without MiniLM's model load, against the
    tiny reference made once for the run (the same lock, the same env's packages)."""
    project = tinyapp.copy_referenced(tiny_referenced, module_tmp / "own")
    shutil.rmtree(project / ".venv-rebuild")  # the links to the session's env, not what they name
    proc = kd(project, "rebuild")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return project


def current(project: Path) -> str:
    return (project / ".venv-rebuild" / PLATFORM / "CURRENT").read_text().strip()


def envs(project: Path) -> list[str]:
    return sorted(p.name for p in (project / ".venv-rebuild" / PLATFORM).glob("env-*"))


@pytest.mark.slow
@rel(
    1,
    "a tampered hash in the lockfile, `rebuild --fresh`",
    "the previous venv, still current and used; no half-install",
)
@pytest.mark.parametrize("installer", ["uv", "pip"])
def test_tampered_hash_keeps_the_last_good_env(own_built: Path, tmp_path: Path, installer: str) -> None:
    project = own_built
    good = current(project)
    lock = project / LOCK
    text = lock.read_text()
    entry = re.search(r"^mdurl==.*?(?=^\S)", text, re.M | re.S)
    assert entry and "--hash=sha256:" in entry.group(0)
    # every file of mdurl gets a wrong hash (one right hash among several would still be accepted), each its own (two
    # files with one hash are no twin Kernodeck writes: the twin check would refuse that first)
    wrong = {h: f"{i:064x}" for i, h in enumerate(dict.fromkeys(re.findall(r"sha256:([0-9a-f]{64})", entry.group(0))))}
    tampered = re.sub(r"sha256:([0-9a-f]{64})", lambda m: "sha256:" + wrong[m.group(1)], entry.group(0))
    # resealed (its body digest recomputed) and its PEP 751 twin forged to match, so that the installer's own hash
    # check is what is tried here; an unsealed edit, or a twin that disagrees, is refused before any install
    # (tests/e2e/test_false_pass.py::test_hand_edited_lock_is_refused, tests/e2e/test_reference_binds.py case 55)
    forged = lockfile.seal(text.replace(entry.group(0), tampered))
    lock.write_text(forged)
    twin = project / "lockfiles" / f"pylock.{PLATFORM}.toml"
    twin_text = twin.read_text()
    block = re.search(r'^name = "mdurl"\n.*?(?=^\[\[packages\]\])', twin_text, re.M | re.S)
    assert block and 'sha256 = "' in block.group(0)
    forged_twin = twin_text.replace(block.group(0), re.sub(r'sha256 = "([0-9a-f]{64})"',
                                                           lambda m: f'sha256 = "{wrong[m.group(1)]}"', block.group(0)))
    twin.write_text(re.sub(r'requirements-lock-sha256 = "[0-9a-f]{64}"',
                           f'requirements-lock-sha256 = "{hashlib.sha256(forged.encode()).hexdigest()}"', forged_twin))
    checked = kd(project, "lock", "--check")
    assert checked.returncode == 0, checked.stderr  # the forgery passes every check of the lock itself
    proc = kd(project, "rebuild", "--fresh", "--installer", installer)
    lock.write_text(text)  # put back at once: the module's other cases share this project
    twin.write_text(twin_text)
    assert proc.returncode == 2
    assert "ERROR: install failed" in proc.stderr and "mdurl" in proc.stderr.lower()
    assert "TIP:" in proc.stderr
    assert current(project) == good and envs(project) == [good]
    if installer == "pip":  # the last good env intact, as the next rebuild's reuse check (its files, its packages)
        # finds it; that a later verify uses it is shown once, by the uv case (the same good env, the same check)
        again = kd(project, "rebuild")
        assert again.returncode == 0 and "reusing" in again.stderr, again.stderr[-2000:]
        assert current(project) == good
        return
    # and the last good env is what a later verify uses (the lock put back is still not stale: its inputs did not
    # change)
    verify = kd(project, "verify", "--out", str(tmp_path / "run"))
    assert verify.returncode == 0, verify.stderr[-2000:]
    assert statuses(read_report(tmp_path / "run"))["rebuild"] == "passed" and current(project) == good


@pytest.mark.slow
@rel(
    2,
    "a rebuild killed (SIGKILL) mid-install",
    "the last good venv, never replaced; the next run removes the incomplete folder",
)
def test_killed_rebuild_is_cleaned_and_never_replaces(own_built: Path) -> None:
    project = own_built
    good = current(project)
    env = dict(
        os.environ,
        PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
        PYTHONPATH=str(project),
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "kernodeck", "rebuild", "--fresh", "--installer", "pip"],
        cwd=project,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 300
    site = None
    while time.monotonic() < deadline:  # wait until the installer is writing into the new env
        new = [p for p in (project / ".venv-rebuild" / PLATFORM).glob("env-*") if p.name != good]
        site = next((s for n in new for s in n.glob("lib/python*/site-packages") if len(list(s.iterdir())) > 4), None)
        if site is not None:
            break
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert site is not None, "the install never started"
    assert current(project) == good and len(envs(project)) == 2  # the killed build is still there, incomplete
    again = kd(project, "rebuild")
    assert again.returncode == 0, again.stderr[-2000:]
    assert "removed incomplete build" in again.stderr and "reusing" in again.stderr
    assert envs(project) == [good] and current(project) == good


@rel(4, "no lockfile for the current platform", "nothing built; the error names the platform id and the lock command")
def test_missing_lockfile_names_platform_and_command(tmp_path: Path) -> None:
    project = copy_project(tmp_path / "p")
    (project / LOCK).unlink()
    proc = kd(project, "verify", "--out", str(tmp_path / "run"))
    assert proc.returncode == 2
    assert f"ERROR: no lockfile for platform {PLATFORM} (expected {LOCK})" in proc.stderr
    assert f"TIP: nox -s lock -- --platform {PLATFORM}" in proc.stderr
    assert statuses(read_report(tmp_path / "run"))["lock-check"] == "failed"
    assert not (project / ".venv-rebuild" / PLATFORM / "CURRENT").exists()


@rel(5, "a truncated or hand-broken lockfile", "nothing built; the error names the file and line")
@pytest.mark.parametrize(
    ("cut", "message"),
    [
        ("continuation", "ends inside a continued line"),
        ("nohash", "has no --hash"),
        ("garbage", "not a valid requirement"),
    ],
)
def test_broken_lockfile_named_with_line(tmp_path: Path, cut: str, message: str) -> None:
    project = copy_project(tmp_path / "p")
    lock = project / LOCK
    lines = lock.read_text().splitlines()
    if cut == "continuation":
        end = next(i for i, line in enumerate(lines) if line.rstrip().endswith("\\") and i > 40)
        lock.write_text("\n".join(lines[: end + 1]) + "\n")
    elif cut == "nohash":  # numpy keeps its pin but loses every --hash line
        at = next(i for i, line in enumerate(lines) if line.startswith("numpy=="))
        end = next(i for i in range(at + 1, len(lines)) if not lines[i].strip().startswith("--hash"))
        lock.write_text("\n".join([*lines[:at], lines[at].rstrip(" \\"), *lines[end:]]) + "\n")
    else:
        at = next(i for i, line in enumerate(lines) if line.startswith("numpy=="))
        lines[at] = "numpy=!=2.4.6 \\"
        lock.write_text("\n".join(lines) + "\n")
    proc = kd(project, "verify", "--out", str(tmp_path / "run"))
    assert proc.returncode == 2
    assert re.search(rf"ERROR: .*{re.escape(PLATFORM)}\.txt:\d+: .*{message}", proc.stderr), proc.stderr[-1500:]
    assert "TIP:" in proc.stderr


@rel(
    5, "a truncated or hand-broken reference manifest", "nothing built or compared; the error names the file (and line)"
)
@pytest.mark.parametrize("damage", ["truncate", "syntax"])
def test_broken_manifest_named(tmp_path: Path, damage: str) -> None:
    project = copy_project(tmp_path / "p")
    path = project / "dossier/reference/manifest.toml"
    text = path.read_text()
    path.write_text(text[: len(text) // 3] if damage == "truncate" else text.replace("[data]", "[data"))
    proc = kd(project, "verify", "--out", str(tmp_path / "run"))
    assert proc.returncode == 2
    assert "ERROR: dossier/reference/manifest.toml" in proc.stderr
    if damage == "syntax":
        assert re.search(r"manifest\.toml:\d+: not valid TOML", proc.stderr)
    st = statuses(read_report(tmp_path / "run"))
    assert st["reference-manifest"] == "failed" and st["rebuild"] == "not-run"


@pytest.mark.slow
@rel(
    6,
    "a reference with NaN/Inf, a wrong shape, another dtype, or ids that do not match the sample",
    "refused at the reference step, before any embedding or comparison, naming which",
)
@pytest.mark.parametrize(
    ("code", "message"),
    [
        ("a[2, 7] = np.inf", "non-finite"),
        ("a = a[:, :100]", "shape (40, 100)"),
        ("a = a.astype(np.float64)", "dtype float64"),
        (
            "import json; q='dossier/reference/embeddings.ids.json'; i=json.load(open(q)); i[0], i[1] = i[1], i[0]; "
            "json.dump(i, open(q, 'w'))",
            "ids do not match the sample",
        ),
    ],
)
def test_unsound_reference_refused_before_comparison(
    built_project: Path, tmp_path: Path, code: str, message: str
) -> None:
    project = sibling(built_project, tmp_path)
    in_env(project, f"import numpy as np; p='dossier/reference/embeddings.npy'; a=np.load(p); {code}; np.save(p, a)")
    reseal(project)
    proc = kd(project, "verify", "--out", str(tmp_path / "run"))
    assert proc.returncode == 1
    report = read_report(tmp_path / "run")
    step = next(s for s in report["steps"] if s["name"] == "reference")  # type: ignore[union-attr]
    assert report["first_failure"] == "reference" and step["layer"] == "reference" and message in step["error"]
    assert all(statuses(report)[n] == "not-run" for n in ("application", "reread", "compare"))


@pytest.mark.slow
@rel(
    10,
    "credentials in PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, UV_INDEX_URL and in a variant's source",
    "no file written by lock, rebuild, verify or the dossier holds them",
)
def test_credentials_in_every_source_never_written(tiny_referenced: Path, tmp_path: Path) -> None:
    # its own build, not a shared one: the rebuild must run its installer with the credentials set (a reused env
    # writes almost nothing), and every file under the project is searched afterwards. The project declares the tiny
    # application (a copy of the session's referenced tiny project, its links to the shared env removed): what the
    # dossier writes is Kernodeck's, the same for every application, where MiniLM's model would only add its load and
    # its runs to the verify
    project = tinyapp.copy_referenced(tiny_referenced, tmp_path / "p")
    shutil.rmtree(project / ".venv-rebuild")  # the links to the session's env, not what they name
    pyproject = project / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text().replace(
            'index = "https://download.pytorch.org/whl/cpu"',
            'index = "https://carol:s3cr3t-variant@127.0.0.1:9/whl/cpu"',
        )
    )
    secrets = ("s3cr3t-pip-index", "s3cr3t-pip-extra", "s3cr3t-uv", "s3cr3t-variant")
    env = dict(
        os.environ,
        PIP_RETRIES="0",
        PIP_TIMEOUT="2",
        PIP_INDEX_URL="https://alice:s3cr3t-pip-index@pypi.org/simple",
        PIP_EXTRA_INDEX_URL="https://bob:s3cr3t-pip-extra@127.0.0.1:9/simple",
        UV_INDEX_URL="https://dave:s3cr3t-uv@pypi.org/simple",
    )
    outputs = []
    for args in (["lock"], ["rebuild", "--installer", "pip"], ["verify", "--out", str(tmp_path / "run")]):
        proc = kd(project, *args, env=env)
        outputs.append(proc.stdout + proc.stderr)
        assert proc.returncode == 0, proc.stderr[-3000:]
    for text in outputs:
        assert not any(s in text for s in secrets)
    for path in [*project.rglob("*"), *(tmp_path / "run").rglob("*")]:
        if path == pyproject:  # the input the secret was put in, not a file Kernodeck wrote
            continue
        if path.is_file() and "site-packages" not in path.parts and path.suffix not in (".so", ".pyc"):
            data = path.read_bytes()
            assert not any(s.encode() in data for s in secrets), path


def _tmpfs_available() -> bool:
    return (
        shutil.which("unshare") is not None
        and subprocess.run(
            ["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"], capture_output=True, check=False
        ).returncode
        == 0
    )


@pytest.mark.slow
@rel(12, "a full disk, or a read-only output folder, at dossier time", "a clear error; the earlier dossier untouched")
@pytest.mark.parametrize("fault", ["full", "read-only"])
def test_dossier_on_full_or_readonly_disk(tiny_referenced: Path, tmp_path: Path, fault: str) -> None:
    # the dossier's writing is Kernodeck's, the same for every application: the tiny one's run (a copy of the
    # session's referenced tiny project, tests/helpers/tinyapp.py), where MiniLM's model would only add its load and
    # its runs before the write that fails
    if not _tmpfs_available():
        pytest.skip("needs a private mount namespace (unshare -m) to make a small or read-only filesystem")
    project = tinyapp.copy_referenced(tiny_referenced, tmp_path)
    mount = tmp_path / "mnt"
    mount.mkdir()
    # the earlier dossier: the passing run that made the tiny reference, only read here (copied into the mount, then
    # hashed)
    earlier = tinyapp.reference_run(tiny_referenced)
    assert read_report(earlier)["status"] == "passed"
    size = sum(p.stat().st_size for p in earlier.rglob("*") if p.is_file())
    # the earlier dossier fits; a second one does not (full), or the filesystem turns read-only before the run
    limit = size + size // 2 if fault == "full" else size * 3
    after = "true" if fault == "full" else f"mount -o remount,ro {mount}"
    script = (
        f"mount -t tmpfs -o size={limit} tmpfs {mount} && cp -a {earlier} {mount}/run && {after} && "
        f"{sys.executable} -m kernodeck verify --no-rebuild --out {mount}/run; echo rc=$?; "
        f"sha256sum {mount}/run/report.json {mount}/run/outputs/logits.npy; ls -a {mount}"
    )
    env = dict(
        os.environ,
        PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
        PYTHONPATH=str(project),
    )
    proc = subprocess.run(
        ["unshare", "-m", "sh", "-c", script],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert "rc=2" in proc.stdout, proc.stdout + proc.stderr[-2000:]
    assert re.search(r"ERROR: (writing the dossier .* failed|cannot write the output folder)", proc.stderr), (
        proc.stderr[-2000:]
    )
    assert "TIP:" in proc.stderr
    expected = subprocess.run(
        ["sha256sum", str(earlier / "report.json"), str(earlier / "outputs/logits.npy")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for line in expected.splitlines():
        assert line.split()[0] in proc.stdout  # the earlier dossier's files, byte for byte
    assert ".staging" not in proc.stdout  # nothing half-written left beside it
