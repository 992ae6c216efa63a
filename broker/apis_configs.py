"""Configs: DescribeConfigs (API 32, v1-4), AlterConfigs (API 33, v0-2: a resource's whole
config replaced) and IncrementalAlterConfigs (API 44, v0-1: SET, DELETE, APPEND,
SUBTRACT) for TOPIC, BROKER and GROUP (KIP-848's group configs) resources, the cluster
default broker (name "") included. A GROUP resource needs no existing group.

As Kafka: the broker checks what it can alone (duplicates, null values, the broker id,
which broker configs may change live: ConfigAdminManager.preprocess), then forwards each
resource to the active controller, which checks the resulting config whole and writes
config records (kraft/configuration_control.py); every broker applies them from the
metadata log (broker/dynamic_config.py). `validate_only` checks without writing.

Authorization (Kafka's ControllerApis/AuthHelper): ALTER_CONFIGS (to alter) or
DESCRIBE_CONFIGS (to describe) on the topic or group, or on the CLUSTER for brokers; a
refusal is TOPIC_, GROUP_ or CLUSTER_AUTHORIZATION_FAILED for that resource only. Kafka's
controller (ControllerApis.authorizeAlterResource) takes GROUP in legacy AlterConfigs too.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from broker.apis_common import ApiHandler, BrokerApis, Response, answer
from broker.codec import RequestHeader
from broker.config import DEFAULTS
from broker.config_describe import describe_broker, describe_group, describe_topic
from broker.dynamic_config import ConfigLayers
from common.acl import CLUSTER_NAME, AclOperation, ResourceType
from common.api_keys import ApiKey
from common.broker_config_defs import (
    DYNAMIC_BROKER_CONFIG_KEYS,
    invalid_dynamic_broker_config,
)
from common.config_def import ConfigType, split_list
from common.errors import Errors
from common.topics import is_valid_name
from metadata_log.controller_api import IncrementalAlterConfigsRequest

TOPIC, BROKER, GROUP = 2, 4, 32
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3

# Resource type -> what Kafka authorizes it against, and the refusal.
_AUTHORIZED_AS: dict[int, tuple[ResourceType, int]] = {
    TOPIC: (ResourceType.TOPIC, Errors.TOPIC_AUTHORIZATION_FAILED),
    BROKER: (ResourceType.CLUSTER, Errors.CLUSTER_AUTHORIZATION_FAILED),
    8: (ResourceType.CLUSTER, Errors.CLUSTER_AUTHORIZATION_FAILED),  # broker loggers
    GROUP: (ResourceType.GROUP, Errors.GROUP_AUTHORIZATION_FAILED),
}


class _Refused(Exception):
    def __init__(self, code: int, message: str | None) -> None:
        super().__init__(message)
        self.code, self.message = code, message


def _refusal(apis: BrokerApis, op: AclOperation, rtype: int, name: str) -> int | None:
    if apis.authorizer is None or rtype not in _AUTHORIZED_AS:
        return None
    kind, error = _AUTHORIZED_AS[rtype]
    target = CLUSTER_NAME if kind == ResourceType.CLUSTER else name
    return None if apis.authorize(op, kind, target) else error


# -- AlterConfigs and IncrementalAlterConfigs ---------------------------------------------------


def _check_own_id(apis: BrokerApis, name: str, what: str, expected: str) -> None:
    """A non-empty BROKER resource name must be our own id (clients send a broker's
    configs to that broker). `what` and `expected` word the refusal as Kafka's alter
    ("Node", "N") and describe ("Broker", "N or empty string") paths do."""
    try:
        node = int(name)
    except ValueError:
        raise _Refused(
            Errors.INVALID_REQUEST, f"{what} id must be an integer, but it is: {name}"
        ) from None
    if node != apis.broker_id:
        message = f"Unexpected broker id, expected {expected}, but received {name}"
        raise _Refused(Errors.INVALID_REQUEST, message)


def _check_broker_resource(apis: BrokerApis, name: str) -> None:
    """ConfigAdminManager.validateResourceNameIsCurrentNodeId: "" or our own id."""
    if name:
        _check_own_id(apis, name, "Node", str(apis.broker_id))


def _broker_preview(apis: BrokerApis, name: str, req: IncrementalAlterConfigsRequest) -> None:
    """The broker's checks of a dynamic broker config change (DynamicBrokerConfig.
    validate), on the resource's dynamic configs as they would become."""
    current = apis.image().configs.get((BROKER, name), {})
    if req.replace:
        props = dict(req.set)
    else:
        props = {**current, **req.set}
        for key in req.delete:
            props.pop(key, None)
        for key, items, adding in [(k, v, True) for k, v in req.append.items()] + [
            (k, v, False) for k, v in req.subtract.items()
        ]:
            ckey = DYNAMIC_BROKER_CONFIG_KEYS.get(key)
            op = "append" if adding else "subtract"
            if ckey is None and key not in DEFAULTS:
                raise _Refused(Errors.INVALID_CONFIG, f"Unknown config name: {key}")
            if ckey is None or ckey.type != ConfigType.LIST:
                raise _Refused(
                    Errors.INVALID_CONFIG,
                    f"Config value {op} is not allowed for config key: {key}",
                )
            old = split_list(props.get(key, ckey.default or ""))
            given = split_list(items)
            old = (
                old + [x for x in given if x not in old]
                if adding
                else [x for x in old if x not in given]
            )
            props[key] = ",".join(old)
    layers: ConfigLayers = apis.replica_manager.dynamic.layers
    why = invalid_dynamic_broker_config(
        {k: v for k, v in props.items() if current.get(k) != v},
        per_broker=bool(name),
        static_names=DEFAULTS,
        current=layers.merged(),
    )
    if why is not None:
        raise _Refused(Errors.INVALID_REQUEST, why)


def _incremental(res: Any, validate_only: bool) -> IncrementalAlterConfigsRequest:
    names = [c.name for c in res.configs]
    if len(set(names)) != len(names):
        raise _Refused(Errors.INVALID_REQUEST, "Error due to duplicate config keys")
    nulls = [c.name for c in res.configs if c.config_operation != DELETE and c.value is None]
    if nulls:
        raise _Refused(Errors.INVALID_REQUEST, f"Null value not supported for : {', '.join(nulls)}")
    ops: dict[int, dict[str, str]] = {SET: {}, APPEND: {}, SUBTRACT: {}}
    delete: list[str] = []
    for c in res.configs:
        if c.config_operation == DELETE:
            delete.append(c.name)
        elif c.config_operation in ops:
            ops[c.config_operation][c.name] = c.value
        else:
            raise _Refused(Errors.INVALID_REQUEST, f"Unknown operations type {c.config_operation}")
    return IncrementalAlterConfigsRequest(
        res.resource_type,
        res.resource_name,
        set=ops[SET],
        delete=delete,
        append=ops[APPEND],
        subtract=ops[SUBTRACT],
        validate_only=validate_only,
    )


def _legacy(res: Any, validate_only: bool) -> IncrementalAlterConfigsRequest:
    names = [c.name for c in res.configs]
    if len(set(names)) != len(names):
        raise _Refused(Errors.INVALID_REQUEST, "Error due to duplicate config keys")
    nulls = [c.name for c in res.configs if c.value is None]
    if nulls:
        raise _Refused(Errors.INVALID_REQUEST, f"Null value not supported for : {', '.join(nulls)}")
    return IncrementalAlterConfigsRequest(
        res.resource_type,
        res.resource_name,
        set={c.name: c.value for c in res.configs},
        replace=True,
        validate_only=validate_only,
    )


async def _alter(apis: BrokerApis, header: RequestHeader, body: Any, incremental: bool) -> Response:
    counts = Counter((r.resource_type, r.resource_name) for r in body.resources)
    responses = []
    for res in body.resources:
        code, message = Errors.NONE, None
        try:
            if counts[(res.resource_type, res.resource_name)] > 1:
                raise _Refused(Errors.INVALID_REQUEST, "Each resource must appear at most once.")
            refused = _refusal(
                apis, AclOperation.ALTER_CONFIGS, res.resource_type, res.resource_name
            )
            if refused is not None:
                raise _Refused(refused, None)
            if res.resource_type not in (TOPIC, BROKER, GROUP):
                raise _Refused(Errors.INVALID_REQUEST, f"Unknown resource type {res.resource_type}")
            if (
                res.resource_type == TOPIC
                and res.resource_name
                and not is_valid_name(res.resource_name)
            ):  # Kafka's Topic.validate ("" is the controller's INVALID_REQUEST)
                raise _Refused(
                    Errors.INVALID_TOPIC_EXCEPTION, f"Topic name {res.resource_name!r} is illegal"
                )
            build = _incremental if incremental else _legacy
            req = build(res, bool(body.validate_only))
            if res.resource_type == BROKER:
                _check_broker_resource(apis, res.resource_name)
                _broker_preview(apis, res.resource_name, req)
            code, message = await apis.admin.alter_configs(req)
        except _Refused as refusal:
            code, message = refusal.code, refusal.message
        responses.append(
            {
                "error_code": code,
                "error_message": message,
                "resource_type": res.resource_type,
                "resource_name": res.resource_name,
            }
        )
    key = ApiKey.INCREMENTAL_ALTER_CONFIGS if incremental else ApiKey.ALTER_CONFIGS
    return answer(key, header, {"throttle_time": 0, "responses": responses})


async def handle_incremental_alter_configs(
    apis: BrokerApis, header: RequestHeader, body: Any
) -> Response:
    return await _alter(apis, header, body, incremental=True)


async def handle_alter_configs(apis: BrokerApis, header: RequestHeader, body: Any) -> Response:
    return await _alter(apis, header, body, incremental=False)


def _alter_error(key: ApiKey) -> Any:
    def error(header: RequestHeader, body: Any, code: int) -> Response:
        responses = [
            {
                "error_code": code,
                "error_message": None,
                "resource_type": r.resource_type,
                "resource_name": r.resource_name,
            }
            for r in body.resources
        ]
        return answer(key, header, {"throttle_time": 0, "responses": responses})

    return error


# -- DescribeConfigs ----------------------------------------------------------------------------


def _describe_one(apis: BrokerApis, res: Any) -> list[Any]:
    layers: ConfigLayers = apis.replica_manager.dynamic.layers
    if res.resource_type == TOPIC:
        if not is_valid_name(res.resource_name):
            raise _Refused(Errors.INVALID_TOPIC_EXCEPTION, None)
        image = apis.image()
        if image.topic_by_name(res.resource_name) is None:
            raise _Refused(Errors.UNKNOWN_TOPIC_OR_PARTITION, None)
        return describe_topic(image.topic_config(res.resource_name), layers)
    if res.resource_type == BROKER:
        name = res.resource_name
        if not name:
            return describe_broker(layers, per_broker=False)
        _check_own_id(apis, name, "Broker", f"{apis.broker_id} or empty string")
        return describe_broker(layers, per_broker=True)
    if res.resource_type == GROUP:
        if not res.resource_name:
            raise _Refused(Errors.INVALID_REQUEST, "Group name must not be empty")
        overrides = apis.image().configs.get((GROUP, res.resource_name), {})
        return describe_group(overrides, layers.merged())
    raise _Refused(Errors.INVALID_REQUEST, f"Unsupported resource type: {res.resource_type}")


async def handle_describe_configs(apis: BrokerApis, header: RequestHeader, body: Any) -> Response:
    synonyms = bool(getattr(body, "include_synonyms", False))
    documentation = bool(getattr(body, "include_documentation", False))
    results = []
    for res in body.resources:
        entry: dict[str, Any] = {
            "error_code": Errors.NONE,
            "error_message": None,
            "configs": [],
            "resource_type": res.resource_type,
            "resource_name": res.resource_name,
        }
        refused = _refusal(
            apis, AclOperation.DESCRIBE_CONFIGS, res.resource_type, res.resource_name
        )
        try:
            if refused is not None:
                raise _Refused(refused, None)
            keys = set(res.configuration_keys or ())
            entry["configs"] = [
                c.as_response(synonyms, documentation)
                for c in _describe_one(apis, res)
                if not keys or c.name in keys
            ]
        except _Refused as refusal:
            entry["error_code"], entry["error_message"] = refusal.code, refusal.message
        results.append(entry)
    return answer(ApiKey.DESCRIBE_CONFIGS, header, {"throttle_time": 0, "results": results})


def describe_configs_error(header: RequestHeader, body: Any, code: int) -> Response:
    results = [
        {
            "error_code": code,
            "error_message": None,
            "resource_type": r.resource_type,
            "resource_name": r.resource_name,
            "configs": [],
        }
        for r in body.resources
    ]
    return answer(ApiKey.DESCRIBE_CONFIGS, header, {"throttle_time": 0, "results": results})


# The versions served, beside their handlers (kio has no DescribeConfigs v0).
API_HANDLERS: tuple[ApiHandler, ...] = (
    ApiHandler(ApiKey.DESCRIBE_CONFIGS, 1, 4, handle_describe_configs, describe_configs_error),
    ApiHandler(
        ApiKey.ALTER_CONFIGS, 0, 2, handle_alter_configs, _alter_error(ApiKey.ALTER_CONFIGS)
    ),
    ApiHandler(
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        0,
        1,
        handle_incremental_alter_configs,
        _alter_error(ApiKey.INCREMENTAL_ALTER_CONFIGS),
    ),
)
