"""Red-team pass 44 (a89dcad: the verdict outside the closed world's hooks: the lock's inputs, the replay, the checks
run on what the application wrote): each finding reproduced, marked ``xfail(strict=True)`` with its id while it
stands, beside premises (passing today: the setup reaches the vulnerable path) and controls (notes:
/work/notes/redteam44.md). SET1, the settings recorded but not in effect, needs the rebuilt env's torch:
tests/e2e/test_redteam44_sessions.py.

LOCK4 (fixed: every file an input names by -r/-c, nested ones too, is a fingerprinted input (lock/includes.py);
an input's own inputs were no input; FALSE PASS of ``lock-current``; lock/inputs.compute_inputs): the lock's
inputs are the ``.in`` files pyproject names and the torch layer, each by its sha256. A line of them that is an option
(``-c constraints.txt``, ``-r common.in``) is "read by the resolver" (refuse_direct_references skips it) and never
fingerprinted: pip-compile and ``uv pip compile`` both read the file it names. Editing the constraints file (here
``kdtiny-beta==1.0`` to ``==2.0``) leaves every recorded input as it was: ``lock -- --check``, rebuild's and verify's
``lock-check`` say the lock is current against its inputs (claim ``lock-current`` established), while a relock pins
kdtiny-beta 2.0 (measured by hand with both resolvers on the tiny wheels: 1.0 locked, the check ``[]`` after the edit,
the relock 2.0). Constraint files and shared ``-r`` layers are common in real projects. Fix idea: fingerprint each file
an input names by ``-r``/``-c``/``--requirement``/``--constraint`` (recursively, as the resolver reads them, paths
relative to the file that names them), or refuse such options in an input with one ERROR naming the line.
CONTROL1: the same edit made in the input itself changes the inputs' digest.

REPLAY1 (fixed: replay.source_places passes the caller's hub cache, Kernodeck's cache and home as absolute variables;
the replay's clean HOME moved the caches its sources are found in; FALSE FAILURE whose TIP loops;
dossier/replay.clean_environment): the clean environment replaces HOME and XDG_CACHE_HOME and drops every
``KERNODECK_*`` variable but the mirrors and the base Python's. A Hugging Face source is found inside the env by
huggingface_hub's ``snapshot_download(..., local_files_only=True)`` in the cache that HF_HOME, else
``$XDG_CACHE_HOME/huggingface``, else ``~/.cache/huggingface`` names; a url source in ``KERNODECK_CACHE``, else
``$XDG_CACHE_HOME/kernodeck``; a ``path`` source may start with ``~``. So for a caller with the default caches, the
replayed verify finds no hf snapshot ("not in the Hugging Face cache ... fetch it: huggingface-cli download ...", which
fills the caller's own cache: the next replay fails the same way), refetches every url source (offline: fails, TIP
``nox -s fetch``, the same loop) and misses a ``~`` path. The uv cache is kept on purpose ("files by hash, never a
source"); the sources' caches are the same kind of thing (each file checked against the reference's digest before the
application runs). Fix idea: pass the located caches as they are for the caller (HF_HOME/HF_HUB_CACHE resolved as
huggingface_hub resolves them, KERNODECK_CACHE resolved as locate.cache_root does), and expand ``~`` in a path source
against the caller's HOME before the replay, or say in the replay's docs and ERROR that they must be set.
CONTROL2: a caller with HF_HOME set finds the snapshot in the replay's environment too.

REPLAY2 (fixed: the scale's variable is passed; ``replay --deadline-scale X`` never reached the replayed verify; a
setting not in effect, FALSE FAILURE on slow hardware): dispatch sets ``$KERNODECK_DEADLINE_SCALE`` "through the
environment: replay's verify inherits it", and clean_environment dropped every ``KERNODECK_*`` variable but
``KERNODECK_INDEX_*``, the base Python's and the variant: the replayed verify runs every deadline at scale 1 (its
report's ``deadlines.scale`` says 1). Fix idea: add deadlines.SCALE_ENV to replay's _PASS, or hand ``--deadline-scale``
to the verify's argv. CONTROL3: the caller's own verify reads the scale from the same variable.

REPLAY3 (fixed: replay.clone_commit clones the top folder and runs in the project's; a project in a folder of its
repository could not be replayed; FALSE FAILURE; replay.replay): replay asks ``git rev-parse HEAD`` in the project's
root (which git answers from any folder of a work tree), then ``git clone <project root>``, which needs the repository's
top folder: "repository '.../examples/digits' does not exist". Every example of this repository (``cd examples/digits &&
nox -s replay``) and every project in a monorepo fails. Fix idea: clone ``git rev-parse --show-toplevel`` and run the
verify in the clone's ``git rev-parse --show-prefix`` folder. CONTROL4: the same project at its repository's top folder
is cloned.

WRITE1 (the cache check judges the in-memory array, not the file written; FALSE PASS of the cache check;
application.App.write and cached.refuse): ``app.write`` saves ``outputs/NAME.npy`` at once and keeps
``np.asarray(array)``: the application's own array, not a copy (resume_app's write copies since red-team pass 30).
application.run_entry then hands that kept array to cached.refuse after the entry returned. An entry that writes the
cache it loaded and then goes on with the array in place (normalised for a later use, ``x /= norm``) leaves
``outputs/x.npy`` byte-equal to the declared cache, and the check compares the changed array: the step passes, the
model never ran. The determinism step's ``first_run`` is the same alias (the first run's slot compared there is what
the array became, not what was written). Fix idea: ``np.array(array, copy=True)`` in App.write (as resume_app does),
or judge the reread file. CONTROL5: the same entry without the in-place change is refused.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kernodeck.dossier.replay import _git, clean_environment, clone_commit
from kernodeck.errors import CommandFailed
from kernodeck.lock.inputs import compute_inputs
from kernodeck.project import app_contract
from kernodeck.project.config import load_project
from kernodeck.project.deadlines import SCALE_ENV, scale_from_env
from kernodeck.project.platforms import resolve_platform
from tests.helpers.closedworld import ENTRY_STEP, IDS, _script, _settings_project
from tests.helpers.hfcache import write_snapshot
from tests.helpers.tinylock import tiny_project

# --- LOCK4 -----------------------------------------------------------------------------------------------------------


def _read_by_pip(path: Path) -> list[str]:
    """What pip's requirements parser (pip-compile's) reads from ``path``, constraints included, as ``name==version``
    (``c:`` before a constraint)."""
    from pip._internal.network.session import PipSession
    from pip._internal.req.req_file import parse_requirements

    return sorted(("c:" if req.constraint else "") + req.requirement
                  for req in parse_requirements(str(path), session=PipSession()))


def _constrained(tmp_path: Path) -> tuple[Path, Path, Any]:
    project = tiny_project(tmp_path / "p", base="-c constraints.txt\nkdtiny-alpha\n")
    constraints = project / "requirements" / "constraints.txt"
    constraints.write_text("kdtiny-beta==1.0\n", encoding="utf-8")
    proj = load_project(project)
    return project, constraints, lambda: compute_inputs(proj, resolve_platform(proj), "pip-tools").digest()


def test_lock4_premise_the_resolver_reads_the_constraints_file_an_input_names(tmp_path: Path) -> None:
    project, constraints, _ = _constrained(tmp_path)
    base = project / "requirements" / "base.in"
    assert _read_by_pip(base) == ["c:kdtiny-beta==1.0", "kdtiny-alpha"]
    constraints.write_text("kdtiny-beta==2.0\n", encoding="utf-8")
    assert _read_by_pip(base) == ["c:kdtiny-beta==2.0", "kdtiny-alpha"]  # what a relock resolves from now


def test_lock4_an_edit_of_the_constraints_file_makes_the_lock_stale(tmp_path: Path) -> None:
    _, constraints, digest = _constrained(tmp_path)
    before = digest()
    constraints.write_text("kdtiny-beta==2.0\n", encoding="utf-8")
    assert digest() != before


def test_control1_the_same_edit_in_the_input_itself_makes_the_lock_stale(tmp_path: Path) -> None:
    project, _, digest = _constrained(tmp_path)
    before = digest()
    base = project / "requirements" / "base.in"
    base.write_text(base.read_text(encoding="utf-8") + "kdtiny-beta==2.0\n", encoding="utf-8")
    assert digest() != before


# --- REPLAY1 ---------------------------------------------------------------------------------------------------------

REPO, COMMIT = "kdtiny/rt44-model", "c" * 40
FIND = """
import sys
from huggingface_hub import snapshot_download
try:
    print(snapshot_download(sys.argv[1], revision=sys.argv[2], local_files_only=True))
except Exception as exc:  # huggingface_hub's LocalEntryNotFoundError: not in the cache
    print("MISSING " + type(exc).__name__)
"""


def _found(env: dict[str, str]) -> str:
    """Where the env's huggingface_hub finds the snapshot (as locate._hf asks), or MISSING."""
    done = subprocess.run([sys.executable, "-c", FIND, REPO, COMMIT], env={**env, "HF_HUB_OFFLINE": "1"},
                          capture_output=True, text=True, check=True, timeout=120)
    return done.stdout.strip().splitlines()[-1]


@pytest.fixture
def caller(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A caller with the default caches (no HF_HOME, HF_HUB_CACHE, XDG_CACHE_HOME, KERNODECK_CACHE) whose Hugging
    Face cache holds the snapshot: where ``huggingface-cli download`` (the source's fetch command) puts it."""
    home = tmp_path / "caller-home"
    for name in ("HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME", "KERNODECK_CACHE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(home))
    return write_snapshot(home / ".cache" / "huggingface" / "hub", REPO, {"config.json": b"{}\n"}, COMMIT)


def test_replay1_premise_the_caller_finds_the_snapshot(caller: Path) -> None:
    assert _found(dict(os.environ)) == str(caller)


def test_replay1_the_replay_finds_the_snapshot_the_caller_has(caller: Path, tmp_path: Path) -> None:
    assert _found(clean_environment(tmp_path / "replay-home")) == str(caller)


def test_control2_a_caller_with_hf_home_set_finds_it_in_the_replay_too(caller: Path, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "caller-home" / ".cache" / "huggingface"))
    assert _found(clean_environment(tmp_path / "replay-home")) == str(caller)


# --- REPLAY2 ---------------------------------------------------------------------------------------------------------


@pytest.fixture
def scaled(monkeypatch: pytest.MonkeyPatch) -> None:
    """What dispatch does for ``replay --deadline-scale 5`` ("through the environment: replay's verify inherits it")."""
    monkeypatch.setenv(SCALE_ENV, repr(5.0))


@pytest.mark.usefixtures("scaled")
def test_control3_the_callers_verify_reads_the_scale_from_the_variable() -> None:
    assert scale_from_env() == 5.0


@pytest.mark.usefixtures("scaled")
def test_replay2_the_replayed_verify_runs_at_the_scale_given(tmp_path: Path) -> None:
    assert scale_from_env(clean_environment(tmp_path / "home")) == 5.0


# --- REPLAY3 ---------------------------------------------------------------------------------------------------------


def _repository(top: Path, project: Path) -> None:
    """A git repository at ``top`` with a project (pyproject.toml) in ``project``, committed."""
    project.mkdir(parents=True, exist_ok=True)
    (project / "pyproject.toml").write_text('[project]\nname = "p"\n', encoding="utf-8")
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "project"]):
        subprocess.run(["git", *args], cwd=top, env=env, capture_output=True, check=True, timeout=60)


def _replayed_clone(root: Path, clone: Path) -> bool:
    """replay's git commands on ``root`` (its commit asked, then the clone, replay's own clone_commit): whether the
    folder the replayed verify runs in holds the project's pyproject.toml."""
    commit = _git(root, "rev-parse", "HEAD").strip()
    assert len(commit) == 40  # replay's own question: answered in any folder
    try:
        project = clone_commit(root, commit, clone, dict(os.environ))
    except CommandFailed:
        return False
    return (project / "pyproject.toml").is_file()


def test_replay3_a_project_in_a_folder_of_its_repository_is_cloned(tmp_path: Path) -> None:
    _repository(tmp_path / "repo", tmp_path / "repo" / "examples" / "digits")
    assert _replayed_clone(tmp_path / "repo" / "examples" / "digits", tmp_path / "clone")


def test_control4_a_project_at_its_repositorys_top_is_cloned(tmp_path: Path) -> None:
    _repository(tmp_path / "repo", tmp_path / "repo")
    assert _replayed_clone(tmp_path / "repo", tmp_path / "clone")


# --- WRITE1 ----------------------------------------------------------------------------------------------------------

ENTRY = '''import numpy as np
from pathlib import Path

ROOT = Path(__file__).resolve().parent


def run(app):
    x = np.load(ROOT / "cache" / "x.npy")                  # "the embeddings, if computed before"
    app.write("x", x, [r["id"] for r in app.records])
    {after}


def criterion(outputs, ids, records, params):
    return {{"passed": True, "summary": "ok"}}
'''
CACHE = np.array([[len(i) * 0.37 + k * 1.1 for k in range(4)] for i in IDS], dtype=np.float32)
IN_PLACE = "x /= np.linalg.norm(x, axis=1, keepdims=True)  # normalised in place for a later use of the embeddings"


def _written(tmp_path: Path, after: str) -> tuple[dict[str, Any], Any]:
    """The application step on the entry (the cache declared, ``files = ["cache/*"]``), and the output file it left."""
    config, fake = _settings_project(tmp_path)
    root = Path(config["project_root"])
    (root / "app.py").write_text(ENTRY.format(after=after), encoding="utf-8")
    (root / "sample.jsonl").write_text("".join(json.dumps({"id": i}) + "\n" for i in IDS), encoding="utf-8")
    (root / "cache").mkdir()
    np.save(root / "cache" / "x.npy", CACHE)
    config["application"]["sources"] = app_contract.from_table(
        {"entry": "app.py:run", "criterion": "app.py:criterion", "sample": "sample.jsonl",
         "code": ["src/mypkg/**/*.py"], "files": ["data/*.csv", "cache/*"],
         "outputs": {"x": {"kind": "exact", "dtype": "float32", "justification": "embeddings"}}}, root
    ).fingerprints(root)
    done = _script(tmp_path, config, ENTRY_STEP, flags=[str(fake)])
    assert done.stdout.strip(), done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result, np.load(tmp_path / "out" / "outputs" / "x.npy")


def test_write1_premise_the_output_written_is_the_cache(tmp_path: Path) -> None:
    _, written = _written(tmp_path, IN_PLACE)
    assert np.array_equal(written, CACHE)  # what reread, compare and the criterion judge: the cache's bytes


def test_write1_an_output_written_from_the_cache_is_refused_whatever_the_array_became(tmp_path: Path) -> None:
    result, _ = _written(tmp_path, IN_PLACE)
    assert result["status"] == "failed", result


def test_control5_the_same_entry_without_the_in_place_change_is_refused(tmp_path: Path) -> None:
    result, _ = _written(tmp_path, "pass")
    assert result["status"] == "failed", result
    assert result["error"].startswith("the output x is the content of cache/x.npy"), result
