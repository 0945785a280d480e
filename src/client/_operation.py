"""An API operation described once, run by either client.

Each method of ``berth.client`` is an ``Operation`` (or a ``StreamOperation``): its HTTP
method and path as the OpenAPI document names them, the type its answer decodes to,
and a function that turns the method's arguments into a ``Request``. The function's
signature is the method's. Read from a ``Client`` the operation is a plain method
(``client.servers()`` returns the body); read from an ``AsyncClient`` it is a coroutine
method (``await client.servers()``): one description, two transports, no method written
twice. ``.response(...)`` gives the whole answer (status, headers, the raw body).
"""

from __future__ import annotations

import functools
import re
import urllib.parse
from collections.abc import (
    AsyncIterator,
    Callable,
    Coroutine,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from dataclasses import dataclass, field
from typing import Any, Generic, ParamSpec, Protocol, TypeVar, overload

import msgspec

__all__ = [
    "AsyncMethod",
    "AsyncSender",
    "AsyncStream",
    "Call",
    "Operation",
    "Request",
    "Response",
    "StreamOperation",
    "StreamReader",
    "SyncMethod",
    "SyncSender",
    "SyncStream",
    "operation",
    "stream",
]

P = ParamSpec("P")
T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

_PATH_PARAM = re.compile(r"\{([A-Za-z]+)\}")
_UPPER = re.compile(r"(?<=[a-z0-9])([A-Z])")


def snake(name: str) -> str:
    """``serverId`` → ``server_id``; ``Idempotency-Key`` → ``idempotency_key``."""
    return _UPPER.sub(r"_\1", name).replace("-", "_").lower()


@dataclass(frozen=True, slots=True)
class Request:
    """What a method's arguments make of a request: path values, query and header values
    (``None``: not sent), the body; ``wait``: seconds berth may hold the answer (``?wait``),
    added to the timeout; ``token``: another credential than the client's."""

    path: Mapping[str, object] = field(default_factory=dict)
    query: Mapping[str, object | None] = field(default_factory=dict)
    headers: Mapping[str, str | None] = field(default_factory=dict)
    body: msgspec.Struct | None = None
    wait: float = 0.0
    token: str | None = None
    #: A body that is not JSON (an upload): its bytes, or chunks of them, and its type.
    raw: bytes | Iterable[bytes] | None = None
    raw_type: str | None = None


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """A request ready to send, and how to read its answer."""

    method: str
    url: str
    params: dict[str, str]
    headers: dict[str, str]
    content: bytes | Iterable[bytes] | None
    wait: float
    arguments: Mapping[str, str]  # an error's location → the method's argument
    decode: Callable[[bytes], T]


@dataclass(frozen=True, slots=True)
class Response(Generic[T_co]):
    """A whole answer: ``status``, ``headers``, the raw ``content`` (as berth sent it)
    and the decoded ``body``."""

    status: int
    headers: Mapping[str, str]
    content: bytes
    body: T_co


class _Described(Generic[P]):
    """What an operation and a stream share: method, path, and the argument names."""

    def __init__(
        self,
        method: str,
        path: str,
        build: Callable[P, Request],
        *,
        query: Mapping[str, str],
        headers: Mapping[str, str],
        body: type[msgspec.Struct] | None,
    ) -> None:
        self.method = method
        self.path = path
        self.build = build
        self.query = dict(query)
        self.headers = dict(headers)
        self.body = body
        self.__doc__ = build.__doc__
        self.__name__ = build.__name__
        arguments = {f"path.{p}": snake(p) for p in _PATH_PARAM.findall(path)}
        arguments |= {f"query.{k}": v for k, v in query.items()}
        arguments |= {f"header.{k}": v for k, v in headers.items()}
        if body is not None:
            arguments |= {f"body.{f.encode_name}": f.name for f in msgspec.structs.fields(body)}
        self.arguments = arguments

    def call(
        self, decode: Callable[[bytes], T], accept: str, *args: P.args, **kwargs: P.kwargs
    ) -> Call[T]:
        request = self.build(*args, **kwargs)
        unknown = (set(request.query) - set(self.query)) | (
            set(request.headers) - set(self.headers)
        )
        assert not unknown, f"{self.__name__} sends undeclared {unknown}"
        url = _PATH_PARAM.sub(
            lambda m: urllib.parse.quote(str(request.path[m.group(1)]), safe=""), self.path
        )
        headers = {k: v for k, v in request.headers.items() if v is not None}
        headers["Accept"] = accept
        if request.token is not None:
            headers["Authorization"] = f"Bearer {request.token}"
        content: bytes | Iterable[bytes] | None = None
        if request.body is not None:
            content = msgspec.json.encode(request.body)
            headers["Content-Type"] = "application/json"
        elif request.raw is not None:
            content = request.raw
            headers["Content-Type"] = request.raw_type or "application/octet-stream"
        params = {k: _text(v) for k, v in request.query.items() if v is not None}
        return Call(
            self.method, url, params, headers, content, request.wait, self.arguments, decode
        )


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def _decoder(result: type[T]) -> Callable[[bytes], T]:
    """How an answer's bytes become ``result``: nothing for ``None`` (204), the text for
    ``str``, else JSON decoded strictly into ``result`` (``msgspec.DecodeError`` if not)."""
    if result is type(None):
        return lambda content: None  # T is None here
    if result is str:
        return lambda content: content.decode("utf-8")  # type: ignore[return-value]
    return functools.partial(msgspec.json.decode, type=result)


class SyncSender:
    """A client that sends a ``Call`` and returns its answer (``berth.client.Client``)."""

    def _send(self, call: Call[T]) -> Response[T]:
        raise NotImplementedError

    def _stream(self, call: Call[Any], reader: StreamReader[T]) -> Iterator[T]:
        raise NotImplementedError


class AsyncSender:
    """The same, awaited (``berth.client.AsyncClient``)."""

    async def _send(self, call: Call[T]) -> Response[T]:
        raise NotImplementedError

    def _stream(self, call: Call[Any], reader: StreamReader[T]) -> AsyncIterator[T]:
        raise NotImplementedError


class SyncMethod(Protocol[P, T_co]):
    """An operation read from a ``Client``."""

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> T_co: ...
    def response(self, *args: P.args, **kwargs: P.kwargs) -> Response[T_co]: ...


class AsyncMethod(Protocol[P, T_co]):
    """An operation read from an ``AsyncClient``."""

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Coroutine[Any, Any, T_co]: ...
    def response(
        self, *args: P.args, **kwargs: P.kwargs
    ) -> Coroutine[Any, Any, Response[T_co]]: ...


class Operation(_Described[P], Generic[P, T]):
    """One request, one answer (JSON, text, or nothing)."""

    def __init__(
        self,
        method: str,
        path: str,
        result: type[T],
        build: Callable[P, Request],
        *,
        query: Mapping[str, str],
        headers: Mapping[str, str],
        body: type[msgspec.Struct] | None,
        accept: str,
    ) -> None:
        super().__init__(method, path, build, query=query, headers=headers, body=body)
        self.result = result
        self.accept = accept
        self._decode = _decoder(result)

    def prepare(self, *args: P.args, **kwargs: P.kwargs) -> Call[T]:
        """The request these arguments make (nothing is sent)."""
        return self.call(self._decode, self.accept, *args, **kwargs)

    @overload
    def __get__(self, obj: SyncSender, owner: object) -> SyncMethod[P, T]: ...
    @overload
    def __get__(self, obj: AsyncSender, owner: object) -> AsyncMethod[P, T]: ...
    @overload
    def __get__(self, obj: None, owner: object) -> Operation[P, T]: ...
    def __get__(self, obj: object, owner: object) -> Any:
        if obj is None:
            return self
        if isinstance(obj, AsyncSender):
            return _AsyncBound(self, obj)
        assert isinstance(obj, SyncSender)
        return _SyncBound(self, obj)


class _SyncBound:
    def __init__(self, op: Operation[Any, Any], sender: SyncSender) -> None:
        self._op, self._sender = op, sender
        functools.update_wrapper(self, op.build)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._sender._send(self._op.prepare(*args, **kwargs)).body

    def response(self, *args: Any, **kwargs: Any) -> Any:
        return self._sender._send(self._op.prepare(*args, **kwargs))


class _AsyncBound:
    def __init__(self, op: Operation[Any, Any], sender: AsyncSender) -> None:
        self._op, self._sender = op, sender
        functools.update_wrapper(self, op.build)

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return (await self._sender._send(self._op.prepare(*args, **kwargs))).body

    async def response(self, *args: Any, **kwargs: Any) -> Any:
        return await self._sender._send(self._op.prepare(*args, **kwargs))


class StreamReader(Protocol[T_co]):
    """Turns a streamed answer's text into items, and says how to resume it."""

    done: bool  # the stream said it ended: stop reading
    resumable: bool  # a cut connection may be opened again (``resume``)
    read_timeout: float | None  # the longest silence that means the connection is gone

    def feed(self, text: str) -> Sequence[T_co]: ...
    def close(self) -> Sequence[T_co]: ...
    def resume(self) -> dict[str, str]:
        """At each connection: drop what was half read; the headers that resume after
        what was read whole."""
        ...


class SyncStream(Protocol[P, T_co]):
    """A stream read from a ``Client``: an iterator of its items."""

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Iterator[T_co]: ...


class AsyncStream(Protocol[P, T_co]):
    """A stream read from an ``AsyncClient``: an async iterator of its items."""

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> AsyncIterator[T_co]: ...


class StreamOperation(_Described[P], Generic[P, T]):
    """One request whose answer is read as it comes: ``reader()`` makes its items."""

    def __init__(
        self,
        method: str,
        path: str,
        reader: Callable[[], StreamReader[T]],
        build: Callable[P, Request],
        *,
        query: Mapping[str, str],
        headers: Mapping[str, str],
        accept: str,
    ) -> None:
        super().__init__(method, path, build, query=query, headers=headers, body=None)
        self.reader = reader
        self.accept = accept

    def prepare(self, *args: P.args, **kwargs: P.kwargs) -> Call[bytes]:
        """The request these arguments make (nothing is sent)."""
        return self.call(bytes, self.accept, *args, **kwargs)

    @overload
    def __get__(self, obj: SyncSender, owner: object) -> SyncStream[P, T]: ...
    @overload
    def __get__(self, obj: AsyncSender, owner: object) -> AsyncStream[P, T]: ...
    @overload
    def __get__(self, obj: None, owner: object) -> StreamOperation[P, T]: ...
    def __get__(self, obj: object, owner: object) -> Any:
        if obj is None:
            return self
        sender: Any = obj

        @functools.wraps(self.build)
        def bound(*args: Any, **kwargs: Any) -> Any:
            return sender._stream(self.prepare(*args, **kwargs), self.reader())

        return bound


def operation(
    method: str,
    path: str,
    result: type[T],
    *,
    query: Mapping[str, str] | None = None,
    headers: Mapping[str, str] | None = None,
    body: type[msgspec.Struct] | None = None,
    accept: str = "application/json",
) -> Callable[[Callable[P, Request]], Operation[P, T]]:
    """Declare a method: ``method path`` answering ``result``. ``query``/``headers``:
    each parameter it may send → the method's argument it comes from (error locations
    are reported under those names); ``body``: the request body's Struct."""

    def declare(build: Callable[P, Request]) -> Operation[P, T]:
        return Operation(
            method,
            path,
            result,
            build,
            query=query or {},
            headers=headers or {},
            body=body,
            accept=accept,
        )

    return declare


def stream(
    path: str,
    reader: Callable[[], StreamReader[T]],
    *,
    query: Mapping[str, str] | None = None,
    headers: Mapping[str, str] | None = None,
    accept: str,
) -> Callable[[Callable[P, Request]], StreamOperation[P, T]]:
    """Declare a streaming ``GET path`` whose items ``reader()`` makes."""

    def declare(build: Callable[P, Request]) -> StreamOperation[P, T]:
        return StreamOperation(
            "GET", path, reader, build, query=query or {}, headers=headers or {}, accept=accept
        )

    return declare
