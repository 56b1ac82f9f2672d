"""The bench's bookkeeping (no timing is asserted: speed is judged only by `nox -s bench` itself)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kernodeck import bench
from kernodeck.config import load_project
from tests.conftest import copy_project


def _measure(median: float) -> dict[str, Any]:
    return {"name": "x", "command": "x", "times_s": [median], "median_s": median, "min_s": median, "note": ""}


def _record(rebuild: float, verify: float, lock_uv: float) -> dict[str, Any]:
    rows: dict[str, Any] = {
        "rebuild": {
            "kernodeck": _measure(rebuild),
            "bare_uv": _measure(1.0),
            "bare_pip": _measure(40.0),
            "ratio_vs_bare_uv": rebuild,
            "ratio_vs_bare_pip": round(rebuild / 40, 2),
            "kernodeck_steps_s": {"install": 0.3, "freeze": 0.4},
        },
        "verify": {
            "kernodeck_same_work": _measure(verify),
            "bare_script": _measure(1.0),
            "kernodeck_full": _measure(2.0),
            "ratio_same_work": verify,
            "ratio_full": 2.0,
            "extra_checks_seconds": {"resume": 2.2},
        },
        "lock": {
            "uv": {"kernodeck": _measure(lock_uv), "bare": _measure(1.0), "ratio": lock_uv},
            "pip-tools": {"kernodeck": _measure(1.2), "bare": _measure(1.0), "ratio": 1.2},
        },
        "scaling": [
            {
                "texts": 32,
                "seconds": 5.0,
                "embed_step_s": 2.0,
                "embed_items_per_s": 16.0,
                "steady_items_per_s": 500.0,
                "determinism_step_s": 0.2,
            }
        ],
    }
    return {
        "finished": "2026-11-30T00:00:00+0000",
        "platform": "cp311-linux_x86_64-cpu",
        "lock": "lockfiles/x.txt",
        "repeat": 3,
        "rows": rows,
        "verdicts": bench.verdicts(rows),
        "machine": {
            "cpu": "Test CPU",
            "cores": 2,
            "os": "Linux",
            "python": "3.11.7",
            "load_average": [0.1, 0.1, 0.1],
            "load_average_after": [0.2, 0.2, 0.2],
            "others_share": 0.05,
        },
    }


def test_verdicts_meet_and_miss_each_target() -> None:
    met = _record(rebuild=1.5, verify=1.25, lock_uv=1.3)["verdicts"]
    assert all(v["met"] for v in met.values()) and set(met) == set(bench.TARGETS)
    missed = _record(rebuild=1.51, verify=1.26, lock_uv=3.0)["verdicts"]
    assert not any(v["met"] for v in missed.values())
    text = bench.render_markdown(_record(rebuild=2.0, verify=1.1, lock_uv=3.0))
    assert "MISSED by 1.33x" in text and "met" in text and "MISSED by 2.31x" in text
    assert "Test CPU, 2 cores" in text and "| 32 | 5.00s |" in text


def test_readme_section_is_replaced_between_markers_or_added(tmp_path: Path) -> None:
    project_root = copy_project(tmp_path / "project")
    project = load_project(project_root)
    readme = project_root / "README.md"
    readme.write_text("# Title\n\nintro\n", encoding="utf-8")
    bench.write(project, _record(2.0, 1.1, 3.0))
    first = readme.read_text(encoding="utf-8")
    assert first.startswith("# Title\n\nintro\n") and first.count(bench.README_START) == 1
    readme.write_text(first + "\n## After\n\nkept\n", encoding="utf-8")
    bench.write(project, _record(1.2, 1.1, 1.1))
    second = readme.read_text(encoding="utf-8")
    assert second.count(bench.README_START) == 1 and second.count(bench.README_END) == 1
    assert "## After\n\nkept" in second and "MISSED" not in second
    assert (project_root / "bench" / "latest.json").exists() and (project_root / "bench" / "latest.md").exists()
