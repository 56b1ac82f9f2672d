"""Tolerances from measurement: calibrate (noise and margin under this machine's variations) and the drift map."""
