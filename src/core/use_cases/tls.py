"""HTTPS through the proxy: after a domain app's route is switched, ask the proxy for the
domain from the server itself and judge what answered (``judge``: the rule, pure)."""

from __future__ import annotations

import asyncio

import structlog

from ..errors import RuntimeFailure, ServerUnreachable
from ..models import ProxyProbe, TlsState, TlsStatus
from ..ports import ServerConnection
from ..types import needs_internal_issuer
from .steps import DeploymentRun

__all__ = ["TLS_CHECK_SECONDS", "check_tls", "judge"]

log = structlog.get_logger()

#: The whole check (HTTP, then the TLS handshake and an HTTPS request) is bounded by this.
TLS_CHECK_SECONDS = 15.0


def judge(domain: str, probe: ProxyProbe) -> tuple[TlsState, str | None]:
    """The TLS state a probe shows, and why when it is not ``ready``.

    * Plain HTTP must answer with a redirect to ``https://<domain>``: otherwise the
      proxy does not serve the domain (``error``).
    * A completed, verified handshake with an HTTP answer over it is ``ready``.
    * Otherwise an internally issued name is an ``error`` (its certificate comes from
      the proxy's own CA at once, so a failure is real); a public one is ``pending``
      (its certificate comes from ACME, which takes a while and needs public DNS).
    """
    if probe.http is None:
        return TlsState.ERROR, "Nothing answered plain HTTP on the proxy's HTTP port."
    location = (probe.redirect or "").lower()
    if not probe.http.startswith("HTTP 3") or not location.startswith(f"https://{domain}"):
        where = f" to {probe.redirect}" if probe.redirect else ""
        return (
            TlsState.ERROR,
            f"Plain HTTP for {domain} answered {probe.http}{where}, not a redirect to "
            f"https://{domain}/: the proxy does not route the domain.",
        )
    if probe.https is not None and probe.tls_error is None:
        if not probe.verified:
            return (
                TlsState.READY,
                "The handshake completed; the proxy's CA root could not be read to verify it.",
            )
        return TlsState.READY, None
    why = probe.tls_error or "the handshake did not complete"
    if probe.issuer == "internal":
        return TlsState.ERROR, f"HTTPS for {domain} failed: {why}"
    return (
        TlsState.PENDING,
        f"Waiting for a public certificate for {domain} (ACME needs the name's public DNS "
        f"to point at the server and ports 80/443 open): {why}",
    )


async def check_tls(run: DeploymentRun, conn: ServerConnection, domain: str) -> TlsStatus | None:
    """Step ``tls``: probe the domain through the proxy, record the result on the
    installation and as an event. A report: it never fails the deployment (the app
    already serves through the route); ``None`` if the probe could not run."""
    await run.enter("tls", f"Checking http://{domain} and https://{domain} through the proxy.")
    probe: ProxyProbe | None = None
    try:
        async with asyncio.timeout(TLS_CHECK_SECONDS):
            probe = await conn.probe_proxy(domain)
    except (TimeoutError, ServerUnreachable, RuntimeFailure) as exc:
        detail = getattr(exc, "detail", None) or f"No answer within {TLS_CHECK_SECONDS:g} s."
        state: TlsState = TlsState.ERROR
        reason: str | None = f"The proxy could not be checked: {detail}"
        issuer = "internal" if needs_internal_issuer(domain) else "acme"
    else:
        state, reason = judge(domain, probe)
        issuer = probe.issuer
    tls = TlsStatus(state=state, reason=reason, issuer=issuer, checked_at=run.deps.clock.now())
    await run.persist(lambda: run.deps.jobs.record_tls(run.job.deployment.id, tls))
    message = f"TLS {state.value} ({issuer} certificate)" + (f": {reason}" if reason else ".")
    await run.event("tls", message)
    log.info("tls_checked", deployment_id=str(run.job.deployment.id), state=state.value)
    return tls if probe is not None else None
