"""A SQL script as its statements, split where psql would split it.

On a Citus coordinator some DDL (CREATE TRIGGER on a distributed table) is forwarded
to the workers as the text of the query that carried it, and a worker refuses a text
of several statements; so there each statement of a migration or function file goes
on its own (`chronomem.migrate`). A semicolon ends a statement outside quotes
('...', E'...', "...", $tag$...$tag$), comments and a SQL-standard BEGIN ATOMIC body.
"""

from __future__ import annotations

import re

_DOLLAR_TAG = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)?\$")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*")


def split_statements(script: str) -> list[str]:
    """The statements of `script`, each without its semicolon; empty ones dropped."""
    statements: list[str] = []
    start = i = 0
    atomic = 0  # depth of BEGIN ATOMIC ... END (its body holds semicolons)
    previous_word = ""
    n = len(script)
    while i < n:
        c = script[i]
        if c == "-" and script.startswith("--", i):
            end = script.find("\n", i)
            i = n if end < 0 else end + 1
        elif c == "/" and script.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if script.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif script.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif c == "'":
            escapes = i > 0 and script[i - 1] in "eE" and not _is_word_char(script, i - 2)
            i += 1
            while i < n:
                if escapes and script[i] == "\\":
                    i += 2
                elif script[i] == "'":
                    if script.startswith("''", i):
                        i += 2
                    else:
                        break
                else:
                    i += 1
            i += 1
        elif c == '"':
            end = script.find('"', i + 1)
            i = n if end < 0 else end + 1
        elif (
            c == "$"
            and (match := _DOLLAR_TAG.match(script, i))
            and not _is_word_char(script, i - 1)
        ):
            end = script.find(match.group(0), match.end())
            i = n if end < 0 else end + len(match.group(0))
        elif c.isalpha() or c == "_":
            match = _WORD.match(script, i)
            assert match is not None
            word = match.group(0).lower()
            if word == "atomic" and previous_word == "begin":
                atomic += 1
            elif word == "end" and atomic:
                atomic -= 1
            # CASE ... END inside an atomic body closes a CASE, not the body.
            elif word == "case" and atomic:
                atomic += 1
            previous_word = word
            i = match.end()
        elif c == ";" and not atomic:
            statements.append(script[start:i])
            start = i = i + 1
        else:
            i += 1
    statements.append(script[start:])
    return [s.strip() for s in statements if _has_code(s)]


def _is_word_char(script: str, index: int) -> bool:
    return index >= 0 and (script[index].isalnum() or script[index] == "_")


def _has_code(statement: str) -> bool:
    """Whether anything but whitespace and comments is left."""
    text = re.sub(r"--[^\n]*", "", statement)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return bool(text.strip())
