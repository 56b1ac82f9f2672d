"""The run dossier: a folder another run can use (procedure, inventory, system chain, settings, outputs, report).

Everything written is reviewed first: URL credentials stripped, this machine's package sources and home/project
paths replaced by placeholders. Credentials are never recorded; the dossier says only how to provide them.

One concept a module:

- :mod:`.review`: ``procedure.md`` and the review of every text file before the dossier is put in place;
- :mod:`.read`: reading a dossier another run wrote (:class:`DamagedDossier` when a file is not Kernodeck's);
- :mod:`.delta`: what differs between two dossiers (``compare``) and between a run and its reference;
- :mod:`.new_reference`: a new reference made and put in place (``nox -s reference``), :mod:`.manifest` its manifest;
- :mod:`.judge`: each declared output compared under its kind, in an interpreter with numpy;
- :mod:`.resume_outputs`: the application's resumed run (end state, loss curve, counters) as compare and drift read it;
- :mod:`.replay`: a dossier's procedure run again; :mod:`.export`: the procedure as a container;
- :mod:`.sbom`: the lock as a CycloneDX SBOM.

Each name is imported from the module that defines it (``from kernodeck.dossier.delta import compare``). A folder
is written staged and swapped in whole by :func:`kernodeck.outdir.staged`.
"""
