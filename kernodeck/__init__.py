"""Kernodeck: lock, rebuild and verify reproducible PyTorch environments.

This package is the orchestration that runs OUTSIDE the rebuilt environment. It never imports torch; the checks
that run INSIDE the rebuilt environment live in the top-level ``checks/`` folder and talk to it through files.
"""

__version__ = "0.1.0"
