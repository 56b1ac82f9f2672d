"""The closed-world harness: a closed project, the in-env package run as the runner runs it, a stand-in torch
(tests/unit/test_verified.py, test_setters.py, test_determinism.py and the red-team files share it)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

from kernodeck.inenv import steprun, world
from kernodeck.inenv._common import Context
from kernodeck.project import app_contract

ROOT = Path(__file__).resolve().parents[2]
INENV = ROOT / "kernodeck" / "inenv"


def _python(*args: str, cwd: Path, python: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_", "PYTHON"))}
    return subprocess.run([str(python or sys.executable), "-I", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, check=False, timeout=120)


# --- 1. verified bytes ----------------------------------------------------------------------------------------------



HARNESS = """
import json, runpy, sys
from pathlib import Path
runpy.run_path(sys.argv[1])
import numpy as np
from kernodeck_inenv import application, power, world
from kernodeck_inenv._common import CheckFailed, Context
config = json.loads(Path(sys.argv[2]).read_text())
ctx = Context(config=config, out=Path(sys.argv[3]))
if "--torch" in sys.argv:  # a fake torch (tests/unit/test_verified.py's FAKE_TORCH), set and read back as the
    sys.path.insert(0, sys.argv[sys.argv.index("--torch") + 1])  # settings step does
    import torch
    from kernodeck_inenv import settings
    settings.apply()
    ctx.state["settings"] = settings.read_back(torch)
sys.modules["kernodeck_inenv"].__loader__.check(Path(sys.argv[1]), config.get("inenv_sha256"))  # as runner.py does
if "--collect" in sys.argv:  # Kernodeck's handler of the signal sent between the windows (below)
    __import__("signal").signal(__import__("signal").SIGUSR2, lambda signum, frame: None)
try:
    world.forget()
    run = application._function(ctx, config["application"]["entry"], "entry")
    run(None)
    if "--collect" in sys.argv:  # Kernodeck's own work between windows runs a collection (here at once), and a
        __import__("gc").collect()  # signal arrives then
        __import__("os").kill(__import__("os").getpid(), __import__("signal").SIGUSR2)
    crit = application._function(ctx, config["application"]["criterion"], "criterion")
    if "--controls" in sys.argv:  # the criterion only on corruptions, through the controls (as judge.criterion)
        judge = lambda outputs: tuple(application._judge(crit, outputs, [{"id": "a"}], {}, Path(config["project_root"])
                                                          ).get(k) for k in ("passed", "summary"))
        print(json.dumps(power.criterion_controls(judge, {"x": np.zeros((1, 2))})), file=sys.stderr)
    else:
        application._judge(crit, {}, [{"id": "a"}], {}, Path(config["project_root"]))
    world.settle()  # as the step loop does once the step's code returned
    print(json.dumps({"status": "passed"}))
except CheckFailed as exc:
    print(json.dumps({"status": "failed", "error": str(exc), "details": exc.details}))
"""

APP = """import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent


def run(app):
    sys.path.insert(0, str(ROOT / "src"))
    import mypkg.util

    (ROOT / "scratch.txt").write_text("written by the entry")  # its own output, then read: not an input
    assert (ROOT / "scratch.txt").read_text() == "written by the entry"
    return mypkg.util.VALUE


def criterion(outputs, ids, records, params):
    labels = (ROOT / "data" / "extra.csv").read_text()
    return {"passed": bool(labels), "summary": labels.strip()}
"""


def _closed_project(tmp_path: Path, **declared: list[str]) -> dict[str, Any]:
    root = tmp_path / "project"
    (root / "src" / "mypkg").mkdir(parents=True)
    (root / "data").mkdir()
    (root / "app.py").write_text(APP)
    (root / "src" / "mypkg" / "__init__.py").write_text("")
    (root / "src" / "mypkg" / "util.py").write_text("VALUE = 1\n")
    (root / "data" / "extra.csv").write_text("label\n1\n")
    (root / "sample.jsonl").write_text('{"id": "a"}\n')
    table = {"entry": "app.py:run", "criterion": "app.py:criterion", "sample": "sample.jsonl", **declared,
             "outputs": {"x": {"kind": "exact", "dtype": "int64", "justification": "labels"}}}
    app = app_contract.from_table(table, root)
    config = {"project_root": str(root), "application": {**app.run_config(), "sample": str(root / "sample.jsonl"),
                                                          "sources": app.fingerprints(root)}}
    return config


def _with_criterion(config: dict[str, Any], doing: str, *, imports: str = "os, sys", head: str = "",
                    **declared: list[str]) -> dict[str, Any]:
    """The closed project's criterion ``doing`` a line of code (``imports`` for its module, ``head``: lines after
    ``ROOT``), its files fingerprinted again under ``declared``."""
    root = Path(config["project_root"])
    (root / "app.py").write_text(APP.replace("import sys\n", f"import {imports}\n", 1).replace(
        "ROOT = Path(__file__).resolve().parent\n", "ROOT = Path(__file__).resolve().parent\n" + head, 1).replace(
        '    labels = (ROOT / "data" / "extra.csv").read_text()\n', f"    {doing}\n    labels = 'x'\n"))
    config["application"]["sources"] = app_contract.from_table(
        {"entry": "app.py:run", "criterion": "app.py:criterion", "sample": "sample.jsonl", **declared,
         "outputs": {"x": {"kind": "exact", "dtype": "int64", "justification": "labels"}}}, root).fingerprints(root)
    return config


def linked_base_venv(tmp_path: Path, stashed: str, text: str) -> tuple[Path, Path, Path]:
    """A venv of this interpreter's base reached through a link (``tmp_path/base``), numpy from this interpreter's
    site-packages; a folder ``stash`` outside the project holding ``stashed`` (relative, e.g. ``bin/python3.11``)
    with ``text``: (the venv, the link, the stash). Red-team passes 65 and 66 (a link on the way to a home)."""
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    link = tmp_path / "base"
    link.symlink_to(Path(sys.base_prefix).resolve())
    venv = tmp_path / "venv"
    subprocess.run([str(link / "bin" / f"python{version}"), "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    site = venv / "lib" / f"python{version}" / "site-packages"
    (site / "numpy_from_tests.pth").write_text(sysconfig.get_path("purelib") + "\n", encoding="utf-8")
    stash = tmp_path / "stash"
    (stash / stashed).parent.mkdir(parents=True)
    (stash / stashed).write_text(text, encoding="utf-8")
    return venv, link, stash


def swapped_read(link: Path, stash: Path, path: Path, expected: str) -> str:
    """A criterion's code that makes ``link`` again onto ``stash``, reads ``path`` (through it), puts the link back
    and asserts it read ``expected``: a read through a link on the way to a home (red-team passes 65 and 66)."""
    real = os.readlink(link)
    return (f"os.remove({str(link)!r}); os.symlink({str(stash)!r}, {str(link)!r}); value = open({str(path)!r}).read(); "
            f"os.remove({str(link)!r}); os.symlink({real!r}, {str(link)!r}); assert value == {expected!r}, value")


def criterion_doing(tmp_path: Path, doing: str, python: Path) -> dict[str, Any]:
    """A closed project's criterion doing ``doing`` (os, sys imported), run through the real hook by ``python``."""
    project = tmp_path / "p"
    project.mkdir()
    config = _with_criterion(_closed_project(project, code=["src/mypkg/**/*.py"]), doing, imports="os, sys",
                             code=["src/mypkg/**/*.py"])
    return _run(project, config, python=python)


def _script(tmp_path: Path, config: dict[str, Any], script: str, inenv: Path = INENV,
            flags: list[str] | tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """A script run as an in-env process would run it (the package loaded by _package.py) on the closed project's
    configuration, its run's folder ``tmp_path/out``."""
    (tmp_path / "script.py").write_text(script)
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "out").mkdir(exist_ok=True)
    return _python(str(tmp_path / "script.py"), str(inenv / "_package.py"), str(tmp_path / "config.json"),
                   str(tmp_path / "out"), *flags, cwd=tmp_path)


def _run(tmp_path: Path, config: dict[str, Any], *flags: str, python: Path | None = None) -> dict[str, Any]:
    (tmp_path / "harness.py").write_text(HARNESS)
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "out").mkdir(exist_ok=True)
    done = _python(str(tmp_path / "harness.py"), str(INENV / "_package.py"), str(tmp_path / "config.json"),
                   str(tmp_path / "out"), *flags, cwd=tmp_path, python=python)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result



FAKE_TORCH = """
import sys
import types
from contextlib import contextmanager

float32, float64 = "torch.float32", "torch.float64"
_s = {"det": False, "warn": False, "prec": "highest", "threads": 4, "interop": 4, "dtype": float32, "seed": 0,
      "cudnn_det": False, "bench": True, "cudnn_tf32": True, "cublas_tf32": True, "fill": False}


def _setter(key):
    return lambda value: _s.__setitem__(key, value)


# torch._C as torch has it: the bindings each Python-level setter lands in
_C = types.ModuleType("torch._C")
_C._set_deterministic_algorithms = lambda mode, warn_only=False: _s.update(det=mode, warn=warn_only)
_C._set_float32_matmul_precision = _setter("prec")
_C._set_default_dtype = _setter("dtype")
_C.set_num_threads, _C.set_num_interop_threads = _setter("threads"), _setter("interop")
_C._set_cudnn_deterministic, _C._set_cudnn_benchmark = _setter("cudnn_det"), _setter("bench")
_C._set_cudnn_allow_tf32, _C._set_cublas_allow_tf32 = _setter("cudnn_tf32"), _setter("cublas_tf32")
_C._set_deterministic_fill_uninitialized_memory = _setter("fill")
sys.modules["torch._C"] = _C
set_num_threads, set_num_interop_threads = _C.set_num_threads, _C.set_num_interop_threads  # from torch._C import *
def manual_seed(seed): _s["seed"] = seed
def initial_seed(): return _s["seed"]
def use_deterministic_algorithms(on, *, warn_only=False): _C._set_deterministic_algorithms(on, warn_only=warn_only)
def are_deterministic_algorithms_enabled(): return _s["det"]
def is_deterministic_algorithms_warn_only_enabled(): return _s["warn"]
def set_float32_matmul_precision(p): _C._set_float32_matmul_precision(p)
def get_float32_matmul_precision(): return _s["prec"]
def get_num_threads(): return _s["threads"]
def get_num_interop_threads(): return _s["interop"]
def set_default_dtype(d): _C._set_default_dtype(d)
def get_default_dtype(): return _s["dtype"]


class ContextProp:  # torch.backends.ContextProp: the binding held since the class was made
    def __init__(self, getter, setter):
        self.getter, self.setter = getter, setter

    def __get__(self, obj, objtype):
        return self.getter()

    def __set__(self, obj, value):
        self.setter(value)


class CudnnModule(types.ModuleType):
    deterministic = ContextProp(lambda: _s["cudnn_det"], _C._set_cudnn_deterministic)
    benchmark = ContextProp(lambda: _s["bench"], _C._set_cudnn_benchmark)
    allow_tf32 = ContextProp(lambda: _s["cudnn_tf32"], _C._set_cudnn_allow_tf32)


@contextmanager
def flags(enabled=False, benchmark=False, deterministic=False, allow_tf32=True):  # torch.backends.cudnn.flags
    old = (_s["bench"], _s["cudnn_det"], _s["cudnn_tf32"])
    _C._set_cudnn_benchmark(benchmark), _C._set_cudnn_deterministic(deterministic), _C._set_cudnn_allow_tf32(allow_tf32)
    try:
        yield
    finally:
        _C._set_cudnn_benchmark(old[0]), _C._set_cudnn_deterministic(old[1]), _C._set_cudnn_allow_tf32(old[2])


class cuBLASModule:  # torch.backends.cuda.matmul: the binding looked up at each set
    def __getattr__(self, name):
        if name == "allow_tf32":
            return _s["cublas_tf32"]
        raise AttributeError(name)

    def __setattr__(self, name, value):
        if name != "allow_tf32":
            raise AttributeError(name)
        _C._set_cublas_allow_tf32(value)


class _Deterministic(types.ModuleType):
    @property
    def fill_uninitialized_memory(self):
        return _s["fill"]

    @fill_uninitialized_memory.setter
    def fill_uninitialized_memory(self, mode):
        _C._set_deterministic_fill_uninitialized_memory(mode)


backends = types.SimpleNamespace(cudnn=CudnnModule("torch.backends.cudnn"),
                                 cuda=types.SimpleNamespace(matmul=cuBLASModule()))
backends.cudnn.flags = flags
utils = types.SimpleNamespace(deterministic=_Deterministic("torch.utils.deterministic"))
"""

def _settings_project(tmp_path: Path, entry: str = "", criterion: str = "", top: str = "") -> tuple[
        dict[str, Any], Path]:
    config = _closed_project(tmp_path, code=["src/mypkg/**/*.py"], files=["data/*.csv"])
    root = Path(config["project_root"])
    text = APP.replace("import sys\n", f"import sys\nimport torch\n{top}\n", 1)
    text = text.replace("    return mypkg.util.VALUE\n", f"    {entry or 'pass'}\n    return mypkg.util.VALUE\n")
    text = text.replace("    return {\"passed\"", f"    {criterion or 'pass'}\n    return {{\"passed\"")
    (root / "app.py").write_text(text)
    config["application"]["sources"] = app_contract.from_table(
        {"entry": "app.py:run", "criterion": "app.py:criterion", "sample": "sample.jsonl",
         "code": ["src/mypkg/**/*.py"], "files": ["data/*.csv"],
         "outputs": {"x": {"kind": "exact", "dtype": "int64", "justification": "labels"}}}, root).fingerprints(root)
    fake = tmp_path / "faketorch"
    (fake / "torch").mkdir(parents=True, exist_ok=True)
    (fake / "torch" / "__init__.py").write_text(FAKE_TORCH)
    return config, fake


# --- the criterion step on 8 unit rows, right on the first argv[4] only (red-team passes 18, 19) ---------------------

CRITERION_STEP = """
import json, runpy, sys
from pathlib import Path
runpy.run_path(sys.argv[1])
import numpy as np
from kernodeck_inenv import judge, world
from kernodeck_inenv._common import CheckFailed, Context
ctx = Context(config=json.loads(Path(sys.argv[2]).read_text()), out=Path(sys.argv[3]))
rows = np.random.default_rng(1).standard_normal((8, 8)).astype(np.float32)
wrong = np.random.default_rng(2).standard_normal((8, 8)).astype(np.float32)
rows[int(sys.argv[4]):] = wrong[int(sys.argv[4]):]  # the model right on the first rows only
ctx.state["reread"] = {"x": rows / np.linalg.norm(rows, axis=1, keepdims=True)}
try:
    world.forget()
    print(json.dumps({"status": "passed", "able_to_fail": judge.criterion(ctx)["controls"]["able_to_fail"]}))
except CheckFailed as exc:
    print(json.dumps({"status": "failed", "error": str(exc)}))
"""
CRITERION_APP_HEAD = """import os
from pathlib import Path

import numpy as np


def run(app):
    pass


"""


# --- the determinism step on a closed project (red-team passes 17-19) ----------------------------------------------

TABLE = {"entry": "app.py:run", "criterion": "app.py:criterion", "sample": "sample.jsonl",
         "code": ["src/mypkg/**/*.py"], "files": ["data/*.csv"],
         "outputs": {"x": {"kind": "exact", "dtype": "int64", "justification": "labels"}}}

DETERMINISM = """
import json, runpy, sys
from pathlib import Path
runpy.run_path(sys.argv[1])
sys.path.insert(0, sys.argv[4])
from kernodeck_inenv import application, determinism, world
from kernodeck_inenv._common import CheckFailed, Context
ctx = Context(config=json.loads(Path(sys.argv[2]).read_text()), out=Path(sys.argv[3]))
try:
    first = application._call_entry(ctx, application.sample(ctx), None)
    ctx.state["first_run"] = {n: a for n, (a, _) in first.written.items()}
    print(json.dumps({"status": "passed", "bitwise_identical": determinism.run(ctx)["bitwise_identical"]}))
except CheckFailed as exc:
    print(json.dumps({"status": "failed", "error": str(exc)}))
"""


def determinism_step(tmp_path: Path, entry: str, outputs: dict[str, Any] | None = None) -> dict[str, Any]:
    """The application's first call, then the determinism step (its reruns), on four records of a closed project
    whose app.py is ``entry`` (os, Path and numpy imported) writing ``outputs`` (TABLE's exact ``x`` unless given);
    the stand-in torch (red-team passes 17-19, 51)."""
    config = _closed_project(tmp_path, code=["src/mypkg/*.py"], files=["data/*.csv"])
    root = Path(config["project_root"])
    (root / "sample.jsonl").write_text("".join(f'{{"id": "r{i}"}}\n' for i in range(4)))
    (root / "app.py").write_text("import os\nfrom pathlib import Path\n\nimport numpy as np\n" + entry +
                                 "\n\ndef criterion(o, i, r, p):\n    return {'passed': True, 'summary': ''}\n")
    config["application"]["sources"] = app_contract.from_table(
        {**TABLE, "code": ["src/mypkg/*.py"], **({"outputs": outputs} if outputs else {})}, root).fingerprints(root)
    config["determinism_records"] = 64
    (tmp_path / "faketorch" / "torch").mkdir(parents=True)
    (tmp_path / "faketorch" / "torch" / "__init__.py").write_text(FAKE_TORCH)
    (tmp_path / "det.py").write_text(DETERMINISM)
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "out").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_", "PYTHON"))}
    done = subprocess.run([sys.executable, "-s", "-P", str(tmp_path / "det.py"), str(INENV / "_package.py"),
                           str(tmp_path / "config.json"), str(tmp_path / "out"), str(tmp_path / "faketorch")],
                          cwd=tmp_path, env={**env, "PYTHONHASHSEED": "0"}, capture_output=True, text=True,
                          check=False, timeout=120)
    assert done.returncode == 0 and done.stdout.strip(), done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


# --- the application step on an entry that loads a declared cache (red-team passes 18, 19) ---------------------------

ENTRY_STEP = """
import json, runpy, sys
from pathlib import Path
runpy.run_path(sys.argv[1])
from kernodeck_inenv import application, world
from kernodeck_inenv._common import CheckFailed, Context
config = json.loads(Path(sys.argv[2]).read_text())
ctx = Context(config=config, out=Path(sys.argv[3]))
sys.path.insert(0, sys.argv[4])  # the stand-in torch (settings.apply seeds and pins it before the entry)
try:
    world.forget()
    details = application.run_entry(ctx)  # the application step
    world.settle()
    print(json.dumps({"status": "passed", "written": details["written"]}))
except CheckFailed as exc:
    print(json.dumps({"status": "failed", "error": str(exc)}))
"""
IDS = ["a", "bb", "ccc", "dddd"]
CACHED_ENTRY = """import numpy as np
from pathlib import Path

ROOT = Path(__file__).resolve().parent


def run(app):
    app.write("x", {load}, [r["id"] for r in app.records])


def criterion(outputs, ids, records, params):
    return {{"passed": True, "summary": "ok"}}
"""


def saved(how: Any, arr: Any) -> bytes:
    buffer = io.BytesIO()
    how(buffer, arr)
    return buffer.getvalue()


def cached_step(tmp_path: Path, load: str, name: str, content: bytes) -> dict[str, Any]:
    """The application step on an entry whose output ``x`` (float32) is ``load``, its cache ``cache/NAME`` (bytes
    ``content``) declared (red-team passes 18 and 19)."""
    config, fake = _settings_project(tmp_path)
    root = Path(config["project_root"])
    (root / "app.py").write_text(CACHED_ENTRY.format(load=load), encoding="utf-8")
    (root / "sample.jsonl").write_text("".join(json.dumps({"id": i}) + "\n" for i in IDS), encoding="utf-8")
    (root / "cache").mkdir()
    (root / "cache" / name).write_bytes(content)
    table = {**TABLE, "files": ["data/*.csv", "cache/*"],
             "outputs": {"x": {"kind": "exact", "dtype": "float32", "justification": "embeddings"}}}
    config["application"]["sources"] = app_contract.from_table(table, root).fingerprints(root)
    done = _script(tmp_path, config, ENTRY_STEP, flags=[str(fake)])
    assert done.stdout.strip(), done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


# The application step with its sources' check, an edit by another process (a script the caller writes) between
# the check and the entry, then the after-step hold (red-team passes 23 and 24): prints the step's status as JSON.
EDITED = r"""
import json, os, runpy, sys
os.environ['KERNODECK_CACHE'] = sys.argv[6]  # the sources' stat records: this test's own
from pathlib import Path
runpy.run_path(sys.argv[1])
sys.path.insert(0, sys.argv[5])  # the stand-in torch (settings.apply seeds and pins it before the entry)
from kernodeck_inenv import application, world
from kernodeck_inenv._common import CheckFailed, Context
config = json.loads(Path(sys.argv[2]).read_text())
ctx = Context(config=config, out=Path(sys.argv[3]))
edit = runpy.run_path(sys.argv[4])  # outside the application (the user, another process): before and after the check
try:
    world.forget()
    edit["before"]()
    application.weights(ctx), application.data(ctx)  # located and fingerprinted before the application runs
    edit["after"]()
    details = application.run_entry(ctx)  # the application step
    world.settle()
    world.sources_held(ctx)  # what the runner checks after each step (runner._held)
    print(json.dumps({"status": "passed", "details": details}))
except CheckFailed as exc:
    print(json.dumps({"status": "failed", "error": str(exc)}))
"""


def declared_project(tmp_path: Path, app_text: str, table_extra: dict[str, Any] | None = None,
                     files: dict[str, str] | None = None,
                     outputs: dict[str, Any] | None = None) -> tuple[dict[str, Any], Path]:
    """The closed project with app.py's text ``app_text`` and more ``files``, declaring its entry, criterion, sample,
    ``outputs`` (default: an exact ``x``) and ``table_extra``, fingerprinted: (its run config, the stand-in torch's
    folder)."""
    config = _closed_project(tmp_path)
    root = Path(config["project_root"])
    (root / "app.py").write_text(app_text)
    for rel, text in (files or {}).items():
        (root / rel).write_text(text)
    table: dict[str, Any] = {
        "entry": "app.py:run",
        "criterion": "app.py:criterion",
        "sample": "sample.jsonl",
        "outputs": outputs or {"x": {"kind": "exact", "dtype": "int64", "justification": "labels"}},
        **(table_extra or {}),
    }
    app = app_contract.from_table(table, root)
    config["application"] = {**app.run_config(), "sample": str(root / "sample.jsonl"),
                             "sources": app.fingerprints(root)}
    fake = tmp_path / "faketorch"
    (fake / "torch").mkdir(parents=True)
    (fake / "torch" / "__init__.py").write_text(FAKE_TORCH)
    return config, fake


def edited_run(tmp_path: Path, table_extra: dict[str, Any], entry: str, edit: str, script: str = "",
               files: dict[str, str] | None = None) -> dict[str, Any]:
    """The application step (``script``, default :data:`EDITED`) on ``entry`` (app.py's text) in a closed project
    declaring ``table_extra`` besides its entry, criterion, sample and output ``x``, with more project ``files``
    written before the fingerprints; ``edit``: a module defining ``before()`` and ``after()``, run around the sources'
    check. Its status as JSON, with ``x``: what the entry wrote (or None)."""
    import numpy as np

    config, fake = declared_project(tmp_path, entry, table_extra, files)
    (tmp_path / "edit.py").write_text(edit)
    done = _script(tmp_path, config, script or EDITED,
                   flags=[str(tmp_path / "edit.py"), str(fake), str(tmp_path / "cache")])
    assert done.stdout.strip(), done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    written = tmp_path / "out" / "outputs" / "x.npy"
    result["x"] = np.load(written).tolist() if written.exists() else None  # what the entry read
    return result


# --- another process acting at the application's marks (red-team passes 24-26): the edit module's after() starts it;
# it acts twice, at MARK (then MARK.done) and at MARK2 (then MARK2.done); the entry waits at each mark with _at

TWICE = """import subprocess, sys
FIRST, SECOND = {first!r}, {second!r}
def before():
    pass
def after():
    subprocess.Popen([sys.executable, "-c", "import os, sys, time\\n"
                      "def at(mark):\\n"
                      "    while not os.path.exists(mark): time.sleep(0.01)\\n"
                      "at(sys.argv[1]); exec(sys.argv[2]); open(sys.argv[1] + '.done', 'w').close()\\n"
                      "at(sys.argv[3]); exec(sys.argv[4]); open(sys.argv[3] + '.done', 'w').close()\\n",
                      {mark!r}, FIRST, {mark2!r}, SECOND])
"""

WAIT = """def _at(mark):
    open(mark, "w").close()
    deadline = time.monotonic() + 20
    while not os.path.exists(mark + ".done") and time.monotonic() < deadline:
        time.sleep(0.01)
"""

CRITERION = """

def criterion(outputs, ids, records, params):
    return dict(passed=True, summary="ok")
"""

RELINK = "import os; os.symlink({to!r}, {link!r} + '.tmp'); os.replace({link!r} + '.tmp', {link!r})"


# --- the resume check's calls (red-team passes 28-30): phase "runner", the call to K (resume_calls.call_to_k), its
# result and seal kept as JSON, then a pause (check writing the order, the new process loading: a thread the call left
# running runs on); phase "straight", the uninterrupted call from its order in a new process; phase "worker", the
# resumed run from its order in a new process (resume_app.worker_call, as _serve runs each), judged as
# resume_app.check judges it ------------------------------------------------------------------------------------------

RESUME_PHASES = r"""
import json, os, runpy, sys, time
os.environ["KERNODECK_CACHE"] = sys.argv[5]
from pathlib import Path
runpy.run_path(sys.argv[1])
sys.path.insert(0, sys.argv[4])  # the stand-in torch
import numpy as np
from kernodeck_inenv import application, resume_app, resume_calls, settings, steprun, world
from kernodeck_inenv._common import CheckFailed, Context
import torch
config = json.loads(Path(sys.argv[2]).read_text())
out, phase = Path(sys.argv[3]), sys.argv[6]
settings.apply(deterministic=True)  # as the settings step (runner) and apply_settings (worker) do
folder = out / "resume-application"
cfg = {"entry": {"file": "app.py", "function": "train"}, "steps": 6, "checkpoint_at": 3,
       "outputs": {"w": {"kind": "exact", "dtype": "int64", "justification": "the state"}}}
keep = out.parent / "trained.json"

def dump(t):
    return {"outputs": {k: v.tolist() for k, v in t.outputs.items()},
            "losses": {str(k): v for k, v in t.losses.items()}, "counters": t.counters}

def load(d):
    return resume_app.Trained({k: np.array(v, dtype=np.int64) for k, v in d["outputs"].items()},
                              {int(k): v for k, v in d["losses"].items()}, d["counters"])

try:
    if phase == "runner":
        ctx = Context(config=config, out=out)
        ctx.state["settings"] = settings.read_back(torch)
        world.forget()
        head, seal = resume_calls.call_to_k(  # as resume_app.check makes it
            lambda where, upto, save_at: resume_app.call_train(cfg, ctx, {}, "cpu", where, upto, save_at, None, None),
            ctx, folder, 3)
        time.sleep(1.0)  # check writing the order, the new process loading: a thread left running runs on
        world.settle()
        steprun.held(ctx, "resume-application")
        keep.write_text(json.dumps({"head": dump(head), "sources": application.located(ctx), "seal": seal,
                                    "settings": ctx.state["settings"]}))
        print(json.dumps({"status": "passed"}))
    else:
        kept = json.loads(keep.read_text())
        order = {"cfg": cfg, "root": config["project_root"], "app": config["application"], "out": str(out),
                 "params": {}, "device": "cpu", "drop": None, "sources": kept["sources"],
                 "settings": kept["settings"], "libraries": []}
        if phase == "straight":
            straight = resume_app.worker_call({**order, "resume_from": None, "folder": str(folder / "uninterrupted")})
            kept["straight"] = dump(straight)
            keep.write_text(json.dumps(kept))
            print(json.dumps({"status": "passed"}))
        else:
            exec(sys.argv[7])  # what the env's own code did in this new process before the call (a test's stand-in)
            resumed = resume_app.worker_call({**order, "seal": kept["seal"], "resume_from": str(folder / "checkpoint"),
                                              "folder": str(folder / "resumed-run")})
            verdict = resume_app.judge(cfg, load(kept["straight"]), load(kept["head"]), resumed, 0.0)
            print(json.dumps({"status": "passed" if verdict["passed"] else "differs",
                              "sees": verdict.get("declaration_sees")}))
except CheckFailed as exc:
    print(json.dumps({"status": "failed", "error": str(exc)}))
"""


def resume_phases(tmp_path: Path, app_tail: str, worker_start: str = "", *, script: str = RESUME_PHASES,
                  table_extra: dict[str, Any] | None = None, upto: str = "worker") -> dict[str, Any]:
    """The resume check's phases (``script``, a variant of :data:`RESUME_PHASES`) up to ``upto`` on a closed project
    whose app.py ends with ``app_tail`` (its ``train``), declaring ``table_extra`` too; the result of the last phase
    that ran, with ``phase``. ``worker_start``: code the worker phase runs before its call, as the env's own code in
    that new process would. The run's config and the stand-in torch stay in ``tmp_path`` (config.json, faketorch)."""
    config, fake = declared_project(tmp_path, APP + app_tail, table_extra)  # the closed project's app.py, the train
    result: dict[str, Any] = {}
    phases = ("runner", "straight", "worker")
    for phase in phases[:phases.index(upto) + 1]:
        done = _script(tmp_path, config, script,
                       flags=[str(fake), str(tmp_path / "cache"), phase, worker_start])
        assert done.stdout.strip(), done.stderr
        result = {**json.loads(done.stdout.strip().splitlines()[-1]), "phase": phase}
        if result["status"] != "passed":
            break
    return result


# --- one judgement of the closed world, and one step, in this process (red-team passes 53, 54) ----------------------

def bare_context(tmp_path: Path) -> Context:
    """An in-env context on an empty project (``tmp_path/project``), its run folder ``tmp_path/run``."""
    root = tmp_path / "project"
    root.mkdir(exist_ok=True)
    return Context(config={"project_root": str(root)}, out=tmp_path / "run")


def stranger(ctx: Context, path: str) -> dict[str, str] | None:
    """The closed world's judgement of one file read, nothing declared (world._stranger)."""
    return world._stranger(ctx, {}, (os.path.realpath(ctx.out) + os.sep,), path)


def without_invariants(monkeypatch: Any) -> None:
    """steprun.run without the invariants held after a step (libraries, settings: not what such a test is about)."""
    monkeypatch.setattr(steprun, "held", lambda *_args, **_kwargs: None)


def window_context(tmp_path: Path) -> Context:
    """bare_context with what a window reads of the declaration (no source declared, an empty sample)."""
    ctx = bare_context(tmp_path)
    (Path(ctx.config["project_root"]) / "sample.jsonl").write_text("", encoding="utf-8")
    ctx.config["application"] = {"sources": {}, "sample": "sample.jsonl"}
    return ctx


def criterion_opening(ctx: Context, *files: str) -> dict[str, Any]:
    """The criterion step as the runner runs it, its window (world.window: the real audit hook) opening ``files``."""
    def criterion() -> dict[str, Any]:
        with world.window(ctx, "the criterion"):
            for path in files:
                with open(path, "rb") as fh:
                    fh.read()
        return {"passed": True}

    return steprun.run(ctx, "criterion", criterion)
