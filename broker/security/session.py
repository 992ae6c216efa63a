"""Who sent the request being handled: the session of its connection (Kafka's
RequestContext / Session). The listener sets it when a connection opens and updates the
principal once TLS or SASL has authenticated it; handlers read it through
`current_session()` (each connection is its own task, so each sees its own).
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass

ANONYMOUS = "User:ANONYMOUS"  # Kafka's principal for an unauthenticated PLAINTEXT/SSL client


@dataclass(slots=True)
class Session:
    listener: str = "PLAINTEXT"  # listener name, e.g. SASL_SSL or INTERNAL
    security_protocol: str = "PLAINTEXT"  # PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL
    principal: str = ANONYMOUS  # "User:<name>" (Kafka's KafkaPrincipal.toString())
    client_host: str = ""  # the peer's IP address, no leading slash ("127.0.0.1")
    authenticated: bool = True  # False on a SASL listener until SaslAuthenticate succeeds


_session: ContextVar[Session | None] = ContextVar("kafka_session", default=None)


def current_session() -> Session:
    """The session of the connection being served (a PLAINTEXT default outside one)."""
    s = _session.get()
    return s if s is not None else Session()


def set_session(session: Session) -> None:
    """Called by the listener in the connection's task, before its first request."""
    _session.set(session)
