"""The application's own resume: its ``train`` to K with a checkpoint, resumed to N in a NEW process == to N.

``[tool.kernodeck.application.resume]`` declares ``entry`` (``train(app, steps, save_at, resume_from)``), ``steps``
(N), ``checkpoint-at`` (K), the end-state ``outputs`` with their tolerance kinds and the ``controls``. This process
trains to K, saving a checkpoint through the application's own mechanism into ``app.checkpoint_dir``; then new
processes (resume.Worker: the same interpreter and flags as the generic resume's, the same determinism settings) each
load the entry again: one trains uninterrupted to N, one resumes from that folder to N (resume_calls.py: what passes
between the calls). They must agree: every declared output under its kind, the loss curve step by step (bitwise on a
CPU, ``gpu-tolerance`` on a GPU) and the progress counters train returns (``step``, ``epoch``, ``loader``, any other).

Negative controls: the resume again, once per declared control, with ``app.resume_drop`` naming the piece of state
train must leave out of its restore (optimizer, rng, loader). The declaration (outputs under their tolerance, the
counters) must see each: one that passes a dropped piece is unable to fail and is refused (layer ``reference``).

Run as a script by the runner's interpreter (the worker); module level imports only the standard library and its
siblings, loaded as the package ``kernodeck_inenv`` by _package.py.
"""

from __future__ import annotations

import json
import math
import os
import runpy
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
runpy.run_path(str(HERE / "_package.py"))  # HERE as the package kernodeck_inenv (the one loader)
from kernodeck_inenv._common import CheckFailed, Context, end, progress, same_float  # noqa: E402
from kernodeck_inenv.protocol import LOSS_CURVE, PROGRESS, RESUMED_RUN, ConfigKey, Layer  # noqa: E402

COUNTERS = ("step", "epoch", "loader")  # the progress train must return; any other key it returns is compared too
TIP = ("declare resume outputs (or a tolerance) that a dropped piece of state moves, or list only the pieces your "
       "train restores in controls ([tool.kernodeck.application.resume]), then: nox -s reference -- --new")


@dataclass
class TrainApp:
    """What train is handed: ``train(app, steps, save_at, resume_from)``. It imports nothing of Kernodeck."""

    params: dict[str, Any]
    device: str
    root: Path
    checkpoint_dir: Path  # where train saves its checkpoint (save_at), with its own mechanism
    resume_drop: str | None  # a negative control: the piece of state to leave out of the restore, or None
    declared: dict[str, Any]
    losses: dict[int, float] = field(default_factory=dict)
    written: dict[str, Any] = field(default_factory=dict)
    repeated: list[int] = field(default_factory=list)  # steps logged more than once in this call

    def progress(self, done: int, total: int, what: str = "") -> None:
        progress(f"{what} {done}/{total}".strip())

    def log(self, step: int, loss: float) -> None:
        """The loss of global step ``step`` (1-based, counted from the run's very start, resumed or not), once."""
        if int(step) in self.losses:
            self.repeated.append(int(step))
        self.losses[int(step)] = float(loss)

    def write(self, name: str, array: Any) -> None:
        """One declared end-state output (e.g. the final weights, flattened), once."""
        import numpy as np

        if name not in self.declared:
            raise CheckFailed(f"train wrote {name!r}, which [tool.kernodeck.application.resume] does not declare",
                              Layer.APPLICATION)
        if name in self.written:
            raise CheckFailed(f"train wrote {name!r} twice", Layer.APPLICATION)
        self.written[name] = np.array(array, copy=True)


@dataclass
class Trained:
    """One call of train: its end-state outputs, its loss curve, its progress counters."""

    outputs: dict[str, Any]
    losses: dict[int, float]
    counters: dict[str, int]


def _train_function(ctx: Context, entry: dict[str, str]) -> Any:
    """The entry, loaded by path through the application loader (application._function): from its verified bytes,
    each call inside a closed-world window judged against the run's declared sources."""
    from kernodeck_inenv.application import _function

    return _function(ctx, entry, "resume entry")


def call_train(cfg: dict[str, Any], ctx: Context, params: dict[str, Any], device: str, folder: Path, steps: int,
               save_at: int | None, resume_from: Path | None, drop: str | None) -> Trained:
    """One call of the application's train; its failures keep their layer (the user's file:line in the message)."""
    from kernodeck_inenv import settings
    from kernodeck_inenv.application import _raised
    from kernodeck_inenv.resume_calls import plain_counters

    root = Path(ctx.config[ConfigKey.PROJECT_ROOT])
    train = _train_function(ctx, cfg["entry"])
    folder.mkdir(parents=True, exist_ok=True)
    app = TrainApp(dict(params), device, root, folder, drop, cfg["outputs"])
    settings.apply(deterministic=True)
    try:
        counters = train(app, steps, save_at, resume_from)
    except CheckFailed:
        raise
    except ImportError as exc:
        raise CheckFailed(f"ImportError: {exc}", Layer.ENVIRONMENT) from exc
    except Exception as exc:
        raise _raised("the resume entry", exc, root) from exc
    missing = sorted(set(cfg["outputs"]) - set(app.written))
    if missing:
        raise CheckFailed(f"train did not write {', '.join(missing)} (declared in the resume contract)",
                          Layer.APPLICATION)
    for name, arr in app.written.items():  # the declared dtype, as the application's outputs are held to theirs
        if str(arr.dtype) != cfg["outputs"][name]["dtype"]:
            raise CheckFailed(f"resume output {name}: dtype {arr.dtype}, expected {cfg['outputs'][name]['dtype']} "
                              "(declared in the resume contract)", Layer.APPLICATION)
    plain_counters(counters, COUNTERS)
    check_progress(counters, app, int(cfg["checkpoint_at"]) if resume_from is not None else 0, steps)
    # copies, taken as the call returns: a thread it left running may still hold the application's own objects
    # (red-team pass 30, FP4)
    return Trained({name: arr.copy() for name, arr in app.written.items()}, dict(app.losses), dict(counters))


def _span(steps: list[int]) -> str:
    """Steps as the report names them: ``31..50`` when they follow each other, else the first few."""
    if steps == list(range(steps[0], steps[-1] + 1)):
        return f"{steps[0]}..{steps[-1]}" if len(steps) > 1 else str(steps[0])
    return ", ".join(map(str, steps[:5])) + (", ..." if len(steps) > 5 else "")


def check_progress(counters: dict[str, Any], app: TrainApp, start: int, steps: int) -> None:
    """The progress train returns against what Kernodeck observes of the call: it asked for ``steps`` from a checkpoint
    of step ``start`` (0: none), and ``app.log`` saw which steps were trained. The call must return step ``steps`` and
    log the loss of exactly the global steps ``start+1..steps``, each once: a train that stops early, skips or repeats
    steps, or trains again from step 1 after a resume is named here, whatever counters it returns. ``epoch`` and
    ``loader`` cannot be checked this way (how many batches an epoch has is the application's, never told to
    Kernodeck): they are compared between the runs (``judge``)."""
    if counters["step"] != steps:
        raise CheckFailed(f"train was asked for {steps} steps and returned step {counters['step']}", Layer.APPLICATION)
    expected, logged = set(range(start + 1, steps + 1)), set(app.losses)
    wrong = [f"logged step {_span(sorted(set(app.repeated)))} more than once"] if app.repeated else []
    if logged - expected:
        wrong.append(f"logged step {_span(sorted(logged - expected))}, outside {_span(sorted(expected))}")
    if expected - logged:
        wrong.append(f"logged no loss for step {_span(sorted(expected - logged))}")
    if wrong:
        call = f"resumed from step {start}" if start else "from the start"
        raise CheckFailed(f"train ({call}, to step {steps}) returned step {steps} but {'; '.join(wrong)}: it must log "
                          "the loss of each global step it trains, once (app.log(step, loss))", Layer.APPLICATION)


def first_parting(straight: dict[int, float], resumed: dict[int, float], steps: int, tolerance: float) -> int | None:
    """The first step (1-based) whose loss differs, is missing on either side, or is not finite."""
    for step in range(1, steps + 1):
        a, b = straight.get(step), resumed.get(step)
        if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)):
            return step
        if not ((abs(a - b) <= tolerance) if tolerance else same_float(a, b)):
            return step
    return None


def judge(cfg: dict[str, Any], straight: Trained, head: Trained, resumed: Trained, tolerance: float) -> dict[str, Any]:
    """The resumed run against the uninterrupted one: outputs under their kinds, the loss curve, the counters."""
    from kernodeck_inenv import tolerance as kinds

    outputs = {}
    for name, decl in cfg["outputs"].items():
        ours, ref = resumed.outputs[name], straight.outputs[name]
        rows = int(ref.shape[0]) if ref.ndim else 1
        verdict = kinds.compare(decl, ours, ref, [str(i) for i in range(rows)])
        verdict["max_abs"] = kinds.max_abs(ours, ref)
        verdict["bitwise"] = kinds.same_bits(ours, ref)
        outputs[name] = verdict
    curve = {**{s: v for s, v in head.losses.items() if s <= cfg["checkpoint_at"]},
             **{s: v for s, v in resumed.losses.items() if s > cfg["checkpoint_at"]}}
    parting = first_parting(straight.losses, curve, cfg["steps"], tolerance)
    counters_differ = sorted(k for k in set(straight.counters) | set(resumed.counters)
                             if straight.counters.get(k) != resumed.counters.get(k))
    seen = [f"{n}: {v['summary']}" for n, v in outputs.items() if not v["passed"]]
    seen += [f"progress {k}: {resumed.counters.get(k)} resumed, {straight.counters.get(k)} uninterrupted"
             for k in counters_differ]
    return {
        "passed": not seen and parting is None,
        "declaration_sees": seen,  # what the declared outputs and counters saw (the controls' measure)
        "outputs": outputs,
        "max_abs_at_end": max((v["max_abs"] for v in outputs.values()), default=0.0),
        "bitwise": all(v["bitwise"] for v in outputs.values()),
        "first_parting_step": parting,
        "counters_uninterrupted": straight.counters,
        "counters_resumed": resumed.counters,
        "counters_at_checkpoint": head.counters,
        "losses_uninterrupted": [straight.losses.get(s) for s in range(1, cfg["steps"] + 1)],
        "losses_resumed": [curve.get(s) for s in range(1, cfg["steps"] + 1)],
    }


def _save(folder: Path, name: str, arr: Any, ids: list[str]) -> None:
    from kernodeck_inenv.arrays import _save_npy, _write_text

    _save_npy(folder / f"{name}.npy", arr)
    _write_text(folder / f"{name}.ids.json", json.dumps(ids))


def _keep(folder: Path, trained: Trained) -> None:
    """A run's end-state outputs in its folder of the dossier, ``NAME.npy`` with ``NAME.ids.json`` (rows numbered
    from 0; a 0-d output is one row), as the application's outputs are kept: what compare and the drift map read. Each
    in the shape train wrote it: a scalar stays 0-d, never a one-element array (compare names the two shapes)."""
    import numpy as np

    for name, arr in trained.outputs.items():
        kept = np.asarray(arr)
        _save(folder, name, kept, [str(i) for i in range(kept.shape[0] if kept.ndim else 1)])


def record(folder: Path, curve: list[float | None], counters: dict[str, int]) -> None:
    """A run's loss curve (each global step's, NaN where none was logged) and progress counters beside its end state,
    as two more outputs (``LOSS_CURVE``, ``PROGRESS``): compare and drift read them as they read the declared ones."""
    import numpy as np

    losses = np.array([math.nan if v is None else v for v in curve], dtype=np.float64)
    _save(folder, LOSS_CURVE, losses, [str(step) for step in range(1, len(curve) + 1)])
    names = sorted(counters)
    _save(folder, PROGRESS, np.array([counters[n] for n in names], dtype=np.int64), names)


def worker_call(order: dict[str, Any], ctx: Context | None = None) -> Trained:
    """(worker) The call its order names, in the folder Kernodeck makes for it now: the uninterrupted run to N, or a
    resumed run from the sealed checkpoint (reading only it of the run's record: resume_calls.worker_context, or
    ``ctx`` made by it); every process the call forked ended as it ends (resume_calls.end_descendants)."""
    from kernodeck_inenv import steprun
    from kernodeck_inenv.resume_calls import (
        adopting,
        called,
        end_descendants,
        made,
        read_the_checkpoint,
        sealed,
        worker_context,
    )

    adopting()
    try:
        ctx, folder = ctx or worker_context(order), Path(order["folder"])
        own = made(folder, f"the {called(order)}'s folder")
        checkpoint = Path(order["resume_from"]) if order.get("resume_from") else None
        if checkpoint is not None:
            sealed(checkpoint, order["seal"])
        trained = call_train(order["cfg"], ctx, order["params"], order["device"], own, int(order["cfg"]["steps"]),
                             None, checkpoint, order["drop"])
        if checkpoint is not None:
            read_the_checkpoint(checkpoint)
            sealed(checkpoint, order["seal"], after=True)  # nothing written there meanwhile
        # as after each of the runner's steps: the libraries mapped, what it read (and what a thread it left running
        # read), the settings in effect, against the runner's records (red-team passes 27, NOTE1, and 30, FP4-FP5)
        steprun.held(ctx, "resume", f"in the {called(order)}'s new process, after its call")
        return trained
    finally:
        end_descendants()


def _serve() -> int:
    """(worker) Apply the settings now; then load the entry, make the call its order on stdin names, and answer on
    this process's own channel: its stdout, taken before the application's code loads (what that code prints goes to
    stderr), so no file of the run's folder carries a result another process or a thread could have rewritten."""
    from kernodeck_inenv.resume import apply_settings
    from kernodeck_inenv.resume_calls import answer, signed, with_records, worker_context

    channel = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.dont_write_bytecode = True  # the application's files are loaded by path: no __pycache__ in the project
    apply_settings()
    line = sys.stdin.readline()
    if not line.strip():
        return 0
    order = json.loads(line)
    key = str(order.pop("key"))  # held here, handed to no call
    # the runner's fingerprints of Kernodeck's in-env files: this process's too (_package.py), as resume.py's worker
    sys.modules["kernodeck_inenv"].__loader__.check(Path(__file__).resolve(), order.get("inenv_sha256"))
    ctx = None
    try:
        ctx = worker_context(order)
        trained = worker_call(order, ctx)
        said = answer(trained.outputs, trained.losses, trained.counters)
    except CheckFailed as exc:
        said = {"error": str(exc), "layer": exc.layer, "details": exc.details}
    channel.write(signed(with_records(said, ctx), key) + "\n")  # the system's files it read: the runner's record
    channel.flush()
    return 0


def check(cfg: dict[str, Any], ctx: Context, params: dict[str, Any], device: str, folder: Path,
          drops: tuple[str | None, ...]) -> dict[str, Any]:
    """The run to K with its checkpoint (this process: sealed as it returns), then, each in a NEW process, the
    uninterrupted run to N and one resumed run per entry of ``drops`` (None: the real resume; a piece: a control).
    Verdicts by drop (``"none"`` for the real one)."""
    from kernodeck_inenv import world
    from kernodeck_inenv.resume import Worker
    from kernodeck_inenv.resume_calls import reading_only

    # Each other call's new process, started now: it imports torch and applies the settings while this one trains to
    # K; it learns its call only when the checkpoint is sealed (its order on stdin).
    workers = [Worker(HERE / "resume_app.py") for _ in (None, *drops)]
    try:
        # of the run's record, nothing for the application's code left running here (a thread of the call to K);
        # what it read meanwhile judged before that ends (red-team pass 31, FP1)
        with reading_only(ctx):
            verdicts = _calls(cfg, ctx, params, device, folder, drops, workers)
            world.late(ctx)
        return verdicts
    finally:
        for worker in workers:  # those never given an order (a failure before): they exit
            worker.close()


def _calls(cfg: dict[str, Any], ctx: Context, params: dict[str, Any], device: str, folder: Path,
           drops: tuple[str | None, ...], workers: list[Any]) -> dict[str, dict[str, Any]]:
    from kernodeck_inenv.application import located
    from kernodeck_inenv.resume_calls import answered, call_to_k

    steps, at = int(cfg["steps"]), int(cfg["checkpoint_at"])
    tolerance = 0.0 if device == "cpu" else float(cfg.get("gpu_tolerance", 1e-5))
    progress(f"train to step {at}, saving a checkpoint")
    head, seal = call_to_k(
        lambda where, upto, save_at: call_train(cfg, ctx, params, device, where, upto, save_at, None, None),
        ctx, folder, at)
    checkpoint = folder / "checkpoint"
    if not any(checkpoint.iterdir()):
        raise CheckFailed(f"train(app, {at}, save_at={at}, None) saved nothing into app.checkpoint_dir",
                          Layer.APPLICATION)
    expected = getattr(getattr(sys.modules.get("kernodeck_inenv"), "__loader__", None), "expected", None)
    base = {"cfg": cfg, "root": ctx.config[ConfigKey.PROJECT_ROOT], "params": params, "device": device,
            "app": ctx.config[ConfigKey.APPLICATION], "out": str(ctx.out), "inenv_sha256": expected,
            "sources": located(ctx), "settings": ctx.state.get("settings"),
            "libraries": ctx.config.get(ConfigKey.LIBRARIES) or []}
    progress(f"train uninterrupted to step {steps} in a new process")
    # each order its own key: a call that finds its own cannot sign another's answer (red-team pass 34, FP2)
    straight = Trained(*answered(workers[0], {**base, "drop": None, "resume_from": None, "key": os.urandom(32).hex(),
                                              "folder": str(folder / "uninterrupted")}, ctx))
    verdicts: dict[str, dict[str, Any]] = {}
    for drop, worker in zip(drops, workers[1:], strict=True):
        name = RESUMED_RUN + (f"-without-{drop}" if drop else "")
        progress(f"resume from step {at} to {steps} in a new process" + (f" without the {drop} state" if drop else ""))
        resumed = Trained(*answered(worker, {**base, "drop": drop, "resume_from": str(checkpoint), "seal": seal,
                                             "key": os.urandom(32).hex(), "folder": str(folder / name)}, ctx))
        verdict = verdicts[drop or "none"] = judge(cfg, straight, head, resumed, tolerance)
        _keep(folder / name, resumed)
        record(folder / name, verdict["losses_resumed"], resumed.counters)
    _keep(folder / "uninterrupted", straight)
    record(folder / "uninterrupted", [straight.losses.get(s) for s in range(1, steps + 1)], straight.counters)
    return verdicts


def run(ctx: Context) -> dict[str, Any]:
    from ._common import CheckFailed, Skip  # the package's own (the runner's; the tests import it as kernodeck.inenv)

    cfg = ctx.config.get(ConfigKey.RESUME_APPLICATION)
    if not cfg:
        raise Skip("no resume of the application declared ([tool.kernodeck.application.resume])")
    app_cfg = ctx.config[ConfigKey.APPLICATION]
    controls = tuple(cfg.get("controls") or ())
    verdicts = check(cfg, ctx, dict(app_cfg.get("params") or {}),
                     str(ctx.state.get("device", "cpu")), ctx.out / "resume-application", (None, *controls))
    real = verdicts.pop("none")
    details = {k: v for k, v in real.items() if k != "declaration_sees"}
    details.update(steps=cfg["steps"], checkpoint_at=cfg["checkpoint_at"], new_process=True,
                   comparison="bitwise loss curve" if str(ctx.state.get("device", "cpu")) == "cpu"
                   else f"loss curve abs <= {cfg.get('gpu_tolerance', 1e-5)}")
    details["controls"] = {drop: {"seen": not v["passed"] and bool(v["declaration_sees"]),
                                  "declaration_sees": v["declaration_sees"],
                                  "first_parting_step": v["first_parting_step"],
                                  "max_abs_at_end": v["max_abs_at_end"]}
                           for drop, v in verdicts.items()}
    if not real["passed"]:
        why = real["declaration_sees"] or [f"the loss curves part at step {real['first_parting_step']}"]
        raise CheckFailed(f"the application's resumed training differs from its uninterrupted run: {'; '.join(why)}",
                          Layer.COMPARISON, details)
    blind = [drop for drop, v in details["controls"].items() if not v["seen"]]
    if blind:
        raise CheckFailed(
            "the resume declaration is unable to fail: with "
            + ", ".join(f"the {d} state dropped" for d in blind)
            + " its outputs and progress counters still agree with the uninterrupted run",
            Layer.REFERENCE, {**details, "tip": TIP},
        )
    return details


if __name__ == "__main__":
    if sys.argv[1:] != ["--serve"]:
        raise SystemExit("usage: resume_app.py --serve (the resume-application step's new process)")
    end(_serve())  # the result is written: tearing down torch checks nothing
