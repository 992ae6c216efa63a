"""Topic names: what is legal and which topics are internal (Kafka's
org.apache.kafka.common.internals.Topic). The broker's handlers and the controller's
CreateTopics check names with the same rule."""

from __future__ import annotations

import re

GROUP_METADATA_TOPIC_NAME = "__consumer_offsets"
TRANSACTION_STATE_TOPIC_NAME = "__transaction_state"
# Topics only the broker itself writes (Kafka's Topic.isInternal).
INTERNAL_TOPICS = frozenset({GROUP_METADATA_TOPIC_NAME, TRANSACTION_STATE_TOPIC_NAME})
MAX_NAME_LENGTH = 249
_LEGAL_CHARS = re.compile(r"[a-zA-Z0-9._-]+")


def is_valid_name(name: str | None) -> bool:
    """Kafka's Topic.validate: 1-249 of [a-zA-Z0-9._-], and neither "." nor ".."."""
    return (
        name is not None
        and 0 < len(name) <= MAX_NAME_LENGTH
        and name not in (".", "..")
        and _LEGAL_CHARS.fullmatch(name) is not None
    )
