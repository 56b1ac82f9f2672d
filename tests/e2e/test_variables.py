"""The variables that change numerics or load code are part of the record (kernodeck/env/start.py): recorded for the
in-env processes, each difference from the reference's named, and an undeclared LD_PRELOAD fails the run before any
in-env process starts. The LD_PRELOAD cases run verify on a tiny hermetic env (no torch: the checks themselves then
fail at `settings`, for that reason, past the gate)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, cast

import pytest

from kernodeck.env import start
from kernodeck.runformat.refdelta import vs_reference
from kernodeck.sources import redact_text
from kernodeck.verify.markdown import _differences
from tests.helpers.project import kd
from tests.helpers.reports import read_report, statuses
from tests.helpers.tinylock import locked_tiny_project, offline_env, pip_wheel, write_wheel

if TYPE_CHECKING:
    from kernodeck.verify.report import Report

LIB = "libm.so.6"  # a library every Linux has: loading it changes nothing, the record and the gate are what is tried


def test_recorded_names_every_family_and_redacts() -> None:
    env = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_NUM_THREADS": "1", "LD_PRELOAD": LIB, "OMP_NUM_THREADS": "2",
           "CUDA_VISIBLE_DEVICES": "0", "NCCL_DEBUG": "INFO", "PYTORCH_NO_CUDA_MEMORY_CACHING": "1",
           "TORCH_HOME": "https://user:secret@host/x", "HOME": "/root", "PATH": "/bin", "HIP_VISIBLE_DEVICES": "0"}
    got = start.recorded(env, lambda value: redact_text(value))
    assert sorted(got) == sorted(k for k in env if k not in ("HOME", "PATH"))
    assert "secret" not in got["TORCH_HOME"] and got["ATEN_CPU_CAPABILITY"] == "avx2"


@pytest.mark.parametrize(
    ("preload", "declared", "undeclared"),
    [
        ("", [], []),
        (LIB, [], [LIB]),
        (f"/usr/lib/{LIB}", [LIB], []),  # declared by file name
        (f"/opt/a.so:{LIB} /opt/b.so", [LIB, "/opt/b.so"], ["/opt/a.so"]),  # colon or space separated
    ],
)
def test_undeclared_preload(preload: str, declared: list[str], undeclared: list[str]) -> None:
    assert start.undeclared_preload({"LD_PRELOAD": preload} if preload else {}, declared) == undeclared


def test_an_audit_library_is_refused_like_a_preloaded_one() -> None:
    """LD_AUDIT: ld.so loads its libraries into every process (red team of issue 29: a verify passed with one that
    ran in every in-env process, recorded as a variable only). Refused unless declared, like LD_PRELOAD."""
    assert start.undeclared_preload({"LD_AUDIT": "/tmp/x/libaudit.so"}, []) == ["/tmp/x/libaudit.so"]
    assert start.undeclared_preload({"LD_AUDIT": "/tmp/x/libaudit.so:/opt/b.so"}, ["libaudit.so"]) == ["/opt/b.so"]
    assert start.undeclared_preload({"LD_AUDIT": "/opt/b.so", "LD_PRELOAD": "/opt/b.so"}, []) == ["/opt/b.so"]


def test_a_variable_difference_is_named_in_the_report(tmp_path: Path) -> None:
    """ATEN_CPU_CAPABILITY set here, not in the reference: a difference, named by the variable."""
    ref, run = tmp_path / "ref", tmp_path / "run"
    for folder, variables in ((ref, {"OMP_NUM_THREADS": "2"}), (run, {"OMP_NUM_THREADS": "2",
                                                                      "ATEN_CPU_CAPABILITY": "default"})):
        folder.mkdir()
        (folder / "system.json").write_text(json.dumps({"os": "Linux", "variables": variables}), encoding="utf-8")
    vs = vs_reference(ref, run)
    assert vs["variables"] == {"ATEN_CPU_CAPABILITY": {"reference": "(unset)", "this run": "default"}}
    assert vs["system"] == {} and vs["not_in_reference"] == []
    lines = _differences(cast("Report", SimpleNamespace(meta={"vs_reference": vs})))
    assert "- variable `ATEN_CPU_CAPABILITY`: (unset) → default" in lines
    # control: the same variables on both sides name no variable
    (run / "system.json").write_text(json.dumps({"os": "Linux", "variables": {"OMP_NUM_THREADS": "2"}}))
    same = _differences(cast("Report", SimpleNamespace(meta={"vs_reference": vs_reference(ref, run)})))
    assert not any("variable `" in line for line in same) and any("the same as the reference" in x for x in same)


def test_ld_preload_fails_unless_declared(tmp_path: Path) -> None:
    links = tmp_path / "links"
    project, _ = locked_tiny_project(tmp_path / "project", [pip_wheel(links), write_wheel(links, "tinya", "1.0")])
    env = offline_env(PIP_FIND_LINKS=str(links), UV_CACHE_DIR=str(tmp_path / "uv-cache"))
    assert kd(project, "rebuild", "--installer", "uv", env=env).returncode == 0
    preloaded = {**env, "LD_PRELOAD": LIB, "OMP_WAIT_POLICY": "ACTIVE"}

    proc = kd(project, "verify", "--no-rebuild", "--out", str(tmp_path / "undeclared"), env=preloaded)
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1 and f"LD_PRELOAD loads {LIB}" in errors[0], proc.stderr[-2000:]
    assert "[tool.kernodeck.environment] ld-preload" in proc.stderr
    report = read_report(tmp_path / "undeclared")
    assert report["first_failure"] == "settings" and statuses(report)["inventory"] == "passed"
    assert report["variables"]["LD_PRELOAD"] == LIB  # type: ignore[index]
    assert not (tmp_path / "undeclared" / "steps").exists()  # no in-env process ran

    pyproject = project / "pyproject.toml"
    pyproject.write_text(pyproject.read_text(encoding="utf-8")
                         + f'\n[tool.kernodeck.environment]\nld-preload = ["{LIB}"]\n', encoding="utf-8")
    proc = kd(project, "verify", "--no-rebuild", "--out", str(tmp_path / "declared"), env=preloaded)
    report = read_report(tmp_path / "declared")
    assert "LD_PRELOAD" not in proc.stderr.split("ERROR:", 1)[-1].splitlines()[0], proc.stderr[-2000:]
    assert report["variables"]["LD_PRELOAD"] == LIB  # type: ignore[index]
    # Kernodeck's own over the caller's, and recorded as the processes got it: idle OpenMP threads sleep
    assert report["variables"]["OMP_WAIT_POLICY"] == "PASSIVE"  # type: ignore[index]
    assert (tmp_path / "declared" / "steps").is_dir()  # the checks started (and failed: this env has no torch)


def test_the_variables_that_move_numerics_outside_torchs_prefixes_are_recorded() -> None:
    """Red team of issue 29 (point 6): each of these passed a verify unrecorded; NPY_DISABLE_CPU_FEATURES=X86_V3
    changes numpy's np.sin in the last bits on an AVX2 machine."""
    env = {"NPY_DISABLE_CPU_FEATURES": "X86_V3", "TORCHINDUCTOR_FREEZING": "1", "TORCHDYNAMO_DISABLE": "1",
           "NVIDIA_TF32_OVERRIDE": "1", "GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX2_Usable", "HOME": "/root"}
    assert sorted(start.recorded(env)) == sorted(k for k in env if k != "HOME")


NUMERIC = {  # the seventh red-team pass: each changes the numbers (or the code) torch and its backends run, unrecorded
    "TRITON_F32_DEFAULT": "tf32", "TRITON_CACHE_DIR": "/tmp/kernels", "MIOPEN_FIND_MODE": "1",
    "ROCBLAS_TENSILE_LIBPATH": "/tmp/t", "HIPBLASLT_TENSILE_LIBPATH": "/tmp/t", "GOTO_NUM_THREADS": "3",
    "BLIS_NUM_THREADS": "3", "MALLOC_PERTURB_": "165", "GCONV_PATH": "/tmp/gconv",
}


@pytest.mark.parametrize("name", sorted(NUMERIC))
def test_a_variable_that_changes_numerics_is_recorded(name: str) -> None:
    assert start.recorded({name: NUMERIC[name], "HOME": "/root"}) == {name: NUMERIC[name]}


LOADING = {"OMP_TOOL_LIBRARIES": "/tmp/libtool.so", "CUDA_INJECTION64_PATH": "/tmp/libinject.so",
           "NCCL_NET_PLUGIN": "/tmp/libnccl-net-x.so", "NCCL_TUNER_PLUGIN": "/tmp/libt.so", "GCONV_PATH": "/tmp/gconv"}


@pytest.mark.parametrize("name", sorted(LOADING))
def test_a_variable_that_loads_code_is_refused_like_ld_preload(name: str) -> None:
    """Each loads code no lock describes into the in-env processes (seventh red-team pass: recorded at most): refused
    unless declared, like LD_PRELOAD; declared by path or file name, it is allowed."""
    assert start.undeclared_preload({name: LOADING[name]}, []) == [LOADING[name]]
    assert start.undeclared_preload({name: LOADING[name]}, [os.path.basename(LOADING[name])]) == []


def test_the_in_env_processes_get_only_recorded_declared_or_plumbing_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """A variable the application reads is an input (seventh red-team pass: ``os.environ["MY_THRESHOLD"]`` in the
    criterion passed unrecorded, and any numeric variable no prefix names reached torch). The in-env processes get an
    allow-list: what is recorded, what is declared (then recorded too), the process's plumbing and Kernodeck's own."""
    for name, value in {"MY_THRESHOLD": "0.9", "SOME_LIBRARY_KNOB": "1", "TRITON_F32_DEFAULT": "tf32",
                        "PATH": "/bin", "KERNODECK_CACHE": "/tmp/c", "PYTHONPATH": "/x", "LC_ALL": "C",
                        "XDG_MY_THRESHOLD": "0.9", "KERNODECK_THRESHOLD": "0.9", "HF_HOME": "/tmp/hf"}.items():
        monkeypatch.setenv(name, value)
    env = start.environ({"PYTHONHASHSEED": "0"})
    assert "MY_THRESHOLD" not in env and "SOME_LIBRARY_KNOB" not in env and "PYTHONPATH" not in env
    # the plumbing is named, never a prefix (eighth pass: XDG_X and KERNODECK_X passed unrecorded)
    assert "XDG_MY_THRESHOLD" not in env and "KERNODECK_THRESHOLD" not in env
    assert start.recorded(env)["HF_HOME"] == "/tmp/hf"  # where the Hugging Face cache is: passed, recorded
    assert env["TRITON_F32_DEFAULT"] == "tf32" and env["PATH"] == "/bin" and env["KERNODECK_CACHE"] == "/tmp/c"
    assert env["PYTHONHASHSEED"] == "0" and env["LC_ALL"] == "C"
    assert {"TRITON_F32_DEFAULT", "LC_ALL"} <= set(start.recorded(env)) and "MY_THRESHOLD" not in start.recorded(env)
    declared = start.declared_variables({"environment": {"variables": ["MY_THRESHOLD"]}})
    env = start.environ({}, declared)
    assert env["MY_THRESHOLD"] == "0.9" and "SOME_LIBRARY_KNOB" not in env
    assert start.recorded(env, declared=declared)["MY_THRESHOLD"] == "0.9"
