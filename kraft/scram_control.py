"""The SCRAM control manager (Kafka's ScramControlManager): AlterUserScramCredentials as
metadata records (KIP-554). Sans-I/O: an image and a request in; records and the answer
out. The broker has already turned the client's salted password into the stored and
server keys, so no password-equivalent reaches the controller or the log.

Per user, as Kafka answers:
- a user named twice in one request (deletions and upsertions together): DUPLICATE_RESOURCE,
  and nothing changes for that user;
- an empty name: UNACCEPTABLE_CREDENTIAL; a mechanism other than SCRAM-SHA-256/512:
  UNSUPPORTED_SASL_MECHANISM; iterations outside [4096, 16384]: UNACCEPTABLE_CREDENTIAL;
- deleting a credential that does not exist: RESOURCE_NOT_FOUND.
The others of the request go ahead in the same batch.
"""

from __future__ import annotations

from common.errors import Errors
from common.scram import MAX_ITERATIONS, MIN_ITERATIONS, ScramMechanism
from kraft.decision import ControllerConfig, Decision
from metadata_log.controller_api import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    AlterUserScramCredentialsResult,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
)
from metadata_log.image import MetadataImage
from metadata_log.records import Record, RemoveUserScramCredentialRecord, UserScramCredentialRecord

DUPLICATE = "A user credential cannot be altered twice in the same request"
NOT_APPLIED = "the metadata changed under the request; retry"

Error = tuple[int, str]


def _name_and_mechanism_error(name: str, mechanism: int) -> Error | None:
    if not name:
        return Errors.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if mechanism not in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):
        return Errors.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    return None


def _upsertion_error(u: ScramCredentialUpsertion) -> Error | None:
    error = _name_and_mechanism_error(u.name, u.mechanism)
    if error is not None:
        return error
    if u.iterations < MIN_ITERATIONS:
        return Errors.UNACCEPTABLE_CREDENTIAL, "Too few iterations"
    if u.iterations > MAX_ITERATIONS:
        return Errors.UNACCEPTABLE_CREDENTIAL, "Too many iterations"
    return None


def _deletion_error(image: MetadataImage, d: ScramCredentialDeletion) -> Error | None:
    error = _name_and_mechanism_error(d.name, d.mechanism)
    if error is not None:
        return error
    if (d.name, d.mechanism) not in image.scram_credentials:
        return Errors.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"
    return None


class ScramControlManager:
    def __init__(self, config: ControllerConfig) -> None:
        self.config = config

    def alter_credentials(
        self, image: MetadataImage, req: AlterUserScramCredentialsRequest, now_ms: int
    ) -> Decision:
        deletions: dict[str, ScramCredentialDeletion] = {}
        upsertions: dict[str, ScramCredentialUpsertion] = {}
        errors: dict[str, Error] = {}
        for d in req.deletions:
            if d.name in errors:
                continue
            if deletions.pop(d.name, None) is not None:
                errors[d.name] = (Errors.DUPLICATE_RESOURCE, DUPLICATE)
                continue
            error = _deletion_error(image, d)
            if error is not None:
                errors[d.name] = error
            else:
                deletions[d.name] = d
        for u in req.upsertions:
            if u.name in errors:
                continue
            if deletions.pop(u.name, None) is not None or upsertions.pop(u.name, None) is not None:
                errors[u.name] = (Errors.DUPLICATE_RESOURCE, DUPLICATE)
                continue
            error = _upsertion_error(u)
            if error is not None:
                errors[u.name] = error
            else:
                upsertions[u.name] = u

        records: list[Record] = [
            RemoveUserScramCredentialRecord(d.name, d.mechanism) for d in deletions.values()
        ]
        records += [
            UserScramCredentialRecord(
                u.name, u.mechanism, u.salt, u.stored_key, u.server_key, u.iterations
            )
            for u in upsertions.values()
        ]
        done = [*deletions, *upsertions]  # Kafka's order: deletions, upsertions, errors
        refused = [AlterUserScramCredentialsResult(n, c, m) for n, (c, m) in errors.items()]
        return Decision(
            tuple(records),
            AlterUserScramCredentialsResponse(
                [AlterUserScramCredentialsResult(n, Errors.NONE) for n in done] + refused
            ),
            AlterUserScramCredentialsResponse(
                [
                    AlterUserScramCredentialsResult(n, Errors.UNKNOWN_SERVER_ERROR, NOT_APPLIED)
                    for n in done
                ]
                + refused
            ),
        )
