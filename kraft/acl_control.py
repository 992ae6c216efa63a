"""The ACL control manager (Kafka's AclControlManager): CreateAcls and DeleteAcls as
metadata records. Sans-I/O: an image and a request in; records and the answer out.

- A new binding gets an AccessControlEntryRecord under a fresh id (a UUID from the
  generator the node gives: random in production, seeded in a simulation). A binding
  already present, or named twice in one request, succeeds without a second record, as
  in Kafka.
- A delete filter removes every binding it matches (RemoveAccessControlEntryRecord) and
  answers with them; a binding two filters match is removed once and reported by both.
- Invalid bindings and filters are refused one by one with INVALID_REQUEST; the others
  of the request go ahead.
"""

from __future__ import annotations

from collections.abc import Callable

from common.acl import AclBinding, binding_error, filter_error
from common.errors import Errors
from kraft.decision import ControllerConfig, Decision
from metadata_log.controller_api import (
    MAX_ACL_OPS,
    AclCreationResult,
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsFilterResult,
    DeleteAclsRequest,
    DeleteAclsResponse,
)
from metadata_log.image import MetadataImage
from metadata_log.records import AccessControlEntryRecord, Record, RemoveAccessControlEntryRecord

NOT_APPLIED = "the metadata changed under the request; retry"


class AclControlManager:
    def __init__(self, config: ControllerConfig, new_acl_id: Callable[[], str]) -> None:
        self.config = config
        self._new_acl_id = new_acl_id

    def _fresh_id(self, image: MetadataImage, taken: set[str]) -> str:
        while True:
            acl_id = self._new_acl_id()
            if acl_id not in image.acls and acl_id not in taken:
                taken.add(acl_id)
                return acl_id

    def create_acls(self, image: MetadataImage, req: CreateAclsRequest, now_ms: int) -> Decision:
        existing: set[AclBinding] = set(image.acls.values())
        taken: set[str] = set()
        records: list[Record] = []
        results: list[AclCreationResult] = []
        for binding in req.creations:
            error = binding_error(binding)
            if error is not None:
                results.append(AclCreationResult(Errors.INVALID_REQUEST, error))
                continue
            if binding not in existing:
                existing.add(binding)
                records.append(AccessControlEntryRecord(self._fresh_id(image, taken), binding))
            results.append(AclCreationResult(Errors.NONE))
        failed = [
            r if r.error_code else AclCreationResult(Errors.UNKNOWN_SERVER_ERROR, NOT_APPLIED)
            for r in results
        ]
        return Decision(tuple(records), CreateAclsResponse(results), CreateAclsResponse(failed))

    def delete_acls(self, image: MetadataImage, req: DeleteAclsRequest, now_ms: int) -> Decision:
        removed: dict[str, None] = {}  # ids, in order; a dict so two filters remove once
        results: list[DeleteAclsFilterResult] = []
        ordered = sorted(image.acls.items())
        for f in req.filters:
            error = filter_error(f)
            if error is not None:
                results.append(DeleteAclsFilterResult(Errors.INVALID_REQUEST, error))
                continue
            matched = [(acl_id, b) for acl_id, b in ordered if f.matches(b)]
            if len(removed.keys() | {acl_id for acl_id, _ in matched}) > MAX_ACL_OPS:
                results.append(
                    DeleteAclsFilterResult(
                        Errors.INVALID_REQUEST,
                        f"Cannot remove more than {MAX_ACL_OPS} acls in a single delete operation.",
                    )
                )
                continue
            removed.update((acl_id, None) for acl_id, _ in matched)
            results.append(DeleteAclsFilterResult(Errors.NONE, None, [b for _, b in matched]))
        failed = [
            r if r.error_code else DeleteAclsFilterResult(Errors.UNKNOWN_SERVER_ERROR, NOT_APPLIED)
            for r in results
        ]
        return Decision(
            tuple(RemoveAccessControlEntryRecord(acl_id) for acl_id in removed),
            DeleteAclsResponse(results),
            DeleteAclsResponse(failed),
        )
