"""The wall's protocol: the names and JSON keys both sides of it share, defined once (the steps' names are the step
table's, kernodeck/inenv/steptable.py: ``StepName``).

The orchestrator writes ``run-config.json`` and reads one ``steps/NN-name.json`` per step; the runner (inside the
rebuilt env) reads the first and writes the others. Both import this module: the orchestrator as
``kernodeck.inenv.protocol``, the runner as its sibling ``kernodeck_inenv.protocol`` (runner.py). It imports only the
standard library, so the orchestrator may import it (tests/helpers/wall.py) and the env's Python may run it.

A layer says where a failure belongs. A check may refine it after a colon (``operator:matmul``); the part before the
colon is always one of ``Layer`` (``is_layer``).
"""

from __future__ import annotations

import enum
import sys

if sys.version_info >= (3, 11):  # noqa: UP036 (the env may run an older Python than the orchestrator)
    from enum import StrEnum
else:  # an env's Python may be older than the orchestrator's

    class StrEnum(str, enum.Enum):
        def __str__(self) -> str:
            return str(self.value)


class Status(StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"  # with a reason
    NOT_RUN = "not-run"  # an earlier step failed


class Layer(StrEnum):
    """Where a failure belongs, so the diagnosis aims at that layer and not at the whole rebuild."""

    LOCK = "lock"
    INSTALL = "install"
    ENVIRONMENT = "environment"
    DEVICE = "device"
    DATA_LOADING = "data-loading"
    REFERENCE = "reference"
    WEIGHTS = "weights"
    APPLICATION = "application"
    TRANSFER = "transfer-to-device"
    OPERATOR = "operator"
    EXTENSION_ABI = "extension-abi"  # a compiled extension built for another torch/CUDA (undefined symbol, library)
    OUTPUT = "output"
    COMPARISON = "comparison"
    DOSSIER = "dossier"
    UNKNOWN = "unknown"  # an exception no check attributed (the runner's last resort)
    IMPORT = "import"  # a step stopped (deadline, stall) while the application's files were being imported


STATUSES = frozenset(s.value for s in Status)
LAYERS = frozenset(layer.value for layer in Layer)


def is_layer(value: str) -> bool:
    """A layer, possibly refined after a colon (``operator:matmul``)."""
    return value.partition(":")[0] in LAYERS


class ConfigKey(StrEnum):
    """The top-level keys of ``run-config.json`` (written by the orchestrator, read by the in-env steps)."""

    STEPS = "steps"
    PROJECT_ROOT = "project_root"
    MODE = "mode"  # "verify" or "reference"
    SESSION = "session"  # the nox session that runs it (verify, reference, calibrate, bisect, upgrade): its TIPs' own
    APPLICATION = "application"
    REFERENCE = "reference"
    CRITERION = "criterion"
    EXPECT_BACKEND = "expect_backend"
    ALLOW_CODE_CHANGE = "allow_code_change"
    RESUME = "resume"
    RESUME_APPLICATION = "resume_application"  # [tool.kernodeck.application.resume], when declared
    DETERMINISM_RECORDS = "determinism_records"
    # the determinism step also runs the entry once without the settings, to record what they cost: a reference's
    # run, and verify --settings-cost (calibrate's nondeterministic variation measures the same on demand)
    SETTINGS_COST = "settings_cost"
    SAMPLE_REPEAT = "sample_repeat"
    MARGIN_FILE = "margin_file"  # calibrate's first variation: where the margins of use go
    VARIATION = "variation"  # calibrate: the legitimate settings this process varies
    LIBRARIES = "libraries"  # [tool.kernodeck.environment] libraries: shared libraries declared from outside the env
    VARIABLES = "variables"  # [tool.kernodeck.environment] variables: the caller's variables the application reads
    INENV_SHA256 = "inenv_sha256"  # {file name: sha256} of Kernodeck's in-env files, as the orchestrator read them
    EXTENSIONS = "extensions"  # the compiled extensions found from outside and the declared smoke checks
    PROBE_WAIT_S = "probe_wait_s"  # the longest wait for torch's collect_env report: well inside the run's deadlines


class StepKey(StrEnum):
    """The keys of one step's result file (``steps/NN-name.json``)."""

    NAME = "name"
    TITLE = "title"
    INTERPRETER = "interpreter"
    STATUS = "status"
    REASON = "reason"
    ERROR = "error"
    LAYER = "layer"
    DETAILS = "details"
    DURATION_S = "duration_s"


CONFIG_KEYS = frozenset(k.value for k in ConfigKey)
STEP_KEYS = frozenset(k.value for k in StepKey)
STEPS_DIR = "steps"  # beside run-config.json
# PYTHONHASHSEED of every in-env process (set by the orchestrator, which starts them so that it holds: no -E/-I);
# the settings step reads back the seed in effect.
HASH_SEED = "0"
RUN_CONFIG = "run-config.json"
COLLECT_ENV = "collect_env.txt"  # beside it: torch.utils.collect_env's report (torch_report.py)
# each step's details: {real path: sha256} of the system's own files its windows read (systemfiles.py); the
# orchestrator writes them all into system.json, so each is compared with the reference's as the system chain's
SYSTEM_FILES = "system_files"
# A stuck in-env process is asked for its stacks before it is stopped (docs/report.md, "A hang"): every process of
# the run that imports Kernodeck's in-env side (the runner, each child it or torch forks or spawns) registers
# faulthandler on this signal, writing to ``<STACKS_DIR_ENV>/<pid>.txt``; the folder is the supervisor's.
STACKS_DIR_ENV = "KERNODECK_STACKS_DIR"
STACKS_SIGNAL = "SIGUSR1"
# The first closed-world refusal a process of the run made in a step, written where it is made
# (``<STACKS_DIR_ENV>/<pid>.verdict.json``): a step the supervisor stops (a retry loop that swallowed it) names it.
VERDICT_SUFFIX = ".verdict.json"
# The home a declared ``path`` source's ``~`` and ``$HOME`` name, when set (an absolute folder): ``nox -s replay`` sets
# it to its caller's home, its own HOME being an empty folder (no package configuration); unset, HOME's.
USER_HOME_ENV = "KERNODECK_USER_HOME"


# The resume-application step's folder in a dossier: one folder per run of the application's train (``uninterrupted``,
# ``resumed``, ``resumed-without-<piece>``), each with its declared end-state outputs (``NAME.npy`` and
# ``NAME.ids.json``, rows numbered from 0), its loss curve and its progress counters as two more such pairs: what
# ``nox -s compare`` and the drift map read of it (the resumed run's, under kernodeck/dossier/resume_outputs.py).
RESUME_DIR = "resume-application"
RESUMED_RUN = "resumed"
LOSS_CURVE = "loss-curve"  # float64, the loss of global step 1..N (NaN where train logged none); ids: "1".."N"
PROGRESS = "progress"  # int64, the counters train returned; ids: their names, sorted
RESUME_FILES = frozenset({LOSS_CURVE, PROGRESS})  # no declared resume output may take these names


def step_file(number: int, name: str) -> str:
    """A step's result file, under ``STEPS_DIR``: numbered in run order."""
    return f"{number:02d}-{name}.json"
