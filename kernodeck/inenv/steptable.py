"""THE in-env step table: one row per step, in the order the steps run, read by both sides of the wall.

The runner (inside the env) reads a row's module, function and title; the orchestrator reads the rest: the default
deadline (kernodeck/project/deadlines.py), whether making a reference runs the step, how its report line summarises
what it found (findings.py), the claims it establishes (evidence.py, kernodeck/verify/claims.py), why a pass may skip
it, what it checks and the layers its failure may belong to (docs/report.md's table of the steps, generated), and
whether a bisection's trials run it. The table is the enum ``StepName``: each member is a step's row, its value the
step's name (the protocol's vocabulary: run-config.json's ``steps``, ``steps/NN-NAME.json``), so code names a step
as ``StepName.SETTINGS`` and mypy knows every name. A new in-env step is its module plus its row here, nothing else
(tests/unit/test_steptable.py). The standard library and siblings only: the orchestrator imports it as
``kernodeck.inenv.steptable`` (tests/wall.py), the runner as its sibling.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import evidence, findings
from .evidence import VERIFY, ClaimRow
from .protocol import Layer

if sys.version_info >= (3, 11):  # noqa: UP036 (the env may run an older Python than the orchestrator)
    from enum import StrEnum
else:  # the protocol's stand-in for an older env's Python
    from .protocol import StrEnum

# Generous: a healthy run on a slow 2-core machine beside another job never trips them (the MiniLM application
# takes about a minute there; the longest silent phase, importing torch and the model, well under five).
LONGEST_S = 3600.0


@dataclass(frozen=True)
class StepRow:
    """One in-env step: what runs it (``module.function(ctx)``, its details), and what the orchestrator makes of it."""

    name: str
    module: str  # a sibling file of the runner, kernodeck/inenv/MODULE.py
    function: str
    title: str
    deadline_s: float = LONGEST_S  # the default of ``[tool.kernodeck.deadlines] NAME``
    reference: bool = True  # making a reference (``reference``) runs it
    summary: Callable[[dict[str, Any]], str] | None = None  # its report line; None: its first scalar details
    claims: tuple[ClaimRow, ...] = ()  # the claims of a pass its record establishes
    skippable: str = ""  # why a pass may skip it, when no claim rests on it (docs/claims.md, "Skipped steps")
    layers: tuple[str, ...] = ()  # the layers its failure may belong to (``Layer``, refined after a colon)
    checks: str = ""  # what it checks: it passes when ... (docs/report.md's table of the steps)
    bisect: bool = False  # a bisection's trials run it (kernodeck/upgrade/bisect.py): the outputs judged, and what
    # they need
    variation: bool = False  # calibrate's variations run it (kernodeck/inenv/calibrate.py): the outputs made and
    # reread, and what they need (its settings step applies the variation's settings instead)


class StepName(StrEnum):
    """The in-env steps, in the order they run: each member is its step's row (``StepName.SETTINGS.row``), its value
    the step's name (``"settings"``): the member's name in lower case, ``_`` written ``-``."""

    _value_: str
    row: StepRow

    def __new__(cls, row: StepRow) -> StepName:
        member = str.__new__(cls, row.name)
        member._value_ = row.name
        member.row = row
        return member

    SETTINGS = StepRow(
        "settings", "settings", "run", "determinism settings applied before any compute", 600.0,
        summary=findings.settings,
        layers=(Layer.ENVIRONMENT,), bisect=True, variation=True,
        checks=("seeds, deterministic algorithms, cuDNN flags, TF32 off (legacy flags, and `fp32_precision` = `ieee`"
                " on every such knob this torch has below `torch.backends`, found in torch's own objects: in 2.13 the "
                "generic one, `cudnn`, `mkldnn`, `cuda.matmul`, `cudnn.conv`/`rnn`, `mkldnn.matmul`/`conv`/`rnn`; one "
                "of the generic, `cuda.matmul` and `cudnn.conv` this torch lacks is recorded \"not available in this "
                "torch\"; a getter that raises is read back as what it raised), matmul precision, "
                "fill_uninitialized_memory, the default dtype, autocast off (cpu, cuda) and no denormal flushed — "
                "applied before any compute and read back: fails when any read-back differs from what was "
                "applied; threads, the attention kernels and the multi-head attention fast path, oneDNN, cuDNN, "
                "opt_einsum, the CUDA libraries preferred and the CUDA matmuls' reduced-precision flags recorded "
                "(a `with torch.autocast(...)` or `sdpa_kernel(...)` block in the application's code is its own "
                "choice), and oneDNN's deterministic and TF32 flags, NNPACK, cuDNN's depthwise kernel, MIOpen, the "
                "SM carveout, the quantized engine, the CPU's fp16 reductions and TorchScript's optimisation, read "
                "from torch's own getters. "
                "Read back again after each call of the application's entry and criterion (and their files' load): a"
                " call that changed one (threads included) fails its step, naming the setting, its recorded value "
                "and the value after the call (`tests/unit/test_verified.py`); so does a setter of one called inside "
                "the call, set back or not (`kernodeck/inenv/setters.py`). What the process's start applies is "
                "read back too (`kernodeck/env/start.py`: `-s -P -u`, no `PYTHON*` variable but `PYTHONHASHSEED`, since"
                " `-I` would ignore the seed): `hash_seed` (the seed in effect: `0`, or `random` when hash "
                "randomisation is on), `hash_randomization` (`sys.flags`), `isolation.no_user_site`, "
                "`isolation.safe_path`, and the `PYTHON*` variables besides the seed (none). Test: "
                "`tests/unit/test_settings.py`, one run per setting where it is not applied"))
    SYSTEM = StepRow(
        "system", "system", "run", "system chain (OS, driver, CUDA/ROCm, devices, loaded libraries)", 600.0,
        summary=findings.system, layers=(Layer.ENVIRONMENT,), variation=True,
        checks=("the system chain, apart from the packages: OS, kernel, arch, libc, CPU, Python, torch, "
                "`torch.version.cuda` and `torch.version.hip` separately, cuDNN/MIOpen as loaded, libraries mapped in"
                " the process, driver, devices, `*_VISIBLE_DEVICES`, compilers, the build chain (`build_chain`: gcc, "
                "g++, nvcc, hipcc, ninja, `CUDA_HOME`, `ROCM_PATH`, `TORCH_CUDA_ARCH_LIST`), the time zone "
                "(`time_zone`: `TZ`, `/etc/localtime`'s target and its bytes' sha256, the database's version; "
                "`system_files`: each of the system's own files a step's windows read, by sha256: zones, the zone "
                "setting, `mimetypes`' tables, os-release, the kernel's state under `/proc` and `/sys`; the hub's "
                "login only as read); unreadable fields "
                "recorded with the reason"))
    BACKEND = StepRow(
        "backend", "backend", "run", "expected backend usable; small computation matches numpy", 900.0,
        summary=findings.backend, claims=(
            ClaimRow("backend", "the expected backend computes correctly (matmul exact, softmax within 1e-6)",
                     "device", evidence.backend_works),),
        layers=(Layer.DEVICE, Layer.TRANSFER, Layer.OPERATOR), bisect=True, variation=True,
        checks=("the EXPECTED backend is usable and a small computation on it equals numpy's; no CPU fallback: if it "
                "fails, every later step is `not-run`"))
    EXTENSIONS = StepRow(
        "extensions", "extensions", "run",
        "compiled extensions imported, matched to their chain, smoke-checked", claims=(
            ClaimRow("extensions", "every compiled extension in the env imports against this torch; declared "
                     "smoke checks agree with their references", "extensions", evidence.extensions_sound),),
        layers=(Layer.EXTENSION_ABI, f"{Layer.OPERATOR}:NAME"),
        checks=("every compiled extension of the env (a shared object linking libtorch/libc10, found from outside by "
                "its `DT_NEEDED`, torch's own excepted) imports against this torch; an undefined symbol or a missing "
                "library is an ABI break naming the distribution, the `.so`, the symbol (demangled) and what it was "
                "built for; on CUDA its kernels carry code the device runs; each declared smoke check agrees with its"
                " pure-PyTorch reference and took its declared path ([extensions.md](extensions.md)); none in the "
                "env: passes and says so"))
    REFERENCE = StepRow(
        "reference", "reference", "check_reference",
        "reference outputs sound (count, shape, dtype, finite, ids)", 600.0, reference=False, claims=(
            ClaimRow("reference-current", "the reference describes this code, data and weights", "code",
                     lambda d: evidence.code_unchanged(d["code"]), modes=VERIFY),),
        skippable="a new reference is being made (`reference`): there is no earlier one to check against",
        layers=(Layer.REFERENCE,), bisect=True, variation=True,
        checks=("the committed expected outputs are sound (each declared output: shape, dtype, finite, ids = the "
                "sample's) and match the manifest's fingerprints"))
    APPLICATION = StepRow(
        "application", "application", "run_entry",
        "the application's entry on the identified sample; outputs written", summary=findings.application,
        layers=(Layer.DATA_LOADING, Layer.WEIGHTS, Layer.APPLICATION, Layer.ENVIRONMENT), bisect=True, variation=True,
        checks=("the declared entry on the identified sample (fingerprint checked), weights (if declared) "
                "fingerprint-checked; each declared output written once, none the content of a declared file the "
                "entry read (a cache of earlier outputs)"))
    REREAD = StepRow(
        "reread", "judge", "reread", "outputs reread from disk: count, dtype, finite, shape, id order",
        600.0, summary=findings.reread,
        layers=(Layer.OUTPUT,), bisect=True, variation=True,
        checks=("outputs REREAD from disk: every declared output present, its dtype, all finite, shape = the "
                "reference's, ids in input order"))
    COMPARE = StepRow(
        "compare", "judge", "compare", "each output against the reference under its declared tolerance kind",
        900.0, summary=findings.compare, claims=(
            ClaimRow("outputs-within-tolerance", "each output is within its declared tolerance of the reference",
                     "outputs", evidence.all_outputs_passed, modes=VERIFY),),
        layers=(Layer.COMPARISON,), bisect=True,
        checks=("each output against the reference under its declared kind: `cosine` (per-row cosine and max abs), "
                "`allclose` (rtol/atol), `exact`, `agreement` (share of equal rows); non-finite values named as such"))
    CRITERION = StepRow(
        "criterion", "judge", "criterion", "the application's criterion on the reread outputs", 900.0,
        summary=findings.criterion, claims=(
            ClaimRow("criterion-met", "the application's criterion is met", "passed",
                     lambda d: d["passed"] is True),
            ClaimRow("criterion-able-to-fail", "the criterion fails every fixed-seed draw of rows permuted against "
                     "their ids, of noise of the outputs' own scale and of half its rows wrong, and passes the outputs "
                     "loaded afresh as at its first sight (it is able to fail)", "controls",
                     lambda d: isinstance(d["controls"], dict) and d["controls"].get("able_to_fail") is True)),
        layers=(Layer.COMPARISON,), bisect=True,
        checks=("the application's own criterion on the REREAD outputs (here: each labelled paraphrase's nearest "
                "neighbour is its pair); skipped when none is declared"))
    DETERMINISM = StepRow(
        "determinism", "determinism", "run", "the entry rerun in one process; cost of the settings where asked",
        summary=findings.determinism, claims=(
            ClaimRow("deterministic", "repeated runs give the same outputs (bitwise on CPU)", "repeats",
                     evidence.deterministic),),
        layers=(Layer.OPERATOR,),
        checks=("the entry rerun twice more in the process (the first 64 records when the sample is larger, "
                "`[tool.kernodeck.determinism] max-records`; stated in the step), the first from the project's code "
                "loaded afresh, each refused a read of what the application wrote before it (no memo of the first "
                "call's outputs passes for a repeat): bitwise identical on CPU, the declared tolerance elsewhere; "
                "the cost of the settings (the entry once more without them) with a reference and with "
                "`verify -- --settings-cost`"))
    RESUME = StepRow(
        "resume", "resume", "run", "training resume in a new process matches the uninterrupted run",
        reference=False, summary=findings.resume, claims=(
            ClaimRow("resume", "training resumed from a checkpoint in a new process matches an uninterrupted run",
                     "passed", lambda d: d["passed"] is True, modes=VERIFY),),
        layers=(Layer.COMPARISON,),
        checks=("generic, not the application: N training steps == K steps, checkpoint, restore in a NEW process "
                "(which applies the same settings), continue to N (bitwise on CPU); that process is started as the "
                "application step begins, so that its torch import overlaps the application's imports, and it gets "
                "nothing but its order (the checkpoint's path, N, the device) once the checkpoint exists; RNG states "
                "(torch, every CUDA device, MPS, numpy, python, the loader's generator) saved and restored as CPU "
                "tensors, only the model moved to the device"))
    # the application's own train, resumed in a new process; asked for only when declared (verify/context.py)
    RESUME_APPLICATION = StepRow(
        "resume-application", "resume_app", "run",
        "the application's own training resumed in a new process matches its uninterrupted run",
        summary=findings.resume_application,
        skippable="the application declares no resume of its own ([tool.kernodeck.application.resume]); "
                  "the env's generic resume exercise still runs (`resume`)",
        layers=(Layer.COMPARISON, Layer.APPLICATION, Layer.REFERENCE),
        checks=("YOUR training ([tool.kernodeck.application.resume], [application.md](application.md)): your `train` "
                "to K saving a checkpoint through your own mechanism (sealed as it returns), then, each in a NEW "
                "process (started as `resume`'s, same settings), to N uninterrupted and resumed from the checkpoint "
                "to N: each declared end-state output within its "
                "kind, the loss curve the same step by step (bitwise on CPU, `gpu-tolerance` on a GPU), the progress "
                "counters (step, epoch, loader) equal, the step counter checked against the steps asked for and the "
                "losses logged (layer `application`); it records the largest difference at the end, the first step "
                "where the curves part and the counters. Then once per declared control (`app.resume_drop` = "
                "optimizer, rng, loader): the declaration must see each (layer `reference` when it cannot, at "
                "`reference` as at `verify`). Not asked for (absent from the report) when the table is not declared"))


STEPS: tuple[StepRow, ...] = tuple(name.row for name in StepName)
BY_NAME: dict[str, StepRow] = {row.name: row for row in STEPS}
VARIATION_STEPS: tuple[StepRow, ...] = tuple(row for row in STEPS if row.variation)  # a calibrate variation's
