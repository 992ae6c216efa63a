"""ACL and SCRAM credential handlers: DescribeAcls, CreateAcls, DeleteAcls (Kafka's
AclApis) and DescribeUserScramCredentials, AlterUserScramCredentials (KIP-554).

- Authorization first, as Kafka: DESCRIBE on the cluster to describe, ALTER to change;
  CLUSTER_AUTHORIZATION_FAILED otherwise. Without an authorizer the ACL APIs answer
  SECURITY_DISABLED (there is nothing to manage); SCRAM credentials work either way.
- Describes are answered from this broker's metadata (the authorizer's bindings, the
  image's credentials); changes go to the active controller and reach every broker
  through the metadata log, so a describe right after a change may not show it yet.
- AlterUserScramCredentials: the client sends a salt and the salted password; the broker
  derives the stored key and server key (RFC 5802) and forwards only those. The salted
  password is as good as the password for logging in to any server with that salt and
  iteration count, so it stays here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from broker.apis_common import ApiHandler, BrokerApis, Response, answer
from broker.codec import RequestHeader
from common.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    ResourceType,
    binding_error,
    filter_error,
)
from common.api_keys import ApiKey
from common.errors import Errors
from common.scram import ScramMechanism, server_key, stored_key
from metadata_log.controller_api import (
    AlterUserScramCredentialsRequest,
    CreateAclsRequest,
    DeleteAclsRequest,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
)

CLUSTER_DENIED = "Cluster authorization failed."
NO_AUTHORIZER = "No Authorizer is configured on the broker"  # DescribeAcls's wording
NO_AUTHORIZER_TO_ALTER = "No Authorizer is configured."  # CreateAcls' and DeleteAcls'
DESCRIBE_DUPLICATE = (
    "Cannot describe SCRAM credentials for the same user twice in a single request: "
)
DESCRIBE_MISSING = "Attempt to describe a user credential that does not exist: "


def _may(apis: BrokerApis, operation: AclOperation) -> bool:
    return apis.authorize(operation, ResourceType.CLUSTER, CLUSTER_NAME)


def _filter(item: Any) -> AclBindingFilter:
    """The filter of a DescribeAcls request or of one DeleteAcls filter entry."""
    return AclBindingFilter(
        item.resource_type_filter,
        item.resource_name_filter,
        item.pattern_type_filter,
        item.principal_filter,
        item.host_filter,
        item.operation,
        item.permission_type,
    )


# -- DescribeAcls ----------------------------------------------------------------------------


def _resources(bindings: Iterable[AclBinding]) -> list[dict[str, Any]]:
    """Bindings grouped by resource pattern (DescribeAclsResponse.aclsResources)."""
    by_pattern: dict[tuple[int, str, int], list[AclBinding]] = defaultdict(list)
    for b in bindings:
        by_pattern[(b.resource_type, b.resource_name, b.pattern_type)].append(b)
    return [
        {
            "resource_type": rtype,
            "resource_name": name,
            "pattern_type": ptype,
            "acls": [
                {
                    "principal": b.principal,
                    "host": b.host,
                    "operation": b.operation,
                    "permission_type": b.permission_type,
                }
                for b in sorted(acls, key=lambda b: (b.principal, b.host, b.operation))
            ],
        }
        for (rtype, name, ptype), acls in sorted(by_pattern.items())
    ]


async def handle_describe_acls(apis: BrokerApis, header: RequestHeader, body: Any) -> Response:
    error, message, resources = Errors.NONE, None, []
    f = _filter(body)
    if not _may(apis, AclOperation.DESCRIBE):
        error, message = Errors.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_DENIED
    elif apis.authorizer is None:
        error, message = Errors.SECURITY_DISABLED, NO_AUTHORIZER
    elif (why := filter_error(f)) is not None:
        error, message = Errors.INVALID_REQUEST, why
    else:
        resources = _resources(b for b in apis.authorizer.bindings if f.matches(b))
    return answer(
        ApiKey.DESCRIBE_ACLS,
        header,
        {
            "throttle_time": 0,
            "error_code": error,
            "error_message": message,
            "resources": resources,
        },
    )


def describe_acls_error(header: RequestHeader, body: Any, code: int) -> Response:
    return answer(
        ApiKey.DESCRIBE_ACLS,
        header,
        {"throttle_time": 0, "error_code": code, "error_message": None, "resources": []},
    )


# -- CreateAcls ------------------------------------------------------------------------------


def _creations_answer(header: RequestHeader, results: list[tuple[int, str | None]]) -> Response:
    return answer(
        ApiKey.CREATE_ACLS,
        header,
        {
            "throttle_time": 0,
            "results": [{"error_code": c, "error_message": m} for c, m in results],
        },
    )


async def handle_create_acls(apis: BrokerApis, header: RequestHeader, body: Any) -> Response:
    n = len(body.creations)
    if not _may(apis, AclOperation.ALTER):
        return _creations_answer(
            header, [(Errors.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_DENIED)] * n
        )
    if apis.authorizer is None:
        return _creations_answer(header, [(Errors.SECURITY_DISABLED, NO_AUTHORIZER_TO_ALTER)] * n)
    results: list[tuple[int, str | None]] = []
    valid: list[tuple[int, AclBinding]] = []  # (index in the request, binding)
    for c in body.creations:
        b = AclBinding(
            c.resource_type,
            c.resource_name,
            c.resource_pattern_type,
            c.principal,
            c.host,
            c.operation,
            c.permission_type,
        )
        why = binding_error(b)  # the controller checks the same: spare it the round trip
        results.append((Errors.INVALID_REQUEST, why) if why else (Errors.NONE, None))
        if why is None:
            valid.append((len(results) - 1, b))
    if valid:
        resp = await apis.admin.create_acls(CreateAclsRequest([b for _, b in valid]))
        for (i, _), r in zip(valid, resp.results, strict=True):
            results[i] = (r.error_code, r.error_message)
    return _creations_answer(header, results)


def create_acls_error(header: RequestHeader, body: Any, code: int) -> Response:
    return _creations_answer(header, [(code, None)] * len(body.creations))


# -- DeleteAcls ------------------------------------------------------------------------------


def _filter_result(code: int, message: str | None, matches: list[AclBinding]) -> dict[str, Any]:
    return {
        "error_code": code,
        "error_message": message,
        "matching_acls": [
            {
                "error_code": Errors.NONE,
                "error_message": None,
                "resource_type": b.resource_type,
                "resource_name": b.resource_name,
                "pattern_type": b.pattern_type,
                "principal": b.principal,
                "host": b.host,
                "operation": b.operation,
                "permission_type": b.permission_type,
            }
            for b in matches
        ],
    }


def _deletions_answer(header: RequestHeader, results: list[dict[str, Any]]) -> Response:
    return answer(ApiKey.DELETE_ACLS, header, {"throttle_time": 0, "filter_results": results})


async def handle_delete_acls(apis: BrokerApis, header: RequestHeader, body: Any) -> Response:
    n = len(body.filters)
    if not _may(apis, AclOperation.ALTER):
        denied = _filter_result(Errors.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_DENIED, [])
        return _deletions_answer(header, [denied] * n)
    if apis.authorizer is None:
        disabled = _filter_result(Errors.SECURITY_DISABLED, NO_AUTHORIZER_TO_ALTER, [])
        return _deletions_answer(header, [disabled] * n)
    results: list[dict[str, Any]] = []
    valid: list[tuple[int, AclBindingFilter]] = []
    for item in body.filters:
        f = _filter(item)
        why = filter_error(f)
        results.append(_filter_result(Errors.INVALID_REQUEST if why else Errors.NONE, why, []))
        if why is None:
            valid.append((len(results) - 1, f))
    if valid:
        resp = await apis.admin.delete_acls(DeleteAclsRequest([f for _, f in valid]))
        for (i, _), r in zip(valid, resp.filter_results, strict=True):
            results[i] = _filter_result(r.error_code, r.error_message, r.matching_acls)
    return _deletions_answer(header, results)


def delete_acls_error(header: RequestHeader, body: Any, code: int) -> Response:
    return _deletions_answer(header, [_filter_result(code, None, [])] * len(body.filters))


# -- DescribeUserScramCredentials ------------------------------------------------------------


def _describe_credentials(apis: BrokerApis, users: Any) -> list[dict[str, Any]]:
    """ScramImage.describe: every user with credentials when none is named; a named user
    twice is DUPLICATE_RESOURCE, one without credentials RESOURCE_NOT_FOUND."""
    infos: dict[str, list[dict[str, int]]] = defaultdict(list)
    for (user, mechanism), cred in sorted(apis.image().scram_credentials.items()):
        infos[user].append({"mechanism": mechanism, "iterations": cred.iterations})
    named: dict[str, bool] = {}  # user -> named more than once
    for u in users or ():
        named[u.name] = u.name in named
    if not users:
        named = dict.fromkeys(infos, False)
    out = []
    for user, twice in named.items():
        result: dict[str, Any] = {"user": user, "error_code": Errors.NONE, "error_message": None}
        if twice:
            result.update(
                error_code=Errors.DUPLICATE_RESOURCE, error_message=DESCRIBE_DUPLICATE + user
            )
        elif user not in infos:
            result.update(
                error_code=Errors.RESOURCE_NOT_FOUND, error_message=DESCRIBE_MISSING + user
            )
        out.append({**result, "credential_infos": infos.get(user, []) if not twice else []})
    return out


async def handle_describe_user_scram_credentials(
    apis: BrokerApis, header: RequestHeader, body: Any
) -> Response:
    if not _may(apis, AclOperation.DESCRIBE):
        return describe_user_scram_credentials_error(
            header, body, Errors.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_DENIED
        )
    return answer(
        ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
        header,
        {
            "throttle_time": 0,
            "error_code": Errors.NONE,
            "error_message": None,
            "results": _describe_credentials(apis, body.users),
        },
    )


def describe_user_scram_credentials_error(
    header: RequestHeader, body: Any, code: int, message: str | None = None
) -> Response:
    # As Kafka's getErrorResponse: the error at the top and once per user named (with an
    # empty user name: the top-level error is what clients read).
    per_user = {"user": "", "error_code": code, "error_message": message, "credential_infos": []}
    return answer(
        ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
        header,
        {
            "throttle_time": 0,
            "error_code": code,
            "error_message": message,
            "results": [per_user] * len(body.users or ()),
        },
    )


# -- AlterUserScramCredentials ---------------------------------------------------------------


def _upsertion(u: Any) -> ScramCredentialUpsertion:
    """The credential to store: the keys derived here from the salted password. A
    mechanism we do not know derives nothing; the controller refuses it for its user."""
    mechanism = ScramMechanism.UNKNOWN
    if u.mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):
        mechanism = ScramMechanism(u.mechanism)
    keys = (b"", b"")
    if mechanism != ScramMechanism.UNKNOWN:
        keys = (stored_key(mechanism, u.salted_password), server_key(mechanism, u.salted_password))
    return ScramCredentialUpsertion(u.name, u.mechanism, u.iterations, u.salt, *keys)


def _alterations_answer(header: RequestHeader, results: list[dict[str, Any]]) -> Response:
    return answer(
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS, header, {"throttle_time": 0, "results": results}
    )


async def handle_alter_user_scram_credentials(
    apis: BrokerApis, header: RequestHeader, body: Any
) -> Response:
    if not _may(apis, AclOperation.ALTER):
        return alter_user_scram_credentials_error(
            header, body, Errors.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_DENIED
        )
    req = AlterUserScramCredentialsRequest(
        [ScramCredentialDeletion(d.name, d.mechanism) for d in body.deletions],
        [_upsertion(u) for u in body.upsertions],
    )
    if not req.deletions and not req.upsertions:
        return _alterations_answer(header, [])
    resp = await apis.admin.alter_user_scram_credentials(req)
    return _alterations_answer(
        header,
        [
            {"user": r.user, "error_code": r.error_code, "error_message": r.error_message}
            for r in resp.results
        ],
    )


def alter_user_scram_credentials_error(
    header: RequestHeader, body: Any, code: int, message: str | None = None
) -> Response:
    """Every user named, sorted, with the error (Kafka's getErrorResponse)."""
    users = sorted({d.name for d in body.deletions} | {u.name for u in body.upsertions})
    return _alterations_answer(
        header, [{"user": u, "error_code": code, "error_message": message} for u in users]
    )


API_HANDLERS: tuple[ApiHandler, ...] = (
    ApiHandler(ApiKey.DESCRIBE_ACLS, 1, 3, handle_describe_acls, describe_acls_error),
    ApiHandler(ApiKey.CREATE_ACLS, 1, 3, handle_create_acls, create_acls_error),
    ApiHandler(ApiKey.DELETE_ACLS, 1, 3, handle_delete_acls, delete_acls_error),
    ApiHandler(
        ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
        0,
        0,
        handle_describe_user_scram_credentials,
        describe_user_scram_credentials_error,
    ),
    ApiHandler(
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
        0,
        0,
        handle_alter_user_scram_credentials,
        alter_user_scram_credentials_error,
    ),
)
