"""Every setting settings.json reports is read back where it applies: for each, a run where it is NOT applied is
caught by its read-back (kernodeck/inenv/settings.py), the table below holding one such run per setting.

The settings step runs in a process started as the orchestrator starts the in-env processes (kernodeck/env/start.py:
``-s -P``, no ``PYTHON*`` variable but the hash seed) with a stand-in torch whose every knob starts at the opposite of
what the step sets, and which can be told to ignore one setter (a torch that drops the request). The process-start
settings are not applied by starting the process otherwise: with ``-I`` (what hid PYTHONHASHSEED), without ``-s``,
without ``-P``, with a ``PYTHON*`` variable left in.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from kernodeck.env import start
from kernodeck.verify.steps.in_env import RUNNER_ENV

ROOT = Path(__file__).resolve().parents[2]

# A torch whose knobs start at the opposite of what the settings step sets; FAKE_TORCH_DROP names (by the read-back
# record's name) the one setting this torch ignores.
FAKE_TORCH = '''
import os
import types

DROP = os.environ.get("FAKE_TORCH_DROP", "")


class Knobs:
    def __init__(self, names, **values):
        object.__setattr__(self, "_names", names)
        for key, value in values.items():
            object.__setattr__(self, key, value)

    def __setattr__(self, key, value):
        if self._names.get(key) != DROP:
            object.__setattr__(self, key, value)


_state = {"seed": 42, "det": False, "warn_only": True, "precision": "medium", "dtype": "torch.float64",
          "daz": True}
float32 = "torch.float32"


def set_default_dtype(dtype):
    if DROP != "default_dtype":
        _state["dtype"] = dtype


def get_default_dtype():
    return _state["dtype"]


def manual_seed(seed):
    if DROP != "seed":
        _state["seed"] = seed


def initial_seed():
    return _state["seed"]


def use_deterministic_algorithms(mode, warn_only=False):
    if DROP != "deterministic_algorithms":
        _state["det"] = mode
    if DROP != "deterministic_warn_only":
        _state["warn_only"] = warn_only


def are_deterministic_algorithms_enabled():
    return _state["det"]


def is_deterministic_algorithms_warn_only_enabled():
    return _state["warn_only"]


def set_float32_matmul_precision(value):
    if DROP != "float32_matmul_precision":
        _state["precision"] = value


def get_float32_matmul_precision():
    return _state["precision"]


def get_num_threads():
    return 1


_autocast = {"cpu": True, "cuda": True}  # on: the opposite of what the step sets


def set_autocast_enabled(device, on):
    if DROP != f"autocast.{device}":
        _autocast[device] = on


def is_autocast_enabled(device):
    return _autocast[device]


def set_flush_denormal(on):
    if DROP != "flush_denormal":
        _state["daz"] = on


int32 = "int32"


class _Tensor:
    """Just what the flush-denormal probe does with a tensor: a float32 denormal times one, its bits."""

    def __init__(self, bits):
        self.bits = bits

    def mul(self, other):
        return _Tensor(0 if _state["daz"] else self.bits)

    def view(self, dtype):
        return self

    def item(self):
        return self.bits


def tensor(values, dtype=None):
    return _Tensor(713678)


def get_num_interop_threads():
    return 1


backends = Knobs({"fp32_precision": "fp32_precision"}, fp32_precision="tf32")
backends.cudnn = Knobs(
    {"deterministic": "cudnn.deterministic", "benchmark": "cudnn.benchmark",
     "allow_tf32": "cudnn.allow_tf32 (legacy flag)", "fp32_precision": "cudnn.fp32_precision"},
    deterministic=False, benchmark=True, allow_tf32=True, fp32_precision="tf32")
backends.cudnn.conv = Knobs({"fp32_precision": "cudnn.conv.fp32_precision"}, fp32_precision="tf32")
backends.cuda = types.SimpleNamespace(matmul=Knobs(
    {"allow_tf32": "cuda.matmul.allow_tf32 (legacy flag)", "fp32_precision": "cuda.matmul.fp32_precision"},
    allow_tf32=True, fp32_precision="tf32"))
backends.cudnn.rnn = Knobs({"fp32_precision": "cudnn.rnn.fp32_precision"}, fp32_precision="tf32")
backends.mkldnn = Knobs({"fp32_precision": "mkldnn.fp32_precision"}, fp32_precision="tf32")
for _op in ("matmul", "conv", "rnn"):  # torch 2.13's knob per oneDNN operator (red-team pass 44, SET1)
    setattr(backends.mkldnn, _op, Knobs({"fp32_precision": f"mkldnn.{_op}.fp32_precision"}, fp32_precision="bf16"))
utils = types.SimpleNamespace(deterministic=Knobs(
    {"fill_uninitialized_memory": "fill_uninitialized_memory"}, fill_uninitialized_memory=False))
'''

RUN = """
    import json, sys
    sys.path[:0] = [sys.argv[1], sys.argv[2]]
    from pathlib import Path
    from kernodeck.inenv._common import CheckFailed, Context
    from kernodeck.inenv import settings
    try:
        record = settings.run(Context(config={}, out=Path(".")))
        print(json.dumps({"status": "passed", "record": record}, default=str))
    except CheckFailed as exc:
        print(json.dumps({"status": "failed", "error": str(exc), "differences": sorted(exc.details["differences"])}))
"""


@dataclass(frozen=True)
class NotApplied:
    """One way a setting is not applied: the fake torch drops its setter, or the process is started otherwise."""

    drop: str = ""
    flags: tuple[str, ...] = start.FLAGS
    env: dict[str, str] = field(default_factory=dict)


TORCH_KNOBS = ("seed", "deterministic_algorithms", "deterministic_warn_only", "cudnn.deterministic", "cudnn.benchmark",
               "cudnn.allow_tf32 (legacy flag)", "cuda.matmul.allow_tf32 (legacy flag)", "float32_matmul_precision",
               "fill_uninitialized_memory", "fp32_precision", "cuda.matmul.fp32_precision", "cudnn.conv.fp32_precision",
               "cudnn.fp32_precision", "cudnn.rnn.fp32_precision", "mkldnn.fp32_precision",
               "mkldnn.matmul.fp32_precision", "mkldnn.conv.fp32_precision", "mkldnn.rnn.fp32_precision",
               "default_dtype", "autocast.cpu", "autocast.cuda", "flush_denormal")
# One row per setting settings.json reports as verified: how a run does not apply it.
TABLE: dict[str, NotApplied] = {
    **{name: NotApplied(drop=name) for name in TORCH_KNOBS},
    "hash_seed": NotApplied(flags=("-I",)),  # what the runner did: -I ignores PYTHONHASHSEED
    "isolation.no_user_site": NotApplied(flags=("-P",)),
    "isolation.safe_path": NotApplied(flags=("-s",)),
    "PYTHON* variables besides PYTHONHASHSEED": NotApplied(env={"PYTHONDONTWRITEBYTECODE": "1"}),
    "CUBLAS_WORKSPACE_CONFIG": NotApplied(env={"CUBLAS_WORKSPACE_CONFIG": ":0:0"}),  # left by the caller
}


def _run(tmp_path: Path, how: NotApplied) -> dict[str, Any]:
    fake = tmp_path / "fake"
    (fake / "torch").mkdir(parents=True, exist_ok=True)
    (fake / "torch" / "__init__.py").write_text(FAKE_TORCH, encoding="utf-8")
    env = start.environ({**RUNNER_ENV, **how.env, **({"FAKE_TORCH_DROP": how.drop} if how.drop else {})})
    proc = subprocess.run([sys.executable, *how.flags, "-c", textwrap.dedent(RUN), str(fake), str(ROOT)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert isinstance(out, dict)
    return out


def test_applied_as_started_every_setting_reads_back(tmp_path: Path) -> None:
    """Control: started as the orchestrator starts it, every setting holds; the table has a row for each one."""
    out = _run(tmp_path, NotApplied())
    assert out["status"] == "passed", out
    record = out["record"]
    assert sorted(record["verified"]) == sorted(TABLE)
    assert record["hash_seed"] == "0" and record["hash_randomization"] == 0 and record["PYTHONHASHSEED"] == "0"


@pytest.mark.parametrize("setting", sorted(TABLE))
def test_a_setting_not_applied_is_caught_by_its_read_back(tmp_path: Path, setting: str) -> None:
    out = _run(tmp_path, TABLE[setting])
    assert out["status"] == "failed" and out["differences"] == [setting], out
    assert f"{setting}: applied" in out["error"]


def test_minus_i_leaves_hash_randomisation_on(tmp_path: Path) -> None:
    """What was recorded before: PYTHONHASHSEED=0 in the environment, yet hash randomisation on under -I."""
    out = _run(tmp_path, TABLE["hash_seed"])
    assert "hash_seed: applied '0', read back 'random'" in out["error"]


# --- the record holds from the settings step on: a change made outside any window (red-team pass 13) ---------------

ENTRY = """import numpy as np


def run(app):
    app.write("x", np.array([len(r["id"]) for r in app.records], dtype=np.int64), [r["id"] for r in app.records])


def criterion(outputs, ids, records, params):
    return {"passed": True, "summary": "ok"}
"""

EXTENSION_THEN_ENTRY = """
import json, runpy, sys
from pathlib import Path
runpy.run_path(sys.argv[1])
from kernodeck_inenv import application, extensions, settings, world
from kernodeck_inenv._common import CheckFailed, Context
config = json.loads(Path(sys.argv[2]).read_text())
ctx = Context(config=config, out=Path(sys.argv[3]))
sys.path.insert(0, sys.argv[4])  # the stand-in torch, and an env package beside it
import torch
settings.apply()  # the settings step: applied, then read back as settings.json records them
ctx.state["settings"] = settings.read_back(torch)
try:
    world.forget()
    extensions._import("kdext", "kdext/_C.so", "kdext", {}, {})  # the extensions step imports a discovered module
    world.settle()
    world.forget()
    application.run_entry(ctx)  # the application step: settings applied again, the entry called in its window
    world.settle()
    print(json.dumps({"status": "passed", "recorded": ctx.state["settings"]["torch.num_threads"],
                      "in_effect": torch.get_num_threads()}))
except CheckFailed as exc:
    print(json.dumps({"status": "failed", "error": str(exc)}))
"""

PINS = "import torch\ntorch.set_num_threads(1)  # tuned for its kernels\n"


def _extension_then_entry(tmp_path: Path, package_init: str) -> dict[str, Any]:
    """The settings step, then the extensions step importing the env package ``kdext`` (its ``__init__``:
    ``package_init``), then the application step computing its outputs, in the closed-world harness."""
    from kernodeck.project import app_contract
    from tests.helpers.closedworld import _script, _settings_project

    config, fake = _settings_project(tmp_path)
    root = Path(config["project_root"])
    (fake / "kdext").mkdir()
    (fake / "kdext" / "__init__.py").write_text(package_init, encoding="utf-8")
    (root / "app.py").write_text(ENTRY, encoding="utf-8")
    config["application"]["sources"] = app_contract.from_table(
        {"entry": "app.py:run", "criterion": "app.py:criterion", "sample": "sample.jsonl",
         "code": ["src/mypkg/**/*.py"], "files": ["data/*.csv"],
         "outputs": {"x": {"kind": "exact", "dtype": "int64", "justification": "labels"}}}, root).fingerprints(root)
    done = _script(tmp_path, config, EXTENSION_THEN_ENTRY, flags=[str(fake)])
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1]) if done.stdout.strip() else {
        "stderr": done.stderr}
    return result


@pytest.mark.parametrize("pins", [True, False], ids=["an env module pins the threads", "control: it leaves them"])
def test_a_setting_changed_outside_any_window_is_named_as_the_next_window_starts(tmp_path: Path, pins: bool) -> None:
    """The extensions step imports every discovered extension module (env code) outside any window; one whose import
    pins torch's threads left them so, and each window compared the settings with their value at ITS start: the
    outputs were computed with 1 thread while settings.json recorded 4 (red-team pass 13). Each window now starts
    with the settings step's record; the control leaves the threads alone and passes with its record in effect."""
    result = _extension_then_entry(tmp_path, PINS if pins else "import torch\n")
    if pins:
        assert result.get("status") == "failed", result  # before: passed, recorded 4, in effect 1
        assert "not in effect as the entry's file starts: torch.num_threads: recorded 4, now 1" in result["error"]
    else:
        assert result == {"status": "passed", "recorded": 4, "in_effect": 4}, result


def _runner_env(tmp_path: Path, package_init: str) -> Path:
    """A venv holding the stand-in torch (closed-world harness) and an env package ``kdext``; numpy borrowed."""
    import sysconfig

    from tests.helpers.closedworld import FAKE_TORCH as SETTABLE_TORCH

    env = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True, capture_output=True)
    site = next((env / "lib").glob("python*/site-packages"))
    (site / "torch").mkdir()
    (site / "torch" / "__init__.py").write_text(
        SETTABLE_TORCH + "\n__version__ = '2.13.0+cpu'\nversion = types.SimpleNamespace(cuda=None, hip=None)\n",
        encoding="utf-8")
    (site / "kdext").mkdir()
    (site / "kdext" / "__init__.py").write_text(package_init, encoding="utf-8")
    (site / "host.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    return env


@pytest.mark.parametrize("pins", [True, False], ids=["an env module pins the threads", "control: it leaves them"])
def test_the_step_after_which_a_setting_is_not_the_record_fails_naming_it(tmp_path: Path, pins: bool) -> None:
    """The runner's check after each step: the real runner, started as verify starts it, runs the settings step and
    the extensions step, which imports ``kdext``; a pin of torch's threads at its import fails the extensions step
    itself (the step it was made in), before any window of the application."""
    import sysconfig

    from kernodeck.verify.steps.in_env import RUNNER

    env = _runner_env(tmp_path, PINS if pins else "import torch\n")
    (tmp_path / "sample.jsonl").write_text('{"id": "a"}\n', encoding="utf-8")
    found = {"discovered": [{"distribution": "kdext", "version": "1.0", "built_for": {}, "objects": [
        {"path": "kdext/__init__.py", "module": "kdext", "links": []}]}], "declared": {}}
    host = Path(sysconfig.get_paths()["purelib"])  # numpy's libraries, mapped from outside the env: declared
    libraries = sorted(str(so.resolve()) for folder in (host / "numpy", host / "numpy.libs")
                       for so in folder.rglob("*.so*"))
    config = {"steps": ["settings", "extensions"], "project_root": str(tmp_path), "mode": "verify",
              "expect_backend": "cpu", "application": {"sample": "sample.jsonl"}, "reference": None,
              "extensions": found, "libraries": libraries}
    out = tmp_path / "run"
    out.mkdir()
    (out / "run-config.json").write_text(json.dumps(config), encoding="utf-8")
    proc = subprocess.run([str(env / "bin" / "python"), *start.FLAGS, str(RUNNER), "--config",
                           str(out / "run-config.json")], cwd=tmp_path, env=start.environ(RUNNER_ENV),
                          capture_output=True, text=True, check=False, timeout=120)
    steps = {json.loads(f.read_text())["name"]: json.loads(f.read_text()) for f in (out / "steps").glob("*.json")}
    assert steps["settings"]["status"] == "passed", (steps, proc.stderr[-3000:])
    if pins:
        assert steps["extensions"]["status"] == "failed", steps["extensions"]
        assert steps["extensions"]["error"].startswith(
            "determinism settings the run records are not in effect after the extensions step: torch.num_threads: "
            "recorded 4, now 1"), steps["extensions"]
    else:
        assert steps["extensions"]["status"] == "passed", steps["extensions"]


def test_the_run_without_the_settings_is_held_to_the_record_for_the_rest_only() -> None:
    """The determinism step's run without the settings (settings.apply(deterministic=False)) changes what
    WITHOUT_SETTINGS names: not held to the record in that run; in a run with the settings the same change is named,
    and a thread count is named in either (the seed never: RESEEDABLE)."""
    from kernodeck.inenv import settings
    from kernodeck.inenv._common import Context

    ctx = Context(config={}, out=Path("."))
    recorded = {"deterministic_algorithms": True, "cudnn.deterministic": True, "cudnn.benchmark": False,
                "fill_uninitialized_memory": True, "torch.num_threads": 4, "seed": 1234}
    ctx.state["settings"] = recorded
    free = {**recorded, "deterministic_algorithms": False, "cudnn.deterministic": False, "cudnn.benchmark": True,
            "fill_uninitialized_memory": False, "seed": 0}
    named = settings.not_in_effect(ctx, free, "as the entry starts")
    assert named is not None and sorted(named.details["changed_settings"]) == sorted(settings.WITHOUT_SETTINGS)
    ctx.state["deterministic"] = False
    assert settings.not_in_effect(ctx, free, "as the entry starts") is None
    pinned = settings.not_in_effect(ctx, {**free, "torch.num_threads": 1}, "as the entry starts")
    assert pinned is not None and list(pinned.details["changed_settings"]) == ["torch.num_threads"]


APPLY_BOTH = """
    import json, sys
    sys.path[:0] = [sys.argv[1], sys.argv[2]]
    from kernodeck.inenv import settings
    with_them, without = settings.apply(deterministic=True), settings.apply(deterministic=False)
    print(json.dumps(sorted(k for k in with_them if with_them[k] != without.get(k))))
"""


def test_without_settings_names_what_apply_changes_without_them(tmp_path: Path) -> None:
    """WITHOUT_SETTINGS is what settings.apply sets otherwise when told deterministic=False (the stand-in torch)."""
    fake = tmp_path / "fake"
    (fake / "torch").mkdir(parents=True)
    (fake / "torch" / "__init__.py").write_text(FAKE_TORCH, encoding="utf-8")
    proc = subprocess.run([sys.executable, *start.FLAGS, "-c", textwrap.dedent(APPLY_BOTH), str(fake), str(ROOT)],
                          cwd=tmp_path, env=start.environ(RUNNER_ENV), capture_output=True, text=True, check=False,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    from kernodeck.inenv import settings

    assert json.loads(proc.stdout) == sorted(settings.WITHOUT_SETTINGS)


# --- a variable read at start the entry sets in os.environ is not in effect (pass 14 FF 6, pass 15 FF 5) ---------

SEEDING_ENTRY = """import os, random
import numpy as np
import torch


def run(app):
    random.seed(42)
    np.random.seed(42)
    {line}
    app.write("x", np.array([len(r["id"]) for r in app.records], dtype=np.int64), [r["id"] for r in app.records])


def criterion(outputs, ids, records, params):
    return {{"passed": True, "summary": "ok"}}
"""

RUNNER_THEN_ENTRY = """
import json, os, runpy, sys
from pathlib import Path
runpy.run_path(sys.argv[1])
from kernodeck_inenv import application, leftover, settings, world
from kernodeck_inenv._common import CheckFailed, Context
leftover.at_start()  # as runner.py does at its start, before any of the project's code
config = json.loads(Path(sys.argv[2]).read_text())
ctx = Context(config=config, out=Path(sys.argv[3]))
sys.path.insert(0, sys.argv[4])  # the stand-in torch
import torch
settings.apply()  # the settings step
ctx.state["settings"] = settings.read_back(torch)
seen = lambda: {k: v for k, v in os.environ.items() if k in ("PYTHONHASHSEED", "PYTHONWARNINGS", "OMP_NUM_THREADS")}
try:
    world.forget()
    application.run_entry(ctx)
    world.settle()
    result = {"status": "passed"}
except CheckFailed as exc:
    result = {"status": "failed", "error": str(exc)}
started = leftover.kernodecks_start()[0]  # what a process Kernodeck starts later gets
print(json.dumps({**result, "in_os_environ": seen(),
                  "kernodecks_processes": {k: started[k] for k in seen() if k in started}}))
"""


def _seeding_entry(tmp_path: Path, line: str) -> dict[str, Any]:
    from kernodeck.project import app_contract
    from tests.helpers.closedworld import _script, _settings_project

    config, fake = _settings_project(tmp_path)
    root = Path(config["project_root"])
    (root / "app.py").write_text(SEEDING_ENTRY.format(line=line), encoding="utf-8")
    config["application"]["sources"] = app_contract.from_table(
        {"entry": "app.py:run", "criterion": "app.py:criterion", "sample": "sample.jsonl",
         "code": ["src/mypkg/**/*.py"], "files": ["data/*.csv"],
         "outputs": {"x": {"kind": "exact", "dtype": "int64", "justification": "labels"}}}, root).fingerprints(root)
    done = _script(tmp_path, config, RUNNER_THEN_ENTRY, flags=[str(fake)])
    assert done.stdout.strip(), done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize(("line", "name", "value"), [
    ("os.environ['PYTHONHASHSEED'] = str(42)", "PYTHONHASHSEED", "42"),  # the common seed_everything(42)
    ("os.environ['PYTHONWARNINGS'] = 'ignore'", "PYTHONWARNINGS", "ignore"),  # quiet warnings
    # red-team pass 15, FALSE FAILURE 5: ordinary for CPU apps; the OpenMP runtime read it as torch was imported
    ("os.environ['OMP_NUM_THREADS'] = '1'", "OMP_NUM_THREADS", "1"),
], ids=["seed_everything", "PYTHONWARNINGS", "OMP_NUM_THREADS"])
def test_a_variable_read_at_start_the_entry_sets_in_os_environ_is_not_a_changed_setting(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, line: str, name: str, value: str) -> None:
    """The interpreter reads PYTHONHASHSEED and the other PYTHON* variables only as it starts, the OpenMP runtime
    OMP_NUM_THREADS as it loads (``import torch``, before the entry), and the processes Kernodeck starts later get
    the environment from before the project's code (leftover.at_start): the entry's ``seed_everything``
    (``os.environ["PYTHONHASHSEED"] = str(seed)``) or ``os.environ["OMP_NUM_THREADS"] = "1"`` changes nothing
    settings.json describes. The read-back took them from os.environ and failed the step "changed determinism
    settings ... PYTHONHASHSEED: recorded '0', after the call '42'" (red-team pass 14; OMP_NUM_THREADS until pass
    15); it reads them as the process started."""
    monkeypatch.delenv(name, raising=False)  # a value the caller set (a parallel run's OMP_NUM_THREADS=1) is no edit
    result = _seeding_entry(tmp_path, line)
    assert result["status"] == "passed", result
    assert result["in_os_environ"][name] == value  # set in the process: only its own later code sees it
    assert result["kernodecks_processes"].get(name) != value, result  # never what Kernodeck's processes get


def test_control_a_setting_the_entry_changes_in_effect_is_still_named(tmp_path: Path) -> None:
    """The control of the test above: the same harness, a setting the entry does change is still named."""
    result = _seeding_entry(tmp_path, "torch.set_num_threads(1)")
    assert result["status"] == "failed", result
    assert result["error"].startswith("the entry changed determinism settings the run records as verified: "), result
    assert "torch.num_threads: recorded 4" in result["error"], result


def test_omp_num_threads_is_read_as_the_process_started_and_a_mismatch_with_the_record_is_named(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In process, the stand-in torch: started with OMP_NUM_THREADS=2, then set to 1 in os.environ (the entry's
    edit), the read-back gives 2 and holds the record made so; a record of another value than the process started
    with (1, what os.environ says now) is named, recorded 1, now 2, so os.environ cannot hide a real mismatch."""
    import types

    from kernodeck.inenv import leftover, settings
    from kernodeck.inenv._common import Context
    from tests.helpers.closedworld import FAKE_TORCH as SETTABLE_TORCH

    torch = types.ModuleType("torch_standin")
    exec(compile(SETTABLE_TORCH, str(tmp_path / "torch_standin.py"), "exec"), torch.__dict__)
    monkeypatch.setattr(leftover, "BEFORE_APPLICATION", [({"OMP_NUM_THREADS": "2"}, sys.executable)])
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    now = settings.read_back(torch)
    assert now["OMP_NUM_THREADS"] == "2", now
    ctx = Context(config={}, out=tmp_path)
    ctx.state["settings"] = dict(now)
    assert settings.not_in_effect(ctx, settings.read_back(torch), "as the entry starts") is None
    ctx.state["settings"] = {**now, "OMP_NUM_THREADS": "1"}
    moved = settings.not_in_effect(ctx, settings.read_back(torch), "as the entry starts")
    assert moved is not None, now
    assert moved.details["changed_settings"] == {"OMP_NUM_THREADS": {"recorded": "1", "now": "2"}}
    assert "OMP_NUM_THREADS: recorded '1', now '2'" in str(moved)
