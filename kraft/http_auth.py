"""Who may call the controllers' HTTP API: the authentication check its middleware runs
before any route (kraft/http_api.py), when security is configured.

A request is authenticated by either
- `Authorization: Bearer <controller.quorum.http.token>` (compared in constant time), or
- a client certificate the TLS handshake verified against `ssl.truststore.*` (with
  `ssl.client.auth=required` or `requested`). When `super.users` is set (Kafka's name:
  on a Kafka controller the brokers' principals are super users, which is what lets
  their controller requests through the authorizer), only those principals
  (`User:CN=...`, common/tls.py) are admitted; any other verified certificate gets
  403. Unset, every certificate the trust store vouches for is admitted.

Everything else gets 401 before its handler runs, so nothing changes. `/healthz` stays
open: load balancers and process supervisors probe it without credentials, and it tells
them nothing but "ok".
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from common.tls import principal_from_certificate

log = logging.getLogger(__name__)

OPEN_PATHS = frozenset({"/healthz"})
_LOG_EVERY_S = 10.0  # a flood of bad requests must not flood the log


@dataclass(frozen=True)
class Refusal:
    status: int  # 401 (no or bad credentials) or 403 (a principal without the right)
    message: str
    token_presented: bool


@dataclass(frozen=True)
class ApiAuth:
    """The policy; the default (no token, no client certificates) lets everything in."""

    token: str | None = field(default=None, repr=False)
    client_certificates: bool = False  # the listener verifies client certificates
    super_users: frozenset[str] = frozenset()  # empty: any verified certificate

    @property
    def enabled(self) -> bool:
        return self.token is not None or self.client_certificates


class Authenticator:
    """Applies an ApiAuth to requests; counts and (rate-limited) logs refusals."""

    def __init__(self, auth: ApiAuth) -> None:
        self.auth = auth
        self._digest = None if auth.token is None else _sha256(auth.token.encode())
        self._last_log = -_LOG_EVERY_S
        self._unlogged = 0

    def check(self, request: web.Request) -> Refusal | None:
        """None if `request` may proceed, else why not."""
        if not self.auth.enabled or request.path in OPEN_PATHS:
            return None
        presented = _bearer(request.headers.get("Authorization"))
        # Hash both sides first: compare_digest is then constant-time even in length.
        if (
            presented is not None
            and self._digest is not None
            and hmac.compare_digest(_sha256(presented.encode()), self._digest)
        ):
            return None
        der = _peer_certificate(request) if self.auth.client_certificates else None
        if der is not None:
            if not self.auth.super_users:
                return None
            principal = principal_from_certificate(der)
            if principal in self.auth.super_users:
                return None
            return self._refuse(
                request,
                403,
                f"{principal} may not use the controller API (not in super.users)",
                presented is not None,
            )
        if presented is not None:
            return self._refuse(request, 401, "authentication failed: invalid bearer token", True)
        return self._refuse(request, 401, f"authentication required: {self._accepted()}", False)

    def _accepted(self) -> str:
        ways = []
        if self.auth.client_certificates:
            ways.append("a client certificate")
        if self.auth.token is not None:
            ways.append("Authorization: Bearer <controller.quorum.http.token>")
        return " or ".join(ways)

    def _refuse(self, request: web.Request, status: int, message: str, presented: bool) -> Refusal:
        now = time.monotonic()
        self._unlogged += 1
        if now - self._last_log >= _LOG_EVERY_S:
            peer = request.remote or "?"
            more = (
                f" (+{self._unlogged - 1} more since the last report)" if self._unlogged > 1 else ""
            )
            log.warning(
                "refused %s %s from %s: %s%s", request.method, request.path, peer, message, more
            )
            self._last_log, self._unlogged = now, 0
        return Refusal(status, message, presented)


def _sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _bearer(header: str | None) -> str | None:
    """The token of `Authorization: Bearer <token>` (scheme case-insensitive, RFC 6750)."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def _peer_certificate(request: web.Request) -> bytes | None:
    """The client certificate (DER) the handshake verified, if any: the context verifies
    whatever is presented, so an unverifiable one never gets this far."""
    transport = request.transport
    ssl_object: Any = None if transport is None else transport.get_extra_info("ssl_object")
    if ssl_object is None:
        return None
    return ssl_object.getpeercert(binary_form=True) or None
