"""The run dossier: a folder another run can use (procedure, inventory, system chain, settings, outputs, report).

Everything written is reviewed first: URL credentials stripped, this machine's package sources and home/project
paths replaced by placeholders. Credentials are never recorded; the dossier says only how to provide them.

One concept a module:

- :mod:`.review`: ``procedure.md`` and the review of every text file before the dossier is put in place;
- :mod:`.read`: reading a dossier another run wrote (:class:`DamagedDossier` when a file is not Kernodeck's);
- :mod:`.delta`: what differs between two dossiers (``compare``) and between a run and its reference;
- :mod:`.reference`: the project's reference (``nox -s reference``) and its manifest;
- :mod:`.judge`: each declared output compared under its kind, in an interpreter with numpy;
- :mod:`.resume_outputs`: the application's resumed run (end state, loss curve, counters) as compare and drift read it;
- :mod:`.replay`: a dossier's procedure run again; :mod:`.export`: the procedure as a container;
- :mod:`.sbom`: the lock as a CycloneDX SBOM.

The names other packages use are re-exported here (``dossier.compare``, ``dossier.review_folder`` ...). A folder is
written staged and swapped in whole by :func:`kernodeck.outdir.staged`.
"""

from __future__ import annotations

from kernodeck.dossier.delta import compare as compare
from kernodeck.dossier.delta import render_compare as render_compare
from kernodeck.dossier.delta import vs_reference as vs_reference
from kernodeck.dossier.read import read_embeddings as read_embeddings
from kernodeck.dossier.review import CREDENTIALS_HELP as CREDENTIALS_HELP
from kernodeck.dossier.review import Reviewer as Reviewer
from kernodeck.dossier.review import procedure as procedure
from kernodeck.dossier.review import review_folder as review_folder
from kernodeck.dossier.review import reviewer as reviewer
from kernodeck.errors import DamagedDossier as DamagedDossier

# The one rule for replacing a folder (guarded: a file put in the earlier folder since the run began is never lost).
from kernodeck.outdir import swap_into_place as swap_into_place
