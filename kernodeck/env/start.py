"""How the env's interpreter is started for the in-env processes: ``-I``'s isolation with the recorded settings in
effect.

``-I`` is ``-E -P -s``, and ``-E`` ignores every ``PYTHON*`` variable, ``PYTHONHASHSEED`` included: the seed the run
records would not be the one in effect (hash randomisation on). So the in-env processes (the runner,
calibrate's variations, drift and compare's numpy scripts; the runner starts the resume worker the same way) start
with ``-s -P -u`` (no user site, neither the script's folder nor the current one on ``sys.path``) in an environment that
holds no ``PYTHON*`` variable but the ones the run sets: what ``-E`` would have ignored is not there to be read. The
settings step reads each back (``sys.flags``, the seed in effect, the ``PYTHON*`` names it sees). Of the caller's
other variables they get only an allow-list (:func:`environ`): each one the application could read is recorded.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping

from kernodeck._proc import clean_env
from kernodeck.inenv.protocol import STACKS_DIR_ENV, USER_HOME_ENV

FLAGS = ("-s", "-P", "-u")  # -u: nothing of the process's output waits in a buffer that its end would have to flush


def argv(python: str | os.PathLike[str], *args: str, site: bool = True) -> list[str]:
    """The command line of an in-env process: the env's interpreter, the isolation flags, then ``args``; without
    ``site``, ``-S`` too (the verify runner runs ``site`` itself once told to: kernodeck/early.py)."""
    return [str(python), *(() if site else ("-S",)), *FLAGS, *args]


def environ(extra: Mapping[str, str] | None = None, declared: Iterable[str] = (),
            drop_numerics: bool = False) -> dict[str, str]:
    """The in-env process's environment: of the caller's variables only :data:`PLUMBING`'s, the recorded ones
    (:data:`RECORDED_PREFIXES`), Kernodeck's own and the ``declared`` ones (no ``PYTHON*``), less, with
    ``drop_numerics``, the recorded ones no run needs (:func:`numerics`); plus ``extra``."""
    names = set(declared)
    env = {k: v for k, v in clean_env().items()
           if (k in PLUMBING or k in names or k.startswith(RECORDED_PREFIXES))
           and not (drop_numerics and numerics(k, names))}
    env.update(extra or {})
    return env


def judging_environ() -> dict[str, str]:
    """The environment of a process that only judges outputs with numpy (compare's, drift's): as :func:`environ`'s
    with ``drop_numerics``, and no :data:`LOADERS` variable at all. No application code runs there, so no library of
    the caller's is loaded into it (red-team pass 69, LDCMP1), and the caller's numerics variables do not choose its
    code paths; what it got is recorded beside its verdict (:func:`recorded`)."""
    return {k: v for k, v in environ(drop_numerics=True).items() if k not in LOADERS}


def declared_variables(tool: Mapping[str, object]) -> list[str]:
    """``[tool.kernodeck.environment] variables``: the caller's variables the application reads, passed and recorded."""
    environment = tool.get("environment")
    if not isinstance(environment, Mapping):
        return []
    return [str(item) for item in environment.get("variables") or []]


# The caller's variables an in-env process gets, and no other: a variable the application reads is an input, so it
# reaches it recorded or declared. Besides those, by name (never a prefix: a project's XDG_X or KERNODECK_X would pass
# unrecorded), the process's plumbing (it differs per machine and changes no number: not recorded) and the variables
# Kernodeck's in-env code reads itself (its cache, its stack dumps' folder, the home a path source's ``~`` names; the
# base image the system step records).
PLUMBING = frozenset({"PATH", "HOME", "USER", "LOGNAME", "TMPDIR", "TEMP", "TMP", "TERM", "SHELL", "SYSTEMROOT",
                      "SYSTEMDRIVE", "WINDIR", "COMSPEC", "PATHEXT", "USERPROFILE", "APPDATA", "LOCALAPPDATA",
                      "PROGRAMDATA", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_RUNTIME_DIR",
                      "KERNODECK_CACHE", STACKS_DIR_ENV, USER_HOME_ENV, "KERNODECK_BASE_IMAGE"})


# The variables torch, its BLAS/OpenMP/oneDNN backends, CUDA/ROCm/NCCL and the dynamic loader read: each one the
# in-env processes get is part of the run's record (they change numerics, or load code).
RECORDED_PREFIXES = ("LD_", "ATEN_", "TORCH_", "PYTORCH_", "OMP_", "KMP_", "GOMP_", "MKL_", "OPENBLAS_", "ONEDNN_",
                     "DNNL_", "CUDA_", "CUBLAS_", "CUBLASLT_", "CUDNN_", "NCCL_", "HIP_", "ROCM_", "HSA_",
                     "ROCR_VISIBLE_DEVICES",  # ROCm's runtime device selection (as CUDA_VISIBLE_DEVICES)
                     # numpy's SIMD dispatch (NPY_DISABLE_CPU_FEATURES moves np.sin's last bits), torch.compile's own
                     # (TORCHINDUCTOR_*, TORCHDYNAMO_*: not TORCH_*), TF32 forced under cuBLAS/cuDNN, glibc's ifuncs
                     "NPY_", "TORCHINDUCTOR_", "TORCHDYNAMO_", "NVIDIA_TF32_OVERRIDE", "GLIBC_TUNABLES",
                     # Triton (inductor's GPU kernels: TRITON_F32_DEFAULT is tl.dot's precision, TRITON_CACHE_DIR the
                     # kernels loaded), ROCm's libraries, the other BLAS builds' thread counts (OpenBLAS reads
                     # GOTO_NUM_THREADS too), glibc's allocator fill (torch.empty's contents) and iconv modules
                     "TRITON_", "MIOPEN_", "ROCBLAS_", "HIPBLAS_", "HIPBLASLT_", "RCCL_", "BLIS_", "GOTO_",
                     "VECLIB_", "ZENDNN_", "MALLOC_", "GCONV_PATH",
                     # the locale and the time zone: how text, numbers and dates are read and written
                     "LANG", "LC_", "TZ",
                     # where the Hugging Face and torch caches are (which snapshot files a weights source finds)
                     "HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "TRANSFORMERS_CACHE",
                     "SENTENCE_TRANSFORMERS_HOME")
# Of the recorded variables, those a run needs to start and to find its inputs: the loader's paths, the devices, the
# toolkits' places, what some machines need to start (a GPU override, NCCL's transports, the allocator), the caches
# and the locale (without which it does not start at all, so no variation could run). calibrate's variations keep only
# these of the caller's recorded ones (each variation sets its own; the declared one is torch's own choice): every
# other recorded variable may pick a kernel's code path, its precision, its algorithm or its thread count (MKL_CBWR,
# TORCH_COMPILE_DISABLE, PYTORCH_JIT, PYTORCH_TUNABLEOP_ENABLED, NCCL_ALGO, ...) and is left out, shown (red-team pass
# 37, CAL2: a keep-list, not a list of what to drop). Each is covered by a recorded prefix
# (tests/unit/test_redteam36.py).
RUN_NEEDS = (
    # the loader's paths, the devices and the toolkits' places
    "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
    "CUDA_HOME", "CUDA_PATH", "ROCM_PATH", "ROCM_HOME", "HIP_PATH",
    # what some machines need for a run to start at all (red-team pass 38, CAL3): ROCm on a consumer GPU, NCCL's
    # transports and interfaces on a multi-GPU host, the allocator's settings a model fits with, two OpenMP runtimes
    "HSA_OVERRIDE_GFX_VERSION", "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_IB_DISABLE", "NCCL_SOCKET_IFNAME",
    "NCCL_DEBUG", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF", "KMP_DUPLICATE_LIB_OK",
    # the locale, and the caches a run finds its weights and its driver's compiled code in
    "LANG", "LC_", "TZ", "HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "TRANSFORMERS_CACHE",
    "SENTENCE_TRANSFORMERS_HOME", "TORCH_HOME", "CUDA_CACHE_PATH",
)


def numerics(name: str, declared: Iterable[str] = ()) -> bool:
    """A recorded variable of the caller's that no run needs to start (:data:`RUN_NEEDS`) and the project does not
    declare: calibrate's variations run without it."""
    return name.startswith(RECORDED_PREFIXES) and not name.startswith(RUN_NEEDS) and name not in set(declared)


PRELOAD = "LD_PRELOAD"
AUDIT = "LD_AUDIT"  # ld.so loads each library it names into every process too, before the program's own code
# Every variable whose value names code to load into the in-env processes (no lock describes it), and how its list is
# split: ld.so's two, the OpenMP tool interface (libomp/libiomp5 dlopen it, and may dlclose it at once: gone from the
# process's map before a step ends), the CUDA driver's injection library, NCCL's plugins, glibc's iconv modules.
LOADERS = {PRELOAD: r"[:\s]+", AUDIT: ":", "OMP_TOOL_LIBRARIES": ":", "CUDA_INJECTION64_PATH": ":",
           "NCCL_NET_PLUGIN": ":", "NCCL_TUNER_PLUGIN": ":", "NCCL_PROFILER_PLUGIN": ":", "GCONV_PATH": ":"}


def recorded(env: Mapping[str, str], redact: Callable[[str], str] = str,
             declared: Iterable[str] = ()) -> dict[str, str]:
    """The variables of ``env`` the record holds (names and values, each value through ``redact``), sorted: the
    recorded prefixes' and the ``declared`` ones."""
    names = set(declared)
    return {name: redact(env[name]) for name in sorted(env) if name.startswith(RECORDED_PREFIXES) or name in names}


def declared_libraries(tool: Mapping[str, object]) -> list[str]:
    """The shared libraries the in-env process may map from outside the env and the system's library folders
    (kernodeck/inenv/libraries.py): ``[tool.kernodeck.environment] libraries``, and the ``ld-preload`` ones, which
    are declared already."""
    environment = tool.get("environment")
    if not isinstance(environment, Mapping):
        return []
    return [str(item) for key in ("libraries", "ld-preload") for item in environment.get(key) or []]


def declared_loaders(env: Mapping[str, str], declared: list[str]) -> list[str]:
    """The :data:`LOADERS` variables of ``env`` that name only ``declared`` libraries: the project's own (an
    ``ld-preload`` entry its run needs to start: libgomp on aarch64, an allocator, NCCL's network plugin), passed as
    its declared variables are (red-team pass 39, CAL4: calibrate left them out of every variation)."""
    return [name for name in LOADERS if env.get(name) and not undeclared_preload({name: env[name]}, declared)]


def undeclared_preload(env: Mapping[str, str], declared: list[str]) -> list[str]:
    """The libraries (or folders of modules) the :data:`LOADERS` variables name that no declared entry matches, by
    path or by file name: code no lock describes, loaded into every in-env process."""
    names: list[str] = []
    for variable, separator in LOADERS.items():
        names += [entry for entry in re.split(separator, env.get(variable, "")) if entry and entry not in names]
    return [name for name in names if name not in declared and os.path.basename(name) not in declared]


# What the verify runner's environment may hold and still start on its start files' proof (env/startfiles.py): the
# variables nothing a start loads (CPython with -S, the standard library the runner imports before its word, glibc,
# OpenSSL through hashlib) reads a file by. Kernodeck's plumbing, the run's own settings, the recorded variables only
# torch, numpy and their libraries read (none loaded before the word), glibc's allocator settings, and a locale's or a
# time zone's name (read from the system's folders). Any other (LD_LIBRARY_PATH, GCONV_PATH, a TZ or LC_ALL naming a
# path, TZDIR, OPENSSL_CONF, PYTHONPYCACHEPREFIX, any declared one) may name a folder of the env: the runner then
# waits for every file's proof (red-team pass 82, EARLY2; pass 88, EARLYSTART1-2).
_AT_START = ("LD_", "GCONV_PATH", "TZ", "LANG", "LC_")  # recorded prefixes a start reads by: only names, below
_LOCALE_NAME = re.compile(r"[A-Za-z0-9_.@+:-]*")  # LANG, LANGUAGE, LC_*: names, no folder
_ZONE_NAME = re.compile(r"[A-Za-z0-9_+-]+(/[A-Za-z0-9_+-]+)*")  # TZ: a zone under the system's zoneinfo


def read_at_start(env: Mapping[str, str], own: Iterable[str] = ()) -> list[str]:
    """The variables of ``env`` that may make the verify runner's start read a file by a path they name (any not
    known to be read by nothing a start loads; ``own``: the run's settings, Kernodeck's): where one is set, the runner
    starts only once every file of the env is proven, not on its start files' proof (env/startfiles.py)."""
    own = set(own)

    def quiet(name: str, value: str) -> bool:
        if name in ("LANG", "LANGUAGE") or name.startswith("LC_"):
            return _LOCALE_NAME.fullmatch(value) is not None
        if name == "TZ":
            return _ZONE_NAME.fullmatch(value) is not None and ".." not in value
        if name in PLUMBING or name in own:
            return True
        return name.startswith(RECORDED_PREFIXES) and not name.startswith(_AT_START) and name not in LOADERS

    return sorted(name for name, value in env.items() if not quiet(name, value))
