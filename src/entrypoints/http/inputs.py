"""The API's inputs, read strictly, once for every route.

A handler's signature says what it reads: ``data: DeployCommand`` (a body, documented by
its wire Struct), ``wait: Wait`` (a query parameter), ``server_id: ServerId`` (a path
id); Litestar documents them and hands them over. Litestar alone reads leniently and stops
at the first error (``"80"`` for a port, ``?wait=01``, a parameter given twice: the last
wins); the API promises more (SPEC.md): strict types, unknown fields refused, every broken
rule at once in one problem, ``body.<field>``/``query.<name>``/``header.<name>`` with the
raw value. So two hooks, registered once on the app, read each request first:

* ``read_inputs`` (``before_request``): a path id that is not a UUID names nothing (404);
  a body must be ``application/json`` (415), at most the size limit (413) and not empty
  (400); then every declared query parameter and header: given at most once, in its one
  spelling (whole numbers in plain digits, canonical UUIDs, a value of its closed set),
  required ones present — every error at once (422).
* ``JsonBody``, the data DTO of every handler whose ``data`` is a command of
  ``schemas.BODIES`` (``JsonBodies``, a serialization plugin): the body decoded strictly
  and parsed by the core into the command; its errors and the parameters' in one 422.

The rule of a parameter comes from its declaration: its type and the constraints of its
``QueryParameter``/``HeaderParameter`` (``ge``, ``le``), with ``Rule`` for the words when
the type does not say them. Litestar then converts what these checks passed.
"""

from __future__ import annotations

import json
import re
import types
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Union, get_args, get_origin
from uuid import UUID

import msgspec
from berth.core.errors import FieldError, InvalidInput, NotFound
from berth.core.types import RuleError, check_uuid
from litestar import Request
from litestar.dto import AbstractDTO
from litestar.enums import ParamType
from litestar.openapi.spec import Reference
from litestar.params import ParameterKwarg
from litestar.plugins import SerializationPlugin
from litestar.typing import FieldDefinition

from .errors import BadJson, UnsupportedMediaType
from .schemas import Body
from .wire import parse_body

__all__ = [
    "ECHO_MAX",
    "JsonBodies",
    "JsonBody",
    "NotJson",
    "Rule",
    "decode_json",
    "echo",
    "parameter_errors",
    "read_inputs",
    "read_whole",
]

#: Echoed values are cut to this many characters (plus "…").
ECHO_MAX = 200

Req = Request[Any, Any, Any]

_DIGITS = re.compile(r"0|[1-9][0-9]*")  # no leading zero (a range from 0 takes "0")
# msgspec's messages for valid JSON whose numbers it cannot represent.
_OUT_OF_RANGE = ("Number out of range", "Integer value out of range")
_INT_MAX_DIGITS = 4300  # CPython's default int <-> str limit (sys.get_int_max_str_digits)


# --- JSON ------------------------------------------------------------------------


class NotJson(ValueError):
    """The body is not valid JSON; the message says why."""


def decode_json(raw: bytes) -> object:
    """``raw`` as JSON, strictly (no ``NaN``, no lone surrogates, valid UTF-8).

    A number too large for a float or an int (``1e400``, 5,000 digits) is still valid
    JSON: it decodes to ``±inf``, which no field of this API accepts, so it becomes a 422
    at its field like any other wrong value — never a 400. Raises :class:`NotJson` when
    it is not JSON, ``RecursionError`` when it nests deeper than the decoder goes.
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


def _json_of(raw: bytes) -> object:
    """The body as JSON: 400 if malformed; 422 if it nests deeper than any body here."""
    try:
        return decode_json(raw)
    except NotJson as exc:
        raise BadJson(str(exc) if raw.strip() else "the body is empty") from None
    except RecursionError:  # valid JSON, but no body of this API nests that deep
        raise InvalidInput([FieldError("body", "The JSON nests too deeply.", None)]) from None


# --- parameters ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Rule:
    """A parameter's rule where its type does not say it all: how a whole number is named
    (``what``: "whole seconds"), a closed set's refusal (``message``), or a string's check
    (``check``, raising ``RuleError``)."""

    what: str = "an integer"
    message: str | None = None
    check: Callable[[str], object] | None = None


@dataclass(frozen=True, slots=True)
class _Parameter:
    name: str  # as on the wire: ``serverId``, ``Idempotency-Key``
    where: str  # "query" | "header"
    required: bool
    check: Callable[[str], object] | None  # raises RuleError

    @property
    def location(self) -> str:
        """Where an error of it is reported: ``query.serverId``, ``header.Idempotency-Key``."""
        return f"{self.where}.{self.name}"


@dataclass(frozen=True, slots=True)
class _Inputs:
    """What a handler reads: its path ids, parameters and body (None: none; else whether
    one is required)."""

    path_ids: tuple[str, ...]
    parameters: tuple[_Parameter, ...]
    body: bool | None


def _whole(low: int, high: int, what: str) -> Callable[[str], object]:
    def check(raw: str) -> object:
        if _DIGITS.fullmatch(raw) and len(raw) <= len(str(high)) and low <= int(raw) <= high:
            return None
        raise RuleError(
            f"Expected {what} from {low} to {high}, in plain digits without a leading zero."
        )

    return check


def _one_of(values: Sequence[object], message: str | None) -> Callable[[str], object]:
    allowed = {str(v) for v in values}
    refused = message or f"Expected {' or '.join(map(str, values))}."

    def check(raw: str) -> object:
        if raw not in allowed:
            raise RuleError(refused)
        return None

    return check


def _rule_of(kind: Any, kwarg: ParameterKwarg, rule: Rule) -> Callable[[str], object] | None:
    """The check of a parameter of type ``kind`` declared as ``kwarg``."""
    if rule.check is not None:
        return rule.check
    if kind is int:
        low = 1 if kwarg.ge is None else int(kwarg.ge)
        return _whole(low, int(kwarg.le or 2**63 - 1), rule.what)
    if kind is UUID:
        return check_uuid
    if get_origin(kind) is Literal:
        return _one_of(get_args(kind), rule.message)
    return None


def _inputs_of(handler: Any) -> _Inputs:
    """A handler's inputs, from its signature (worked out once, kept in its ``opt``)."""
    found: _Inputs | None = handler.opt.get("berth.inputs")
    if found is not None:
        return found
    path_ids: list[str] = []
    parameters: list[_Parameter] = []
    body: bool | None = None
    dto = handler.resolve_data_dto()
    provided = handler.resolve_dependencies()
    for name, field in handler.parsed_fn_signature.parameters.items():
        if name == "data" and dto is not None and issubclass(dto, JsonBody):
            body = not field.is_optional
        kwarg = field.kwarg_definition
        if not isinstance(kwarg, ParameterKwarg) or name in provided:
            continue
        alias = kwarg.name or name
        if kwarg.param_type is ParamType.PATH:
            if field.annotation is UUID:  # an id; another path parameter is a file's path
                path_ids.append(alias)
            continue
        rule = next((m for m in field.metadata if isinstance(m, Rule)), Rule())
        check = _rule_of(_without_none(field.annotation), kwarg, rule)
        where = "header" if kwarg.param_type is ParamType.HEADER else "query"
        parameters.append(_Parameter(alias, where, field.is_required, check))
    found = _Inputs(tuple(path_ids), tuple(parameters), body)
    handler.opt["berth.inputs"] = found
    return found


def _without_none(annotation: Any) -> Any:
    if get_origin(annotation) in (Union, types.UnionType):
        return next(a for a in get_args(annotation) if a is not type(None))
    return annotation


def parameter_errors(request: Req, inputs: _Inputs | None = None) -> list[FieldError]:
    """Every broken rule of the request's query parameters and headers, as declared by its
    handler: given more than once, missing when required, or not in its one spelling."""
    errors: list[FieldError] = []
    query: Any = None  # each read once per request, and only if a parameter is there
    headers: Any = None
    for parameter in (inputs or _inputs_of(request.route_handler)).parameters:
        if parameter.where == "header":
            headers = request.headers if headers is None else headers
            _read(headers, parameter, errors)
        else:
            query = request.query_params if query is None else query
            _read(query, parameter, errors)
    return errors


def _read(source: Any, parameter: _Parameter, errors: list[FieldError]) -> str | None:
    """``parameter``'s one value in ``source`` (the request's query parameters or
    headers; ``None`` when absent); its errors go to ``errors``."""
    values: list[str] = source.getall(parameter.name, [])
    if len(values) > 1:
        errors.append(
            FieldError(
                parameter.location, f"Given {len(values)} times; give it at most once.", None
            )
        )
    elif not values:
        if parameter.required:
            errors.append(FieldError(parameter.location, "Field required.", None))
    elif parameter.check is not None:
        try:
            parameter.check(values[0])
        except RuleError as exc:
            errors.append(FieldError(parameter.location, str(exc), echo(values[0])))
        else:
            return values[0]
    else:
        return values[0]
    return None


def read_whole(request: Req, where: str, name: str, high: int, what: str) -> int | None:
    """A whole number parameter read alone, by a handler that does not declare it (the
    dashboard's event stream): 1 to ``high``, ``None`` when absent, else a 422."""
    errors: list[FieldError] = []
    source = request.headers if where == "header" else request.query_params
    found = _read(source, _Parameter(name, where, False, _whole(1, high, what)), errors)
    if errors:
        raise InvalidInput(errors)
    return None if found is None else int(found)


async def read_inputs(request: Req) -> None:
    """The ``before_request`` hook: path ids (404), the body's media type, size and
    presence (415, 413, 400), then every parameter (422). With a body to read, the
    parameters' errors wait for its own: ``JsonBody`` lists them together."""
    inputs = _inputs_of(request.route_handler)
    for name in inputs.path_ids:
        try:
            UUID(request.path_params[name])
        except ValueError:  # a path id that is not a UUID names nothing, like an unknown id
            raise NotFound(f"{name.removesuffix('Id').capitalize()} not found.") from None
    if inputs.body is not None and await _has_body(request, required=inputs.body):
        return
    if inputs.parameters and (errors := parameter_errors(request, inputs)):
        raise InvalidInput(errors)


async def _has_body(request: Req, *, required: bool) -> bool:
    """Whether the request carries a JSON body: 415 unless ``application/json``, 413 over
    the limit, 400 when one is required (or announced) but empty."""
    content_type = request.headers.get("content-type")
    if not required and content_type is None and not await request.body():
        return False  # an optional body, left out
    if (content_type or "").split(";", 1)[0].strip().lower() != "application/json":
        raise UnsupportedMediaType()
    if not await request.body():
        raise BadJson("the body is empty")
    return True


# --- bodies ------------------------------------------------------------------------


class JsonBody(AbstractDTO[Any]):
    """The data DTO of a command read from a JSON body (``schemas.Body``): decoded
    strictly, renamed to the core's names, parsed by the core's parser, every error at
    its API location with the parameters' (``parameter_errors``). The document shows the
    wire Struct."""

    body: ClassVar[Body]

    def decode_bytes(self, value: bytes) -> Any:
        request: Any = self.asgi_connection
        spec = self.body
        names = (spec.path,) if isinstance(spec.path, str) else spec.path or ()
        ids = tuple(UUID(request.path_params[name]) for name in names)
        return parse_body(
            _json_of(value),
            spec.wire,
            lambda raw: spec.parse(raw, *ids),
            extra=parameter_errors(request),
        )

    @classmethod
    def create_for_field_definition(
        cls, field_definition: FieldDefinition, handler_id: str, backend_cls: Any = None
    ) -> None:
        """Nothing to build: the core's parser is the whole reading."""

    @classmethod
    def create_openapi_schema(
        cls, field_definition: FieldDefinition, handler_id: str, schema_creator: Any
    ) -> Reference:
        # msgspec's schema of the wire Struct, which ``openapi.py`` adds to the components.
        return Reference(ref=f"#/components/schemas/{cls.body.wire.__name__}")

    @classmethod
    def generate_field_definitions(cls, model_type: type[Any]) -> Generator[Any, None, None]:
        yield from ()

    @classmethod
    def detect_nested_field(cls, field_definition: FieldDefinition) -> bool:
        return False


class JsonBodies(SerializationPlugin):
    """Gives a ``JsonBody`` to each handler whose ``data`` is one of ``bodies``' commands."""

    def __init__(self, bodies: Mapping[type, Body]) -> None:
        self._dtos = {
            command: type(
                f"JsonBody[{command.__name__}]", (JsonBody,), {"body": body, "model_type": command}
            )
            for command, body in bodies.items()
        }

    def supports_type(self, field_definition: FieldDefinition) -> bool:
        return field_definition.annotation in self._dtos

    def create_dto_for_type(self, field_definition: FieldDefinition) -> type[AbstractDTO[Any]]:
        dto: type[AbstractDTO[Any]] = self._dtos[_without_none(field_definition.annotation)]
        return dto
