"""LangGraph's long-term memory store (`langgraph.store.base.BaseStore`) kept as
Chronomem facts: `pip install 'chronomem-client[langgraph]'`.

    from chronomem_client.langgraph import ChronomemStore

    store = ChronomemStore("http://127.0.0.1:8765", token)
    graph = builder.compile(store=store)          # nodes get it as `runtime.store`
    store.put(("users", "42"), "prefs", {"food": "pizza"})
    store.put(("users", "42"), "prefs", {"food": "sushi"})   # supersedes, keeps the old
    store.at(as_of=before).get(("users", "42"), "prefs")     # what held then

One store is one project (the API key's, or `project=`). An item (namespace, key) is
one subject entity, `langgraph <base32 of the JSON [*namespace, key]>` (lower case:
it survives the server's name normalization and decodes back), with one predicate,
`langgraph item`, declared cardinality one: a put asserts a new fact that supersedes
the item's current one. The fact's object is a digest of the value (so an equal value
is a no-op) and its content the value as JSON. A delete supersedes the item with a
deletion marker, so as-of reads before it still see the item. Importing
`chronomem_client` never imports this module or LangGraph.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable, Generator, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar

from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    validate_op_namespace,
)

from chronomem_client.client import AsyncClient, Call, ChronomemError, Client, Id, When
from chronomem_client.models import Fact

__all__ = ["PREDICATE", "ChronomemStore", "ReadOnlyStoreError"]

PREDICATE = "langgraph item"
SUBJECT_PREFIX = "langgraph "
DELETED = "deleted"  # the marker's object; never a digest (not hexadecimal)
_MAX_SUBJECT = 500
_MAX_CONTENT = 8192

R = TypeVar("R")
# One op's work: yields the calls it needs, receives their answers, returns its result.
Steps = Generator[Call[Any], Any, R]


class ReadOnlyStoreError(NotImplementedError):
    """A write to a store opened at an instant (`as_of` / `known_at`)."""


def _encode(namespace: tuple[str, ...], key: str) -> str:
    raw = json.dumps([*namespace, key], ensure_ascii=False, separators=(",", ":"))
    subject = SUBJECT_PREFIX + base64.b32encode(raw.encode()).decode().rstrip("=").lower()
    if len(subject) > _MAX_SUBJECT:
        raise InvalidNamespaceError(f"namespace and key too long for one item: {namespace}, {key}")
    return subject


def _decode(subject: str) -> tuple[tuple[str, ...], str] | None:
    if not subject.startswith(SUBJECT_PREFIX):
        return None
    text = subject[len(SUBJECT_PREFIX) :].upper()
    try:
        parts = json.loads(base64.b32decode(text + "=" * (-len(text) % 8)).decode())
    except ValueError:
        return None
    if not isinstance(parts, list) or not parts or not all(isinstance(p, str) for p in parts):
        return None
    return tuple(parts[:-1]), parts[-1]


def _digest(value: Mapping[str, Any]) -> str:
    canonical = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _item(fact: Fact | None, namespace: tuple[str, ...], key: str) -> Item | None:
    if fact is None or fact.object == DELETED:
        return None
    try:
        body = json.loads(fact.content)
        value, created = body["value"], datetime.fromisoformat(body["created_at"])
    except (ValueError, KeyError, TypeError):
        return None
    return Item(
        value=value, key=key, namespace=namespace, created_at=created, updated_at=fact.valid_from
    )


def _matches(value: Any, wanted: Any) -> bool:
    """LangGraph's filter semantics: equality, nested dicts, $eq/$ne/$gt/$gte/$lt/$lte."""
    if isinstance(wanted, dict):
        if any(k.startswith("$") for k in wanted):
            return all(_operator(value, op, arg) for op, arg in wanted.items())
        return isinstance(value, dict) and all(_matches(value.get(k), v) for k, v in wanted.items())
    return bool(value == wanted)


def _operator(value: Any, op: str, arg: Any) -> bool:
    if op == "$eq":
        return bool(value == arg)
    if op == "$ne":
        return bool(value != arg)
    compare: dict[str, Callable[[float, float], bool]] = {
        "$gt": float.__gt__,
        "$gte": float.__ge__,
        "$lt": float.__lt__,
        "$lte": float.__le__,
    }
    if op not in compare:
        raise ValueError(f"unsupported filter operator {op}")
    try:
        return compare[op](float(value), float(arg))
    except (TypeError, ValueError):
        return False


def _keep(item: Item, op: SearchOp) -> bool:
    n = len(op.namespace_prefix)
    return item.namespace[:n] == tuple(op.namespace_prefix) and all(
        _matches(item.value.get(k), v) for k, v in (op.filter or {}).items()
    )


def _ns_matches(namespace: tuple[str, ...], op: ListNamespacesOp) -> bool:
    for condition in op.match_conditions or ():
        path = tuple(condition.path)
        if len(namespace) < len(path):
            return False
        pairs = (
            zip(namespace, path, strict=False)
            if condition.match_type == "prefix"
            else zip(reversed(namespace), reversed(path), strict=False)
        )
        if any(p != "*" and n != p for n, p in pairs):
            return False
    return True


def _translate(err: ChronomemError) -> Exception:
    """The error a LangGraph user expects instead of an HTTP answer."""
    if err.status in (401, 403):
        return PermissionError(str(err))
    if err.status in (404, 422):
        return ValueError(str(err))
    return err


class ChronomemStore(BaseStore):
    """A LangGraph `BaseStore` whose items are Chronomem facts (see the module doc).

    `as_of` (world time) and `known_at` (record time) open the store at an instant: it
    reads what held then as the store believed then, and refuses writes
    (`ReadOnlyStoreError`, a `NotImplementedError`). `at(...)` opens a view of this one."""

    supports_ttl = False

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        project: Id | None = None,
        as_of: When = None,
        known_at: When = None,
        timeout: float = 30.0,
    ) -> None:
        self.base_url, self.token, self.timeout = base_url, token, timeout
        self.project: str | None = None if project is None else str(project)
        self.as_of, self.known_at = as_of, known_at
        self._client: Client | None = None
        self._aclient: AsyncClient | None = None
        self._declared = False

    # -- views and extras ---------------------------------------------------------------
    @property
    def read_only(self) -> bool:
        return self.as_of is not None or self.known_at is not None

    def at(self, *, as_of: When = None, known_at: When = None) -> ChronomemStore:
        """The same store opened at an instant (None: now), read-only."""
        view = ChronomemStore(
            self.base_url,
            self.token,
            project=self.project,
            as_of=as_of,
            known_at=known_at,
            timeout=self.timeout,
        )
        view._client, view._aclient = self._client, self._aclient
        return view

    def history(self, namespace: tuple[str, ...], key: str) -> list[Item]:
        """Every value the item has had, oldest first (deletions and retractions left out)."""
        return self._drive(self._history(tuple(namespace), key))

    async def ahistory(self, namespace: tuple[str, ...], key: str) -> list[Item]:
        return await self._adrive(self._history(tuple(namespace), key))

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    async def aclose(self) -> None:
        if self._aclient is not None:
            await self._aclient.aclose()

    # -- BaseStore ----------------------------------------------------------------------
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        return [self._drive(self._op(op)) for op in ops]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return [await self._adrive(self._op(op)) for op in ops]

    # -- drivers: the same steps over the sync or the async client ----------------------
    def _drive(self, steps: Steps[R]) -> R:
        if self._client is None:
            self._client = Client(self.base_url, self.token, timeout=self.timeout)
        try:
            call = next(steps)
            while True:
                try:
                    answer = self._client.send(call)
                except ChronomemError as err:
                    raise _translate(err) from err
                call = steps.send(answer)
        except StopIteration as done:
            result: R = done.value
            return result

    async def _adrive(self, steps: Steps[R]) -> R:
        if self._aclient is None:
            self._aclient = AsyncClient(self.base_url, self.token, timeout=self.timeout)
        try:
            call = next(steps)
            while True:
                try:
                    answer = await self._aclient.send(call)
                except ChronomemError as err:
                    raise _translate(err) from err
                call = steps.send(answer)
        except StopIteration as done:
            result: R = done.value
            return result

    # -- steps --------------------------------------------------------------------------
    def _project(self) -> Steps[str]:
        if self.project is None:
            projects = (yield Client.calls.list_projects()).projects
            if len(projects) != 1:
                raise ValueError("this API key sees several projects: pass project=")
            self.project = str(projects[0].project_id)
        return self.project

    def _facts(self, subject: str | None = None, *, now: bool = False) -> Steps[list[Fact]]:
        project = yield from self._project()
        facts: list[Fact] = []
        cursor = None
        while True:
            page = yield Client.calls.list_facts(
                project,
                subject=subject,
                predicate=PREDICATE,
                as_of=None if now else self.as_of,
                known_at=None if now else self.known_at,
                cursor=cursor,
                limit=1000,
            )
            facts.extend(page.facts)
            if page.next_cursor is None:
                return facts
            cursor = page.next_cursor

    def _items(self) -> Steps[list[Item]]:
        items = []
        for fact in (yield from self._facts()):
            where = _decode(fact.subject)
            item = where and _item(fact, *where)
            if item is not None:
                items.append(item)
        return items

    def _op(self, op: Op) -> Steps[Result]:
        validate_op_namespace(op)
        if isinstance(op, GetOp):
            return (yield from self._get(tuple(op.namespace), op.key))
        if isinstance(op, PutOp):
            return (yield from self._put(op))
        if isinstance(op, SearchOp):
            return (yield from self._search(op))
        if isinstance(op, ListNamespacesOp):
            return (yield from self._list_namespaces(op))
        raise ValueError(f"Unknown operation type: {type(op)}")

    def _get(
        self, namespace: tuple[str, ...], key: str, *, now: bool = False
    ) -> Steps[Item | None]:
        facts = yield from self._facts(_encode(namespace, key), now=now)
        return _item(facts[0] if facts else None, namespace, key)

    def _put(self, op: PutOp) -> Steps[None]:
        if self.read_only:
            raise ReadOnlyStoreError("this store is opened at an instant: it is read-only")
        if op.ttl is not None:
            raise NotImplementedError("TTL is not supported by ChronomemStore; set ttl=None")
        namespace = tuple(op.namespace)
        if op.value is not None:
            if not namespace:
                raise InvalidNamespaceError("Namespace cannot be empty.")
            if namespace[0] == "langgraph":
                raise InvalidNamespaceError(
                    f'Root label for namespace cannot be "langgraph". Got: {namespace}'
                )
            if not isinstance(op.value, Mapping):
                raise TypeError("a store value must be a mapping")
        subject = _encode(namespace, op.key)
        project = yield from self._project()
        current = yield from self._get(namespace, op.key, now=True)
        if op.value is None:
            if current is None:
                return None  # nothing to delete
            obj, content = DELETED, DELETED
        else:
            created = current.created_at if current else datetime.now(UTC)
            value = dict(op.value)
            content = json.dumps({"value": value, "created_at": created.isoformat()})
            if len(content) > _MAX_CONTENT:
                raise ValueError(f"value too large for one item ({len(content)} > 8192 chars)")
            obj = _digest(value)
        if not self._declared:
            yield Client.calls.declare_predicate(project, PREDICATE, "one")
            self._declared = True
        fact = {
            "subject": subject,
            "predicate": PREDICATE,
            "object": obj,
            "object_type": "literal",
            "content": content,
        }
        # A put is an explicit write: it may re-assert a claim someone retracted.
        result = yield Client.calls.assert_facts(project, [fact], override_tombstones=True)
        outcome = result.results[0]
        if outcome.status in ("refused", "invalid"):
            why = outcome.error.message if outcome.error else outcome.reason
            raise ValueError(f"the item was not written: {why}")
        return None

    def _search(self, op: SearchOp) -> Steps[list[SearchItem]]:
        found: list[SearchItem] = []
        if op.query:
            project = yield from self._project()
            answer = yield Client.calls.search(
                project,
                op.query,
                as_of=self.as_of,
                known_at=self.known_at,
                k=200,
                legs=["fact_vector", "fact_fulltext"],
            )
            seen = set()
            for hit in answer.results:
                where = _decode(hit.subject or "")
                if hit.kind != "fact" or where is None or where in seen:
                    continue
                seen.add(where)
                fact = Fact.model_construct(
                    object=hit.object or "",
                    content=hit.text or "",
                    valid_from=hit.valid_from or datetime.now(UTC),
                )
                item = _item(fact, *where)
                if item is not None and _keep(item, op):
                    found.append(_scored(item, hit.score))
        else:
            items = [i for i in (yield from self._items()) if _keep(i, op)]
            items.sort(key=lambda i: i.updated_at, reverse=True)
            found = [_scored(i, None) for i in items]
        return found[op.offset : op.offset + op.limit]

    def _list_namespaces(self, op: ListNamespacesOp) -> Steps[list[tuple[str, ...]]]:
        spaces = {i.namespace for i in (yield from self._items())}
        spaces = {ns for ns in spaces if _ns_matches(ns, op)}
        if op.max_depth is not None:
            spaces = {ns[: op.max_depth] for ns in spaces}
        return sorted(spaces)[op.offset : op.offset + op.limit]

    def _history(self, namespace: tuple[str, ...], key: str) -> Steps[list[Item]]:
        validate_op_namespace(GetOp(namespace, key))
        project = yield from self._project()
        timeline = yield Client.calls.timeline(project, _encode(namespace, key), PREDICATE)
        items = []
        for version in sorted(timeline.facts, key=lambda f: f.valid_from):
            if version.status == "retracted":
                continue
            fact = Fact.model_construct(
                object=version.object, content=version.content, valid_from=version.valid_from
            )
            item = _item(fact, namespace, key)
            if item is not None:
                items.append(item)
        return items


def _scored(item: Item, score: float | None) -> SearchItem:
    return SearchItem(
        item.namespace, item.key, item.value, item.created_at, item.updated_at, score=score
    )
