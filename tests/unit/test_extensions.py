"""Compiled extensions (issue 33) on a small fake env of REAL shared objects built here with gcc (no torch needed):
discovery from outside (DT_NEEDED, RECORD, the version label), the in-env ``extensions`` step run by the real runner
in that env (an undefined symbol, a missing library, a smoke check against its reference, the path it took), and
the CUDA architecture rule on fixture lists. The real torch extension end to end: tests/e2e/test_extensions_e2e.py.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest

from kernodeck.env import extension_scan
from kernodeck.env.elfneeded import needed_from_headers
from kernodeck.inenv import extensions as inenv_ext
from tests.helpers.extstep import run_step

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to build the shared objects")

FAKE_TORCH = "__version__ = '2.13.0+cpu'\nclass version:\n    cuda = None\n    hip = None\n"
C10 = "int c10_present(void) { return 10; }\n"
# A Python extension linking libc10: ``add`` is its op; BROKEN calls a c10 function libc10 does not export.
EXT = r"""
#include <Python.h>
extern int c10_present(void);
#ifdef BROKEN
extern int _ZN3c105Error4whatEv(void);
#endif
static PyObject* add(PyObject* self, PyObject* args) {
    double a, b;
    if (!PyArg_ParseTuple(args, "dd", &a, &b)) return NULL;
#ifdef BROKEN
    a += _ZN3c105Error4whatEv();
#endif
    return PyFloat_FromDouble(a + b + (c10_present() - 10));
}
static PyMethodDef methods[] = {{"add", add, METH_VARARGS, "a + b"}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "_C", NULL, -1, methods};
PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&mod); }
"""
SMOKE = """
def smoke(ext, device):
    return {"output": [ext.add(1.0, 2.0)], "reference": [REF], "path": "compiled"}
"""


def _record(site: Path, info: Path, files: list[str]) -> None:
    lines = []
    for rel in files:
        data = (site / rel).read_bytes()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        lines.append(f"{rel},sha256={digest},{len(data)}")
    lines.append(f"{info.name}/RECORD,,")
    (info / "RECORD").write_text("\n".join(lines) + "\n", encoding="utf-8")


def _dist(site: Path, name: str, version: str, files: list[str], requires: tuple[str, ...] = ()) -> None:
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                                   + "".join(f"Requires-Dist: {r}\n" for r in requires), encoding="utf-8")
    _record(site, info, files)


def _gcc(*args: str) -> None:
    subprocess.run(["gcc", "-shared", "-fPIC", "-O0", *args], check=True, capture_output=True)


def fake_env(root: Path, *, broken: bool = False, rpath: bool = True, label: str = "+pt25cu124",
             requires: tuple[str, ...] = ("torch>=2.5",)) -> Path:
    """A venv whose site-packages holds a fake torch (its own libc10.so) and kdext, an extension linking libc10."""
    env = root / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True, capture_output=True)
    site = next((env / "lib").glob("python*/site-packages"))
    (site / "torch" / "lib").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text(FAKE_TORCH, encoding="utf-8")
    (root / "c10.c").write_text(C10, encoding="utf-8")
    _gcc("-o", str(site / "torch/lib/libc10.so"), str(root / "c10.c"))
    _dist(site, "torch", "2.13.0+cpu", ["torch/__init__.py", "torch/lib/libc10.so"])
    (site / "kdext").mkdir()
    (site / "kdext" / "__init__.py").write_text("", encoding="utf-8")
    (root / "ext.c").write_text(EXT, encoding="utf-8")
    so = f"kdext/_C{sysconfig.get_config_var('EXT_SUFFIX')}"
    _gcc(*(["-DBROKEN"] if broken else []), f"-I{sysconfig.get_paths()['include']}", "-o", str(site / so),
         str(root / "ext.c"), f"-L{site / 'torch/lib'}", "-lc10",
         *(["-Wl,-rpath,$ORIGIN/../torch/lib"] if rpath else []))
    _dist(site, "kdext", f"1.0{label}", ["kdext/__init__.py", so], requires=requires)
    # the numpy the step's comparison uses, without copying it: a .pth naming this interpreter's site-packages
    (site / "host.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    return env


def test_discovery_finds_the_extension_not_torchs_own_with_what_it_was_built_for(tmp_path: Path) -> None:
    env = fake_env(tmp_path)
    found = extension_scan.discover(env, cuobjdump="")
    assert [e.distribution for e in found.extensions] == ["kdext"]  # torch's own libc10.so is not an extension
    ext = found.extensions[0]
    (obj,) = ext.objects
    assert obj.module == "kdext._C" and obj.links == ("libc10.so",) and obj.path.startswith("kdext/_C.")
    assert obj.compiler.startswith("GCC:") and obj.cuda_arches is None  # no cuobjdump: not read
    assert ext.built_for["torch"] == "2.5" and ext.built_for["cuda"] == "12.4"
    assert ext.built_for["from"] == "version label +pt25cu124"
    config = found.as_config()
    assert config["discovered"][0]["objects"][0]["module"] == "kdext._C"


def test_discovery_reads_the_torch_pin_from_the_metadata_headers_not_from_its_description(tmp_path: Path) -> None:
    env = fake_env(tmp_path, label="")
    meta = next(env.glob("lib/python*/site-packages/kdext-*.dist-info")) / "METADATA"
    meta.write_text(meta.read_text(encoding="utf-8") + "\nA description.\nRequires-Dist: torch==0.1\n",
                    encoding="utf-8")
    (ext,) = extension_scan.discover(env, cuobjdump="").extensions
    assert ext.built_for["torch"] == ">=2.5" and ext.built_for["from"].startswith("Requires-Dist: torch")


def test_the_needed_libraries_are_read_from_the_headers_as_pyelftools_reads_them(tmp_path: Path) -> None:
    from elftools.elf.elffile import ELFFile

    env = fake_env(tmp_path)
    site = next(env.glob("lib/python*/site-packages"))
    objects = [site / "torch/lib/libc10.so", *site.glob("kdext/_C*.so")]
    for so in objects:
        with so.open("rb") as handle:
            assert needed_from_headers(handle) == extension_scan._needed(ELFFile(handle))
    with objects[1].open("rb") as handle:
        assert "libc10.so" in (needed_from_headers(handle) or [])
    # headers that cannot be followed: no answer from them, and the name is searched for in the bytes instead
    garbled = tmp_path / "garbled.so"
    garbled.write_bytes(b"\x7fELF\x02\x01" + b"\xff" * 58 + b"...libtorch_cpu.so...")
    with garbled.open("rb") as handle:
        assert needed_from_headers(handle) is None
        assert extension_scan._names_torch(handle)
    plain = tmp_path / "plain.so"
    plain.write_bytes(objects[0].read_bytes())  # libc10 itself needs no torch library
    with plain.open("rb") as handle:
        assert not extension_scan._names_torch(handle)


def test_built_for_reads_the_label_the_torch_pin_and_the_cuda_runtime() -> None:
    obj = extension_scan.SharedObject("x/_C.so", "x._C", ("libtorch.so",), ("libtorch.so", "libcudart.so.12"), "", None)
    assert extension_scan.built_for("2.0+pt210cu130", [], [obj])["torch"] == "2.10"
    assert extension_scan.built_for("2.0+pt210cu130", [], [obj])["cuda"] == "13.0"
    pinned = extension_scan.built_for("1.0", ["torch==2.5.1", "numpy"], [obj])
    assert pinned["torch"] == "==2.5.1" and pinned["cuda"] == "12"
    assert pinned["from"] == "Requires-Dist: torch, needs libcudart.so.12"
    assert extension_scan.built_for("1.0", [], []) == {}


def test_an_env_without_extensions_passes_and_says_so(tmp_path: Path) -> None:
    env = fake_env(tmp_path)
    shutil.rmtree(next(env.glob("lib/python*/site-packages/kdext-*.dist-info")))
    assert extension_scan.discover(env, cuobjdump="").extensions == ()
    result = run_step(env, tmp_path)
    assert result["status"] == "passed", result
    assert result["details"]["summary"].startswith("no compiled extension in the env")


def test_a_sound_extension_is_imported_and_its_smoke_check_runs(tmp_path: Path) -> None:
    env = fake_env(tmp_path)
    (tmp_path / "checks").mkdir()
    (tmp_path / "checks" / "ext.py").write_text(SMOKE.replace("REF", "3.0"), encoding="utf-8")
    decl = {"kdext": {"module": "kdext._C", "smoke": "checks/ext.py:smoke", "rtol": 0.0, "atol": 1e-12,
                      "path": "compiled"}}
    result = run_step(env, tmp_path, decl)
    assert result["status"] == "passed", result
    (record,) = result["details"]["extensions"]
    assert record["distribution"] == "kdext" and record["objects"][0]["imported"] is True
    assert record["built_for"]["torch"] == "2.5" and record["torch_matches"] is False  # recorded beside 2.13
    assert result["details"]["smoke"]["kdext"]["max_abs"] == 0.0
    # the bytes it ran, recorded (and in the reference's identity: app_contract.Application.smoke)
    smoke_sha256 = hashlib.sha256((tmp_path / "checks" / "ext.py").read_bytes()).hexdigest()
    assert result["details"]["smoke"]["kdext"]["smoke_sha256"] == smoke_sha256
    assert result["details"]["running"]["torch"] == "2.13.0+cpu"
    assert "smoke kdext: max abs 0 on cpu, path compiled" in result["details"]["summary"]


def test_an_undefined_symbol_is_an_abi_break_named_with_its_symbol_and_cause(tmp_path: Path) -> None:
    env = fake_env(tmp_path, broken=True)
    result = run_step(env, tmp_path)
    assert result["status"] == "failed" and result["layer"] == "extension-abi", result
    error = result["error"]
    assert error.startswith("extension kdext: _C.") and "undefined symbol" in error
    if shutil.which("c++filt"):
        assert "c10::Error::what()" in error and "(_ZN3c105Error4whatEv)" in error
    assert "built for torch 2.5 / CUDA 12.4 (version label +pt25cu124)" in error
    assert "this env runs torch 2.13.0+cpu / no CUDA: rebuild it against this torch" in error
    assert result["details"]["symbol"] == "_ZN3c105Error4whatEv"


def test_a_missing_library_is_an_abi_break(tmp_path: Path) -> None:
    env = fake_env(tmp_path, rpath=False, label="", requires=())
    result = run_step(env, tmp_path)
    assert result["status"] == "failed" and result["layer"] == "extension-abi", result
    assert "needs libc10.so, which cannot be loaded here" in result["error"]
    assert "built for another torch or CUDA than this env's (it records none)" in result["error"]


@pytest.mark.parametrize(
    ("smoke", "decl", "said"),
    [
        (SMOKE.replace("REF", "3.5"), {}, "smoke output differs from its pure-PyTorch reference beyond the declared"),
        (SMOKE.replace("REF", "3.0"), {"path": "cuda-kernel"},
         "took the path 'compiled', not the declared 'cuda-kernel' (a fallback was used)"),
    ],
)
def test_a_smoke_check_that_disagrees_fails_naming_the_extension(tmp_path: Path, smoke: str, decl: dict[str, str],
                                                                  said: str) -> None:
    env = fake_env(tmp_path)
    (tmp_path / "checks").mkdir()
    (tmp_path / "checks" / "ext.py").write_text(smoke, encoding="utf-8")
    declared = {"kdext": {"module": "kdext._C", "smoke": "checks/ext.py:smoke", "rtol": 1e-6, "atol": 1e-6, **decl}}
    result = run_step(env, tmp_path, declared)
    assert result["status"] == "failed" and result["layer"] == "operator:kdext", result
    assert result["error"].startswith("extension kdext: ") and said in result["error"]


# The CUDA rule on fixture lists: (device capability, cubins, PTX) -> what runs, or None.
ARCH_CASES = [
    ("8.0", ["sm_80"], [], "sm_80"),
    ("8.6", ["sm_80"], [], "sm_80"),  # same major, lower minor: binary compatible
    ("8.0", ["sm_86"], [], None),  # a higher minor does not run on a lower one
    ("9.0", ["sm_80", "sm_86"], [], None),  # another major: no cubin runs
    ("9.0", ["sm_80"], ["compute_80"], "compute_80 (PTX, compiled at load)"),  # PTX is JIT-compiled upward
    ("7.5", ["sm_80"], ["compute_80"], None),  # PTX never runs on an older device
    ("9.0", ["sm_90a"], [], "sm_90a"),
    ("10.0", ["sm_90a"], ["compute_90a"], None),  # arch-specific code runs on its own capability only
    ("12.0", ["sm_100", "sm_120"], [], "sm_120"),
    ("8.9", [], [], None),
]


@pytest.mark.parametrize(("capability", "cubins", "ptx", "runs"), ARCH_CASES)
def test_the_cuda_arch_rule_on_fixture_lists(capability: str, cubins: list[str], ptx: list[str],
                                             runs: str | None) -> None:
    assert inenv_ext.arch_runs(capability, cubins, ptx) == runs


def test_an_extension_with_no_code_for_the_device_fails_before_the_application() -> None:
    from kernodeck.inenv._common import CheckFailed

    obj = {"path": "kdext/_C.so", "cuda_arches": ["sm_80", "sm_86"], "ptx": []}
    assert inenv_ext._check_arches("kdext", obj, "8.6", "cuda:0") == "runs sm_80 on 8.6"
    with pytest.raises(CheckFailed) as failed:
        inenv_ext._check_arches("kdext", obj, "9.0", "cuda:0")
    assert failed.value.layer == "extension-abi:arch"
    assert "none runs on cuda:0 (compute capability 9.0)" in str(failed.value)
    assert inenv_ext._check_arches("kdext", {**obj, "cuda_arches": None}, "9.0", "cuda:0") == "not read (no cuobjdump)"
    assert inenv_ext._check_arches("kdext", {**obj, "cuda_arches": []}, "9.0", "cuda:0") == "no CUDA code"


def test_cuobjdumps_listing_is_read_for_arches_and_ptx(tmp_path: Path) -> None:
    tool = tmp_path / "cuobjdump"
    tool.write_text("#!/bin/sh\nif [ \"$1\" = --list-elf ]; then echo 'ELF file    1: x.1.sm_80.cubin'; "
                    "echo 'ELF file    2: x.2.sm_90a.cubin'; else echo 'PTX file    1: x.1.compute_90.ptx'; fi\n")
    tool.chmod(0o755)
    assert extension_scan.cuda_arches(tmp_path / "x.so", str(tool)) == (("sm_80", "sm_90a"), ("compute_90",))


def _twin(wheels: list[str]) -> Any:
    from packaging.pylock import Pylock

    def file(name: str) -> dict[str, Any]:
        return {"name": name, "url": f"https://files.example.org/{name}", "hashes": {"sha256": "ab" * 32}}

    return Pylock.from_dict({"lock-version": "1.0", "created-by": "tests", "packages": [
        {"name": "kdbuilt", "version": "1.0", "sdist": file("kdbuilt-1.0.tar.gz"), "wheels": [file(w) for w in wheels]},
    ]})


def test_a_pin_built_here_from_its_sdist_is_named_with_its_generator_and_digests(tmp_path: Path) -> None:
    env = fake_env(tmp_path)
    site = next(env.glob("lib/python*/site-packages"))
    (site / "kdbuilt").mkdir()
    (site / "kdbuilt" / "__init__.py").write_text("", encoding="utf-8")
    _dist(site, "kdbuilt", "1.0", ["kdbuilt/__init__.py"])
    info = site / "kdbuilt-1.0.dist-info"
    (info / "WHEEL").write_text("Wheel-Version: 1.0\nGenerator: setuptools (80.9.0)\nRoot-Is-Purelib: false\n"
                                "Tag: cp311-cp311-linux_x86_64\n", encoding="utf-8")
    # the lock holds only a manylinux wheel: the installed linux_x86_64 one was built here
    wheel = "kdbuilt-1.0-cp311-cp311-manylinux_2_28_x86_64.whl"
    found = extension_scan.discover(env, cuobjdump="", twin=_twin([wheel]))
    (made,) = found.built_here
    assert (made.name, made.version, made.generator, made.sdist) == ("kdbuilt", "1.0", "setuptools (80.9.0)",
                                                                      "kdbuilt-1.0.tar.gz")
    assert made.tags == ("cp311-cp311-linux_x86_64",) and made.sdist_sha256 == "ab" * 32
    assert made.record_sha256 == hashlib.sha256((info / "RECORD").read_bytes()).hexdigest()
    assert found.as_config()["built_here"][0]["name"] == "kdbuilt"
    result = run_step(env, tmp_path, twin=_twin(["kdbuilt-1.0-cp311-cp311-manylinux_2_28_x86_64.whl"]))
    assert result["status"] == "passed", result
    assert "built here from kdbuilt-1.0.tar.gz: kdbuilt 1.0 (setuptools (80.9.0))" in result["details"]["summary"]
    # the control: a locked wheel carrying the installed tag was downloaded, not built here
    assert extension_scan.discover(env, cuobjdump="", twin=_twin(["kdbuilt-1.0-cp311-cp311-linux_x86_64.whl"])
                               ).built_here == ()
    assert extension_scan.discover(env, cuobjdump="").built_here == ()  # no twin: nothing to tell it by


def test_a_smoke_check_that_raises_fails_naming_the_extension_and_its_line(tmp_path: Path) -> None:
    env = fake_env(tmp_path)
    (tmp_path / "checks").mkdir()
    (tmp_path / "checks" / "ext.py").write_text("def smoke(ext, device):\n    return ext.add(1.0)\n", encoding="utf-8")
    declared = {"kdext": {"module": "kdext._C", "smoke": "checks/ext.py:smoke", "rtol": 0.0, "atol": 0.0}}
    result = run_step(env, tmp_path, declared)
    assert result["status"] == "failed" and result["layer"] == "operator:kdext", result
    assert result["error"].startswith("extension kdext: its smoke check checks/ext.py:smoke raised TypeError")
    assert result["details"]["raised_at"] == "checks/ext.py:2 in smoke"


def test_a_smoke_check_runs_from_its_fingerprinted_bytes_in_the_closed_world(tmp_path: Path) -> None:
    """The smoke check is the project's code: loaded unchecked and run outside any window, it read an undeclared file
    and could hand it on (red-team pass 11). Its reads are judged now, and a file changed after the run's
    fingerprint is not run."""
    env = fake_env(tmp_path)
    (tmp_path / "checks").mkdir()
    (tmp_path / "undeclared.txt").write_text("7", encoding="utf-8")
    smoke = tmp_path / "checks" / "ext.py"
    smoke.write_text("from pathlib import Path\n\ndef smoke(ext, device):\n"
                     "    float((Path(__file__).parents[1] / 'undeclared.txt').read_text())\n"
                     "    return {'output': [ext.add(1.0, 2.0)], 'reference': [3.0]}\n", encoding="utf-8")
    declared = {"kdext": {"module": "kdext._C", "smoke": "checks/ext.py:smoke", "rtol": 0.0, "atol": 0.0}}
    result = run_step(env, tmp_path, declared)
    assert result["status"] == "failed" and "undeclared.txt (opened)" in result["error"], result
    assert "the smoke check of kdext" in result["error"], result


def test_what_the_smoke_answer_reads_is_judged_in_its_window(tmp_path: Path) -> None:
    """A lazy output converts itself where Kernodeck reads it: that read happened after the window closed, neither
    recorded nor judged (red-team pass 38, WINDOW1). The answer is made plain data inside the window now: what its
    ``__array__`` opens is named as the smoke call's own read."""
    env = fake_env(tmp_path)
    (tmp_path / "checks").mkdir()
    (tmp_path / "undeclared.txt").write_text("3.0", encoding="utf-8")
    (tmp_path / "checks" / "ext.py").write_text(
        "from pathlib import Path\n\nclass Lazy:\n"
        "    def __array__(self, dtype=None, copy=None):\n"
        "        import numpy as np\n"
        "        return np.array([float((Path(__file__).parents[1] / 'undeclared.txt').read_text())])\n\n"
        "def smoke(ext, device):\n"
        "    return {'output': Lazy(), 'reference': [ext.add(1.0, 2.0)]}\n", encoding="utf-8")
    declared = {"kdext": {"module": "kdext._C", "smoke": "checks/ext.py:smoke", "rtol": 0.0, "atol": 0.0}}
    result = run_step(env, tmp_path, declared)
    assert result["status"] == "failed" and "undeclared.txt (opened)" in result["error"], result
    assert "the smoke check of kdext" in result["error"], result


SMOKE_THEN_ENTRY = """
import hashlib, json, runpy, sys
from pathlib import Path
runpy.run_path(sys.argv[1])
from kernodeck_inenv import application, extensions, settings, world
from kernodeck_inenv._common import CheckFailed, Context
config = json.loads(Path(sys.argv[2]).read_text())
ctx = Context(config=config, out=Path(sys.argv[3]))
sys.path.insert(0, sys.argv[4])  # the stand-in torch, set and read back as the settings step does
import torch
settings.apply()
ctx.state["settings"] = settings.read_back(torch)
smoke = Path(config["project_root"]) / "checks" / "ext.py"
decl = {"module": "json", "smoke": "checks/ext.py:smoke", "rtol": 0.0, "atol": 0.0,
        "smoke_sha256": hashlib.sha256(smoke.read_bytes()).hexdigest()}
try:
    world.forget()
    extensions._smoke(ctx, "kdext", decl, "cpu", {}, {})  # the extensions step's call, before the application
    world.settle()
    print(json.dumps({"status": "passed", "deterministic": torch.are_deterministic_algorithms_enabled()}))
except CheckFailed as exc:
    print(json.dumps({"status": "failed", "error": str(exc)}))
"""


@pytest.mark.parametrize("turns_off", [True, False], ids=["determinism-off", "control"])
def test_a_smoke_check_that_changes_a_setting_fails_naming_it(tmp_path: Path, turns_off: bool) -> None:
    """A smoke check runs after the settings step and before the application: one that turned determinism off left it
    off for the application's run, which settings.json records as verified (red-team pass 12). Watched as the
    application's code is, it fails; the control changes nothing and passes."""
    from tests.helpers.closedworld import _script, _settings_project

    config, fake = _settings_project(tmp_path)
    root = Path(config["project_root"])
    (root / "checks").mkdir()
    change = "    torch.use_deterministic_algorithms(False)\n" if turns_off else ""
    (root / "checks" / "ext.py").write_text(
        f"import torch\n\n\ndef smoke(ext, device):\n{change}    return {{'output': [1.0], 'reference': [1.0]}}\n",
        encoding="utf-8")
    done = _script(tmp_path, config, SMOKE_THEN_ENTRY, flags=[str(fake)])
    result = json.loads(done.stdout.strip().splitlines()[-1]) if done.stdout.strip() else {"stderr": done.stderr}
    if turns_off:
        assert result.get("status") == "failed" and "the smoke check of kdext" in result.get("error", ""), result
        assert "deterministic" in result["error"], result
    else:
        assert result == {"status": "passed", "deterministic": True}, result


def test_report_md_names_the_extension_abi_layer_and_its_cause() -> None:
    from kernodeck.inenv.protocol import Status
    from kernodeck.verify.markdown import likely_cause
    from kernodeck.verify.record import Step
    from kernodeck.verify.report import Report

    cause = "built for torch 2.5 / CUDA 12.4 (version label +pt25cu124); this env runs torch 2.13.0+cpu / no CUDA"
    failed = Step("extensions", Status.FAILED, error="extension kdext: ...", layer="extension-abi",
                  details={"likely_cause": cause})
    said = likely_cause(Report("p", [failed]), failed)
    assert said == f"the extension-abi layer: a compiled extension does not match this env's torch/CUDA: {cause}."
    other = Step("extensions", Status.FAILED, error="x", layer="operator:kdext")
    assert "extension-abi" not in likely_cause(Report("p", [other]), other)


def test_cuobjdump_is_found_on_path_or_in_the_cuda_toolkit(tmp_path: Path) -> None:
    toolkit = tmp_path / "cuda" / "bin"
    toolkit.mkdir(parents=True)
    assert extension_scan.find_cuobjdump({"PATH": str(tmp_path), "CUDA_HOME": str(tmp_path / "cuda")}) == ""
    (toolkit / "cuobjdump").write_text("#!/bin/sh\n")
    (toolkit / "cuobjdump").chmod(0o755)
    assert extension_scan.find_cuobjdump({"PATH": str(tmp_path), "CUDA_HOME": str(tmp_path / "cuda")}) == str(
        toolkit / "cuobjdump")
    assert extension_scan.find_cuobjdump({"PATH": str(toolkit)}) == str(toolkit / "cuobjdump")
