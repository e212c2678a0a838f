"""The console's pages. Each page is the SQL call (or calls) it names, through
memory_http.authorize_call with the session's token, rendered; the retract form is
memory_http.retract_fact, as the API's route. The conflict inbox, reviews and
cardinality are in thin_api.console.review."""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import RedirectResponse, Response

from thin_api.console import timeline as tl
from thin_api.console.web import (
    PATH,
    SESSION_COOKIE,
    SIGN_IN_COOKIE,
    ApiError,
    BadInput,
    ConsoleRoute,
    call,
    check_csrf,
    new_sign_in_token,
    parse_id,
    parse_instant,
    project_nav,
    render,
    session_token,
    set_cookie,
)
from thin_api.models import ContextRequest, SearchRequest
from thin_api.oidc import looks_like_jwt
from thin_api.routes import retrieval
from thin_api.sessions import (
    CONSOLE_IDLE_SECONDS,
    close_session,
    open_jwt_session,
    open_key_session,
)

router = APIRouter(prefix=PATH, include_in_schema=False, route_class=ConsoleRoute)

Text = Annotated[str | None, Query(max_length=2000)]


# -- sign-in ---------------------------------------------------------------------------
@router.get("")
def home(request: Request) -> Response:
    session_token(request)  # signed out: to the sign-in page
    return RedirectResponse(f"{PATH}/projects", status_code=303)


@router.get("/sign-in")
def sign_in_form(request: Request) -> Response:
    token = new_sign_in_token()
    response = render(request, "sign_in.html", sign_in_csrf=token, error=None)
    set_cookie(request, response, SIGN_IN_COOKIE, token)
    return response


@router.post("/sign-in")
def sign_in(
    request: Request,
    credential: Annotated[str, Form(max_length=20_000)],
    csrf: Annotated[str, Form(max_length=200)] = "",
) -> Response:
    expected = request.cookies.get(SIGN_IN_COOKIE)
    if not expected or csrf != expected:
        raise ApiError(403, "csrf", "the sign-in form expired; reload the page")
    credential = credential.strip()
    db = request.app.state.db
    try:
        if looks_like_jwt(credential):
            session = open_jwt_session(
                db, request.app.state.jwt_verifier, credential, CONSOLE_IDLE_SECONDS
            )
        else:
            session = open_key_session(db, credential)
    except ApiError as err:
        if err.status != 401:
            raise
        retry = new_sign_in_token()
        response = render(
            request,
            "sign_in.html",
            401,
            sign_in_csrf=retry,
            error="Not signed in: that API key or token is not valid here.",
        )
        set_cookie(request, response, SIGN_IN_COOKIE, retry)
        return response
    signed_in = RedirectResponse(f"{PATH}/projects", status_code=303)
    set_cookie(request, signed_in, SESSION_COOKIE, session.token)
    signed_in.delete_cookie(SIGN_IN_COOKIE, path=PATH)
    return signed_in


@router.post("/sign-out")
def sign_out(request: Request, csrf: Annotated[str, Form(max_length=200)] = "") -> Response:
    token = check_csrf(request, csrf)
    close_session(request.app.state.db, token)
    response = RedirectResponse(f"{PATH}/sign-in", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path=PATH)
    return response


# -- projects --------------------------------------------------------------------------
@router.get("/projects")
def projects(request: Request) -> Response:
    """memory_http.org, memory_http.list_projects and each one's memory.project_overview."""
    org = call(request, None, "select * from memory_http.org()", many=True)
    listed = call(request, None, "select * from memory_http.list_projects()", many=True)
    overviews = [
        (
            p,
            call(
                request,
                p["project_id"],
                "select memory.project_overview(%s::uuid)",
                (p["project_id"],),
            ),
        )
        for p in listed
    ]
    return render(request, "projects.html", org=org[0] if org else None, overviews=overviews)


@router.get("/p/{project_id}")
def project(request: Request, project_id: str) -> Response:
    pid = parse_id(project_id)
    overview = call(request, pid, "select memory.project_overview(%s::uuid)", (pid,))
    return render(
        request, "project.html", overview=overview, **project_nav(request, pid, "overview")
    )


# -- the subject timeline --------------------------------------------------------------
@router.get("/p/{project_id}/timeline")
def subject_timeline(
    request: Request,
    project_id: str,
    subject: Text = None,
    at: Text = None,
    known_at: Text = None,
) -> Response:
    """memory_http.timeline for the versions and their events; memory.list_facts at
    (at, known_at) for which of them the store believed held then."""
    pid = parse_id(project_id)
    nav = project_nav(request, pid, "timeline")
    at_t, known_t = parse_instant("at", at), parse_instant("known_at", known_at)
    if not subject or not subject.strip():
        return render(request, "timeline.html", subject="", **nav)
    found = call(
        request, pid, "select memory_http.timeline(%s::uuid, %s::text, %s::text)",
        (pid, subject, None),
    )  # fmt: skip
    held = call(
        request,
        pid,
        "select memory.list_facts(%s::uuid, %s::timestamptz, %s::timestamptz, %s::text, "
        "%s::text, %s::uuid, %s::integer)",
        (pid, at_t, known_t, subject, None, None, 1000),
    )
    facts = found["facts"]
    at_v, known_v = tl.instant(held["as_of"]), tl.instant(held["known_at"])
    world = tl.axis_for(facts, tl.WORLD, at_v)
    record = tl.axis_for(facts, tl.RECORD, known_v)
    return render(
        request,
        "timeline.html",
        subject=subject,
        rows=tl.rows(facts, {str(f["fact_id"]) for f in held["facts"]}, world),
        axis=world,
        at_value=held["as_of"],
        known_value=held["known_at"],
        at_pos=world.position(at_v) if at_v else None,
        at_range=(int(world.start.timestamp()), int(world.end.timestamp())),
        known_range=(int(record.start.timestamp()), int(record.end.timestamp())),
        at_s=int(at_v.timestamp()) if at_v else None,
        known_s=int(known_v.timestamp()) if known_v else None,
        **nav,
    )


# -- one fact --------------------------------------------------------------------------
@router.get("/p/{project_id}/facts/{fact_id}")
def fact(
    request: Request,
    project_id: str,
    fact_id: str,
    retracted: Text = None,
    reviewed: Text = None,
) -> Response:
    """memory.fact_detail (the version and its source episode) and
    memory_http.fact_history (every event of its identity, each version's standing)."""
    pid, fid = parse_id(project_id), parse_id(fact_id)
    nav = project_nav(request, pid, "facts")
    detail = call(request, pid, "select memory.fact_detail(%s::uuid, %s::uuid)", (pid, fid))
    history = call(request, pid, "select memory_http.fact_history(%s::uuid, %s::uuid)", (pid, fid))
    # This version's standing is the one its own events carry (every version has some).
    standing = next(
        (h["standing"] for h in history["events"] if str(h["fact_id"]) == str(fid)), None
    )
    return render(
        request,
        "fact.html",
        fact=detail,
        history=history["events"],
        standing=standing,
        retracted=retracted,
        reviewed=reviewed,
        **nav,
    )


@router.post("/p/{project_id}/facts/{fact_id}/retract")
def retract(
    request: Request,
    project_id: str,
    fact_id: str,
    csrf: Annotated[str, Form(max_length=200)] = "",
    reason: Annotated[str, Form(max_length=2000)] = "",
) -> Response:
    """memory_http.retract_fact (needs project:write, as the API's route)."""
    check_csrf(request, csrf)
    pid, fid = parse_id(project_id), parse_id(fact_id)
    result = call(
        request,
        pid,
        "select memory_http.retract_fact(%s::uuid, %s::uuid, %s::text)",
        (pid, fid, reason.strip() or None),
    )
    status = result.get("status", "retracted") if isinstance(result, dict) else "retracted"
    return RedirectResponse(f"{PATH}/p/{pid}/facts/{fid}?retracted={status}", status_code=303)


# -- facts at an instant ---------------------------------------------------------------
@router.get("/p/{project_id}/facts")
def facts(
    request: Request,
    project_id: str,
    subject: Text = None,
    predicate: Text = None,
    text: Text = None,
    at: Text = None,
    known_at: Text = None,
    cursor: Text = None,
) -> Response:
    """memory.list_facts (subject, predicate, at, known_at; 100 a page); with words in
    `text`, memory_http.search's fact full-text leg at the same instants instead."""
    pid = parse_id(project_id)
    nav = project_nav(request, pid, "facts")
    at_t, known_t = parse_instant("at", at), parse_instant("known_at", known_at)
    form = {"subject": subject or "", "predicate": predicate or "", "text": text or "",
            "at": at or "", "known_at": known_at or ""}  # fmt: skip
    if text and text.strip():
        found = _search(request, pid, text, at_t, known_t, 200, ["fact_fulltext"])
        hits = [h for h in found["results"] if h.get("kind") == "fact"]
        return render(request, "facts.html", form=form, page=None, hits=hits, found=found, **nav)
    after = None
    if cursor:
        try:
            after = UUID(cursor)
        except ValueError as err:
            raise BadInput("cursor", "cursor: not a cursor of this page") from err
    page = call(
        request,
        pid,
        "select memory.list_facts(%s::uuid, %s::timestamptz, %s::timestamptz, %s::text, "
        "%s::text, %s::uuid, %s::integer)",
        (pid, at_t, known_t, subject or None, predicate or None, after, 100),
    )
    return render(request, "facts.html", form=form, page=page, hits=None, found=None, **nav)


# -- entities and the graph ------------------------------------------------------------
@router.get("/p/{project_id}/entities")
def entities(request: Request, project_id: str, cursor: Text = None) -> Response:
    """memory.list_entities, 100 a page."""
    pid = parse_id(project_id)
    nav = project_nav(request, pid, "entities")
    page = call(
        request, pid, "select memory.list_entities(%s::uuid, %s::text, %s::integer)",
        (pid, cursor or None, 100),
    )  # fmt: skip
    return render(request, "entities.html", page=page, **nav)


@router.get("/p/{project_id}/graph")
def graph(
    request: Request,
    project_id: str,
    entity: Text = None,
    depth: Annotated[int, Query(ge=1, le=3)] = 1,
    at: Text = None,
    known_at: Text = None,
) -> Response:
    """memory.graph_neighbors of an entity at (at, known_at)."""
    pid = parse_id(project_id)
    nav = project_nav(request, pid, "entities")
    form = {"entity": entity or "", "depth": depth, "at": at or "", "known_at": known_at or ""}
    if not entity or not entity.strip():
        return render(request, "graph.html", form=form, found=None, **nav)
    found = call(
        request,
        pid,
        "select memory.graph_neighbors(%s::uuid, %s::text, %s::integer, %s::timestamptz, "
        "%s::timestamptz, %s::integer)",
        (pid, entity, depth, parse_instant("at", at), parse_instant("known_at", known_at), 100),
    )
    names = {str(n["entity_id"]): n["name"] for n in found["nodes"]}
    names[str(found["entity"]["entity_id"])] = found["entity"]["name"]
    return render(request, "graph.html", form=form, found=found, names=names, **nav)


# -- sessions --------------------------------------------------------------------------
@router.get("/p/{project_id}/sessions")
def sessions(request: Request, project_id: str, cursor: Text = None) -> Response:
    """memory.list_sessions, 100 a page."""
    pid = parse_id(project_id)
    nav = project_nav(request, pid, "sessions")
    page = call(
        request, pid, "select memory.list_sessions(%s::uuid, %s::text, %s::integer)",
        (pid, cursor or None, 100),
    )  # fmt: skip
    return render(request, "sessions.html", page=page, **nav)


@router.get("/p/{project_id}/sessions/{session}")
def messages(
    request: Request,
    project_id: str,
    session: str,
    after: Annotated[int, Query(ge=0)] = 0,
) -> Response:
    """memory.session_messages, 100 a page."""
    pid = parse_id(project_id)
    nav = project_nav(request, pid, "sessions")
    page = call(
        request,
        pid,
        "select memory.session_messages(%s::uuid, %s::text, %s::integer, %s::integer)",
        (pid, session, after, 100),
    )
    return render(request, "messages.html", page=page, **nav)


# -- the change feed -------------------------------------------------------------------
@router.get("/p/{project_id}/changes")
def changes(request: Request, project_id: str, since: Text = None, cursor: Text = None) -> Response:
    """memory.fact_changes after `since` (record time), 100 a page."""
    pid = parse_id(project_id)
    nav = project_nav(request, pid, "changes")
    page = call(
        request,
        pid,
        "select memory.fact_changes(%s::uuid, %s::timestamptz, %s::timestamptz, %s::text, "
        "%s::integer)",
        (pid, parse_instant("since", since), None, cursor or None, 100),
    )
    return render(request, "changes.html", page=page, since=since or "", **nav)


# -- the search playground -------------------------------------------------------------
def _search(
    request: Request,
    project: UUID,
    query: str,
    at: Any,
    known_at: Any,
    k: int,
    legs: list[str] | None = None,
) -> Any:
    """The API's search route itself (memory_http.search, the query embedded as there)."""
    body = SearchRequest.model_validate(
        {"query": query, "as_of": at, "known_at": known_at, "k": k, "legs": legs}
    )
    app = request.app
    return retrieval.search(
        project, body, session_token(request), app.state.db, app.state.embedder, app.state.metrics
    )


@router.get("/p/{project_id}/search")
def search(
    request: Request,
    project_id: str,
    query: Text = None,
    at: Text = None,
    known_at: Text = None,
    k: Annotated[int, Query(ge=1, le=200)] = 10,
) -> Response:
    """memory_http.search (each hit's rank in each leg, the legs that failed) and
    memory_http.context (the block an agent is handed), through the API's routes."""
    pid = parse_id(project_id)
    nav = project_nav(request, pid, "search")
    form = {"query": query or "", "at": at or "", "known_at": known_at or "", "k": k}
    if not query or not query.strip():
        return render(request, "search.html", form=form, found=None, context=None, **nav)
    at_t, known_t = parse_instant("at", at), parse_instant("known_at", known_at)
    found = _search(request, pid, query, at_t, known_t, k)
    body = ContextRequest.model_validate(
        {"query": query, "as_of": at_t, "known_at": known_t, "k": k}
    )
    app = request.app
    context = retrieval.context(
        pid, body, session_token(request), app.state.db, app.state.embedder, app.state.metrics
    )
    legs = sorted({leg for hit in found["results"] for leg in hit.get("ranks", {})})
    return render(request, "search.html", form=form, found=found, context=context, legs=legs, **nav)
