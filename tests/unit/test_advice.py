"""advice.py: what a closed-world verdict advises for a declared source's file its fingerprint leaves out (red-team
pass 57, HUB1), beside the other declarations."""

from __future__ import annotations

from kernodeck.inenv.advice import SOURCE, TIP, TIP_SOURCE, advice, tip

_HF = {"file": "weights: added_tokens.json", "declare": SOURCE, "source": "weights", "name": "added_tokens.json",
       "kind": "hf", "path": "/cache/models--o--m/snapshots/c/added_tokens.json"}
_PATH = {**_HF, "file": "data.corpus: .gitattributes", "source": "data.corpus", "name": ".gitattributes",
         "kind": "path"}


def test_an_hf_snapshots_file_is_advised_as_the_sources_files_or_its_removal() -> None:
    said = advice([_HF])
    assert said.startswith('add ["added_tokens.json"] to [tool.kernodeck.application.weights] files'), said
    assert "remove them from the Hugging Face cache" in said and "data.NAME" not in said
    assert tip([_HF]) == TIP_SOURCE


def test_another_sources_file_is_said_left_out_of_its_fingerprint() -> None:
    said = advice([_PATH])
    assert said.startswith('[".gitattributes"] of the data.corpus source are left out of its fingerprint'), said
    assert "[tool.kernodeck.application.data.corpus] files" not in said


def test_a_verdict_naming_any_other_file_keeps_the_declarations_tip() -> None:
    assert tip([_HF, {"file": "src/x.py", "declare": "code"}]) == TIP
    assert tip([{"file": "/elsewhere/x.bin", "declare": "outside the project"}]) == TIP
    assert tip([]) == TIP
