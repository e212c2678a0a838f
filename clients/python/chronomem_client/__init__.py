"""chronomem-client: the light Python client of Chronomem's HTTP API.

Long-term memory for AI agents, kept by a Chronomem server as a temporal knowledge
graph. This distribution holds only what an agent needs to talk to that server: the
sync and async clients (`Client`, `AsyncClient`, over httpx) and the wire models
their answers parse into (`chronomem_client.models`, pydantic). It depends on httpx
and pydantic alone, and importing it imports no server code and no agent framework.

    from chronomem_client import Client

    with Client("http://127.0.0.1:8765", token) as memory:
        memory.declare_predicate(project, "plan", "one")
        memory.assert_facts(project, [{"subject": "user 42", "predicate": "plan",
                                       "object": "pro", "valid_from": "2024-01-01"}])
        memory.list_facts(project, as_of="2024-02-01").facts

An error answer raises `ChronomemError` (status, stable code, message, field).
"""

from __future__ import annotations

from chronomem_client.client import AsyncClient, Call, Calls, ChronomemError, Client, Id, When

__all__ = [
    "AsyncClient",
    "Call",
    "Calls",
    "ChronomemError",
    "Client",
    "Id",
    "When",
]
