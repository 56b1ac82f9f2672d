"""Reports: a run's report.json read back, and reports as a complete run leaves them (every step a verify's claims
stand on, each recording its evidence)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kernodeck.inenv.protocol import Status
from kernodeck.verify.record import Step

# step name -> the details that establish its claims (kernodeck/verify/claims.py CLAIMS)
EVIDENCE: dict[str, dict[str, Any]] = {
    "lock-check": {"lock": "lockfiles/cp311-linux_x86_64-cpu.txt"},
    "inventory": {"vs_lock": {"added": {}, "removed": {}, "changed": {}},
                  "files": {"snapshot": "compared", "without_record": [], "damaged": {},
                            "counts": {"foreign": 0, "shared": 0, "added": 0, "removed": 0, "changed": 0},
                            "bytecode_since_build": {"files": 0, "checked_now": 0, "not_its_source": []}}},
    "backend": {"expected_backend": "cpu", "device": "cpu", "matmul_max_abs_error": 0.0, "softmax_max_abs_error": 2e-8},
    "extensions": {"extensions": [{"distribution": "kdext", "objects": [{"module": "kdext._C", "imported": True}]}],
                   "smoke": {"kdext": {"max_abs": 0.0}}},
    "reference": {"rows": 40, "code": {"files": {"checks/app.py": "0" * 64}, "changed": [], "allowed": False}},
    "compare": {"passed": True, "outputs": {"embeddings": {"kind": "cosine", "passed": True}}},
    "criterion": {"passed": True, "controls": {"able_to_fail": True}},
    "determinism": {"device": "cpu", "repeats": 3, "bitwise_identical": True, "outputs": {"embeddings": {}}},
    "resume": {"passed": True},
}


def complete_steps() -> list[Step]:
    """A passing verify's steps, fresh each call (tests change them)."""
    return [Step(name, Status.PASSED, details={k: v for k, v in details.items()}) for name, details in EVIDENCE.items()]


def read_report(folder: Path) -> dict[str, object]:
    """The ``report.json`` a run left in ``folder``."""
    return json.loads((folder / "report.json").read_text(encoding="utf-8"))


def statuses(report: dict[str, object]) -> dict[str, str]:
    """Each step's status by its name."""
    return {s["name"]: s["status"] for s in report["steps"]}  # type: ignore[index,union-attr]
