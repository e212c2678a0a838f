"""Reading a model's answer leniently, and validating it section by section, item by item.

Models that cannot be held to a JSON schema (Ollama, vLLM, llama.cpp servers, older
models) wrap their JSON in code fences, add prose around it, or stop mid-answer.
`parse_answer` takes the first JSON object out of the text; a truncated one is closed
after its last complete item (the incomplete tail is reported, not guessed at).
A trailing comma before a closing bracket is dropped. `validate_answer` keeps each item
of the shape the model was asked for and turns each other one into a rejection
(memory_worker.record_extraction_rejections' items), so that nothing is dropped silently;
the project's rules are memory_worker.apply_extraction's, which records its own.
A whole answer that is not JSON, or a section that is not a list, is an AnswerError:
the caller asks again once with its message.
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

import jsonschema
import pydantic
from pydantic import BaseModel, Field

from workers.extraction_prompt import ProjectSchema

RAW_LIMIT = 2000  # characters of a broken answer kept with its rejection


class AnswerError(ValueError):
    """The answer as a whole is unusable (not JSON, or a section of the wrong shape)."""


# -- the answer's items (pydantic validates each on its own) -------------------------


class Entity(BaseModel):
    name: str = Field(min_length=1)
    type: str | None = None
    summary: str | None = None
    aliases: list[str] = Field(default_factory=list)


class Fact(BaseModel):
    subject: str = Field(min_length=1)
    predicate: str = Field(min_length=1)
    object: str
    object_type: Literal["entity", "literal", "date", "number"] | None = None
    content: str
    confidence: float = Field(ge=0, le=1)
    valid_from: str | None = None
    valid_to: str | None = None


class Contradiction(BaseModel):
    fact_id: str
    reason: str


class Note(BaseModel):
    kind: Literal["preference", "summary"]
    subject: str | None = None
    content: str


SECTIONS: dict[str, type[BaseModel]] = {
    "entities": Entity,
    "facts": Fact,
    "contradictions": Contradiction,
    "notes": Note,
}


# -- lenient parsing ------------------------------------------------------------------

_FENCE = re.compile(r"```[A-Za-z0-9_-]*[ \t]*\n?(.*?)(?:```|\Z)", re.DOTALL)


@dataclass
class Parsed:
    answer: dict[str, Any]
    truncated_tail: str | None = None  # what was cut off a truncated answer


def _cut_points(text: str) -> list[tuple[int, str]]:
    """Where a truncated object can be closed without an incomplete item: inside an
    array or the outer object, before a comma, after a closed item, or after an array's
    opening bracket; each with the brackets that close it there."""
    points: list[tuple[int, str]] = []
    stack: list[str] = []
    in_string = escaped = False
    closers = {"{": "}", "[": "]"}
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            continue
        if ch == '"':
            in_string = True
        elif ch in "{[":
            stack.append(ch)
            if ch == "[":  # (not after the outer "{": an answer keeps something)
                points.append((i + 1, "".join(closers[c] for c in reversed(stack))))
        elif ch in "}]":
            if not stack:
                break
            stack.pop()
            if not stack:
                break  # complete: nothing was truncated
            if stack[-1] == "[" or len(stack) == 1:
                points.append((i + 1, "".join(closers[c] for c in reversed(stack))))
        elif ch == "," and stack and (stack[-1] == "[" or len(stack) == 1):
            points.append((i, "".join(closers[c] for c in reversed(stack))))
    return points


def _without_trailing_commas(text: str) -> str:
    """The text without commas that only whitespace separates from a closing bracket
    (outside strings): `[1, 2,]` is a slip, not a truncation."""
    out: list[str] = []
    pending: int | None = None  # where in out an unconfirmed comma sits
    in_string = escaped = False
    for ch in text:
        if in_string:
            out.append(ch)
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            continue
        if ch in "]}" and pending is not None:
            del out[pending]
        if not ch.isspace():
            pending = None
        if ch == '"':
            in_string = True
        if ch == ",":
            pending = len(out)
        out.append(ch)
    return "".join(out)


def parse_answer(text: str | None) -> Parsed:
    """The answer's JSON object; AnswerError when there is none."""
    if text is None or not text.strip():
        raise AnswerError("the answer was empty: answer with one JSON object")
    body = text.strip()
    fenced = _FENCE.search(body)
    if fenced and "{" in fenced.group(1):
        body = fenced.group(1)
    start = body.find("{")
    if start < 0:
        raise AnswerError("the answer contains no JSON object: answer with one JSON object")
    body = _without_trailing_commas(body[start:])
    try:
        value, _end = json.JSONDecoder().raw_decode(body)  # trailing prose is ignored
    except json.JSONDecodeError as err:
        for cut, closing in reversed(_cut_points(body)):
            try:
                value = json.loads(body[:cut] + closing)
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict):
                return Parsed(value, truncated_tail=body[cut:][:RAW_LIMIT])
        raise AnswerError(f"the answer is not valid JSON ({err})") from err
    if not isinstance(value, dict):
        raise AnswerError("the answer must be a JSON object with the schema's keys")
    return Parsed(value)


# -- validation -----------------------------------------------------------------------


@dataclass
class Validated:
    payload: dict[str, Any]
    rejected: list[dict[str, Any]] = field(default_factory=list)


def _reject(section: str, item: Any, reason: str, message: str) -> dict[str, Any]:
    return {"section": section, "item": item, "reason": reason, "message": message}


def _errors(err: pydantic.ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'item'}: {e['msg']}" for e in err.errors()
    )


def _coerce(section: str, item: Any) -> Any:
    """Obvious, safe repairs: a percentage confidence, a null list."""
    if not isinstance(item, dict):
        return item
    item = dict(item)
    if section == "facts":
        conf = item.get("confidence")
        if isinstance(conf, str) and conf.strip().endswith("%"):
            with contextlib.suppress(ValueError):
                item["confidence"] = float(conf.strip()[:-1]) / 100
        obj = item.get("object")
        if isinstance(obj, (int, float)) and not isinstance(obj, bool):
            item["object"] = str(obj)
    if section == "entities" and item.get("aliases") is None:
        item.pop("aliases", None)
    return item


def _section(name: str, raw: Any, rejected: list[dict[str, Any]]) -> list[dict[str, Any]]:
    model = SECTIONS[name]
    kept: list[dict[str, Any]] = []
    for item in raw:
        try:
            parsed = model.model_validate(_coerce(name, item))
        except pydantic.ValidationError as err:
            rejected.append(_reject(name, item, "schema_violation", _errors(err)))
            continue
        kept.append(parsed.model_dump(mode="json", exclude_none=True))
    return kept


def _fields(raw: Any, schema: ProjectSchema, rejected: list[dict[str, Any]]) -> Any:
    """The custom fields checked against the project's JSON Schema, in full (SQL has no
    JSON Schema validator; apply_extraction checks type, enum, required and
    additionalProperties itself): each property that breaks it is rejected; an object
    still invalid without them is rejected whole. Anything else goes on to
    apply_extraction, which rejects it."""
    if schema.fields is None or not isinstance(raw, dict) or not raw:
        return raw
    validator = jsonschema.Draft202012Validator(schema.fields)
    value = dict(raw)
    for err in sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path)):
        path = list(err.absolute_path)
        if path and path[0] in value:
            key = path[0]
            rejected.append(
                _reject("fields", {key: value.pop(key)}, "schema_violation", err.message)
            )
    remaining = [e.message for e in validator.iter_errors(value)]
    if remaining:
        rejected.append(_reject("fields", value, "schema_violation", "; ".join(remaining)))
        return {}
    return value


def validate_answer(answer: dict[str, Any], schema: ProjectSchema) -> Validated:
    """Each item of the shape the model was asked for kept, each other one a
    rejection; the project's rules (declared predicates, entity types, object types,
    labels, confidence floor, windows) are apply_extraction's. AnswerError when a list
    section is not a list (the answer's shape is wrong: worth asking again)."""
    for name in (*SECTIONS, "classification"):
        raw = answer.get(name)
        if raw is not None and not isinstance(raw, list):
            raise AnswerError(f"{name!r} must be a JSON array, not {type(raw).__name__}")
    rejected: list[dict[str, Any]] = []
    payload: dict[str, Any] = {
        name: _section(name, answer.get(name) or [], rejected) for name in SECTIONS
    }
    payload["classification"] = answer.get("classification") or []
    payload["fields"] = _fields(answer.get("fields"), schema, rejected)
    return Validated(payload, rejected)
