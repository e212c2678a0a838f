"""The revisions are the files of sql/: numbered in order, each one parent of the next."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from chronomem import migrate
from chronomem.migrate import MigrationError, SqlRevisions, alembic_config, revision_files


def test_every_sql_file_is_a_revision_and_the_chain_is_their_order() -> None:
    files = revision_files()
    script = SqlRevisions.from_config(alembic_config())
    assert [r for r, _ in files] == [f"{n:04d}" for n in range(1, len(files) + 1)]
    assert script.get_current_head() == files[-1][0]
    chain = [rev.revision for rev in script.walk_revisions("base", "heads")]
    assert chain == [r for r, _ in reversed(files)]
    for (parent, _), (child, _) in itertools.pairwise(files):
        assert script.get_revision(child).down_revision == parent


@pytest.mark.parametrize("name", ["0002_Bad_Case.sql", "0003_gap.sql", "notes.sql"])
def test_a_misnamed_or_missing_number_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    (tmp_path / "0001_first.sql").write_text("select 1;\n")
    (tmp_path / name).write_text("select 1;\n")
    monkeypatch.setattr(migrate, "SQL_DIR", tmp_path)
    with pytest.raises(MigrationError, match="numbered from 0001 without gaps"):
        revision_files()


def test_well_named_files_are_accepted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The control for the refusals above.
    (tmp_path / "0001_first.sql").write_text("-- first: the first file\nselect 1;\n")
    (tmp_path / "0002_second_one.sql").write_text("select 1;\n")
    monkeypatch.setattr(migrate, "SQL_DIR", tmp_path)
    assert [r for r, _ in revision_files()] == ["0001", "0002"]
    script = SqlRevisions.from_config(alembic_config())
    assert script.get_current_head() == "0002"
    assert script.get_revision("0002").down_revision == "0001"
