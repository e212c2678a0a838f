"""The API's Instant and SQL's memory_internal.try_timestamptz are one definition:
every text below is accepted by both, with the same value, or refused by both."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg
import pytest

from thin_api.models import parse_instant

TEXTS = [
    # accepted
    "2024-01-01",
    "2024-01-01Z",
    "2024-01-01T00:00:00Z",
    "2024-01-01 12:00:00+02",
    "2024-01-01T12:00+0530",
    "2024-01-01T12:00:00.123456789-03:30",
    "2024-01-01T00:00:00.0000005Z",
    "9999-12-31T23:59:59Z",
    "9999-12-31T23:59:59.999999Z",
    "0001-01-01T00:00:00Z",
    "0001-01-01T01:00:00+01:00",
    "2024-02-29",
    # refused
    "2024-01-01 BC",
    "2024-01-01 allballs",
    "2024-01-01 5:00 pm",
    "9999-12-31T23:59:59-14:00",
    "0001-01-01T00:00:00+14:00",
    "9999-12-31T23:59:59.9999999Z",
    "2024-01-01+02",
    "2023-02-29",
    "2024-13-01",
    "2024-01-01T24:00:01Z",
    " 2024-01-01",
    "2024-01-01 ",
    "infinity",
    "now",
    "Jan 5 2024",
    "20240101",
    "2024-01-01T12Z",
    "",
]


def _api(text: str) -> datetime | None:
    try:
        return parse_instant(text)
    except ValueError:
        return None


@pytest.mark.parametrize("text", TEXTS)
def test_api_and_sql_agree_on_what_an_instant_is(conn: psycopg.Connection[Any], text: str) -> None:
    row = conn.execute("select memory_internal.try_timestamptz(%s)", (text,)).fetchone()
    assert row is not None
    assert _api(text) == row[0], f"{text!r}: API {_api(text)}, SQL {row[0]}"


def test_the_corpus_has_both_kinds() -> None:
    # Control: the agreement above is not two parsers that refuse everything.
    accepted = [t for t in TEXTS if _api(t) is not None]
    assert len(accepted) == 12 and len(TEXTS) - len(accepted) == 18
