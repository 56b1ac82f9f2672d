"""The extensions step: each compiled extension found from outside the env (kernodeck/env/extension_scan.py) imported
here, matched to the chain it was built for, and smoke-checked where the project declares it.

An undefined symbol or a missing library at import is an ABI break, attributed to the layer ``extension-abi``: the
message names the distribution, the shared object, the symbol (demangled with ``c++filt`` where present) and the
likely cause. On CUDA, an object whose kernels carry no code this device can run is a failure too. A declared smoke
check (``[tool.kernodeck.extensions.NAME]``) calls the compiled op on the expected device and compares it with its
pure-PyTorch reference under the declared tolerance; a declared ``path`` must be the one the call took. No
extension: the step says so and passes. It runs before the application, outside its audit window.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from . import declared_files, leftover, paths, world
from ._common import CheckFailed, Context, load_file, progress, user_traceback
from .application import settings_held
from .protocol import ConfigKey, Layer

_UNDEFINED = re.compile(r"undefined symbol: (\S+)")
_MISSING = re.compile(r"(\S+?): cannot open shared object file")
_SO_PATH = re.compile(r"(/\S+\.so[\w.]*)")


def demangle(symbol: str) -> str:
    """``symbol`` as C++ reads it, with ``c++filt`` where present (the mangled name when not)."""
    environ = leftover.kernodecks_start()[0]  # not what a smoke check set (LD_PRELOAD, PATH): Kernodeck's own
    exe = shutil.which("c++filt", path=environ.get("PATH"))
    if not exe or not symbol.startswith("_Z"):
        return symbol
    try:
        out = subprocess.run([exe, symbol], capture_output=True, text=True, timeout=20, check=False, env=environ)
    except (OSError, subprocess.TimeoutExpired):
        return symbol
    return out.stdout.strip() or symbol


def running_chain(torch: Any) -> dict[str, Any]:
    """The chain this env runs: torch, and the CUDA or HIP it was built with (None on a CPU build)."""
    return {"torch": torch.__version__, "cuda": torch.version.cuda, "hip": getattr(torch.version, "hip", None)}


def _minor(version: str) -> str:
    return ".".join(re.findall(r"\d+", version.split("+", 1)[0])[:2])


def likely_cause(built: dict[str, str], running: dict[str, Any]) -> str:
    """What the extension was built for against what this env runs, and what to do."""
    gpu = f"CUDA {running['cuda']}" if running.get("cuda") else f"HIP {running['hip']}" if running.get("hip") else ""
    runs = f"torch {running['torch']} / {gpu or 'no CUDA'}"
    if built.get("torch") or built.get("cuda") or built.get("rocm"):
        parts = [f"torch {built['torch']}" if built.get("torch") else "", f"CUDA {built['cuda']}"
                 if built.get("cuda") else "", f"ROCm {built['rocm']}" if built.get("rocm") else ""]
        said = " / ".join(p for p in parts if p)
        return (f"built for {said} ({built.get('from', 'recorded')}); this env runs {runs}: rebuild it against this "
                "torch, or pin the torch it was built for")
    return (f"built for another torch or CUDA than this env's (it records none); this env runs {runs}: rebuild it "
            "against this torch, or pin the torch it was built for")


def abi_failure(dist: str, so: str, exc: BaseException, built: dict[str, str], running: dict[str, Any]
                ) -> CheckFailed | None:
    """The import error of an extension as an ABI break (None: not one: another kind of import error)."""
    text = str(exc)
    cause = likely_cause(built, running)
    where = _SO_PATH.search(text)
    named = Path(where.group(1)).name if where else so
    details: dict[str, Any] = {"distribution": dist, "shared_object": so, "error": text, "likely_cause": cause,
                               "built_for": built, "running": running}
    if m := _UNDEFINED.search(text):
        symbol = m.group(1)
        readable = demangle(symbol)
        details.update(symbol=symbol, symbol_demangled=readable, failing_object=named)
        return CheckFailed(
            f"extension {dist}: {named} has an undefined symbol {readable}"
            + (f" ({symbol})" if readable != symbol else "") + f": {cause}",
            Layer.EXTENSION_ABI, details,
        )
    if m := _MISSING.search(text):
        library = m.group(1)
        details.update(missing_library=library, failing_object=named)
        return CheckFailed(f"extension {dist}: {so} needs {library}, which cannot be loaded here: {cause}",
                           Layer.EXTENSION_ABI, details)
    return None


def _capability(text: str) -> tuple[int, int] | None:
    m = re.fullmatch(r"(\d+)\.(\d+)", text.strip())
    return (int(m.group(1)), int(m.group(2))) if m else None


def _arch(name: str) -> tuple[int, int, bool] | None:
    """``sm_86`` / ``compute_90a`` -> (8, 6, arch-specific)."""
    m = re.fullmatch(r"(?:sm|compute)_(\d+)(\d)([af]?)", name)
    return (int(m.group(1)), int(m.group(2)), m.group(3) == "a") if m else None


def arch_runs(capability: str, cubins: list[str], ptx: list[str]) -> str | None:
    """Which of the object's CUDA code a device of ``capability`` (``"8.6"``) runs: a cubin ``sm_XY`` runs on the
    same major X with a minor >= Y (``sm_90a`` on 9.0 only); PTX ``compute_XY`` is compiled at load for any device
    >= X.Y. The first that runs, or None: no code for this device."""
    device = _capability(capability)
    if device is None:
        return None
    for name in cubins:
        a = _arch(name)
        if a and a[0] == device[0] and (a[1] == device[1] if a[2] else a[1] <= device[1]):
            return name
    for name in ptx:
        a = _arch(name)
        if a and ((a[0], a[1]) == device if a[2] else (a[0], a[1]) <= device):
            return f"{name} (PTX, compiled at load)"
    return None


def _device_capability(ctx: Context, device: str) -> str | None:
    if not device.startswith("cuda"):
        return None
    index = int(device.partition(":")[2] or 0)
    for entry in (ctx.state.get("system") or {}).get("devices") or []:
        if isinstance(entry, dict) and entry.get("index") == index and entry.get("capability"):
            return str(entry["capability"])
    return None


def _check_arches(dist: str, obj: dict[str, Any], capability: str | None, device: str) -> str:
    cubins, ptx = obj.get("cuda_arches"), list(obj.get("ptx") or [])
    if cubins is None:
        return "not read (no cuobjdump)"
    if not cubins and not ptx:
        return "no CUDA code"
    if capability is None:
        return f"carries {', '.join([*cubins, *ptx])}; no CUDA device here to match"
    runs = arch_runs(capability, list(cubins), ptx)
    if runs is None:
        raise CheckFailed(
            f"extension {dist}: {obj['path']} carries code for {', '.join(cubins) or 'no cubin'} (PTX "
            f"{', '.join(ptx) or 'none'}): none runs on {device} (compute capability {capability}): rebuild it with "
            f"TORCH_CUDA_ARCH_LIST including {capability}",
            f"{Layer.EXTENSION_ABI}:arch",
            {"distribution": dist, "shared_object": obj["path"], "cuda_arches": cubins, "ptx": ptx,
             "device_capability": capability},
        )
    return f"runs {runs} on {capability}"


def _says(module: Any) -> dict[str, str]:
    """What the extension's own package says it was built for (attributes some extensions carry)."""
    top = importlib.import_module(module.__name__.split(".", 1)[0])
    said = {}
    for attr in ("torch_version", "__torch_version__", "cuda_version", "__cuda_version__", "built_with_torch"):
        value = getattr(top, attr, None)
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            said[attr] = str(value)
    return said


def _import(dist: str, so: str, name: str, built: dict[str, str], running: dict[str, Any]) -> Any:
    try:
        return importlib.import_module(name)
    except (ImportError, OSError) as exc:
        failure = abi_failure(dist, so, exc, built, running)
        if failure is not None:
            raise failure from exc
        raise CheckFailed(f"extension {dist}: importing {name} failed: {type(exc).__name__}: {exc}",
                          Layer.ENVIRONMENT, {"distribution": dist, "module": name}) from exc


def _to_array(value: Any) -> Any:
    import numpy as np

    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    return np.array(value, dtype=np.float64, copy=True)  # a plain array of Kernodeck's, never a view of the answer's


def plain(name: str, result: Any) -> dict[str, Any]:
    """The smoke call's answer as plain data (two float64 arrays of Kernodeck's and the path's text, or None), made
    inside the call's window: every method of the answer's (a dict subclass's ``get``, a lazy output's ``detach`` or
    ``__array__``, a path's ``__str__``) runs there, watched, and none later on Kernodeck's thread (red-team pass
    38, WINDOW1, as the application's answer: application._recorded)."""
    if not isinstance(result, dict) or "output" not in result or "reference" not in result:
        raise CheckFailed(f"extension {name}: its smoke check must return a dict with 'output' and 'reference' "
                          f"(and 'path'), got {type(result).__name__}", Layer.APPLICATION)
    path = result.get("path")
    # str.__str__: an exact str, whatever the answer's own str() gave (its str subclass, whose __ne__ would run later)
    return {"output": _to_array(result["output"]), "reference": _to_array(result["reference"]),
            "path": None if path is None else str.__str__(str(path))}


def compare(name: str, result: dict[str, Any], decl: dict[str, Any]) -> dict[str, Any]:
    """The smoke call's answer (:func:`plain`) against its pure-PyTorch reference, under the declared tolerance and
    path."""
    import numpy as np

    out, ref = result["output"], result["reference"]
    rtol, atol = float(decl["rtol"]), float(decl["atol"])
    record: dict[str, Any] = {"shape": list(out.shape), "rtol": rtol, "atol": atol,
                              "path": result.get("path"), "expected_path": decl.get("path")}
    layer = f"{Layer.OPERATOR}:{name}"
    if out.shape != ref.shape:
        raise CheckFailed(f"extension {name}: smoke output shape {list(out.shape)} differs from its reference's "
                          f"{list(ref.shape)}", layer, record)
    with np.errstate(invalid="ignore"):
        diff = np.abs(out - ref)
        record["max_abs"] = float(diff.max()) if diff.size else 0.0
        over = int(np.count_nonzero(~(diff <= atol + rtol * np.abs(ref))))
    record["values_over"] = over
    if over or not math.isfinite(record["max_abs"]):
        raise CheckFailed(f"extension {name}: smoke output differs from its pure-PyTorch reference beyond the declared "
                          f"tolerance: {over} of {out.size} values over atol {atol} + rtol {rtol}*|ref| (max abs "
                          f"{record['max_abs']:.3g})", layer, record)
    expected = decl.get("path")
    if expected is not None and result.get("path") != expected:
        raise CheckFailed(f"extension {name}: the smoke call took the path {result.get('path')!r}, not the declared "
                          f"{expected!r} (a fallback was used)", layer, record)
    return record


def _smoke(ctx: Context, name: str, decl: dict[str, Any], device: str, running: dict[str, Any],
           built: dict[str, dict[str, str]]) -> dict[str, Any]:
    import numpy  # noqa: F401  (Kernodeck's own import, before the window: plain() converts the answer with it there)

    progress(f"smoke check {name}")
    module = _import(name, decl["module"], decl["module"], built.get(decl["module"].split(".")[0], {}), running)
    file, _, func = str(decl["smoke"]).partition(":")
    root = Path(ctx.config[ConfigKey.PROJECT_ROOT])
    # the project's code, as the application's: from the bytes the orchestrator fingerprinted (smoke_sha256), in the
    # closed world and under the settings' watch (red-team passes 11, 12: loaded unchecked, it ran outside any window,
    # read what it liked and could turn determinism off for the application). Its file is one of the declared sources
    # (app_contract.Application.smoke: the reference's identity, as ``code``; red-team pass 13): what it leaves in
    # this process (a library function patched) reaches the application. A configuration that does not declare it
    # (made by hand) declares it for this window only.
    declared, sha256 = declared_files.declared(ctx), decl.get("smoke_sha256") or None
    own = [form for form in paths.forms(str(root / file)) if form not in declared]
    declared.update(dict.fromkeys(own, sha256 or ""))
    # the settings step's record is what the watch holds the settings to (no such step: nothing recorded to hold)
    held = settings_held(ctx, f"the smoke check of {name}") if "settings" in ctx.state else contextlib.nullcontext()
    try:
        with held, world.window(ctx, f"the smoke check of {name}"):
            answer = getattr(load_file(root / file, f"kernodeck_extension_smoke_{name}", sha256, file), func)(
                module, device)
            result = plain(name, answer)
            del answer
    except CheckFailed:
        raise
    except Exception as exc:  # the project's code: its own line, as the application's failures show it
        raise CheckFailed(f"extension {name}: its smoke check {decl['smoke']} raised {type(exc).__name__}: {exc}",
                          f"{Layer.OPERATOR}:{name}", user_traceback(exc, root)) from exc
    finally:
        for form in own:
            declared.pop(form, None)
    return {"module": decl["module"], "smoke": decl["smoke"], "smoke_sha256": sha256, "device": device,
            **compare(name, result, decl)}


def run(ctx: Context) -> dict[str, Any]:
    import torch

    cfg = ctx.config.get(ConfigKey.EXTENSIONS) or {}
    discovered: list[dict[str, Any]] = list(cfg.get("discovered") or [])
    declared: dict[str, dict[str, Any]] = dict(cfg.get("declared") or {})
    running = running_chain(torch)
    device = str(ctx.state.get("device") or "cpu")  # the backend step's device
    capability = _device_capability(ctx, device)
    records = []
    by_package: dict[str, dict[str, str]] = {}
    for ext in discovered:
        dist, built = ext["distribution"], dict(ext.get("built_for") or {})
        progress(f"import {dist}")
        objects, says = [], {}
        for obj in ext["objects"]:
            entry = {"path": obj["path"], "module": obj["module"], "links": obj["links"]}
            if obj["module"]:
                module = _import(dist, obj["path"], obj["module"], built, running)
                entry["imported"] = True
                says.update(_says(module))
                by_package[obj["module"].split(".")[0]] = built
            entry["cuda"] = _check_arches(dist, obj, capability, device)
            objects.append(entry)
        torch_built = built.get("torch", "")
        matches = None if not re.fullmatch(r"\d+\.\d+", torch_built) else torch_built == _minor(running["torch"])
        records.append({"distribution": dist, "version": ext["version"], "built_for": built, "says": says,
                        "torch_matches": matches, "objects": objects})
    smoke = {name: _smoke(ctx, name, decl, device, running, by_package) for name, decl in declared.items()}
    tools = (ctx.state.get("system") or {}).get("build_chain") or {}
    built_here = [{**b, "build_chain": tools} for b in cfg.get("built_here") or []]
    here = "; ".join(f"built here from {b['sdist']}: {b['name']} {b['version']} ({b['generator'] or 'generator ?'})"
                     for b in built_here)
    if not records and not smoke:
        summary = "no compiled extension in the env (no shared object links libtorch or libc10)"
    else:
        parts = [f"{r['distribution']} {r['version']}: {sum(1 for o in r['objects'] if o.get('imported'))} "
                 "module(s) imported" + (f", built for torch {r['built_for']['torch']}" if r["built_for"].get("torch")
                                         else "") for r in records]
        parts += [f"smoke {n}: max abs {s['max_abs']:.3g} on {s['device']}" + (f", path {s['path']}" if s['path']
                                                                               else "") for n, s in smoke.items()]
        summary = "; ".join(parts)
    summary += f"; {here}" if here else ""
    return {"summary": summary, "running": running, "extensions": records, "smoke": smoke, "built_here": built_here,
            "not_read": list(cfg.get("not_read") or []), "device": device, "device_capability": capability}
