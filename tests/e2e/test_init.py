"""`kernodeck init` and the nox session API (kernodeck/noxsessions.py): what a user's project starts from.

Fast tests run init as a user does (``python -m kernodeck init`` in a temp folder) and load the scaffolded noxfile with
a real ``nox -l``; the slow one (tests/e2e/test_quickstart_e2e.py)
takes an empty git repository from init to a passing verify.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

from kernodeck import noxsessions
from kernodeck.project import init
from tests.helpers.project import ROOT

EXISTING = """\
# My project: this comment stays
[project]
name = "myproj"  # the name stays, with its comment
version = "1.0"
dependencies = ["torch"]

[tool.ruff]
line-length = 100  # ruff's comment

[dependency-groups]
dev = ["pytest"]  # dev's comment

# the comment above [tool.black] stays above it
[tool.black]
line-length = 88
"""


def _comments(text: str) -> list[str]:
    return [line.split("#", 1)[1].strip() for line in text.splitlines() if "#" in line]


def _init(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``kernodeck init`` as a user runs it in their project: Kernodeck from this checkout, not from the project."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "kernodeck", "init", *args], cwd=root, env=env, text=True,
                          capture_output=True, timeout=120, check=False)


def test_init_merges_into_an_existing_pyproject_keeping_comments(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(EXISTING, encoding="utf-8")
    (tmp_path / "pyproject.toml").chmod(0o644)
    proc = _init(tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "merged into pyproject.toml" in " ".join(proc.stdout.split())
    text = (tmp_path / "pyproject.toml").read_text(encoding="utf-8")
    for comment in _comments(EXISTING):
        assert comment in _comments(text), comment
    before, after = tomllib.loads(EXISTING), tomllib.loads(text)
    assert after["project"] == before["project"]
    assert after["tool"]["ruff"] == before["tool"]["ruff"] and after["tool"]["black"] == before["tool"]["black"]
    assert after["dependency-groups"]["dev"] == ["pytest"]
    assert set(after["dependency-groups"]) == {"dev", *noxsessions.GROUPS.values()}
    assert after["tool"]["kernodeck"]["application"]["entry"] == "checks/app.py:run"
    # the comment that led to [tool.black] still leads to it, not to the groups added before it
    assert text.index("# the comment above [tool.black]") < text.index("[tool.black]")
    assert text.index("kernodeck-wheelhouse") < text.index("# the comment above [tool.black]")
    # and its mode is the one it had, not a temporary file's private 0600
    assert (tmp_path / "pyproject.toml").stat().st_mode & 0o777 == 0o644


def test_a_plain_rewrite_would_lose_the_comments() -> None:
    """Negative control for the merge test above: dumping the parsed data (what a naive merge does) drops them."""
    data = tomllib.loads(EXISTING)
    lines = [f"{k} = {v!r}" for k, v in data["project"].items()]
    assert not set(_comments(EXISTING)) <= set(_comments("\n".join(lines)))
    merged, replaced = init.merge_pyproject(EXISTING, init.render(init.template("pyproject.toml.tmpl"), init._values()),
                                            force=False)
    assert replaced == [] and set(_comments(EXISTING)) <= set(_comments(merged))


def test_init_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    app = tmp_path / "checks" / "app.py"
    app.parent.mkdir()
    app.write_text("# my own application\n", encoding="utf-8")
    proc = _init(tmp_path)
    assert proc.returncode == 2
    err = proc.stderr.splitlines()
    assert err[0].startswith("ERROR: kernodeck init would overwrite checks/app.py; nothing was written"), proc.stderr
    assert err[1].startswith("TIP: kernodeck init --force")
    assert app.read_text(encoding="utf-8") == "# my own application\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checks"]  # nothing else written either
    forced = _init(tmp_path, "--force")
    assert forced.returncode == 0, forced.stderr
    assert "overwrote    checks/app.py" in forced.stdout
    assert app.read_text(encoding="utf-8") == init.template("checks/app.py.tmpl")


def test_init_refuses_to_replace_an_existing_declaration(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.kernodeck]\nlockfiles = "mine"\n', encoding="utf-8")
    proc = _init(tmp_path)
    assert proc.returncode == 2 and "pyproject.toml [tool.kernodeck]" in proc.stderr and "--force" in proc.stderr
    assert (tmp_path / "pyproject.toml").read_text(encoding="utf-8") == '[tool.kernodeck]\nlockfiles = "mine"\n'
    again = _init(tmp_path, "--force")
    assert again.returncode == 0, again.stderr
    assert tomllib.loads((tmp_path / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["kernodeck"]["lockfiles"] \
        == "lockfiles"


def test_init_twice_changes_nothing(tmp_path: Path) -> None:
    assert _init(tmp_path).returncode == 0
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    proc = _init(tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "created" not in proc.stdout and "overwrote" not in proc.stdout
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_init_adds_only_missing_gitignore_lines(tmp_path: Path) -> None:
    (tmp_path / ".gitignore").write_text("*.log\n/runs/\n", encoding="utf-8")
    assert _init(tmp_path).returncode == 0
    lines = (tmp_path / ".gitignore").read_text(encoding="utf-8").splitlines()
    assert lines[:2] == ["*.log", "/runs/"] and lines.count("/runs/") == 1
    assert {"/.venv-rebuild/", "/.nox/"} <= set(lines)


def test_scaffolded_gitignore_ignores_kernodecks_transient_folders(tmp_path: Path) -> None:
    """A killed run's staging/parked folders (kernodeck/outdir.py) and README's fallback bootstrap venv are ignored by
    git; the project's own files beside them are not (checked by git itself, not by reading the patterns)."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    assert _init(tmp_path).returncode == 0
    transient = [".nox-bootstrap/bin/python", "runs/.pass.staging-4242/report.json", "runs/.pass.old-4242/report.json",
                 "dossier/.reference.staging-17/manifest.toml", "dossier/.reference.old-17/manifest.toml"]
    kept = ["dossier/reference/manifest.toml", "checks/app.py", "notes.staging-1/x.txt", "nox-bootstrap/x.txt"]
    for name in transient + kept:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x", encoding="utf-8")
    proc = subprocess.run(["git", "check-ignore", "--no-index", "--verbose", "--non-matching", *transient, *kept],
                          cwd=tmp_path, text=True, capture_output=True, check=False)
    ignored = {line.split("\t")[1]: bool(line.split("\t")[0].split(":")[-1]) for line in proc.stdout.splitlines()}
    assert ignored == {**dict.fromkeys(transient, True), **dict.fromkeys(kept, False)}, proc.stdout


def test_template_tool_pins_are_this_repositorys() -> None:
    """The groups init writes pin the same tools as Kernodeck's own (a lock records its resolver's version)."""
    import nox.project

    ours = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    theirs = tomllib.loads(init.render(init.template("pyproject.toml.tmpl"), init._values()))
    for kind, group in noxsessions.GROUPS.items():
        assert sorted(nox.project.dependency_groups(theirs, group)) == sorted(nox.project.dependency_groups(ours, kind))


def test_kernodeck_source_order(tmp_path: Path) -> None:
    assert noxsessions.kernodeck_source("kernodeck==0.1.0", {}) == "kernodeck==0.1.0"
    assert noxsessions.kernodeck_source(None, {}) is None
    assert noxsessions.kernodeck_source("kernodeck==0.1.0", {"KERNODECK_SOURCE": "kernodeck==9"}) == "kernodeck==9"
    assert noxsessions.kernodeck_source("kernodeck==0.1.0", {"KERNODECK_SOURCE": str(tmp_path)}) == str(tmp_path)
    # a folder is rebuilt each time (a reused session venv must not keep old code); a requirement installs as it is
    assert noxsessions.install_args(str(tmp_path), "uv") == ["--no-deps", "--reinstall-package", "kernodeck",
                                                             str(tmp_path)]
    assert noxsessions.install_args(str(tmp_path), "virtualenv")[:2] == ["--no-deps", "--force-reinstall"]
    assert noxsessions.install_args("kernodeck==9", "uv") == ["kernodeck==9"]


def _nox(cwd: Path, *args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, **env, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])}
    return subprocess.run([sys.executable, "-m", "nox", *args], cwd=cwd, env=full, text=True, capture_output=True,
                          timeout=timeout, check=False)


def test_scaffolded_noxfile_loads_kernodeck_from_its_source(tmp_path: Path) -> None:
    assert _init(tmp_path).returncode == 0
    listed = _nox(tmp_path, "-l", env={"KERNODECK_SOURCE": str(ROOT)})
    assert listed.returncode == 0, listed.stderr
    for spec in noxsessions.SESSIONS:
        assert f" {spec.name} -> " in listed.stdout
    # Negative: neither beside nox nor at $KERNODECK_SOURCE: one ERROR line and a TIP, not a traceback
    missing = _nox(tmp_path, "-l", env={"KERNODECK_SOURCE": str(tmp_path / "nowhere")})
    assert missing.returncode != 0
    assert "ERROR: Kernodeck is not installed beside nox" in missing.stderr and "TIP:" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_root_noxfile_uses_the_api() -> None:
    listed = _nox(ROOT, "-l", env={})
    assert listed.returncode == 0, listed.stderr
    for spec in noxsessions.SESSIONS:
        assert f" {spec.name} -> {spec.doc}" in listed.stdout
    assert " tests -> " in listed.stdout and " lint -> " in listed.stdout



def test_scaffolded_workflow_is_schema_valid_and_zizmor_clean(tmp_path: Path) -> None:
    """The CI workflow init writes passes the checks this repository's own workflows pass (their negative controls:
    tests/e2e/test_workflows.py)."""
    from tests.helpers.workflows import SHA_PIN, schema_check, zizmor

    assert _init(tmp_path).returncode == 0
    path = tmp_path / ".github" / "workflows" / "kernodeck.yml"
    for check in (schema_check, zizmor):
        proc = check(path)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    text = path.read_text(encoding="utf-8")
    assert "@@" not in text and "nox -s verify" in text and "nox -s lock -- --check" in text
    uses = [line for line in text.splitlines() if "uses:" in line]
    assert uses and all(SHA_PIN.match(line) for line in uses)
