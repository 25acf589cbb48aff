"""The site builder never replaces a folder it did not write (no Quarto needed: refused first)."""

from __future__ import annotations

import pytest

from harness.core.errors import UserError
from harness.publish.site import build_site


def test_the_site_refuses_a_non_empty_folder_it_did_not_write(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("the user's")
    with pytest.raises(UserError, match="did not write"):
        build_site({}, out, quarto="/nonexistent/quarto")
    assert (out / "notes.txt").read_text() == "the user's"


def test_the_site_refuses_the_results_folder_and_a_study(tmp_path):
    from harness.core import paths

    with pytest.raises(UserError):
        build_site({}, paths.RESULTS, quarto="/nonexistent/quarto")
    with pytest.raises(UserError):
        build_site({}, paths.RESULTS / "cpu-tiny", quarto="/nonexistent/quarto")
