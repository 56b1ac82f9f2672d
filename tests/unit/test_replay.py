"""replay (kernodeck/dossier/replay.py): its clean environment finds each declared source where the caller's own verify
finds it (red-team pass 44, REPLAY1), carries the deadlines' scale (REPLAY2), and a project in a folder of its
repository is cloned whole and verified in its own folder of the clone (REPLAY3). The sources are located by the
in-env code itself, in a fresh interpreter with the replay's environment; replay() runs for real up to its tools
(git clones, its commands' environment and folder), the venv, pip and the verify stood in for."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kernodeck._proc import run as run_for_real
from kernodeck.dossier import replay as replay_module
from kernodeck.dossier.replay import clean_environment, replay, source_places
from kernodeck.env import pythons
from kernodeck.errors import KernodeckError
from kernodeck.inenv.protocol import USER_HOME_ENV
from kernodeck.project import assets
from kernodeck.project.config import load_project
from kernodeck.project.deadlines import SCALE_ENV
from tests.helpers.hfcache import write_snapshot
from tests.helpers.project import ROOT

REPO, COMMIT = "kdtiny/replay-model", "d" * 40
WEIGHTS = b"\x00weights\x01" * 32
DATA = b"caller's data\n"
CACHES = ("HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME", "KERNODECK_CACHE", USER_HOME_ENV,
          "HF_HUB_OFFLINE", SCALE_ENV)


@pytest.fixture
def caller(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A caller with its own HOME, none of the caches' variables set, no PIP_*/UV_* (hermetic); its home."""
    home = tmp_path / "caller-home"
    home.mkdir()
    for name in [*CACHES, *(k for k in os.environ if k.startswith(("PIP_", "UV_")))]:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    return home


def _hub_as_huggingface_hub_says(env: dict[str, str]) -> str:
    """Where huggingface_hub itself puts its hub cache in ``env`` (its constants, read at import)."""
    code = "import huggingface_hub.constants as c; print(c.HF_HUB_CACHE)"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                          timeout=120).stdout.strip()


def _locate(cfg: dict[str, Any], env: dict[str, str], root: Path) -> dict[str, Any]:
    """The in-env ``locate.locate`` in a fresh interpreter with ``env`` (huggingface_hub reads its cache's variables
    when imported): {"path", "files"} or {"error"}."""
    code = textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {str(ROOT)!r})
        from pathlib import Path
        from kernodeck.inenv import locate
        from kernodeck.inenv._common import CheckFailed
        try:
            where, found = locate.locate(json.loads(sys.argv[1]), Path({str(root)!r}), "weights", "weights")
            print(json.dumps({{"path": str(where), "files": found}}))
        except CheckFailed as exc:
            print(json.dumps({{"error": str(exc)}}))
    """)
    proc = subprocess.run([sys.executable, "-c", code, json.dumps(cfg)], env={**env, "HF_HUB_OFFLINE": "1"},
                          capture_output=True, text=True, check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


# --- REPLAY1: the sources' places ------------------------------------------------------------------------------------

# Each way a caller places the caches (the variable set, relative to the caller's home; "" the defaults)
PLACINGS = [{}, {"XDG_CACHE_HOME": "xdg"}, {"HF_HOME": "hf-home"}, {"HUGGINGFACE_HUB_CACHE": "legacy-hub"},
            {"HF_HUB_CACHE": "hub", "HF_HOME": "unused"}, {"KERNODECK_CACHE": "kd-cache"}]


@pytest.mark.parametrize("placing", PLACINGS, ids=lambda p: ",".join(p) or "defaults")
def test_each_source_is_found_in_the_replay_where_the_caller_finds_it(
        placing: dict[str, str], caller: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, rel in placing.items():
        monkeypatch.setenv(name, str(caller / rel))
    hub = _hub_as_huggingface_hub_says(dict(os.environ))
    assert str(assets.hf_cache()) == hub  # Kernodeck resolves the hub cache as huggingface_hub does
    snapshot = write_snapshot(Path(hub), REPO, {"w.bin": WEIGHTS}, COMMIT)
    digest = hashlib.sha256(WEIGHTS).hexdigest()
    kd_cache = Path(os.environ.get("KERNODECK_CACHE") or Path(os.environ.get("XDG_CACHE_HOME") or caller / ".cache")
                    / "kernodeck")
    (kd_cache / "sha256" / digest).mkdir(parents=True)
    (kd_cache / "sha256" / digest / "w.bin").write_bytes(WEIGHTS)
    (caller / "data").mkdir()
    (caller / "data" / "d.txt").write_bytes(DATA)

    env = clean_environment(tmp_path / "replay-home")
    assert env["HOME"] == str(tmp_path / "replay-home")  # the clean HOME stays the point of the replay
    assert _hub_as_huggingface_hub_says(env) == hub
    files = {"w.bin": digest}
    project = tmp_path / "clone"
    hf = _locate({"kind": "hf", "hf": REPO, "revision": COMMIT, "files": files}, env, project)
    assert hf == {"path": str(snapshot), "files": files}, hf
    url = _locate({"kind": "url", "url": "https://h.example/w.bin", "sha256": digest, "files": files}, env, project)
    assert url == {"path": str(kd_cache / "sha256" / digest / "w.bin"), "files": {"w.bin": digest}}, url
    for declared in ("~/data", "$HOME/data", "${HOME}/data", "~"):
        found = _locate({"kind": "path", "path": declared}, env, project)
        assert found.get("path", "").startswith(str(caller)), (declared, found)
    path = _locate({"kind": "path", "path": "~/data", "files": {"d.txt": hashlib.sha256(DATA).hexdigest()}}, env,
                   project)
    assert path == {"path": str(caller / "data"), "files": {"d.txt": hashlib.sha256(DATA).hexdigest()}}


def test_a_source_only_in_the_replays_own_home_is_not_found(caller: Path, tmp_path: Path) -> None:
    """The clean HOME serves nothing: a ``~`` path, a snapshot and a url file there are not the caller's."""
    replay_home = tmp_path / "replay-home"
    env = clean_environment(replay_home)
    (replay_home / "data").mkdir()
    (replay_home / "data" / "d.txt").write_bytes(DATA)
    write_snapshot(replay_home / ".cache" / "huggingface" / "hub", REPO, {"w.bin": WEIGHTS}, COMMIT)
    digest = hashlib.sha256(WEIGHTS).hexdigest()
    (replay_home / ".cache" / "kernodeck" / "sha256" / digest).mkdir(parents=True)
    (replay_home / ".cache" / "kernodeck" / "sha256" / digest / "w.bin").write_bytes(WEIGHTS)
    path = _locate({"kind": "path", "path": "~/data"}, env, tmp_path)
    assert path == {"error": f"~/data ({caller / 'data'}) does not exist"}, path
    hf = _locate({"kind": "hf", "hf": REPO, "revision": COMMIT}, env, tmp_path)
    assert "is not in the Hugging Face cache" in hf.get("error", ""), hf
    url = _locate({"kind": "url", "url": "https://h.example/w.bin", "sha256": digest}, env, tmp_path)
    assert f"is not in the cache {caller / '.cache' / 'kernodeck'}" in url.get("error", ""), url


def test_a_user_home_that_is_not_absolute_is_refused(caller: Path, tmp_path: Path) -> None:
    (caller / "data").mkdir()
    (caller / "data" / "d.txt").write_bytes(DATA)
    env = {**clean_environment(tmp_path / "replay-home"), USER_HOME_ENV: "caller-home"}
    found = _locate({"kind": "path", "path": "~/data"}, env, tmp_path)
    assert found == {"error": f"~/data: ${USER_HOME_ENV} must be an absolute folder, not 'caller-home'"}, found


def test_without_the_user_home_a_tilde_is_homes_and_home_word_is_not_home(caller: Path, tmp_path: Path) -> None:
    """Outside a replay nothing changes: ``~`` is HOME's; ``$HOMEDIR`` is its own variable, not ``$HOME``."""
    (caller / "data").mkdir()
    (caller / "data" / "d.txt").write_bytes(DATA)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "PIP_", "UV_"))}
    found = _locate({"kind": "path", "path": "~/data"}, env, tmp_path)
    assert found.get("path") == str(caller / "data"), found
    replayed = clean_environment(tmp_path / "replay-home")
    assert _locate({"kind": "path", "path": "$HOMEDIR/data"}, replayed, tmp_path) == {
        "error": "$HOMEDIR/data: the variable HOMEDIR is not set"}


def test_the_places_are_absolute_and_relative_ones_the_callers_working_folders(
        caller: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNODECK_CACHE", "rel-cache")
    monkeypatch.setenv("HF_HUB_CACHE", "rel-hub")
    assert source_places() == {"HF_HUB_CACHE": str(tmp_path / "rel-hub"),
                               "KERNODECK_CACHE": str(tmp_path / "rel-cache"), USER_HOME_ENV: str(caller)}


@pytest.mark.parametrize("offline", [None, "1", "0"])
def test_hf_hub_offline_is_the_callers(offline: str | None, caller: Path, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    if offline is not None:
        monkeypatch.setenv("HF_HUB_OFFLINE", offline)
    assert clean_environment(tmp_path / "replay-home").get("HF_HUB_OFFLINE") == offline


# --- REPLAY2 and REPLAY3: replay() itself ----------------------------------------------------------------------------

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}


def _repository(top: Path, prefix: str, *, commit_project: bool = True) -> Path:
    """A git repository at ``top`` holding examples/regression (a user's project) in ``prefix``; the project."""
    project = top / prefix if prefix else top
    listed = subprocess.run(["git", "ls-files", "examples/regression"], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.split()
    for name in listed:
        dest = project / Path(name).relative_to("examples/regression")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes((ROOT / name).read_bytes())
    (top / "README.md").write_text("a monorepo\n", encoding="utf-8")
    env = {**os.environ, **GIT_ENV}
    adds = [["add", "-A"]] if commit_project else [["add", "README.md"]]
    for args in (["init", "-q"], *adds, ["commit", "-q", "-m", "project"]):
        subprocess.run(["git", *args], cwd=top, env=env, capture_output=True, check=True, timeout=60)
    return project


@pytest.fixture
def stood_in(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """replay's tools stood in for: its git commands run, its venv and pip are recorded, its verify is recorded (argv,
    environment, folder, and whether that folder holds the project) and writes a passing report."""
    calls: list[dict[str, Any]] = []

    def run(argv: list[Any], **kwargs: Any) -> Any:
        if str(argv[0]) == "git":
            return run_for_real(argv, **kwargs)
        calls.append({"argv": [str(a) for a in argv]})
        return None

    def verify(argv: list[Any], *, label: str, env: dict[str, str], cwd: Path) -> None:
        calls.append({"argv": [str(a) for a in argv], "env": dict(env), "cwd": cwd,
                      "project": (cwd / "pyproject.toml").is_file()})
        dossier = Path(str(argv[argv.index("--out") + 1]))
        dossier.mkdir(parents=True)
        (dossier / "report.json").write_text(json.dumps({"status": "passed"}), encoding="utf-8")

    monkeypatch.setattr(replay_module, "run", run)
    monkeypatch.setattr(replay_module, "run_with_progress", verify)
    monkeypatch.setattr(replay_module, "resolve_platform", lambda project: SimpleNamespace(python="3.11",
                                                                                           os_arch="linux_x86_64"))
    monkeypatch.setattr(pythons, "find", lambda *args: SimpleNamespace(path=sys.executable))
    monkeypatch.setenv("KERNODECK_SOURCE", str(ROOT))
    return calls


@pytest.mark.parametrize("prefix", ["examples/regression", ""], ids=["in-a-folder", "control-at-the-top"])
def test_replay_clones_the_repository_and_verifies_in_the_projects_folder_at_the_scale_given(
        prefix: str, caller: Path, stood_in: list[dict[str, Any]], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    project = _repository(tmp_path / "repo", prefix)
    monkeypatch.setenv(SCALE_ENV, repr(5.0))  # what dispatch does for `replay --deadline-scale 5`
    result = replay(load_project(project), out=tmp_path / "replayed")
    assert result.status == "passed"
    verify = stood_in[-1]
    assert verify["argv"][1:] == ["-E", "-s", "-m", "kernodeck", "verify", "--fresh", "--out", verify["argv"][-1]]
    inside = ("clone", *Path(prefix).parts)  # the project's folder of the clone, where it has its pyproject.toml
    assert verify["project"] and verify["cwd"].parts[-len(inside):] == inside, verify["cwd"]
    env = verify["env"]
    assert env[SCALE_ENV] == "5.0"  # REPLAY2: the replayed verify runs at the scale given
    assert env["HOME"] != str(caller) and env[USER_HOME_ENV] == str(caller)
    assert env["HF_HUB_CACHE"] == str(caller / ".cache" / "huggingface" / "hub")
    assert env["KERNODECK_CACHE"] == str(caller / ".cache" / "kernodeck")
    meta = json.loads((tmp_path / "replayed" / "replay.json").read_text(encoding="utf-8"))
    assert meta["status"] == "passed" and "HF_HUB_CACHE, KERNODECK_CACHE" in meta["sources_found_in"]


def test_a_replay_without_the_scale_runs_at_scale_one(caller: Path, stood_in: list[dict[str, Any]],
                                                      tmp_path: Path) -> None:
    replay(load_project(_repository(tmp_path / "repo", "")), out=tmp_path / "replayed")
    assert SCALE_ENV not in stood_in[-1]["env"]


def test_a_project_folder_the_commit_lacks_is_one_error(caller: Path, stood_in: list[dict[str, Any]],
                                                        tmp_path: Path) -> None:
    project = _repository(tmp_path / "repo", "examples/regression", commit_project=False)
    with pytest.raises(KernodeckError) as caught:
        replay(load_project(project), out=tmp_path / "replayed")
    assert "has no examples/regression/pyproject.toml: the project is not committed" in str(caught.value)
    assert "git add" in caught.value.tip and "nox -s replay" in caught.value.tip
    assert not [call for call in stood_in if "verify" in call["argv"]]
