"""The steps that run INSIDE the rebuilt environment, by its explicit interpreter, all in one process (runner.py).

Shipped in the kernodeck distribution and run by path (``python -I .../kernodeck/inenv/runner.py``): nothing of
Kernodeck is installed into the env. They need only the standard library and what they check (numpy, torch, the
application's packages) and import nothing of the orchestrator: the runner loads these files as the package
``kernodeck_inenv`` from this folder, and the application's entry by its file path. Results cross the wall as JSON
files, one per step.
"""
