"""The system chain, kept apart from the package inventory: OS to driver to the libraries torch actually loaded.

Each field is read from a fact; one that cannot be read is recorded as {"unavailable": reason}, never dropped.
The vendor comes from torch.version.cuda / torch.version.hip and the driver, never from the ``torch.cuda`` name.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from . import systemfiles, torch_report
from ._common import Context
from .protocol import ConfigKey

_LIBS = re.compile(
    r"(libcudnn[^/]*|libcublas[^/]*|libcudart[^/]*|libnccl[^/]*|libnvrtc[^/]*|libtorch_cuda[^/]*|"
    r"libMIOpen[^/]*|libamdhip64[^/]*|librocblas[^/]*|libhipblas[^/]*|libtorch_hip[^/]*|"
    r"libgomp[^/]*|libiomp5[^/]*|libmkl[^/]*|libopenblas[^/]*|libtorch_cpu[^/]*|libc10[^/]*)\.so[^/]*$"
)


def unavailable(reason: str) -> dict[str, str]:
    return {"unavailable": reason}


def _cmd_version(name: str, args: list[str]) -> Any:
    exe = shutil.which(name)
    if not exe:
        return unavailable(f"{name} not on PATH")
    try:
        # a tool that prints bytes this locale cannot decode is still recorded (red-team pass 87, DECODE1)
        out = subprocess.run([exe, *args], capture_output=True, text=True, errors="replace", timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return unavailable(f"{name} failed: {exc}")
    lines = [line for line in (out.stdout + out.stderr).splitlines() if line.strip()]
    return {
        "path": exe,
        "version": lines[-1].strip() if name in ("nvcc", "hipcc") and lines else (lines[0] if lines else ""),
    }


BUILD_TOOLS = ("gcc", "g++", "nvcc", "hipcc", "ninja")


def build_chain(tools: dict[str, Any]) -> dict[str, Any]:
    """What compiles a torch extension on this machine (torch.utils.cpp_extension's tools and the variables it reads):
    recorded beside the chain an extension found in the env was built for. ``tools``: the versions of
    :data:`BUILD_TOOLS` (:func:`collect` probes each once, gcc's for its ``compilers`` too)."""
    variables = {name: os.environ.get(name, "(unset)")
                 for name in ("CUDA_HOME", "CUDA_PATH", "ROCM_PATH", "TORCH_CUDA_ARCH_LIST", "CXX", "CC")}
    return {**tools, **variables}


def _libc() -> Any:
    name, version = platform.libc_ver()
    return f"{name} {version}" if name else unavailable("platform.libc_ver() found none (not glibc?)")


def _cpu_model() -> Any:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError as exc:
        return unavailable(f"/proc/cpuinfo: {exc}")
    return platform.processor() or unavailable("no model name in /proc/cpuinfo")


# The instruction-set flags that decide which CPU kernels torch (ATen, oneDNN, MKL, sleef) dispatches to.
_ISA_FLAG = re.compile(
    r"^(sse4_1|sse4_2|avx|avx2|fma|f16c|avx512.*|avx_vnni.*|avx_ne_convert|amx.*|"
    r"asimd.*|neon|sve\d*|sme\d*|bf16|i8mm|fphp|dotprod|asimddp)$"
)


def _cpuinfo_fields(text: str) -> dict[str, str]:
    """The first processor block of /proc/cpuinfo as key -> value (every core of one machine is the same model)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break
            continue
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    return fields


def _hypervisor(flags: set[str]) -> Any:
    """The hypervisor (a VM, not a container) this machine runs under ("none" on bare metal)."""
    exe = shutil.which("systemd-detect-virt")
    if exe:
        try:
            out = subprocess.run([exe, "--vm"], capture_output=True, text=True, timeout=10, check=False)
            name = out.stdout.strip()
            if name:
                return name
        except (OSError, subprocess.TimeoutExpired):
            pass
    try:
        return Path("/sys/hypervisor/type").read_text(encoding="utf-8").strip()
    except OSError:
        pass
    if "hypervisor" in flags:
        return "present (type not readable)"
    return "none" if flags else unavailable("no systemd-detect-virt, /sys/hypervisor or cpuinfo flags")


def cpu_identity(cpuinfo: str | None = None) -> dict[str, Any]:
    """What decides the CPU kernels: vendor, family/model/stepping, the ISA flags that matter, the hypervisor."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8")
        except OSError as exc:
            return _cpu_identity_sysctl() or {"unavailable": f"/proc/cpuinfo: {exc}"}
    fields = _cpuinfo_fields(cpuinfo)
    flags = set((fields.get("flags") or fields.get("Features") or "").split())
    return {
        "vendor": fields.get("vendor_id") or fields.get("CPU implementer") or unavailable("not in /proc/cpuinfo"),
        "family": fields.get("cpu family") or fields.get("CPU architecture") or unavailable("not in /proc/cpuinfo"),
        "model": fields.get("model") or fields.get("CPU part") or unavailable("not in /proc/cpuinfo"),
        "stepping": fields.get("stepping") or fields.get("CPU variant") or unavailable("not in /proc/cpuinfo"),
        "microcode": fields.get("microcode") or unavailable("not in /proc/cpuinfo"),
        "isa_flags": sorted(f for f in flags if _ISA_FLAG.match(f)),
        "hypervisor": _hypervisor(flags),
    }


def _cpu_identity_sysctl() -> dict[str, Any] | None:
    """macOS: the same record from sysctl (hw.optional.* features set to 1)."""
    exe = shutil.which("sysctl")
    if not exe:
        return None
    try:
        out = subprocess.run([exe, "-a"], capture_output=True, text=True, timeout=20, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    values = dict(line.split(": ", 1) for line in out.splitlines() if ": " in line)
    flags = sorted(
        key.rsplit(".", 1)[-1].lower()
        for key, value in values.items()
        if key.startswith("hw.optional.") and value.strip() == "1"
    )
    return {
        "vendor": values.get("machdep.cpu.vendor") or values.get("machdep.cpu.brand_string") or unavailable("sysctl"),
        "family": values.get("hw.cpufamily") or unavailable("sysctl"),
        "model": values.get("machdep.cpu.brand_string") or unavailable("sysctl"),
        "stepping": values.get("machdep.cpu.stepping") or unavailable("sysctl"),
        "microcode": values.get("machdep.cpu.microcode_version") or unavailable("sysctl"),
        "isa_flags": flags,
        "hypervisor": "present" if values.get("kern.hv_vmm_present", "").strip() == "1" else "none",
    }


def torch_cpu_capability(torch: Any) -> Any:
    """The CPU kernel level torch itself dispatches to (e.g. AVX512, AVX2, DEFAULT), as torch reports it."""
    getter = getattr(getattr(torch.backends, "cpu", None), "get_cpu_capability", None)
    if getter is None:
        return unavailable("torch.backends.cpu.get_cpu_capability missing in this torch")
    try:
        return str(getter())
    except RuntimeError as exc:
        return unavailable(str(exc))


def loaded_libraries() -> Any:
    """Shared libraries mapped in THIS process (what torch loaded), not what the system has installed."""
    maps = Path("/proc/self/maps")
    if not maps.exists():
        return unavailable("/proc/self/maps missing (not Linux)")
    found = set()
    for line in maps.read_text(encoding="utf-8", errors="replace").splitlines():
        path = line.split()[-1] if line.split() else ""
        if _LIBS.search(path):
            found.add(path)
    return sorted(found)


def _driver(torch: Any) -> Any:
    proc_file = Path("/proc/driver/nvidia/version")
    if proc_file.exists():
        text = proc_file.read_text(encoding="utf-8", errors="replace")
        match = re.search(r"Kernel Module\s+([\d.]+)", text)
        return {"vendor": "nvidia", "version": match.group(1) if match else text.splitlines()[0]}
    amd = Path("/sys/module/amdgpu/version")
    if amd.exists():
        return {"vendor": "amd", "version": amd.read_text(encoding="utf-8").strip()}
    return unavailable("no NVIDIA (/proc/driver/nvidia/version) or AMD (/sys/module/amdgpu) kernel driver")


def _devices(torch: Any) -> Any:
    devices: list[dict[str, Any]] = []
    if torch.cuda.is_available():
        for index in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(index)
            entry = {
                "index": index,
                "name": props.name,
                "memory_bytes": props.total_memory,
                "multiprocessors": props.multi_processor_count,
            }
            if getattr(torch.version, "hip", None):
                entry["gcnArchName"] = getattr(props, "gcnArchName", "unavailable")
            else:
                entry["capability"] = f"{props.major}.{props.minor}"
            devices.append(entry)
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        devices.append({"index": 0, "name": "Apple MPS", "kind": "mps"})
    return devices


def vendor(torch_cuda: Any, torch_hip: Any, driver: Any, mps: bool) -> str:
    if torch_hip:
        return "amd"
    if torch_cuda:
        return "nvidia"
    if mps:
        return "apple"
    if isinstance(driver, dict) and driver.get("vendor"):
        return f"{driver['vendor']} (driver present, but this torch has no GPU support)"
    return "none (CPU build of torch)"


def _os_name(system: str) -> Any:
    if system == "Linux":
        try:
            return platform.freedesktop_os_release().get("PRETTY_NAME", "Linux")
        except OSError as exc:
            return {"name": "Linux", "release_file": unavailable(str(exc))}
    return platform.platform()


def collect() -> dict[str, Any]:
    import torch

    torch_cuda = torch.version.cuda
    torch_hip = getattr(torch.version, "hip", None)
    cudnn: Any
    try:
        cudnn = (
            torch.backends.cudnn.version()
            if torch.backends.cudnn.is_available()
            else unavailable("cudnn not available to this torch")
        )
    except RuntimeError as exc:
        cudnn = unavailable(str(exc))
    driver = _driver(torch)
    mps_ok = bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())
    uname = platform.uname()
    tools = {name: _cmd_version(name, ["--version"]) for name in BUILD_TOOLS}  # each probed once
    return {
        "os": _os_name(uname.system),
        "kernel": uname.release,
        "architecture": uname.machine,
        "libc": _libc(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu": cpu_identity(),
        "torch_cpu_capability": torch_cpu_capability(torch),
        "python_version": sys.version.split()[0],
        "python_build": sys.version,
        "python_executable": sys.executable,
        "torch_version": torch.__version__,
        "torch_version_cuda": torch_cuda,  # None on CPU and ROCm builds: recorded as is, not guessed
        "torch_version_hip": torch_hip,
        "torch_git": getattr(torch.version, "git_version", None),
        "cudnn_version_loaded": cudnn if torch_cuda else unavailable("not a CUDA build of torch"),
        "miopen_version_loaded": (cudnn if torch_hip else unavailable("not a ROCm build of torch")),
        "loaded_libraries": loaded_libraries(),
        "driver": driver,
        "vendor": vendor(torch_cuda, torch_hip, driver, mps_ok),
        "devices": _devices(torch),
        "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", "(unset)"),
        "HIP_VISIBLE_DEVICES": os.environ.get("HIP_VISIBLE_DEVICES", "(unset)"),
        "compilers": {name: tools[name] for name in ("gcc", "nvcc", "hipcc")},
        "build_chain": build_chain(tools),
        "time_zone": systemfiles.chain(),
    }


# Set by a container `nox -s export` wrote (ENV in the Dockerfile, %environment in Apptainer): the base image it was
# built from, pinned by digest where the project pinned it (kernodeck.dossier.baseimage.ENV_VAR names the same).
CONTAINER_IMAGE_ENV = "KERNODECK_BASE_IMAGE"


def container(environ: dict[str, str] | None = None) -> dict[str, Any]:
    """The container image this run is in, from the container's own metadata; nothing outside such a container."""
    reference = (os.environ if environ is None else environ).get(CONTAINER_IMAGE_ENV, "").strip()
    if not reference:
        return {}
    pinned = "@sha256:" in reference
    return {"container_image": {"reference": reference, "pinned_by_digest": pinned,
                                "digest": reference.rsplit("@", 1)[1] if pinned else None}}


def run(ctx: Context) -> dict[str, Any]:
    # torch's own report beside the record, taken before any project code runs; its probes (processes) run while
    # this thread probes the chain's (the compilers', the CPU's): the step lasts as long as the longer of the two
    report, written = torch_report.begin(), False
    try:
        chain = collect()
        chain.update(container())
        ctx.state["system"] = chain
        written = True
    finally:
        report.finish(ctx.out if written else None,
                      float(ctx.config.get(ConfigKey.PROBE_WAIT_S) or torch_report.WAIT_S))
    return chain
