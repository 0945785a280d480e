"""``/api/agent/sources``: upload a build context for a deploy's ``build.sourceId``."""

from __future__ import annotations

from typing import Any

from berth.core import commands as c
from litestar import Controller, Request, post
from litestar.di import NamedDependency

from ..errors import UnsupportedMediaType, problem_response
from ..openapi import documented
from ..schemas import SourceOut, source_out
from .common import READ, Caller

__all__ = ["SOURCE_TYPES", "SourceController"]

#: The media types an upload may be sent as.
SOURCE_TYPES = ("application/x-tar", "application/gzip", "application/x-gzip")


class SourceController(Controller):
    path = "/sources"

    @documented(
        post,
        "/",
        "uploadSource",
        status_code=201,
        responses={
            **READ,
            413: problem_response("The source is over BERTH_SOURCE_MAX_BYTES (200 MiB)."),
            415: problem_response("The body is not application/x-tar or application/gzip."),
        },
        # The store caps the size as the bytes arrive (BERTH_SOURCE_MAX_BYTES), not the
        # 1 MiB of JSON bodies.
        request_max_body_size=None,
    )
    async def upload_source(
        self, caller: NamedDependency[Caller], request: Request[Any, Any, Any]
    ) -> SourceOut:
        """Upload a build context

        The body is a tar archive (`application/x-tar`) or a gzipped one
        (`application/gzip`) of the directory to build, streamed to disk as it arrives
        (at most `BERTH_SOURCE_MAX_BYTES`, 200 MiB). Deploy it with
        `build: {"sourceId": id}`; it is kept 24 hours after its upload or its last use by a
        build, and only your team can use it (another team's id is a 404).

        Returns:
            The source's id, the SHA-256 and size of what was received, and when it
            expires.
        """
        media = (request.headers.get("content-type") or "").split(";", 1)[0].strip().lower()
        if media not in SOURCE_TYPES:
            raise UnsupportedMediaType("Send the source as application/x-tar or application/gzip.")
        return source_out(await caller(c.UploadSource(chunks=request.stream())))
