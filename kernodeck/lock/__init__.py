"""Locking: a platform's hash-pinned requirements lock and its PEP 751 twin, made from declared inputs and checked
for drift against them.

- :mod:`~kernodeck.lock.inputs`: what a lock depends on (input files, variant, target, resolver, resolution date);
- :mod:`~kernodeck.lock.check`: THE lock check of ``lock --check``, ``rebuild`` and ``verify`` (cheap: no network);
- :mod:`~kernodeck.lock.compile`: resolving the inputs (:mod:`~kernodeck.lock.resolvers`: pip-tools or uv) into a
  lock and its twin, written together (:mod:`~kernodeck.lock.write`);
- :mod:`~kernodeck.lock.lockfile`: the requirements lock's format; :mod:`~kernodeck.lock.pylock`: the PEP 751 twin,
  whose files are placed by the index client :mod:`~kernodeck.lock.index`;
- beside them: ``hashpins`` (``--upgrade-package``), ``lockdiff``, ``upgrade``, ``bisect``, ``audit``.

The names other packages use are re-exported here (``locking.require_checked``, ``locking.compile_lock`` ...).
"""

from __future__ import annotations

from kernodeck.lock.check import LockRead as LockRead
from kernodeck.lock.check import check_lock as check_lock
from kernodeck.lock.check import check_many as check_many
from kernodeck.lock.check import check_twin as check_twin
from kernodeck.lock.check import raise_first as raise_first
from kernodeck.lock.check import read_lock as read_lock
from kernodeck.lock.check import require_checked as require_checked
from kernodeck.lock.check import require_current as require_current
from kernodeck.lock.check import twin_disagreements as twin_disagreements
from kernodeck.lock.compile import compile_lock as compile_lock
from kernodeck.lock.inputs import AS_OF_KEY as AS_OF_KEY
from kernodeck.lock.inputs import RESOLVERS as RESOLVERS
from kernodeck.lock.inputs import LockInputs as LockInputs
from kernodeck.lock.inputs import as_of_instant as as_of_instant
from kernodeck.lock.inputs import compute_inputs as compute_inputs
from kernodeck.lock.inputs import effective_as_of as effective_as_of
from kernodeck.lock.inputs import input_files as input_files
from kernodeck.lock.inputs import lock_path as lock_path
from kernodeck.lock.inputs import pylock_path as pylock_path
from kernodeck.lock.inputs import requirements_in as requirements_in
from kernodeck.lock.inputs import resolver_version as resolver_version
from kernodeck.lock.resolvers import uv_lock_environment as uv_lock_environment
from kernodeck.lock.write import write_pair as write_pair
from kernodeck.lock.write import write_pylock_only as write_pylock_only
