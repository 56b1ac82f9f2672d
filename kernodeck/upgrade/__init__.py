"""Above verify: a relock checked against the reference, and the bisection of a lock change that moved the outputs.

- :mod:`~kernodeck.upgrade.relock`: ``nox -s upgrade``: relock, the lock diff, verify on the new lock, the drift
  table, the relock pull request's body;
- :mod:`~kernodeck.upgrade.bisect`: ``nox -s bisect``: envs built from the old lock with subsets of the new pins,
  the application run in each (the run builder's configuration, :mod:`kernodeck.verify.runbuild`);
  :mod:`~kernodeck.upgrade.bisect_search`: the search itself, pure.
"""
