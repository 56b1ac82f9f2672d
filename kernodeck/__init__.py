"""Kernodeck: lock, rebuild and verify reproducible PyTorch environments.

This package is the orchestration that runs OUTSIDE the rebuilt environment; it never imports torch. The steps that
run INSIDE the rebuilt environment ship with it in ``kernodeck/inenv/``: run by path with the env's interpreter
(``python -I``), they import nothing from here and talk to it through files.
"""

__version__ = "0.1.0"
