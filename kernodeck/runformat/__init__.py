"""runformat: what a reference and a run's folder ARE, read and written by verify (below it in the layers).

One concept a module:

- :mod:`.manifest`: the reference's manifest (model, identity, loading); :mod:`.lineage`: the reference's history
  against this run's lock; :mod:`.recording`: a new reference's manifest built from a reference run's outputs (and
  the flip bound verify applies);
- :mod:`.refdelta`: a run against its reference (inventory, system chain), written into every run's report;
- :mod:`.review`: ``procedure.md`` and the review every text file of a run's folder passes before it is put in place;
- :mod:`.sbom`: the lock as a CycloneDX SBOM.

What reads or replays a run's folder after the fact (compare, replay, export, a new reference put in place) is
:mod:`kernodeck.dossier`, above verify. Each name is imported from the module that defines it.
"""
