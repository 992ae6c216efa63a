"""What each Kafka API answers a principal with no ACLs, as Kafka's request handlers do:
one request per API key (at its lowest and highest advertised version) aimed at state
that exists, and the refusal it must get; and `cluster_view`, the state a super user
sees, to show the refusals changed nothing.

`check_refused(client, advertised, target)` walks the API keys a broker advertises in
ApiVersions: a key with no entry here fails, so an API added without authorization (or
without a line here saying what its refusal is) cannot go unnoticed.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from common.api_keys import ApiKey
from common.errors import Errors
from tests.harness.raw_protocol import RawClient, batch, encode_request, produce, request

NOT_REQUESTED = -(2**31)  # Kafka's "authorized operations not requested"
TOPIC_DENIED = Errors.TOPIC_AUTHORIZATION_FAILED
GROUP_DENIED = Errors.GROUP_AUTHORIZATION_FAILED
CLUSTER_DENIED = Errors.CLUSTER_AUTHORIZATION_FAILED
TXN_DENIED = Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED

ALL_TOPICS = {"topics": None, "allow_auto_topic_creation": False,
              "include_topic_authorized_operations": False}  # fmt: skip

# Kafka answers these for anyone: version discovery and the login itself.
OPEN_APIS = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})


@dataclass(frozen=True)
class Target:
    """Existing state the refused requests aim at."""

    topic: str  # a topic with records (partitions 0 and 1)
    topic_id: uuid.UUID
    doomed: str  # another topic, for DeleteTopics
    group: str  # an Empty group with committed offsets on `topic`
    broker_id: int


Check = Callable[[RawClient, int, Target], None]


def call(client: RawClient, key: int, version: int, data: dict[str, Any]) -> Any:
    return client.call(key, version, request(key, version, data))


def codes(items: Any, field: str = "partitions") -> list[int]:
    return [p.error_code for item in items for p in getattr(item, field)]


# -- the data path ---------------------------------------------------------------------------


def _produce(c: RawClient, v: int, t: Target) -> None:
    for topic in (t.topic, "no-such-topic"):  # refused before existence is looked at
        resp = c.call(0, v, produce(topic, 0, batch(3), v=v))
        assert codes(resp.responses, "partition_responses") == [TOPIC_DENIED], topic


def _fetch(c: RawClient, v: int, t: Target) -> None:
    part = {
        "partition": 0,
        "fetch_offset": 0,
        "partition_max_bytes": 1 << 20,
        "current_leader_epoch": -1,
        "last_fetched_epoch": -1,
        "log_start_offset": -1,
    }
    topic = {"topic": t.topic, "topic_id": t.topic_id, "partitions": [part]}
    base = {
        "max_wait": 0,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [topic],
        "forgotten_topics_data": [],
        "rack_id": "",
    }
    # A consumer needs READ on the topic; a follower CLUSTER_ACTION (else Kafka refuses
    # each partition with TOPIC_AUTHORIZATION_FAILED, the top-level error staying NONE).
    for replica in (-1, t.broker_id + 1):
        ids = {"replica_id": replica, "replica_state": {"replica_id": replica, "replica_epoch": -1}}
        resp = call(c, 1, v, {**base, **ids})
        assert getattr(resp, "error_code", 0) == 0, replica  # v7 added it
        assert codes(resp.responses) == [TOPIC_DENIED], replica


def _list_offsets(c: RawClient, v: int, t: Target) -> None:
    parts = [{"partition_index": 0, "timestamp": -1, "current_leader_epoch": -1}]
    data = {
        "replica_id": -1,
        "isolation_level": 0,
        "topics": [{"name": t.topic, "partitions": parts}],
    }
    assert codes(call(c, 2, v, data).topics) == [TOPIC_DENIED]


def _offset_for_leader_epoch(c: RawClient, v: int, t: Target) -> None:
    parts = [{"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]
    data = {"replica_id": -1, "topics": [{"topic": t.topic, "partitions": parts}]}
    assert codes(call(c, 23, v, data).topics) == [TOPIC_DENIED]


def _init_producer_id(c: RawClient, v: int, t: Target) -> None:
    ids = {"transaction_timeout": 60000, "producer_id": -1, "producer_epoch": -1}
    assert call(c, 22, v, {"transactional_id": None, **ids}).error_code == CLUSTER_DENIED
    assert call(c, 22, v, {"transactional_id": "tx", **ids}).error_code == TXN_DENIED


# -- metadata and admin ----------------------------------------------------------------------


def _metadata(c: RawClient, v: int, t: Target) -> None:
    flags = {"allow_auto_topic_creation": True, "include_cluster_authorized_operations": True,
             "include_topic_authorized_operations": True}  # fmt: skip
    everything = call(c, 3, v, {"topics": None if v else [], **flags})
    assert everything.topics == ()  # listed only when describable, silently
    named = [{"name": n, "topic_id": None} for n in (t.topic, "auto-created-never")]
    resp = call(c, 3, v, {"topics": named, **flags})
    assert [(x.name, x.error_code) for x in resp.topics] == [
        (t.topic, TOPIC_DENIED),
        ("auto-created-never", TOPIC_DENIED),  # may not describe, so may not create
    ]
    if v >= 8:
        assert all(x.topic_authorized_operations == NOT_REQUESTED for x in resp.topics)
    if 8 <= v <= 10:
        assert resp.cluster_authorized_operations == 0  # may not describe the cluster
    if v >= 12:  # by id: the id is no secret, the name is
        resp = call(c, 3, v, {"topics": [{"name": None, "topic_id": t.topic_id}], **flags})
        assert [(x.name, x.topic_id, x.error_code) for x in resp.topics] == [
            (None, t.topic_id, TOPIC_DENIED)
        ]


def _describe_cluster(c: RawClient, v: int, t: Target) -> None:
    flags = {"endpoint_type": 1}
    resp = call(c, 60, v, {"include_cluster_authorized_operations": True, **flags})
    assert resp.error_code == 0 and resp.cluster_authorized_operations == 0
    resp = call(c, 60, v, {"include_cluster_authorized_operations": False, **flags})
    assert resp.cluster_authorized_operations == NOT_REQUESTED


def _create_topics(c: RawClient, v: int, t: Target) -> None:
    spec = {"num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}
    data = {"topics": [{"name": "never-created", **spec}], "timeout": 5000, "validate_only": False}
    assert [x.error_code for x in call(c, 19, v, data).topics] == [TOPIC_DENIED]


def _delete_topics(c: RawClient, v: int, t: Target) -> None:
    data = {"topic_names": [t.doomed], "topics": [{"name": t.doomed, "topic_id": None}],
            "timeout": 5000}  # fmt: skip
    resp = call(c, 20, v, data)
    assert [(x.name, x.error_code) for x in resp.responses] == [(t.doomed, TOPIC_DENIED)]
    if v >= 6:  # by id: refused, and the name stays hidden (no DESCRIBE)
        resp = call(c, 20, v, {"topics": [{"name": None, "topic_id": t.topic_id}], "timeout": 1})
        assert [(x.name, x.topic_id, x.error_code) for x in resp.responses] == [
            (None, t.topic_id, TOPIC_DENIED)
        ]


def _create_partitions(c: RawClient, v: int, t: Target) -> None:
    data = {"topics": [{"name": t.topic, "count": 5, "assignments": None}], "timeout": 5000,
            "validate_only": False}  # fmt: skip
    assert [x.error_code for x in call(c, 37, v, data).results] == [TOPIC_DENIED]


def _describe_configs(c: RawClient, v: int, t: Target) -> None:
    resources = [
        {"resource_type": 2, "resource_name": t.topic, "configuration_keys": None},
        {"resource_type": 4, "resource_name": str(t.broker_id), "configuration_keys": None},
        {"resource_type": 32, "resource_name": t.group, "configuration_keys": None},
    ]
    data = {"resources": resources, "include_synonyms": False, "include_documentation": False}
    resp = call(c, 32, v, data)
    assert [(x.error_code, x.configs) for x in resp.results] == [
        (TOPIC_DENIED, ()),
        (CLUSTER_DENIED, ()),
        (GROUP_DENIED, ()),
    ]


# -- groups ----------------------------------------------------------------------------------


def _find_coordinator(c: RawClient, v: int, t: Target) -> None:
    for key_type, key, error in ((0, t.group, GROUP_DENIED), (1, "tx", TXN_DENIED)):
        if v == 0 and key_type == 1:
            continue  # v0 finds groups only
        resp = call(c, 10, v, {"key": key, "key_type": key_type, "coordinator_keys": [key]})
        found = resp.coordinators if v >= 4 else [resp]
        assert [(x.error_code, x.node_id) for x in found] == [(error, -1)]


def _join_group(c: RawClient, v: int, t: Target) -> None:
    data = {"group_id": t.group, "session_timeout": 10000, "rebalance_timeout": 10000,
            "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}], "reason": None}  # fmt: skip
    assert call(c, 11, v, data).error_code == GROUP_DENIED


def _member(t: Target) -> dict[str, Any]:
    return {"group_id": t.group, "generation_id": 1, "member_id": "m", "group_instance_id": None}


def _heartbeat(c: RawClient, v: int, t: Target) -> None:
    assert call(c, 12, v, _member(t)).error_code == GROUP_DENIED


def _leave_group(c: RawClient, v: int, t: Target) -> None:
    members = [{"member_id": "m", "group_instance_id": None, "reason": None}]
    assert call(c, 13, v, {**_member(t), "members": members}).error_code == GROUP_DENIED


def _sync_group(c: RawClient, v: int, t: Target) -> None:
    data = {**_member(t), "protocol_type": "consumer", "protocol_name": "range",
            "assignments": [{"member_id": "m", "assignment": b""}]}  # fmt: skip
    assert call(c, 14, v, data).error_code == GROUP_DENIED


def _offset_commit(c: RawClient, v: int, t: Target) -> None:
    parts = [{"partition_index": 0, "committed_offset": 0, "committed_leader_epoch": -1,
              "committed_metadata": "", "commit_timestamp": -1}]  # fmt: skip
    data = {"group_id": t.group, "generation_id_or_member_epoch": -1, "member_id": "",
            "group_instance_id": None, "retention_time": -1,
            "topics": [{"name": t.topic, "partitions": parts}]}  # fmt: skip
    assert codes(call(c, 8, v, data).topics) == [GROUP_DENIED]


def _offset_fetch(c: RawClient, v: int, t: Target) -> None:
    for topics in (None, [{"name": t.topic, "partition_indexes": [0, 1]}]):
        if topics is None and v < 2:
            continue  # all-topics fetches start at v2
        group = {"group_id": t.group, "member_id": None, "member_epoch": -1, "topics": topics}
        resp = call(c, 9, v, {**group, "groups": [group], "require_stable": False})
        if v < 2:  # no error field yet: Kafka answers no offsets
            assert resp.topics == ()
            continue
        groups = resp.groups if v >= 8 else [resp]
        assert [(g.error_code, g.topics) for g in groups] == [(GROUP_DENIED, ())]


def _describe_groups(c: RawClient, v: int, t: Target) -> None:
    resp = call(c, 15, v, {"groups": [t.group], "include_authorized_operations": True})
    assert [(g.group_id, g.error_code, g.members) for g in resp.groups] == [
        (t.group, GROUP_DENIED, ())
    ]


def _list_groups(c: RawClient, v: int, t: Target) -> None:
    resp = call(c, 16, v, {"states_filter": [], "types_filter": []})
    assert resp.error_code == 0 and resp.groups == ()  # only what it may describe: nothing


def _delete_groups(c: RawClient, v: int, t: Target) -> None:
    resp = call(c, 42, v, {"groups_names": [t.group]})
    assert [(r.group_id, r.error_code) for r in resp.results] == [(t.group, GROUP_DENIED)]


def _offset_delete(c: RawClient, v: int, t: Target) -> None:
    topics = [{"name": t.topic, "partitions": [{"partition_index": 0}]}]
    resp = call(c, 47, v, {"group_id": t.group, "topics": topics})
    assert resp.error_code == GROUP_DENIED and resp.topics == ()


def _txn_offset_commit(c: RawClient, v: int, t: Target) -> None:
    """Kafka checks WRITE on the transactional id first, then READ on the group."""
    parts = [{"partition_index": p, "committed_offset": 0, "committed_leader_epoch": -1,
              "committed_metadata": ""} for p in (0, 1)]  # fmt: skip
    data = {"transactional_id": "txn", "group_id": t.group, "producer_id": 1,
            "producer_epoch": 0, "generation_id": -1, "member_id": "",
            "group_instance_id": None,
            "topics": [{"name": t.topic, "partitions": parts}]}  # fmt: skip
    assert codes(call(c, 28, v, data).topics) == [TXN_DENIED, TXN_DENIED]


# -- security APIs (Kafka: DESCRIBE or ALTER on the cluster) ---------------------------------


def _describe_acls(c: RawClient, v: int, t: Target) -> None:
    data = {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
            "principal_filter": None, "host_filter": None, "operation": 1,
            "permission_type": 1}  # fmt: skip
    resp = call(c, 29, v, data)
    assert resp.error_code == CLUSTER_DENIED and resp.resources == ()


def _create_acls(c: RawClient, v: int, t: Target) -> None:
    acl = {
        "resource_type": 2,
        "resource_name": "x",
        "resource_pattern_type": 3,
        "principal": "User:ANONYMOUS",
        "host": "*",
        "operation": 2,
        "permission_type": 3,
    }
    resp = call(c, 30, v, {"creations": [acl]})
    assert [r.error_code for r in resp.results] == [CLUSTER_DENIED]


def _delete_acls(c: RawClient, v: int, t: Target) -> None:
    flt = {
        "resource_type_filter": 1,
        "resource_name_filter": None,
        "pattern_type_filter": 1,
        "principal_filter": None,
        "host_filter": None,
        "operation": 1,
        "permission_type": 1,
    }
    resp = call(c, 31, v, {"filters": [flt]})
    assert [(r.error_code, r.matching_acls) for r in resp.filter_results] == [(CLUSTER_DENIED, ())]


def _describe_scram(c: RawClient, v: int, t: Target) -> None:
    resp = call(c, 50, v, {"users": None})
    assert resp.error_code == CLUSTER_DENIED and resp.results == ()


def _alter_scram(c: RawClient, v: int, t: Target) -> None:
    upsert = {
        "name": "someone",
        "mechanism": 2,
        "iterations": 8192,
        "salt": b"s" * 16,
        "salted_password": b"p" * 64,
    }
    resp = call(c, 51, v, {"deletions": [], "upsertions": [upsert]})
    assert [(r.user, r.error_code) for r in resp.results] == [("someone", CLUSTER_DENIED)]


REFUSALS: dict[int, Check] = {
    ApiKey.PRODUCE: _produce,
    ApiKey.FETCH: _fetch,
    ApiKey.LIST_OFFSETS: _list_offsets,
    ApiKey.METADATA: _metadata,
    ApiKey.OFFSET_COMMIT: _offset_commit,
    ApiKey.OFFSET_FETCH: _offset_fetch,
    ApiKey.FIND_COORDINATOR: _find_coordinator,
    ApiKey.JOIN_GROUP: _join_group,
    ApiKey.HEARTBEAT: _heartbeat,
    ApiKey.LEAVE_GROUP: _leave_group,
    ApiKey.SYNC_GROUP: _sync_group,
    ApiKey.DESCRIBE_GROUPS: _describe_groups,
    ApiKey.LIST_GROUPS: _list_groups,
    ApiKey.CREATE_TOPICS: _create_topics,
    ApiKey.DELETE_TOPICS: _delete_topics,
    ApiKey.INIT_PRODUCER_ID: _init_producer_id,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: _offset_for_leader_epoch,
    ApiKey.DESCRIBE_ACLS: _describe_acls,
    ApiKey.CREATE_ACLS: _create_acls,
    ApiKey.DELETE_ACLS: _delete_acls,
    ApiKey.DESCRIBE_CONFIGS: _describe_configs,
    ApiKey.CREATE_PARTITIONS: _create_partitions,
    ApiKey.DELETE_GROUPS: _delete_groups,
    ApiKey.OFFSET_DELETE: _offset_delete,
    ApiKey.TXN_OFFSET_COMMIT: _txn_offset_commit,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: _describe_scram,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: _alter_scram,
    ApiKey.DESCRIBE_CLUSTER: _describe_cluster,
}


# -- elections and the describing APIs (issue 14) ----------------------------------------------


def _elect_leaders(c: RawClient, v: int, t: Target) -> None:
    asked = [{"topic": t.topic, "partitions": [0]}]
    resp = call(c, 43, v, {"election_type": 0, "topic_partitions": asked, "timeout": 5000})
    if v >= 1:
        assert resp.error_code == CLUSTER_DENIED
    results = [(r.topic, [p.error_code for p in r.partition_result])
               for r in resp.replica_election_results]  # fmt: skip
    assert results == [(t.topic, [CLUSTER_DENIED])]


def _describe_log_dirs(c: RawClient, v: int, t: Target) -> None:
    resp = call(c, 35, v, {"topics": None})
    assert resp.results == ()
    if v >= 3:
        assert resp.error_code == CLUSTER_DENIED


def _describe_topic_partitions(c: RawClient, v: int, t: Target) -> None:
    resp = call(c, 75, v, {"topics": [{"name": t.topic}], "response_partition_limit": 10})
    assert [(x.name, x.error_code, x.partitions) for x in resp.topics] == [
        (t.topic, TOPIC_DENIED, ())
    ]
    listed = call(c, 75, v, {"topics": [], "response_partition_limit": 10})
    assert listed.topics == ()  # listing all leaves refused topics out


def _describe_quorum(c: RawClient, v: int, t: Target) -> None:
    asked = [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]
    resp = call(c, 55, v, {"topics": asked})
    assert resp.error_code == CLUSTER_DENIED and resp.topics == ()


def _alter_configs(c: RawClient, v: int, t: Target) -> None:
    resources = [
        {"resource_type": 2, "resource_name": t.topic,
         "configs": [{"name": "retention.ms", "value": "1"}]},
        {"resource_type": 4, "resource_name": str(t.broker_id),
         "configs": [{"name": "log.cleaner.backoff.ms", "value": "1000"}]},
        {"resource_type": 32, "resource_name": t.group,
         "configs": [{"name": "consumer.session.timeout.ms", "value": "50000"}]},
    ]  # fmt: skip
    resp = call(c, 33, v, {"resources": resources, "validate_only": False})
    assert [(r.resource_name, r.error_code) for r in resp.responses] == [
        (t.topic, TOPIC_DENIED),
        (str(t.broker_id), CLUSTER_DENIED),
        (t.group, GROUP_DENIED),
    ]


def _incremental_alter_configs(c: RawClient, v: int, t: Target) -> None:
    def op(name: str, value: str) -> dict[str, Any]:
        return {"name": name, "config_operation": 0, "value": value}

    resources = [
        {"resource_type": 2, "resource_name": t.topic, "configs": [op("retention.ms", "1")]},
        {"resource_type": 4, "resource_name": "", "configs": [op("min.insync.replicas", "3")]},
        {"resource_type": 32, "resource_name": t.group,
         "configs": [op("consumer.session.timeout.ms", "50000")]},
    ]  # fmt: skip
    resp = call(c, 44, v, {"resources": resources, "validate_only": False})
    assert [(r.resource_name, r.error_code) for r in resp.responses] == [
        (t.topic, TOPIC_DENIED),
        ("", CLUSTER_DENIED),
        (t.group, GROUP_DENIED),
    ]


REFUSALS.update(
    {
        ApiKey.ALTER_CONFIGS: _alter_configs,
        ApiKey.INCREMENTAL_ALTER_CONFIGS: _incremental_alter_configs,
        ApiKey.ELECT_LEADERS: _elect_leaders,
        ApiKey.DESCRIBE_LOG_DIRS: _describe_log_dirs,
        ApiKey.DESCRIBE_TOPIC_PARTITIONS: _describe_topic_partitions,
        ApiKey.DESCRIBE_QUORUM: _describe_quorum,
    }
)


def check_refused(client: RawClient, advertised: dict[int, tuple[int, int]], t: Target) -> None:
    """Every advertised API, at its lowest and highest version, refuses (see REFUSALS)."""
    unknown = sorted(k for k in advertised if k not in REFUSALS and k not in OPEN_APIS)
    assert not unknown, f"advertised APIs with no authorization check here: {unknown}"
    for key, (lo, hi) in sorted(advertised.items()):
        if key in OPEN_APIS:
            continue
        for v in sorted({lo, hi}):
            try:
                REFUSALS[key](client, v, t)
            except AssertionError as e:
                raise AssertionError(f"{ApiKey(key).name} v{v}: {e}") from e


# -- what a super user sees -------------------------------------------------------------------


def cluster_view(clients: list[RawClient]) -> dict[str, Any] | None:
    """The state a super user sees through one client per broker, or None while the
    cluster still settles (a leader or coordinator moving, a group loading): topics with
    their ids and partition counts, each log's start and end offset (the offsets topic
    too, where every group write lands), and each group's state, members and offsets."""
    md = call(clients[0], 3, 12, ALL_TOPICS)
    if any(p.error_code for t in md.topics for p in t.partitions):
        return None
    topics = {t.name: (t.topic_id, len(t.partitions)) for t in md.topics}
    offsets: dict[tuple[str, int, int], int] = {}
    groups: dict[str, Any] = {}
    for client in clients:
        for ts in (-2, -1):  # earliest, latest; only the leader answers
            listed = [
                {
                    "name": t.name,
                    "partitions": [
                        {
                            "partition_index": p.partition_index,
                            "timestamp": ts,
                            "current_leader_epoch": -1,
                        }
                        for p in t.partitions
                    ],
                }
                for t in md.topics
            ]
            resp = call(client, 2, 7, {"replica_id": -1, "isolation_level": 0, "topics": listed})
            for t in resp.topics:
                for p in t.partitions:
                    if p.error_code == 0:
                        offsets[(t.name, p.partition_index, ts)] = p.offset
        listed_groups = call(client, 16, 5, {"states_filter": [], "types_filter": []})
        if listed_groups.error_code:
            return None
        for g in listed_groups.groups:
            groups[g.group_id] = _group_view(client, g.group_id)
    if len(offsets) != 2 * sum(n for _, n in topics.values()) or None in groups.values():
        return None
    return {"topics": topics, "offsets": offsets, "groups": groups, "configs": _configs(clients)}


def _configs(clients: list[RawClient]) -> dict[str, Any]:
    """Every topic's overrides and the cluster default broker configs (what a refused
    AlterConfigs or IncrementalAlterConfigs would have changed)."""
    md = call(clients[0], 3, 12, ALL_TOPICS)
    resources = [{"resource_type": 2, "resource_name": t.name, "configuration_keys": None}
                 for t in md.topics]  # fmt: skip
    resources.append({"resource_type": 4, "resource_name": "", "configuration_keys": None})
    data = {"resources": resources, "include_synonyms": False, "include_documentation": False}
    resp = call(clients[0], 32, 4, data)
    return {
        (r.resource_type, r.resource_name): sorted(
            (c.name, c.value) for c in r.configs if c.config_source in (1, 3)
        )
        for r in resp.results
    }


def _group_view(client: RawClient, group_id: str) -> Any:
    described = call(client, 15, 5, {"groups": [group_id], "include_authorized_operations": False})
    g = described.groups[0]
    wanted = {"group_id": group_id, "member_id": None, "member_epoch": -1, "topics": None}
    fetched = call(client, 9, 9, {"groups": [wanted], "require_stable": False}).groups[0]
    if g.error_code or fetched.error_code:
        return None
    committed = {(t.name, p.partition_index): p.committed_offset
                 for t in fetched.topics for p in t.partitions}  # fmt: skip
    return g.group_state, sorted(m.member_id for m in g.members), committed


# -- record deletion and producers (issue 14) --------------------------------------------------


def _delete_records(c: RawClient, v: int, t: Target) -> None:
    # DELETE on the topic, checked before existence (Kafka's handleDeleteRecordsRequest).
    topics = [{"name": n, "partitions": [{"partition_index": 0, "offset": -1}]}
              for n in (t.topic, "no-such-topic")]  # fmt: skip
    resp = call(c, 21, v, {"topics": topics, "timeout": 5000})
    assert [(x.name, [(p.error_code, p.low_watermark) for p in x.partitions])
            for x in resp.topics] == [(t.topic, [(TOPIC_DENIED, -1)]),
                                      ("no-such-topic", [(TOPIC_DENIED, -1)])]  # fmt: skip


def _describe_producers(c: RawClient, v: int, t: Target) -> None:
    resp = call(c, 61, v, {"topics": [{"name": t.topic, "partition_indexes": [0, 1]}]})
    got = [(x.name, [(p.error_code, p.active_producers) for p in x.partitions])
           for x in resp.topics]  # fmt: skip
    assert got == [(t.topic, [(TOPIC_DENIED, ()), (TOPIC_DENIED, ())])]


# -- partition reassignments (KIP-455) ---------------------------------------------------------


def _alter_partition_reassignments(c: RawClient, v: int, t: Target) -> None:
    asked = [{"name": t.topic, "partitions": [{"partition_index": 0, "replicas": [t.broker_id]}]}]
    resp = call(c, 45, v, {"topics": asked})
    assert resp.error_code == CLUSTER_DENIED
    assert [(r.name, codes([r])) for r in resp.responses] == [(t.topic, [CLUSTER_DENIED])]


def _list_partition_reassignments(c: RawClient, v: int, t: Target) -> None:
    resp = call(c, 46, v, {"topics": None})
    assert resp.error_code == CLUSTER_DENIED and resp.topics == ()


REFUSALS.update(
    {
        ApiKey.DELETE_RECORDS: _delete_records,
        ApiKey.DESCRIBE_PRODUCERS: _describe_producers,
        ApiKey.ALTER_PARTITION_REASSIGNMENTS: _alter_partition_reassignments,
        ApiKey.LIST_PARTITION_REASSIGNMENTS: _list_partition_reassignments,
    }
)


# -- transactions (issue 15) ---------------------------------------------------------------------

_TXN = {"producer_id": 1000, "producer_epoch": 0}


def _add_partitions_to_txn(c: RawClient, v: int, t: Target) -> None:
    if v < 4:  # a client: WRITE on the transactional id first
        resp = call(c, 24, v, {
            "v3_and_below_transactional_id": "tx", "v3_and_below_producer_id": 1000,
            "v3_and_below_producer_epoch": 0,
            "v3_and_below_topics": [{"name": t.topic, "partitions": [0, 1]}],
        })  # fmt: skip
        found = [p.partition_error_code for r in resp.results_by_topic_v3_and_below
                 for p in r.results_by_partition]  # fmt: skip
        assert found == [TXN_DENIED, TXN_DENIED]
        return
    # v4 is the brokers' form (KIP-890 verification): CLUSTER_ACTION
    resp = call(c, 24, v, {"transactions": [{
        "transactional_id": "tx", **_TXN, "verify_only": True,
        "topics": [{"name": t.topic, "partitions": [0]}],
    }]})  # fmt: skip
    assert resp.error_code == CLUSTER_DENIED and resp.results_by_transaction == ()


def _add_offsets_to_txn(c: RawClient, v: int, t: Target) -> None:
    resp = call(c, 25, v, {"transactional_id": "tx", **_TXN, "group_id": t.group})
    assert resp.error_code == TXN_DENIED


def _end_txn(c: RawClient, v: int, t: Target) -> None:
    assert call(c, 26, v, {"transactional_id": "tx", **_TXN, "committed": True}).error_code == (
        TXN_DENIED
    )


def _describe_transactions(c: RawClient, v: int, t: Target) -> None:
    # Read by hand: the refused rows carry Kafka's "no start time", -1, which kio's
    # reader refuses. Each row: error code, then the id as a compact string.
    c.send(encode_request(65, v, request(65, v, {"transactional_ids": ["tx", "ty"]}), 1))
    frame = c.recv_frame()
    denied = TXN_DENIED.to_bytes(2, "big")
    assert denied + b"\x03tx" in frame and denied + b"\x03ty" in frame


def _list_transactions(c: RawClient, v: int, t: Target) -> None:
    resp = call(c, 66, v, {"state_filters": [], "producer_id_filters": [], "duration_filter": -1})
    assert resp.error_code == Errors.NONE and resp.transaction_states == ()


REFUSALS.update(
    {
        ApiKey.ADD_PARTITIONS_TO_TXN: _add_partitions_to_txn,
        ApiKey.ADD_OFFSETS_TO_TXN: _add_offsets_to_txn,
        ApiKey.END_TXN: _end_txn,
        ApiKey.DESCRIBE_TRANSACTIONS: _describe_transactions,
        ApiKey.LIST_TRANSACTIONS: _list_transactions,
    }
)
# -- transactions --------------------------------------------------------------------------


def _write_txn_markers(c: RawClient, v: int, t: Target) -> None:
    # Only brokers (ALTER or CLUSTER_ACTION on the cluster) write markers: a refused
    # marker would otherwise end someone's transaction.
    topics = [{"name": t.topic, "partition_indexes": [0, 1]}]
    marker = {"producer_id": 1, "producer_epoch": 0, "transaction_result": False,
              "topics": topics, "coordinator_epoch": 0}  # fmt: skip
    resp = call(c, 27, v, {"markers": [marker]})
    got = [(m.producer_id, [(x.name, codes([x])) for x in m.topics]) for m in resp.markers]
    assert got == [(1, [(t.topic, [CLUSTER_DENIED, CLUSTER_DENIED])])]


REFUSALS.update({ApiKey.WRITE_TXN_MARKERS: _write_txn_markers})
