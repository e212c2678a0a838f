"""The console's conflict inbox, a fact's review and the predicates' cardinality. Each
page is the SQL call (or calls) it names, through memory_http.authorize_call with the
session's token, as the API's routes in thin_api.routes.conflicts make them: the
database checks every value and permission (resolving and reviewing need memory:review,
the cardinality page configuration:read, its undo configuration:write)."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote
from uuid import UUID

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import RedirectResponse, Response

from thin_api.console.web import (
    PATH,
    ApiError,
    BadInput,
    ConsoleRoute,
    call,
    check_csrf,
    parse_id,
    parse_instant,
    project_nav,
    render,
)

router = APIRouter(prefix=PATH, include_in_schema=False, route_class=ConsoleRoute)

Text = Annotated[str | None, Query(max_length=2000)]
FormText = Annotated[str, Form(max_length=2000)]
Csrf = Annotated[str, Form(max_length=200)]

_BIGINT = 2**63 - 1


def _form_id(field: str, value: str) -> UUID | None:
    """An id chosen in a form; None when none was chosen."""
    if not value.strip():
        return None
    try:
        return UUID(value.strip())
    except ValueError as err:
        raise BadInput(field, f"{field}: not an id: {value!r}") from err


def _change_id(value: str) -> int:
    """A change_id from a path: one that is not a bigint is not found, as a random one."""
    if not value.isdigit() or not 1 <= int(value) <= _BIGINT:
        raise ApiError(404, "not_found", "not found")
    return int(value)


# -- the inbox -------------------------------------------------------------------------
@router.get("/p/{project_id}/conflicts")
def inbox(
    request: Request,
    project_id: str,
    status: Text = None,
    limit: Annotated[int, Query()] = 50,
    before: Text = None,
    before_id: Text = None,
) -> Response:
    """memory_http.list_conflicts (open by default; resolved or all), newest first, a page
    of `limit`; the next page starts at the answer's next_before and next_before_id."""
    pid = parse_id(project_id)
    nav = project_nav(request, pid, "inbox")
    chosen = status or "open"
    page = call(
        request,
        pid,
        "select memory_http.list_conflicts(%s::uuid, %s::text, %s::text, %s::integer, "
        "%s::timestamptz, %s::uuid)",
        (pid, chosen, None, limit, parse_instant("before", before),
         _form_id("before_id", before_id or "")),
    )  # fmt: skip
    return render(request, "inbox.html", page=page, which=chosen, limit=limit, **nav)


@router.get("/p/{project_id}/conflicts/{conflict_id}")
def conflict(request: Request, project_id: str, conflict_id: str, done: Text = None) -> Response:
    """memory_http.get_conflict: the conflict, its members (facts or held claims, with
    window, standing, confidence and outcome) and its events."""
    pid, cid = parse_id(project_id), parse_id(conflict_id)
    nav = project_nav(request, pid, "inbox")
    found = call(request, pid, "select memory_http.get_conflict(%s::uuid, %s::uuid)", (pid, cid))
    return render(request, "conflict.html", conflict=found, done=done, **nav)


@router.post("/p/{project_id}/conflicts/{conflict_id}/resolve")
def resolve(
    request: Request,
    project_id: str,
    conflict_id: str,
    csrf: Csrf = "",
    resolution: FormText = "",
    member_id: FormText = "",
    at: FormText = "",
    reason: FormText = "",
) -> Response:
    """memory_http.resolve_conflict (needs memory:review, as the API's route):
    keep_both, supersede (member_id wins from `at`) or retract (member_id never held)."""
    check_csrf(request, csrf)
    pid, cid = parse_id(project_id), parse_id(conflict_id)
    result = call(
        request,
        pid,
        "select memory_http.resolve_conflict(%s::uuid, %s::uuid, %s::text, %s::uuid, "
        "%s::timestamptz, %s::text)",
        (pid, cid, resolution, _form_id("member_id", member_id), parse_instant("at", at),
         reason.strip() or None),
    )  # fmt: skip
    # A retraction that leaves two members disagreeing keeps the conflict open.
    done = result.get("resolution") or result.get("status", "")
    return RedirectResponse(
        f"{PATH}/p/{pid}/conflicts/{cid}?done={quote(str(done))}", status_code=303
    )


# -- review ----------------------------------------------------------------------------
@router.post("/p/{project_id}/facts/{fact_id}/review")
def review(
    request: Request,
    project_id: str,
    fact_id: str,
    csrf: Csrf = "",
    standing: FormText = "",
    reason: FormText = "",
) -> Response:
    """memory_http.review_fact (needs memory:review): confirmed, unreviewed or rejected
    (which retracts the fact)."""
    check_csrf(request, csrf)
    pid, fid = parse_id(project_id), parse_id(fact_id)
    result = call(
        request,
        pid,
        "select memory_http.review_fact(%s::uuid, %s::uuid, %s::text, %s::text)",
        (pid, fid, standing, reason.strip() or None),
    )
    return RedirectResponse(
        f"{PATH}/p/{pid}/facts/{fid}?reviewed={quote(str(result['standing']))}", status_code=303
    )


# -- cardinality -----------------------------------------------------------------------
@router.get("/p/{project_id}/cardinality")
def cardinality(request: Request, project_id: str, undone: Text = None) -> Response:
    """memory_http.suggest_cardinality (each predicate's suggestion and its evidence) and
    memory_http.predicate_changes (the latest 100, newest first), both
    configuration:read."""
    pid = parse_id(project_id)
    nav = project_nav(request, pid, "cardinality")
    suggested = call(request, pid, "select memory_http.suggest_cardinality(%s::uuid)", (pid,))
    changes = call(
        request, pid, "select memory_http.predicate_changes(%s::uuid, %s::integer)", (pid, 100)
    )
    return render(
        request,
        "cardinality.html",
        suggestions=suggested["suggestions"],
        changes=changes["changes"],
        undone=undone,
        **nav,
    )


@router.post("/p/{project_id}/cardinality/{change_id}/undo")
def undo(request: Request, project_id: str, change_id: str, csrf: Csrf = "") -> Response:
    """memory_http.undo_predicate_change (needs configuration:write): the predicate gets
    back the cardinality it had before that change, which must be the predicate's latest
    (the database refuses an earlier one)."""
    check_csrf(request, csrf)
    pid, change = parse_id(project_id), _change_id(change_id)
    result = call(
        request,
        pid,
        "select memory_http.undo_predicate_change(%s::uuid, %s::bigint)",
        (pid, change),
    )
    back = f"{result['predicate']}: {result['cardinality']}"
    return RedirectResponse(f"{PATH}/p/{pid}/cardinality?undone={quote(back)}", status_code=303)
