"""FastAPI dependencies: the bearer token, the database, the query embedder."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from thin_api.db import Database
from thin_api.embedding import QueryEmbedder
from thin_api.errors import unauthorized
from thin_api.metrics import ApiMetrics
from thin_api.oidc import looks_like_jwt
from thin_api.sessions import bearer_session

_bearer = HTTPBearer(
    auto_error=False,
    bearerFormat="cmk_<key id>_<secret>",
    description="An API key: `Authorization: Bearer cmk_...`.",
)


def bearer_token(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)],
) -> str:
    """The token as sent; whether it is a valid key is the database's to say. A JWT
    (an OIDC access token) is verified here and stands for the session the database
    maps it to (thin_api/sessions.py)."""
    if credentials is None or not credentials.credentials:
        raise unauthorized()
    if looks_like_jwt(credentials.credentials):
        return bearer_session(request.app, credentials.credentials)
    return credentials.credentials


def database(request: Request) -> Database:
    db: Database = request.app.state.db
    return db


def query_embedder(request: Request) -> QueryEmbedder:
    embedder: QueryEmbedder = request.app.state.embedder
    return embedder


def api_metrics(request: Request) -> ApiMetrics:
    metrics: ApiMetrics = request.app.state.metrics
    return metrics


Token = Annotated[str, Depends(bearer_token)]
DB = Annotated[Database, Depends(database)]
Embedder = Annotated[QueryEmbedder, Depends(query_embedder)]
Metrics = Annotated[ApiMetrics, Depends(api_metrics)]
