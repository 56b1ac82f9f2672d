"""The reference step: the committed expected outputs are sound (count, shape, dtype, finite, ids in sample order),
are the very files the manifest fingerprints, and the declared code is the code they were made from."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ._common import CheckFailed, Context, Skip, sha256_file
from .application import _app_cfg, _ids, sample
from .arrays import _first_difference, _load_ids, _load_npy, check_structure


def check_reference(ctx: Context) -> dict[str, Any]:
    """Refuse an unsound reference BEFORE any comparison: NaN/Inf, wrong shape or dtype, ids not the sample's."""
    if ctx.config.get("mode") == "reference" or not ctx.config.get("reference"):
        raise Skip("making a new reference: there is no earlier one to check against")
    ref = ctx.config["reference"]
    folder = Path(ref["dir"])
    code = code_check(ctx)
    sample_ids = _ids(sample(ctx))
    declared = _app_cfg(ctx)["outputs"]
    missing = sorted(set(declared) - set(ref["outputs"]))
    if missing:
        raise CheckFailed(f"the reference has no output {', '.join(missing)} (declared in pyproject)", "reference")
    arrays, details = {}, {}
    for name, decl in declared.items():
        rec = ref["outputs"][name]
        ids = _load_ids(folder / rec["ids"], f"reference {name}", "reference")
        if ids != sample_ids:
            raise CheckFailed(
                f"reference {name} ids do not match the sample (first difference at row "
                f"{_first_difference(ids, sample_ids)}; {len(ids)} reference ids, {len(sample_ids)} sample ids)",
                "reference",
            )
        arr = _load_npy(folder / rec["file"], f"reference {name}", "reference")
        check_structure(
            arr,
            dtype=decl["dtype"],
            rows=len(sample_ids),
            shape=tuple(rec["shape"]),
            what=f"reference {name}",
            layer="reference",
        )
        # Sound, and also the very files the manifest's identity names (not a file swapped in later).
        for key, file in (("sha256", rec["file"]), ("ids_sha256", rec["ids"])):
            if sha256_file(folder / file) != rec[key]:
                raise CheckFailed(f"reference {file} differs from the fingerprint in manifest.toml", "reference")
        arrays[name] = arr
        details[name] = {"shape": list(arr.shape), "dtype": str(arr.dtype)}
    for file, digest in (ref.get("records") or {}).items():  # its system and inventory records (manifest.RECORDS)
        if sha256_file(folder / file) != digest:
            raise CheckFailed(f"reference {file} differs from the fingerprint in manifest.toml (the record verify "
                              "compares this run's system chain and packages with)", "reference",
                              {"tip": f"git checkout -- {_shown(ctx, folder / file)}   (the reference's own record; or "
                                      "nox -s reference -- --new for a new reference)"})
    ctx.state["reference"] = arrays
    return {"outputs": details, "rows": len(sample_ids), "code": code,
            "sample_sha256": _app_cfg(ctx).get("sample_sha256")}


def _shown(ctx: Context, path: Path) -> str:
    """``path`` relative to the project's folder where it lies there."""
    root = Path(ctx.config.get("project_root") or ".")
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


CODE_TIP = "nox -s reference -- --new   (if the change is intended: a new reference for this code)"


def code_check(ctx: Context) -> dict[str, Any]:
    """The declared code files (entry, criterion, ``code``) are the reference's, by their sha256 fingerprints.

    A changed or missing file fails here, named as such (a missing one's TIP restores it: a new reference would
    describe code that is not there), unless the run was told ``--allow-code-change``: then the files are
    recorded as changed and the orchestrator's verdict can never be ``passed``.
    """
    recorded: dict[str, str] = dict(ctx.config["reference"].get("code") or {})
    root = Path(ctx.config["project_root"])
    changed = sorted(f for f, digest in recorded.items() if not (root / f).is_file() or sha256_file(root / f) != digest)
    result = {"files": sorted(recorded), "changed": changed, "allowed": bool(ctx.config.get("allow_code_change"))}
    if changed and not result["allowed"]:
        missing = [f for f in changed if not (root / f).is_file()]
        differ = [f for f in changed if f not in missing]
        said = ([f"code differs from the reference's fingerprint: {', '.join(differ)}"] if differ else []) + (
            [f"code the reference fingerprints is missing: {', '.join(missing)}"] if missing else [])
        tip = (f"git checkout -- {' '.join(missing)}   (restore the missing files; if they are gone on purpose: "
               "nox -s reference -- --new)") if missing else CODE_TIP
        raise CheckFailed("; ".join(said), "reference", {"code": result, "tip": tip})
    return result

