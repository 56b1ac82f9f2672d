"""The extensions step run on a folder of compiled extensions, as the in-env runner runs it."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any

from kernodeck.env import extension_scan
from kernodeck.verify.steps.in_env import RUNNER


def run_step(env: Path, root: Path, declared: dict[str, Any] | None = None, twin: Any = None) -> dict[str, Any]:
    """The real runner, by path, in the fake env, with only the extensions step; its result file."""
    found = extension_scan.discover(env, cuobjdump="", twin=twin)
    (root / "sample.jsonl").write_text('{"id": "a"}\n', encoding="utf-8")
    # the smoke checks' files fingerprinted as verify's in-env phase does (in_env.extensions_config)
    declared = {name: {**decl, "smoke_sha256": hashlib.sha256((root / str(decl["smoke"]).partition(":")[0]
                                                              ).read_bytes()).hexdigest()}
                for name, decl in (declared or {}).items()}
    config = {"steps": ["extensions"], "project_root": str(root), "mode": "verify", "expect_backend": "cpu",
              "application": {"sample": "sample.jsonl"}, "reference": None,
              "extensions": {**found.as_config(), "declared": declared}}
    # a fake env that borrows another env's site-packages through a .pth maps that env's libraries from outside its
    # own prefix: declared, as a project declares libraries it takes from outside the env (inenv/libraries.py)
    linked = [Path(line.strip()) for pth in env.glob("lib/python*/site-packages/*.pth")
              for line in pth.read_text(encoding="utf-8").splitlines() if line.strip()]
    config["libraries"] = sorted({str(so.resolve()) for folder in linked if folder.is_dir()
                                  for so in folder.rglob("*.so*") if so.is_file()})
    out = root / "run"
    out.mkdir(exist_ok=True)
    (out / "run-config.json").write_text(json.dumps(config), encoding="utf-8")
    env_vars = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    subprocess.run([str(env / "bin" / "python"), "-I", str(RUNNER), "--config", str(out / "run-config.json")],
                   cwd=root, env=env_vars, capture_output=True, text=True, timeout=120, check=False)
    return dict(json.loads(next((out / "steps").glob("*-extensions.json")).read_text(encoding="utf-8")))
