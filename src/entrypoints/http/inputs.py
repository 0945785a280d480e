"""What the HTTP layer reads before the core's parsers see it: the JSON body and the
query parameters. Pure functions, so every rule here is unit-tested without a server.

* The body is decoded by msgspec (strict JSON: no ``NaN``, no lone surrogates, valid
  UTF-8). A number too large for a float or an int (``1e400``, 5,000 digits) is still
  valid JSON: it decodes to ``±inf``, which no field of this API accepts, so it becomes
  a 422 at its field like any other wrong value — never a 400.
* A query parameter is read here, not by Litestar: one spelling per value (plain
  digits, no sign, no leading zero), every error at ``query.<name>`` with the raw
  value, and a parameter given more than once is an error (never "the first" or "the
  last", which two parsers would disagree on).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any
from uuid import UUID

import msgspec
from berth.core.errors import FieldError
from berth.core.types import RuleError, check_uuid

__all__ = [
    "ECHO_MAX",
    "NotJson",
    "decode_json",
    "echo",
    "query_int",
    "query_uuid",
    "single",
]

#: Echoed values are cut to this many characters (plus "…").
ECHO_MAX = 200

_DIGITS = re.compile(r"[1-9][0-9]*")
# msgspec's messages for valid JSON whose numbers it cannot represent.
_OUT_OF_RANGE = ("Number out of range", "Integer value out of range")
_INT_MAX_DIGITS = 4300  # CPython's default int <-> str limit (sys.get_int_max_str_digits)


class NotJson(ValueError):
    """The body is not valid JSON; the message says why."""


def decode_json(raw: bytes) -> object:
    """``raw`` as JSON, strictly; numbers beyond range become ``±inf``.

    Raises :class:`NotJson` when it is not JSON, ``RecursionError`` when it nests
    deeper than the decoder goes (valid JSON no body of this API allows).
    """
    try:
        return msgspec.json.decode(raw)
    except msgspec.ValidationError as exc:  # untyped decoding: only number ranges
        if not str(exc).startswith(_OUT_OF_RANGE):
            raise NotJson(str(exc)) from None
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:  # msgspec: bad UTF-8 → the latter
        raise NotJson(str(exc)) from None
    return _decode_with_huge_numbers(raw)


def _decode_with_huge_numbers(raw: bytes) -> object:
    """The standard library's decoder, held to msgspec's grammar, for a body that msgspec
    found valid up to a number it cannot represent (and did not read beyond it)."""
    try:
        text = raw.decode("utf-8")  # strict, and no UTF-16/32 guessing as json.loads(bytes)
        value = json.loads(text, parse_int=_int_or_inf, parse_constant=_no_constants)
    except (UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError is a ValueError
        raise NotJson(str(exc)) from None
    _refuse_lone_surrogates(value)
    return value


def _int_or_inf(text: str) -> int | float:
    digits = text.lstrip("-")
    if len(digits) > _INT_MAX_DIGITS:
        return float("-inf") if text.startswith("-") else float("inf")
    return int(text)


def _no_constants(name: str) -> object:
    raise NotJson(f"{name} is not JSON")


def _refuse_lone_surrogates(value: object) -> None:
    """msgspec refuses ``"\\ud800"``; ``json`` decodes it to a string no encoder takes."""
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            _utf8(item)
        elif isinstance(item, dict):
            for key, member in item.items():
                _utf8(key)
                stack.append(member)
        elif isinstance(item, list):
            stack.extend(item)


def _utf8(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise NotJson("A string holds a lone surrogate (not valid Unicode).") from None


def echo(value: str) -> str:
    """A raw value as errors echo it: short."""
    return value if len(value) <= ECHO_MAX else value[:ECHO_MAX] + "…"


def single(name: str, values: Sequence[str], errors: list[FieldError]) -> str | None:
    """The one value of ``?name`` (``None`` when absent); an error when given more than once."""
    if not values:
        return None
    if len(values) > 1:
        errors.append(
            FieldError(f"query.{name}", f"Given {len(values)} times; give it at most once.", None)
        )
        return None
    return values[0]


def query_int(
    name: str,
    values: Sequence[str],
    errors: list[FieldError],
    *,
    low: int,
    high: int,
    what: str = "an integer",
) -> int | None:
    """``?name`` as an integer ``low``-``high`` in plain digits (``01``, ``+1``, ``1.0``,
    ``1e2`` are refused); ``None`` when absent or wrong (then ``errors`` says why)."""
    raw = single(name, values, errors)
    if raw is None:
        return None
    if _DIGITS.fullmatch(raw) and len(raw) <= len(str(high)) and low <= int(raw) <= high:
        return int(raw)
    errors.append(
        FieldError(
            f"query.{name}",
            f"Expected {what} from {low} to {high}, in plain digits without a leading zero.",
            echo(raw),
        )
    )
    return None


def query_uuid(name: str, values: Sequence[str], errors: list[FieldError]) -> UUID | None:
    """``?name``, required, as a canonical UUID; ``None`` when absent or wrong."""
    raw = single(name, values, errors)
    if raw is None:
        if not values:
            errors.append(FieldError(f"query.{name}", "Field required.", None))
        return None
    try:
        return check_uuid(raw)
    except RuleError as exc:
        errors.append(FieldError(f"query.{name}", str(exc), echo(raw)))
        return None
