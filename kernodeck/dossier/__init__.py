"""The run dossier read after the fact: a folder another run can use (procedure, inventory, system chain, settings,
outputs, report). What a dossier and a reference ARE (manifest, lineage, recording, the delta against the reference,
the review, the SBOM), written by verify, is :mod:`kernodeck.runformat`, below verify.

Everything written is reviewed first (:mod:`kernodeck.runformat.review`): URL credentials stripped, this machine's
package sources and home/project paths replaced by placeholders. Credentials are never recorded; the dossier says
only how to provide them.

One concept a module:

- :mod:`.read`: reading a dossier another run wrote (:class:`DamagedDossier` when a file is not Kernodeck's);
- :mod:`.delta`: what differs between two dossiers (``compare``);
- :mod:`.new_reference`: a new reference made and put in place (``nox -s reference``);
- :mod:`.judge`: each declared output compared under its kind, in an interpreter with numpy;
- :mod:`.resume_outputs`: the application's resumed run (end state, loss curve, counters) as compare and drift read it;
- :mod:`.replay`: a dossier's procedure run again; :mod:`.export`: the procedure as a container;
- :mod:`.toolpins`, :mod:`.baseimage`: what the container files pin.

Each name is imported from the module that defines it (``from kernodeck.dossier.delta import compare``). A folder
is written staged and swapped in whole by :func:`kernodeck.outdir.staged`.
"""
