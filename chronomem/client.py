"""The HTTP client, kept importable here for existing code: it lives in the light
client distribution, `chronomem-client` (clients/python, package `chronomem_client`),
which agents install without the server. New code imports `chronomem_client`."""

from __future__ import annotations

from chronomem_client.client import AsyncClient, Call, Calls, ChronomemError, Client, Id, When

__all__ = ["AsyncClient", "Call", "Calls", "ChronomemError", "Client", "Id", "When"]
