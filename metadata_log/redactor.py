"""Metadata records as people may see them (Kafka's RecordRedactor): the JSON form of a
record with its secrets replaced by "(redacted)", for every dump meant for a person or a
log (the controller's JSON log route, `kraft metadata`). The shape stays the same: each
secret field is still there, as a string.

Brokers read the log as msgpack, unredacted: they need the SCRAM keys to check logins.
"""

from __future__ import annotations

from typing import Any

import msgspec

from common.config_def import is_sensitive_config
from metadata_log.image import ScramCredential
from metadata_log.records import ConfigRecord, Record, UserScramCredentialRecord

REDACTED = "(redacted)"
# A SCRAM credential's salt and keys: with them anyone can log in as the user (the stored
# key and server key let one impersonate the server; with the salt they are the target of
# an offline dictionary attack).
SECRET_FIELDS = ("salt", "stored_key", "server_key")


def loggable_record(record: Record) -> dict[str, Any]:
    """The record as JSON-ready builtins (its `type` tag included), secrets redacted."""
    out: dict[str, Any] = msgspec.to_builtins(record)
    if isinstance(record, UserScramCredentialRecord):
        out.update(dict.fromkeys(SECRET_FIELDS, REDACTED))
    elif (
        isinstance(record, ConfigRecord)
        and record.value is not None
        and is_sensitive_config(record.name)  # a password-typed dynamic config
    ):
        out["value"] = REDACTED
    return out


def loggable_credential(credential: ScramCredential) -> dict[str, Any]:
    """An image's SCRAM credential as JSON-ready builtins: only the iterations show."""
    out: dict[str, Any] = msgspec.to_builtins(credential)
    out.update(dict.fromkeys(SECRET_FIELDS, REDACTED))
    return out
