"""Checks that run INSIDE the rebuilt environment, by its explicit interpreter, all in one process (runner.py).

They need only the standard library and what they check (torch, numpy, the sample app's packages); nothing of the
``kernodeck`` orchestrator is imported here. Results cross the wall as JSON files, one per step.
"""
