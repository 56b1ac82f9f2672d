"""Red-team pass 16 (issue 29's classes): each finding reproduced, marked ``xfail(strict=True)`` with its id while it
stands (a plain test once fixed), and guards of the classes that held (notes: /work/notes/redteam16.md).

FF1 (closed world, FALSE FAILURE): a file the application writes through a NATIVE writer (safetensors' ``save_file``,
``torch.jit.save`` given a path, a tokenizer's ``save``: Rust or C++, no audit event) is not known as its own output;
read back through a reader the closed world wraps to report its file (``safe_open``/``load_file``, ``torch.jit.load``),
it is judged as an undeclared input and the step fails. The ordinary pattern "save the fine-tuned / scripted model
into a temporary folder and load it back" (``save_pretrained`` writes ``model.safetensors`` through safetensors) is
refused, though every byte of it was computed in this run. Fixed: the native writers report what they write
(inenv/natives.py's writer rows), as Python's ``open(path, "w")`` would; FP2 and FP3 had the same cause.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kernodeck.project import app_contract
from tests.helpers.builtenv import env_python
from tests.helpers.closedworld import (
    INENV,
    _closed_project,
    _python,
    _run,
    _settings_project,
    _with_criterion,
)
from tests.helpers.nativestandins import ENTRY, PACKAGES, standins

ROOT = Path(__file__).resolve().parents[2]
FAKE_PACKAGES = tuple(PACKAGES)  # the stand-ins of test_natives

# the stand-in's native writer: safetensors' serialize_file (under save_file) writes its bytes with the closed world's
# hook quiet on this thread, as the Rust writer writes them (no ``open`` audit event: test_natives.NATIVEIO); a
# control below writes the same bytes through Python's open
ROUND_TRIP = ("import tempfile, os, safetensors.torch; d = tempfile.mkdtemp(); "
              "safetensors.torch.save_file({'w': 0}, os.path.join(d, 'w.safetensors')); "
              "safetensors.torch.load_file(os.path.join(d, 'w.safetensors'))")
PYTHON_WRITE = ("import tempfile, os, safetensors.torch; d = tempfile.mkdtemp(); "
                "open(os.path.join(d, 'w.safetensors'), 'wb').write(b'weights'); "
                "safetensors.torch.load_file(os.path.join(d, 'w.safetensors'))")


def _native_project(tmp_path: Path, doing: str) -> tuple[dict[str, Any], Path]:
    config, fake = _settings_project(tmp_path, entry=doing)
    root = Path(config["project_root"])
    standins(fake)
    config["application"]["sources"] = app_contract.from_table(
        {"entry": "app.py:run", "criterion": "app.py:criterion", "sample": "sample.jsonl",
         "code": ["src/mypkg/**/*.py"], "files": ["data/*.csv"],
         "outputs": {"x": {"kind": "exact", "dtype": "int64", "justification": "labels"}}}, root).fingerprints(root)
    return config, fake


def _entry(tmp_path: Path, config: dict[str, Any], fake: Path, python: Path | None = None,
           script: str = ENTRY, flags: tuple[str, ...] = ()) -> dict[str, Any]:
    (tmp_path / "script.py").write_text(script)
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "out").mkdir(exist_ok=True)
    done = _python(str(tmp_path / "script.py"), str(INENV / "_package.py"), str(tmp_path / "config.json"),
                   str(tmp_path / "out"), str(fake), *flags, cwd=tmp_path, python=python)
    assert done.stdout.strip(), done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_ff1_control_a_file_written_through_python_then_read_back_is_the_applications_own(tmp_path: Path) -> None:
    """The control: the same bytes written through Python's open into a temporary folder, then read back through the
    wrapped safe_open, are the application's output (an open that created it), not an input: passed."""
    config, fake = _native_project(tmp_path, PYTHON_WRITE)
    assert _entry(tmp_path, config, fake, flags=FAKE_PACKAGES) == {"status": "passed"}


def test_ff1_a_file_a_native_writer_made_then_read_back_is_not_an_input(tmp_path: Path) -> None:
    """FF1: written by the native writer (no audit event of its own), the file read back through the wrapped reader
    was judged as an undeclared file outside the project, though the entry made every byte of it. Fixed: the wrapped
    writer reports it as ``open(path, "w")`` would, and the read back is of the application's own output."""
    config, fake = _native_project(tmp_path, ROUND_TRIP)
    result = _entry(tmp_path, config, fake, flags=FAKE_PACKAGES)
    assert result == {"status": "passed"}, result


# the same in the real env (the rebuilt one of this checkout): safetensors' and torch's own native writers
REAL_ENTRY = ENTRY.replace("sys.path.insert(0, sys.argv[4])\n", "", 1)
REAL = {
    "torch.save -> torch.load": (  # an ASCII path: torch._C.PyTorchFileWriter writes it in C++
        "import tempfile, os, torch; d = tempfile.mkdtemp(); "
        "torch.save({'w': torch.ones(3)}, os.path.join(d, 'ck.pt')); torch.load(os.path.join(d, 'ck.pt'))"),
    "safetensors save_file -> load_file": (
        "import tempfile, os, torch; from safetensors.torch import save_file, load_file; d = tempfile.mkdtemp(); "
        "save_file({'w': torch.ones(3)}, os.path.join(d, 'w.safetensors')); "
        "load_file(os.path.join(d, 'w.safetensors'))"),
    "torch.jit.save -> torch.jit.load": (
        "import tempfile, os, torch; d = tempfile.mkdtemp(); "
        "torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), os.path.join(d, 'm.pt')); "
        "torch.jit.load(os.path.join(d, 'm.pt'))"),
}
ENV = env_python(ROOT)


@pytest.mark.skipif(not ENV.exists(), reason="needs this checkout's rebuilt env (nox -s rebuild)")
@pytest.mark.parametrize("how", sorted(REAL))
def test_ff1_in_the_real_env(tmp_path: Path, how: str) -> None:
    config, fake = _native_project(tmp_path, REAL[how])
    result = _entry(tmp_path, config, fake, python=ENV, script=REAL_ENTRY,
                    flags=("safetensors", "safetensors.torch", "torch.jit"))
    assert result == {"status": "passed"}, result


# --- classes that held: guards ---------------------------------------------------------------------------------------

# an undeclared project file read through a path /proc or /dev/fd resolves (a trusted system folder on its face)
THROUGH_PROC = {
    "/proc/self/root": "labels = open('/proc/self/root' + str(ROOT / 'data' / 'extra.csv')).read()",
    "/proc/thread-self/root": "labels = open('/proc/thread-self/root' + str(ROOT / 'data' / 'extra.csv')).read()",
    "/proc/<pid>/root": "labels = open('/proc/%d/root' % os.getpid() + str(ROOT / 'data' / 'extra.csv')).read()",
    "/dev/fd/<dir fd>": ("fd = os.open(str(ROOT), os.O_RDONLY); "
                         "labels = open('/dev/fd/%d/data/extra.csv' % fd).read()"),
    "/proc/self/fd/<dir fd>": ("fd = os.open(str(ROOT / 'data'), os.O_RDONLY); "
                               "labels = open('/proc/self/fd/%d/extra.csv' % fd).read()"),
    "io.open_code": "import io; labels = io.open_code(str(ROOT / 'data' / 'extra.csv')).read()",
}


@pytest.mark.parametrize("how", sorted(THROUGH_PROC))
def test_held_an_undeclared_file_read_through_proc_or_dev_fd_is_named(tmp_path: Path, how: str) -> None:
    config = _with_criterion(_closed_project(tmp_path, code=["src/mypkg/**/*.py"]), THROUGH_PROC[how],
                             code=["src/mypkg/**/*.py"])
    result = _run(tmp_path, config)
    assert result["status"] == "failed", result
    assert "data/extra.csv (opened)" in result["error"], result


# FP2 (closed world's write guard, FALSE PASS of the record): a change of what the run relies on as checked (the env,
# a declared source, Kernodeck's cache, the run's record: steps/, run-config.json) is refused only when an audit event
# shows it. A native writer makes none: ``torch.from_file(path, shared=True)`` maps the file MAP_SHARED and every
# assignment to the tensor writes its bytes (safetensors' save_file and torch.jit.save given a path write unseen too).
# Measured through `verify` (/work/notes/redteam16.md): an entry rewriting steps/01-settings.json and run-config.json
# so, its verify PASSED (-WITH-CHANGED-CODE, the code edited without a new reference) and the dossier's settings.json
# records "hash_randomization": 7 and PYTHONHASHSEED "9", values no process had. Fixed: the shared from_file reports
# an ``open(path, "a+")`` (natives.py), refused there as the Python write is.
FORGE = ("import os, torch; p = os.path.join(os.getcwd(), 'out', 'run-config.json'); "
         "t = torch.from_file(p, shared=True, size=os.path.getsize(p), dtype=torch.uint8); "
         "t[:] = torch.tensor(list(bytes(t.tolist()).replace(b'SEED_0', b'SEED_9')), dtype=torch.uint8)")
FORGE_IN_PYTHON = ("import os; p = os.path.join(os.getcwd(), 'out', 'run-config.json'); "
                   "f = open(p, 'r+b'); data = f.read(); f.seek(0); f.write(data.replace(b'SEED_0', b'SEED_9'))")


def _record_forge(tmp_path: Path, doing: str) -> tuple[dict[str, Any], str]:
    config, fake = _native_project(tmp_path, doing)
    (tmp_path / "out").mkdir(exist_ok=True)
    (tmp_path / "out" / "run-config.json").write_text(json.dumps({**config, "marker": "SEED_0"}))
    result = _entry(tmp_path, config, fake, python=ENV, script=REAL_ENTRY, flags=("torch",))
    return result, (tmp_path / "out" / "run-config.json").read_text()


@pytest.mark.skipif(not ENV.exists(), reason="needs this checkout's rebuilt env (nox -s rebuild)")
def test_fp2_control_a_python_write_into_the_runs_record_is_refused(tmp_path: Path) -> None:
    result, text = _record_forge(tmp_path, FORGE_IN_PYTHON)
    assert result["status"] == "failed" and "Kernodeck's record of this run" in result["error"], result
    assert "SEED_0" in text


@pytest.mark.skipif(not ENV.exists(), reason="needs this checkout's rebuilt env (nox -s rebuild)")
def test_fp2_a_native_write_into_the_runs_record_is_refused(tmp_path: Path) -> None:
    result, text = _record_forge(tmp_path, FORGE)
    assert result["status"] == "failed" and "Kernodeck's record of this run" in result["error"], result
    assert "SEED_0" in text and "SEED_9" not in text


# FF4 (closed world, FALSE FAILURE): a model with its own code (transformers' trust_remote_code, the code a declared
# source of the project's holds) passes the first run and fails every later one. transformers copies the module into
# its modules cache (HF_MODULES_CACHE, default $HF_HOME/modules) and imports it from there; a later run finds the copy
# already there (filecmp-equal to the declared file: not copied again), and its import is judged an undeclared file
# outside the project. The reference run writes the cache, so every verify after it fails.
REMOTE = ("from transformers import AutoConfig; "
          "AutoConfig.from_pretrained(str(ROOT / 'data' / 'remote'), trust_remote_code=True)")
REMOTE_TABLE = {"entry": "app.py:run", "criterion": "app.py:criterion", "sample": "sample.jsonl",
                "code": ["src/mypkg/**/*.py", "data/remote/*.py"], "files": ["data/*.csv", "data/remote/*.json"],
                "outputs": {"x": {"kind": "exact", "dtype": "int64", "justification": "labels"}}}


def _remote_run(tmp_path: Path) -> dict[str, Any]:
    config, fake = _native_project(tmp_path, REMOTE)
    root = Path(config["project_root"])
    (root / "data" / "remote").mkdir(parents=True)
    (root / "data" / "remote" / "config.json").write_text(
        json.dumps({"model_type": "xcfg", "auto_map": {"AutoConfig": "configuration_x.XConfig"}}))
    (root / "data" / "remote" / "configuration_x.py").write_text(
        "from transformers import PretrainedConfig\n\n\nclass XConfig(PretrainedConfig):\n    model_type = 'xcfg'\n")
    config["application"]["sources"] = app_contract.from_table(REMOTE_TABLE, root).fingerprints(root)
    return _entry(tmp_path, config, fake, python=ENV, script=REAL_ENTRY, flags=("torch",))


@pytest.mark.skipif(not ENV.exists(), reason="needs this checkout's rebuilt env (nox -s rebuild)")
def test_ff4_a_models_own_code_passes_the_second_run_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_MODULES_CACHE", str(tmp_path / "modules"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert _remote_run(tmp_path / "first") == {"status": "passed"}  # the copy written: the application's own
    result = _remote_run(tmp_path / "second")
    assert result == {"status": "passed"}, result


# NOTE5 (class 5, the criterion's power): "able to fail" is one fixed-seed draw of each required corruption, and the
# margin is reported, never judged. A criterion of one bit about one number, the sign of one coordinate of the first
# item's embedding, fails both draws for 54 of this reference's 384 coordinates, and is taken as able to fail: any
# model whose that coordinate is positive (half of all random ones) passes it. The lead's call whether this is in the
# class (the issue asks that a criterion "failing only trivial corruptions" be refused); a fix would ask that it fail
# several draws of each (or the corruption of a few rows only), which a one-bit criterion cannot.
# Fixed (fix16c): each required corruption is drawn controls.DRAWS times by fixed seeds and the criterion must fail
# every draw; on this reference no coordinate's sign does (the column below fails draw 0 of both, as before).
def test_note5_a_criterion_of_one_coordinates_sign_is_not_able_to_fail() -> None:
    import numpy as np

    from kernodeck.inenv import controls, power

    ref = np.load(ROOT / "dossier" / "reference" / "embeddings.npy")
    bad = controls.corruptions({"embeddings": ref})
    column = next(j for j in range(ref.shape[1]) if ref[0, j] > 0 and bad["permuted"]["embeddings"][0, j] <= 0
                  and bad["noise"]["embeddings"][0, j] <= 0)
    found = power.criterion_controls(lambda o: (bool(o["embeddings"][0, column] > 0), "one sign"),
                                        {"embeddings": ref})
    assert not found["able_to_fail"], found
    assert found["cannot_see"] and all(found["corruptions"][how]["passed_draws"] for how in found["cannot_see"])
    assert not any(power.criterion_controls(lambda o, j=j: (bool(o["embeddings"][0, j] > 0), "one sign"),
                                               {"embeddings": ref})["able_to_fail"] for j in range(ref.shape[1]))
