"""The steps that run INSIDE the rebuilt environment, by its explicit interpreter, all in one process (runner.py).

Shipped in the kernodeck distribution and run by path (``python -I .../kernodeck/inenv/runner.py``): nothing of
Kernodeck is installed into the env. They need only the standard library and what they check (numpy, torch, the
application's packages) and import nothing of the orchestrator: each script run by path (runner, calibrate, drift,
compare_outputs, resume's worker) loads these files as the package ``kernodeck_inenv`` from this folder through
_package.py, the one loader, and the application's entry by its file path. Results cross the wall as JSON
files, one per step.
"""
