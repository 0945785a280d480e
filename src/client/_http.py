"""The two transports: ``Client`` (blocking) and ``AsyncClient``, over httpx."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from types import TracebackType
from typing import Any, Self, TypeVar

import httpx
import msgspec

from ._operation import AsyncSender, Call, Response, StreamReader, SyncSender
from .api import Api
from .errors import ApiError, UnexpectedAnswer, Unreachable

__all__ = ["DEFAULT_URL", "AsyncClient", "Client"]

T = TypeVar("T")

DEFAULT_URL = "http://127.0.0.1:8080"
TIMEOUT = 30.0  # seconds for an answer; a call with ``wait`` gets that much more
STREAM_ATTEMPTS = 5  # connections a resumable stream may use before it gives up


class _Base:
    """What both transports share: the URL, the token, how a call becomes httpx's."""

    def __init__(self, url: str, token: str | None, timeout: float) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"the URL must start with http:// or https://, got {url!r}")
        self.url = url
        self._timeout = timeout
        self._options: dict[str, Any] = {
            "base_url": url.rstrip("/"),
            "headers": {"Authorization": f"Bearer {token}"} if token else {},
            "timeout": timeout,
            "trust_env": False,  # talk to the URL given, never through a proxy of the env
        }

    def _request(self, call: Call[Any], more: dict[str, str] | None = None) -> dict[str, Any]:
        return {
            "method": call.method,
            "url": call.url,
            "params": call.params,
            "headers": {**call.headers, **(more or {})},
            "content": call.content,
            "timeout": self._timeout + call.wait,
        }

    def _answer(self, response: httpx.Response, call: Call[T]) -> Response[T]:
        if response.status_code >= 400:
            raise self._error(response, call)
        content = response.content
        try:
            body = call.decode(content)
        except (msgspec.DecodeError, UnicodeDecodeError) as exc:
            raise UnexpectedAnswer(f"unexpected answer from {self.url}: {exc}") from exc
        return Response(response.status_code, response.headers, content, body)

    @staticmethod
    def _error(response: httpx.Response, call: Call[Any]) -> ApiError:
        return ApiError.of(response.status_code, response.content, response.headers, call.arguments)

    def _unreachable(
        self, exc: httpx.HTTPError, what: str = "berth is not reachable"
    ) -> Unreachable:
        return Unreachable(f"{what} at {self.url}: {str(exc) or type(exc).__name__}")

    def _stream_request(self, call: Call[Any], reader: StreamReader[Any]) -> dict[str, Any]:
        request = self._request(call, reader.resume())
        request["timeout"] = httpx.Timeout(self._timeout, read=reader.read_timeout)
        return request

    def _lost(self, exc: httpx.HTTPError, reader: StreamReader[Any], attempt: int) -> None:
        """A stream cut by ``exc``: raise, unless it can be resumed once more."""
        if not reader.resumable or attempt == STREAM_ATTEMPTS - 1:
            raise self._unreachable(exc, "lost the stream") from exc


class Client(_Base, SyncSender, Api):
    """berth's API, blocking: ``with Client(url, token) as berth: berth.servers()``.

    Every method of ``Api`` returns the answer's body (a Struct of ``berth.client.models``);
    ``method.response(...)`` the whole answer. Raises ``ApiError`` (berth said no),
    ``Unreachable`` or ``UnexpectedAnswer``. ``transport`` replaces the network (tests).
    """

    def __init__(
        self,
        url: str = DEFAULT_URL,
        token: str | None = None,
        *,
        timeout: float = TIMEOUT,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(url, token, timeout)
        self._http = httpx.Client(transport=transport, **self._options)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _send(self, call: Call[T]) -> Response[T]:
        try:
            response = self._http.request(**self._request(call))
        except httpx.HTTPError as exc:
            raise self._unreachable(exc) from exc
        return self._answer(response, call)

    def _stream(self, call: Call[Any], reader: StreamReader[T]) -> Iterator[T]:
        for attempt in range(STREAM_ATTEMPTS):
            try:
                with self._http.stream(**self._stream_request(call, reader)) as response:
                    if response.status_code >= 400:
                        response.read()
                        raise self._error(response, call)
                    for text in response.iter_text():
                        yield from reader.feed(text)
                        if reader.done:
                            return
                yield from reader.close()
                return
            except httpx.HTTPError as exc:
                self._lost(exc, reader, attempt)


class AsyncClient(_Base, AsyncSender, Api):
    """berth's API, awaited: ``async with AsyncClient(url, token) as berth: await
    berth.servers()``; streams are async iterators. Otherwise as ``Client``."""

    def __init__(
        self,
        url: str = DEFAULT_URL,
        token: str | None = None,
        *,
        timeout: float = TIMEOUT,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(url, token, timeout)
        self._http = httpx.AsyncClient(transport=transport, **self._options)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def _send(self, call: Call[T]) -> Response[T]:
        try:
            response = await self._http.request(**self._request(call))
        except httpx.HTTPError as exc:
            raise self._unreachable(exc) from exc
        return self._answer(response, call)

    async def _stream(self, call: Call[Any], reader: StreamReader[T]) -> AsyncIterator[T]:
        for attempt in range(STREAM_ATTEMPTS):
            try:
                async with self._http.stream(**self._stream_request(call, reader)) as response:
                    if response.status_code >= 400:
                        await response.aread()
                        raise self._error(response, call)
                    async for text in response.aiter_text():
                        for item in reader.feed(text):
                            yield item
                        if reader.done:
                            return
                for item in reader.close():
                    yield item
                return
            except httpx.HTTPError as exc:
                self._lost(exc, reader, attempt)
