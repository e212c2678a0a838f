"""The subject timeline's drawing: where each version's bar lies on one time axis.

Only geometry: which versions there are, their windows and events come from
memory_http.timeline, and which of them hold at (at, known_at) from memory.list_facts
(memory.facts_at); nothing here decides either.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any


def instant(value: Any) -> datetime | None:
    if value is None:
        return None
    moment = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


@dataclass
class Bar:
    fact: dict[str, Any]
    left: float  # percent of the axis
    width: float
    holds: bool  # listed by memory.list_facts at (at, known_at)
    open_end: bool


@dataclass
class Row:
    predicate: str
    bars: list[Bar] = field(default_factory=list)


@dataclass
class Axis:
    start: datetime
    end: datetime

    def position(self, moment: datetime) -> float:
        span = (self.end - self.start).total_seconds() or 1.0
        return max(0.0, min(100.0, (moment - self.start).total_seconds() / span * 100))


WORLD = ("window_from", "window_until")
RECORD = ("recorded_at", "retracted_at")


def axis_for(facts: list[dict[str, Any]], keys: tuple[str, ...], *marks: datetime | None) -> Axis:
    """From the earliest of the facts' `keys` instants (and `marks`) to the latest one (or
    now), a twentieth wider on each side so bars and cursors at the ends stay visible.
    World time (WORLD: the windows) and record time (RECORD, with the events) get an
    axis each."""
    moments = [m for m in marks if m is not None]
    for fact in facts:
        for key in keys:
            moment = instant(fact.get(key))
            if moment is not None:
                moments.append(moment)
        if keys == RECORD:
            moments.extend(m for e in fact.get("events", []) if (m := instant(e.get("at"))))
    now = datetime.now(UTC)
    start = min(moments, default=now - timedelta(days=30))
    end = max([*moments, now]) if keys == RECORD else max(moments, default=now)
    pad = max((end - start) / 20, timedelta(hours=1))
    return Axis(start - pad, end + pad)


def rows(facts: list[dict[str, Any]], held: set[str], axis: Axis) -> list[Row]:
    """One row per predicate in the order the timeline gives them."""
    out: dict[str, Row] = {}
    for fact in facts:
        row = out.setdefault(fact["predicate"], Row(fact["predicate"]))
        begin = instant(fact.get("window_from")) or axis.start
        until = instant(fact.get("window_until"))
        left = axis.position(begin)
        right = axis.position(until) if until is not None else 100.0
        row.bars.append(
            Bar(
                fact=fact,
                left=left,
                width=max(right - left, 0.6),  # an empty window still shows as a sliver
                holds=str(fact["fact_id"]) in held,
                open_end=until is None,
            )
        )
    return list(out.values())
