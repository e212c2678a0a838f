"""The API asks memory.vector_query_text in the statement that authorizes the call (no
round trip of its own) and embeds its answer with the local model: its search and
context answer exactly what the two calls made one after the other give (the text
first, then memory.search with that text's embedding), whether the question names a
participant (the name left out) or not (the question as it is)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from api_server import Tenant, api_server, make_tenant
from psycopg.rows import dict_row

pytest.importorskip("onnxruntime", reason="the local query embedder needs the `embed` extra")

from thin_api.embedding import vector_text
from workers.onnx_embedding import OnnxMiniLM

TURNS = [
    ("Ann", "Zanzibar was lovely, the spice market most of all"),
    ("Bob", "I would rather have gone hiking in the Alps"),
    ("Ann", "Next year we go to Lisbon for the music"),
    ("Bob", "Lisbon is fine if the trams run"),
]


@pytest.fixture(scope="module")
def tenant(app_dsn: str) -> Tenant:
    return make_tenant(app_dsn, "vector text fold")


@pytest.fixture(scope="module")
def model() -> OnnxMiniLM:
    return OnnxMiniLM(threads=1)  # the API's query embedder


@pytest.fixture(scope="module")
def base(app_dsn: str, tenant: Tenant, model: OnnxMiniLM) -> Iterator[str]:
    """The API with its local query embedder, over turns embedded by the same model."""
    with api_server(app_dsn, CHRONOMEM_API_QUERY_EMBEDDINGS="auto") as url:
        with tenant.client(url) as client:
            messages: list[dict[str, Any]] = [
                {"role": "user" if who == "Ann" else "assistant", "content": text,
                 "metadata": {"speaker": who}}
                for who, text in TURNS
            ]  # fmt: skip
            ids = client.ingest(tenant.project, "trips", messages).episode_ids
        vectors = [vector_text(v) for v in model.embed([t for _, t in TURNS])]
        with psycopg.connect(app_dsn) as conn:
            conn.execute("select memory.use_org(%s)", (tenant.org,))
            conn.execute(
                "select memory_worker.store_embeddings('episode', %s, %s::vector[])",
                (ids, vectors),
            )
        yield url


def _sql(tenant: Tenant, query: str, params: tuple[Any, ...]) -> Any:
    with psycopg.connect(tenant.app_dsn, row_factory=dict_row) as conn:
        conn.execute("select memory.use_org(%s)", (tenant.org,))
        row = conn.execute(query, params).fetchone()
    assert row is not None
    return row["v"]


def _one_after_the_other(tenant: Tenant, model: OnnxMiniLM, question: str, text: str) -> Any:
    vector = vector_text(model.embed([text])[0])
    return _sql(
        tenant, "select memory.search(%s, %s, %s::vector) as v", (tenant.project, question, vector)
    )


def _hits(results: list[Any]) -> list[tuple[str, str, float, dict[str, int]]]:
    return [(r["kind"], str(r["id"]), float(r["score"]), dict(r["ranks"])) for r in results]


@pytest.mark.parametrize(
    ("question", "names_a_participant"),
    [
        ("What did Ann think of the Zanzibar spice market?", True),
        ("What did Bob say about the Lisbon trams?", True),
        ("What did Carol think of the Zanzibar spice market?", False),  # not a speaker
        ("Which city has trams?", False),
    ],
)
def test_search_and_context_answer_as_the_two_calls_did(
    base: str, tenant: Tenant, model: OnnxMiniLM, question: str, names_a_participant: bool
) -> None:
    text = _sql(tenant, "select memory.vector_query_text(%s, %s) as v", (tenant.project, question))
    assert (text != question) is names_a_participant, text
    with tenant.client(base) as client:
        answer = client.search(tenant.project, question)
        context = client.context(tenant.project, question)
    assert "episode_vector" in answer.legs
    expected = _one_after_the_other(tenant, model, question, text)
    got = _hits([h.model_dump() for h in answer.results])
    assert got == _hits(expected["results"])
    vector = vector_text(model.embed([text])[0])
    expected_context = _sql(
        tenant, "select memory.context(%s, %s, %s::vector) as v", (tenant.project, question, vector)
    )
    assert context.text == expected_context["text"]
    if names_a_participant:
        # Control: embedding the question as it is answers otherwise, so the equality
        # above says which text was embedded.
        raw = _one_after_the_other(tenant, model, question, question)
        assert got != _hits(raw["results"])
