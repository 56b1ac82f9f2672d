"""A vulnerability audit of a platform lock with pip-audit (opt-in: ``nox -s audit``; it needs the network).

pip-audit reads the hash-pinned lock as it is (``--require-hashes --disable-pip``: nothing resolved, nothing
installed), asks the vulnerability service about each pin and writes JSON. What could not be asked is said as such:
an unreachable service is "not checked: no network", a pin the service does not know is counted as not checked,
never folded into "no known vulnerabilities".
"""

from __future__ import annotations

import enum
import json
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, assert_never

from kernodeck import tips
from kernodeck._proc import clean_env, first_error, log, show
from kernodeck.errors import KernodeckError

# What a failed request to the vulnerability service looks like in pip-audit's output (requests / urllib3).
_NO_NETWORK = (
    "ConnectionError",
    "ProxyError",
    "NewConnectionError",
    "Max retries exceeded",
    "Name or service not known",
    "Temporary failure in name resolution",
    "Connection refused",
    "timed out",
    "Network is unreachable",
)


class AuditStatus(enum.StrEnum):
    CLEAN = "no known vulnerabilities"
    VULNERABLE = "vulnerable"
    NOT_CHECKED = "not checked"


@dataclass
class AuditResult:
    platform: str
    status: AuditStatus
    checked: int = 0
    skipped: dict[str, str] = field(default_factory=dict)  # name -> why the service could not judge it
    vulnerabilities: list[dict[str, Any]] = field(default_factory=list)
    reason: str = ""

    def line(self) -> str:
        skipped = f"; {len(self.skipped)} not checked ({_first(self.skipped)})" if self.skipped else ""
        match self.status:
            case AuditStatus.NOT_CHECKED:
                return f"audit {self.platform}: not checked: {self.reason}"
            case AuditStatus.CLEAN:
                return f"audit {self.platform}: no known vulnerabilities in {self.checked} package(s){skipped}"
            case AuditStatus.VULNERABLE:
                found = ", ".join(
                    f"{v['name']}=={v['version']} {v['id']}"
                    + (f" (fixed in {', '.join(v['fix_versions'])})" if v.get("fix_versions") else "")
                    for v in self.vulnerabilities
                )
                return f"audit {self.platform}: VULNERABLE: {found}; {self.checked} package(s) checked{skipped}"
            case _ as unreachable:
                assert_never(unreachable)


def _first(skipped: dict[str, str]) -> str:
    name, why = next(iter(skipped.items()))
    return f"e.g. {name}: {why}"


def pip_audit_argv(lock_file: Path, out: Path, python: str | None = None) -> list[str]:
    return [
        python or sys.executable, "-m", "pip_audit", "-r", str(lock_file), "--require-hashes", "--disable-pip",
        "--progress-spinner", "off", "--format", "json", "--output", str(out),
    ]


def parse(platform: str, data: dict[str, Any]) -> AuditResult:
    """pip-audit's JSON (``{"dependencies": [{name, version, vulns | skip_reason}]}``) as a result."""
    checked, skipped, vulns = 0, {}, []
    for dep in data.get("dependencies", []):
        if "skip_reason" in dep:
            skipped[str(dep["name"])] = str(dep["skip_reason"])
            continue
        checked += 1
        for vuln in dep.get("vulns", []):
            vulns.append({"name": dep["name"], "version": dep.get("version", "?"), "id": vuln.get("id", "?"),
                          "fix_versions": list(vuln.get("fix_versions", []))})
    if vulns:
        return AuditResult(platform, AuditStatus.VULNERABLE, checked, skipped, vulns)
    if checked == 0:
        reason = f"the vulnerability service knew none of the {len(skipped)} pins" if skipped else "no pins"
        if skipped:
            reason += f" ({_first(skipped)})"
        return AuditResult(platform, AuditStatus.NOT_CHECKED, 0, skipped, reason=reason)
    return AuditResult(platform, AuditStatus.CLEAN, checked, skipped)


def audit_lock(lock_file: Path, platform: str, python: str | None = None) -> AuditResult:
    """Run pip-audit on one lock; an unreachable service is NOT_CHECKED ("no network"), never clean."""
    import subprocess

    with tempfile.TemporaryDirectory(prefix="kernodeck-audit-") as tmp:
        out = Path(tmp) / "audit.json"
        argv = pip_audit_argv(lock_file, out, python)
        log(f"$ {show(argv)}")
        proc = subprocess.run(argv, env=clean_env(), capture_output=True, text=True, timeout=1800, check=False)
        text = proc.stderr + proc.stdout
        if "No module named pip_audit" in text:
            raise KernodeckError("pip-audit is not installed in this environment", tip=tips.nox("audit"))
        if out.exists() and out.stat().st_size:
            try:
                return parse(platform, json.loads(out.read_text(encoding="utf-8")))
            except ValueError:
                pass
        if any(marker in text for marker in _NO_NETWORK):
            return AuditResult(platform, AuditStatus.NOT_CHECKED, reason=f"no network ({first_error(text)[:200]})")
        raise KernodeckError(f"pip-audit failed on {lock_file.name} (exit {proc.returncode}): {first_error(text)}",
                             tip=tips.nox("audit", "--platform", platform))


def exit_code(results: list[AuditResult]) -> int:
    """1 when a vulnerability was found, 3 when some lock could not be checked at all, else 0."""
    if any(r.status is AuditStatus.VULNERABLE for r in results):
        return 1
    if any(r.status is AuditStatus.NOT_CHECKED for r in results):
        return 3
    return 0
