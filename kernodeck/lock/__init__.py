"""Locking: a platform's hash-pinned requirements lock and its PEP 751 twin, made from declared inputs and checked
for drift against them.

- :mod:`~kernodeck.lock.inputs`: what a lock depends on (input files, variant, target, resolver, resolution date);
  the files the inputs name by ``-r``/``-c`` are inputs too (:mod:`~kernodeck.lock.includes`);
- :mod:`~kernodeck.lock.check`: THE lock check of ``lock --check``, ``rebuild`` and ``verify`` (cheap: no network);
- :mod:`~kernodeck.lock.compile`: resolving the inputs (:mod:`~kernodeck.lock.resolvers`: pip-tools or uv) into a
  lock and its twin, written together (:mod:`~kernodeck.lock.write`);
- :mod:`~kernodeck.lock.lockfile`: the requirements lock's format; :mod:`~kernodeck.lock.pylock`: the PEP 751 twin,
  whose files are placed by the index client :mod:`~kernodeck.lock.index_client`;
- beside them: ``hashpins`` (``--upgrade-package``), ``lockdiff``, ``audit``; ``upgrade`` and ``bisect``, which run
  verify, are above it (:mod:`kernodeck.upgrade`).

Each name is imported from the module that defines it (``from kernodeck.lock.check import require_checked``).
"""
