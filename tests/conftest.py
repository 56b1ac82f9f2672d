"""Fixtures and hooks only (plain helpers live in tests/helpers/, imported from there; nothing imports this file).
Tests are hermetic: no PIP_*/UV_* variables unless a test needs the real package sources."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import builtenv, crossworker, fresh, sharedruns, tinyapp
from tests.helpers.project import ROOT, copy_project, kd
from tests.helpers.removals import REMOVALS
from tests.helpers.sharedruns import SharedRun


def pytest_configure(config: pytest.Config) -> None:
    """A parallel run's workers share the machine's cores: each verify they start runs torch with a thread per core,
    so two workers ran four spinning OpenMP threads on two cores (a MiniLM determinism step took 9.4 s beside
    another worker, 0.55 s alone). Each worker's processes get their share of the cores, unless the caller set it;
    what a run records of it (OMP_NUM_THREADS, torch's threads) is a recorded setting, never a failure."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1 and "OMP_NUM_THREADS" not in os.environ:
        os.environ["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // workers))


@pytest.fixture(autouse=True)
def hermetic(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in list(os.environ):
        if var.startswith(("PIP_", "UV_")) or var in (
            "PYTHONPATH",
            "VIRTUAL_ENV",
            "KERNODECK_VARIANT",
            "KERNODECK_FAULT",
        ):
            monkeypatch.delenv(var, raising=False)


def pytest_report_header(config: pytest.Config) -> str:
    """Free disk where the run writes (the slow tests rebuild real envs: ~1.2 GB each, removed as each passes)."""
    free = shutil.disk_usage(config._tmp_path_factory.getbasetemp()).free  # type: ignore[attr-defined]
    return (f"kernodeck: {free / 2**30:.1f} GiB free for the run's folders (the whole suite took up to 7.5 GiB at once "
            "on 2026-12-01, all of it given back when it passed)")


_OUTCOME = pytest.StashKey[dict[str, bool]]()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    report = yield
    item.stash.setdefault(_OUTCOME, {})[report.when] = report.passed
    return report


@pytest.fixture
def tmp_path(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """pytest's ``tmp_path`` (a numbered folder named after the test, kept when the test failed), removed beside the
    tests that follow when it passed (tests/helpers/removals.py) instead of in its teardown."""
    path = tmp_path_factory.mktemp(re.sub(r"[\W]", "_", request.node.name)[:30], numbered=True)
    yield path
    if request.node.stash.get(_OUTCOME, {}).get("call", True):
        REMOVALS.start(path)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    REMOVALS.wait()
    _write_reliability_table()


@pytest.fixture(scope="session", autouse=True)
def suite_uv_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Fresh machines share one uv cache inside pytest's base folder, removed with it when the run passes; the
    workers of a parallel run (pytest-xdist: a base folder each, under one root) share the root's."""
    fresh.use_suite_uv_cache(crossworker.shared_root(tmp_path_factory) / "uv-cache")


@pytest.fixture(scope="module")
def module_tmp(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A folder for a module's shared fixtures (a rebuilt env is ~1.2 GB: its files are copies, never links),
    removed when the module ends with no test failed, as pytest removes a passed test's tmp_path."""
    path = tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1])
    failed = request.session.testsfailed
    yield path
    if request.session.testsfailed == failed:
        REMOVALS.start(path)


@pytest.fixture(scope="session")
def built_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the project with its real environment rebuilt once for the whole run, every worker of a parallel
    run included (tests/helpers/crossworker.py): torch, sentence-transformers, the model. Its readers never change it.

    Needs this machine's package sources (pip config): the one kind of test allowed to use them.
    """
    def make(folder: Path) -> dict[str, object]:
        project = copy_project(folder / "project")
        proc = kd(project, "rebuild")
        if proc.returncode != 0:
            raise RuntimeError(f"rebuild of the real environment failed:\n{proc.stderr[-3000:]}")
        return {"project": str(project)}

    _, made = crossworker.once(tmp_path_factory, "built", make)
    return Path(str(made["project"]))


@pytest.fixture(scope="session")
def passed_run(built_project: Path, tmp_path_factory: pytest.TempPathFactory) -> SharedRun:
    """ONE passing verify of the unmodified built project for the whole run, for the tests that only read its
    dossier, output or read counts (tests/helpers/sharedruns.py says how it is made so that each can; each asserts
    that it passed)."""
    return sharedruns.shared(tmp_path_factory, "passed-run",
                             lambda folder: sharedruns.passed_run(built_project, folder))


@pytest.fixture(scope="session")
def gpu_missing_run(built_project: Path, tmp_path_factory: pytest.TempPathFactory) -> SharedRun:
    """ONE verify of the built project that fails at backend (``--expect-backend cuda`` on a CPU), for its readers."""
    return sharedruns.shared(tmp_path_factory, "gpu-missing-run",
                             lambda folder: sharedruns.gpu_missing_run(built_project, folder))

@pytest.fixture(scope="session")
def concurrent_runs(tiny_referenced: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[SharedRun, SharedRun]:
    """ONE pair of verifies of one copy of the referenced tiny project started at once, for its readers (both
    finish; compared): the platform's file lock and the comparison are Kernodeck's, the same for every application."""
    return sharedruns.shared_pair(
        tmp_path_factory, "concurrent-runs",
        lambda folder: sharedruns.concurrent_pair(tinyapp.copy_referenced(tiny_referenced, folder), folder))

@pytest.fixture(scope="session")
def digits_built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """examples/digits copied with its env rebuilt ONCE for the whole run (tests/helpers/builtenv.py: built_example),
    for the tests that run it in their own copy sharing that env (``builtenv.example_copy``): test_examples' verify,
    test_calibrate_e2e's calibration. Needs this machine's package sources (pip config)."""
    return builtenv.built_example(tmp_path_factory, "digits")


@pytest.fixture(scope="session")
def regression_built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """examples/regression copied with its env rebuilt ONCE for the whole run, as ``digits_built``: for
    test_quickstart_e2e's adopted copy and test_calibrate_e2e's calibration."""
    return builtenv.built_example(tmp_path_factory, "regression")


@pytest.fixture(scope="session")
def tiny_referenced(built_project: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ONE copy of the project declaring the tiny application (tests/helpers/tinyapp.py), referenced, for the whole
    run: its readers never change it; each copies it (``tinyapp.copy_referenced``)."""

    def make(folder: Path) -> dict[str, object]:
        return {"project": str(tinyapp.referenced(built_project, folder))}

    _, made = crossworker.once(tmp_path_factory, "tiny-referenced", make)
    return Path(str(made["project"]))

# --- The reliability table: produced by the suite itself ------------------------------------------------------------
# Tests marked @pytest.mark.reliability(case, "what is tried", "what was kept") are collected; with
# KERNODECK_RELIABILITY_TABLE=1 (the `nox -s reliability` session) docs/reliability.md's section between the markers is
# rewritten from their outcomes, so the table is never typed by hand.
_RELIABILITY: dict[str, dict[str, object]] = {}
README_START, README_END = "<!-- reliability:start -->", "<!-- reliability:end -->"


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    item = _ITEMS.get(report.nodeid)
    if item is None:
        return
    marker = item.get_closest_marker("reliability")
    if marker is None:
        return
    entry = _RELIABILITY.setdefault(
        report.nodeid, {"case": marker.args[0], "tried": marker.args[1], "kept": marker.args[2], "outcome": "passed"}
    )
    if report.failed:
        entry["outcome"] = "FAILED"
    elif report.skipped and report.when in ("setup", "call"):
        entry["outcome"] = "skipped"


_ITEMS: dict[str, pytest.Item] = {}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        _ITEMS[item.nodeid] = item


def _write_reliability_table() -> None:
    if os.environ.get("KERNODECK_RELIABILITY_TABLE") != "1" or not _RELIABILITY:
        return
    rows: dict[int, list[dict[str, object]]] = {}
    for nodeid, entry in _RELIABILITY.items():
        rows.setdefault(int(entry["case"]), []).append({**entry, "test": nodeid.split("::", 1)[1]})  # type: ignore[arg-type]
    lines = [README_START, "", "| # | case tried | outcome | what was kept | tests |", "|---|---|---|---|---|"]
    for case in sorted(rows):
        group = rows[case]
        outcomes = {str(e["outcome"]) for e in group}
        outcome = (
            "FAILED" if "FAILED" in outcomes else ("passed" if outcomes == {"passed"} else "/".join(sorted(outcomes)))
        )
        tests = ", ".join(f"`{e['test']}`" for e in group)
        lines.append(f"| {case} | {group[0]['tried']} | {outcome} | {group[0]['kept']} | {tests} |")
    lines += [
        "",
        f"_Generated by `nox -s reliability` from {len(_RELIABILITY)} test outcomes; do not edit by hand._",
        "",
        README_END,
    ]
    readme = ROOT / "docs" / "reliability.md"
    text = readme.read_text(encoding="utf-8")
    block = "\n".join(lines)
    if README_START in text and README_END in text:
        head, rest = text.split(README_START, 1)
        text = head + block + rest.split(README_END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n## Reliability\n\n" + block + "\n"
    readme.write_text(text, encoding="utf-8")
