"""kernodeck/stackdump.py: faulthandler's dumps read back; the layer and the user's frame a stopped run is named by."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kernodeck.inenv.protocol import Layer
from kernodeck.inenv.steptable import BY_NAME, StepName
from kernodeck.stackdump import INENV, Frame, diagnose, is_user, parse, render

SITE = "/env/lib/python3.11/site-packages"


def _dump(pid: int, parent: int, how: str, *threads: list[tuple[str, int, str]]) -> str:
    lines = [f"# pid {pid} parent {parent} {how}: python runner.py"]
    for number, frames in enumerate(threads):
        lines.append(f"{'Current thread' if number == 0 else 'Thread'} 0x{number + 1:016x} (most recent call first):")
        lines += [f'  File "{file}", line {line} in {func}' for file, line, func in frames]
        lines.append("")
    return "\n".join(lines) + "\n"


def _runner(root: Path, *inner: tuple[str, int, str]) -> list[tuple[str, int, str]]:
    """A main thread: ``inner`` frames (most recent first) over Kernodeck's runner."""
    return [*inner, (str(INENV / "application.py"), 170, "_call_entry"), (str(INENV / "runner.py"), 120, "main"),
            (str(INENV / "runner.py"), 160, "<module>")]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "checks").mkdir()
    (tmp_path / "checks" / "app.py").write_text("x = 1\ny = batch.to(device)\nz = 3\n", encoding="utf-8")
    return tmp_path


def test_the_operator_layer_names_the_users_function_under_a_module_call(root: Path) -> None:
    app = str(root / "checks" / "app.py")
    text = _dump(10, 1, "started", _runner(root, ("/usr/lib/python3.11/time.py", 1, "sleep"), (app, 3, "slow_hook"),
                                           (f"{SITE}/torch/nn/modules/module.py", 1790, "_call_impl"), (app, 1, "run")))
    found = diagnose("application", [parse(text)], 10, root)
    assert found.layer == "operator:slow_hook" and found.user_frame == "checks/app.py:3"


def test_a_worker_blocked_in_the_dataset_is_data_loading_with_the_workers_line(root: Path) -> None:
    app = str(root / "checks" / "app.py")
    main = _dump(10, 1, "started", _runner(root, (f"{SITE}/torch/utils/data/dataloader.py", 1100, "_try_get_data"),
                                           (app, 1, "run")))
    worker = _dump(11, 10, "forked", [(app, 3, "__getitem__"), (f"{SITE}/torch/utils/data/_utils/worker.py", 300,
                                                                 "_worker_loop"), (app, 1, "run"),
                                      (str(INENV / "runner.py"), 160, "<module>")])
    found = diagnose("application", [parse(main), parse(worker)], 10, root)
    assert found.layer == "data-loading" and found.user_frame == "checks/app.py:3"  # the worker's, not the loop's
    assert found.user_frames == ("pid 10: checks/app.py:1 in run", "pid 11: checks/app.py:3 in __getitem__")
    shown = render([parse(worker), parse(main)], 10, root, "application: timed-out")
    assert shown.index("== process 10: the in-env runner ==") < shown.index("== process 11: a child (forked from 10)")
    assert "checks/app.py:3 in __getitem__    # z = 3" in shown  # the user's frame first, with its source line
    assert "runner.py" not in shown and "frame(s) of Kernodeck's in-env runner trimmed" in shown


_IMPORT = ("<frozen importlib._bootstrap>", 241, "_call_with_frames_removed")
_MP = "/usr/lib/python3.11/multiprocessing"
_STARTED = [(f"{_MP}/process.py", 108, "run"), (f"{_MP}/spawn.py", 135, "_main"), ("<string>", 1, "<module>")]


@pytest.mark.parametrize(
    ("inner", "loading"),
    [([(f"{SITE}/torch/utils/data/_utils/worker.py", 10, "<module>"), _IMPORT,
       (str(INENV / "resume.py"), 90, "_serve")], False),
     # the functions the module bodies call while torch is imported (datapipes' decorators and metaclasses): CI
     # caught a stop named data-loading when the worker was in one
     ([(f"{SITE}/torch/utils/data/datapipes/_decorator.py", 30, "__call__"),
       (f"{SITE}/torch/utils/data/datapipes/iter/callable.py", 40, "<module>"), _IMPORT,
       (f"{SITE}/torch/__init__.py", 2000, "<module>"), _IMPORT, (str(INENV / "resume.py"), 90, "_serve")], False),
     ([(f"{SITE}/torch/utils/data/datapipes/_typing.py", 270, "__new__"), _IMPORT,
       (str(INENV / "resume.py"), 90, "_serve")], False),
     # the control: a DataLoader worker loading data, and one that imports a module while it loads
     ([(f"{SITE}/torch/utils/data/_utils/worker.py", 300, "_worker_loop"), *_STARTED], True),
     ([(f"{SITE}/torch/utils/data/datapipes/_typing.py", 270, "__new__"), _IMPORT,
       (f"{SITE}/torch/utils/data/_utils/worker.py", 300, "_worker_loop"), *_STARTED], True)],
    ids=["module-body", "decorator-under-import", "metaclass-under-import", "worker-loop", "worker-importing"])
def test_a_child_importing_torch_is_not_data_loading(root: Path, inner: list[tuple[str, int, str]],
                                                     loading: bool) -> None:
    """The resume check's worker, started early, may still be importing torch (``torch/utils/data``'s module bodies
    and the functions they call) when a hook in the application hangs: the layer stays the operator's. The control:
    a child in a DataLoader's worker loop is data loading, even while it imports something."""
    app = str(root / "checks" / "app.py")
    main = _dump(10, 1, "started", _runner(root, ("/usr/lib/python3.11/time.py", 1, "sleep"), (app, 3, "slow_hook"),
                                           (f"{SITE}/torch/nn/modules/module.py", 1790, "_call_impl"), (app, 1, "run")))
    child = _dump(12, 10, "started", inner)
    found = diagnose("application", [parse(main), parse(child)], 10, root)
    assert found.layer == ("data-loading" if loading else "operator:slow_hook")


@pytest.mark.parametrize(
    ("inner", "step", "layer"),
    [
        ([("APP", 1, "<module>"), ("<frozen importlib._bootstrap_external>", 940, "exec_module")], "application",
         "import"),
        ([("APP", 2, "run")], "application", "transfer-to-device"),  # line 2 reads batch.to(device)
        ([(f"{SITE}/torch/serialization.py", 1000, "load"), ("APP", 1, "run")], "application", "weights"),
        ([("APP", 1, "criterion")], "criterion", "comparison"),
        ([("APP", 1, "run")], "application", "application"),
        ([("APP", 3, "run")], "determinism", "operator"),  # its row's layer (steptable)
    ],
    ids=["import", "transfer", "weights", "comparison", "application", "determinism"],
)
def test_the_layer_comes_from_the_stack_else_the_step(root: Path, inner: list[tuple[str, int, str]], step: str,
                                                      layer: str) -> None:
    app = str(root / "checks" / "app.py")
    frames = [(app if f == "APP" else f, line, func) for f, line, func in inner]
    found = diagnose(step, [parse(_dump(10, 1, "started", _runner(root, *frames)))], 10, root)
    assert found.layer == layer


def test_user_frames_are_the_projects_own_code_only(root: Path) -> None:
    assert is_user(Frame(str(root / "checks" / "app.py"), 1, "run"), root)
    # the negative controls: an env inside the project, Kernodeck's in-env code, a frozen module, another folder
    assert not is_user(Frame(str(root / ".venv-rebuild" / "x" / "lib" / "site-packages" / "torch" / "a.py"), 1, "f"),
                       root)
    assert not is_user(Frame(str(INENV / "runner.py"), 1, "main"), root)
    assert not is_user(Frame("<frozen importlib._bootstrap>", 1, "_load"), root)
    assert not is_user(Frame("/usr/lib/python3.11/threading.py", 1, "wait"), root)


def test_a_second_dump_replaces_the_first() -> None:
    once = _dump(10, 1, "started", [("/a.py", 1, "f")])
    twice = once + once.split("\n", 1)[1].replace("line 1", "line 2")
    assert [f.line for t in parse(twice).threads for f in t.frames] == [2]


def _waiting_runner() -> list[tuple[str, int, str]]:
    """A runner's main thread with none of the project's code: the resume check waiting on its worker."""
    return [("/usr/lib/python3.11/subprocess.py", 2004, "_try_wait"), (str(INENV / "resume.py"), 120, "call"),
            (str(INENV / "resume_app.py"), 300, "check"), (str(INENV / "runner.py"), 160, "<module>")]


def test_a_runner_waiting_on_its_worker_is_named_by_the_workers_frame(root: Path) -> None:
    """The resume check's worker (a new process) runs the project's train while the runner waits on it: the user's
    frame is the worker's (red-team pass 57, HANG1)."""
    app = str(root / "checks" / "app.py")
    worker = _dump(11, 10, "started", [("/usr/lib/python3.11/threading.py", 320, "wait"), (app, 3, "train"),
                                       (str(INENV / "resume_app.py"), 380, "<module>")])
    found = diagnose("resume-application", [parse(_dump(10, 1, "started", _waiting_runner())), parse(worker)], 10,
                     root)
    assert found.user_frame == "checks/app.py:3" and found.user_frames == ("pid 11: checks/app.py:3 in train",)


def test_a_runner_in_the_projects_code_keeps_its_own_frame(root: Path) -> None:
    """Negative control: the runner's own user frame names the stop, whatever a child runs (as a forked child
    that waits on its parent's lock)."""
    app = str(root / "checks" / "app.py")
    main = _dump(10, 1, "started", _runner(root, ("/usr/lib/python3.11/time.py", 1, "sleep"), (app, 1, "run")))
    child = _dump(11, 10, "started", [(app, 3, "train"), (str(INENV / "resume_app.py"), 380, "<module>")])
    assert diagnose("application", [parse(main), parse(child)], 10, root).user_frame == "checks/app.py:1"
    alone = diagnose("resume-application", [parse(_dump(10, 1, "started", _waiting_runner()))], 10, root)
    assert alone.user_frame == ""  # no process of the project's code answered: nothing named


def test_a_stuck_steps_layer_is_read_from_its_row() -> None:
    """Every row of the step table: with stacks that say nothing, the layer is one the row lists (the application's
    where the project's code runs in the step); a step the table does not have is unknown (red-team pass 57)."""
    said = {step.row.name: diagnose(step.row.name, [], 0, Path("/nowhere")).layer for step in StepName}
    assert all(said[step.row.name] in step.row.layers for step in StepName if step.row.layers), said
    assert said["resume-application"] == "application" and said["extensions"] == "extension-abi"
    assert said["reread"] == "output" and said["backend"] == "device"


def test_a_step_outside_the_table_is_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative control: no name of a step decides a layer outside its row; a row whose layers change moves it."""
    assert diagnose("", [], 0, Path("/nowhere")).layer == "unknown"  # before the first step started
    assert diagnose("no-such-step", [], 0, Path("/nowhere")).layer == "unknown"
    row = StepName.CRITERION.row
    monkeypatch.setitem(BY_NAME, "criterion", dataclasses.replace(row, layers=(Layer.OUTPUT,)))
    assert diagnose("criterion", [], 0, Path("/nowhere")).layer == "output"
