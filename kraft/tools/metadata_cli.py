"""`kraft metadata`: print the cluster metadata image or its records, like Kafka's
kafka-metadata-shell, from a running controller (HTTP) or a snapshot file.

A secured controller plane takes `--command-config FILE` (as kafka-metadata-quorum's
`--bootstrap-controller` does): `security.protocol=SSL`, the `ssl.*` client settings
(`ssl.truststore.location`; `ssl.keystore.location` for mutual TLS) and
`controller.quorum.http.token` (common/controller_plane.py). A controller's own
properties file works too."""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from pathlib import Path

import msgspec

from common.controller_plane import ControllerPlaneClient, plane_client
from common.properties import ConfigError, read_properties
from common.scram import ScramMechanism
from metadata_log.image import MetadataImage
from metadata_log.redactor import loggable_credential, loggable_record
from metadata_log.snapshot import SnapshotError, read_snapshot, snapshot_records


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("metadata", help="print the metadata image or records")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--controller", help="a controller's HTTP address, host:port")
    src.add_argument("--snapshot", type=Path, help="a metadata snapshot file")
    p.add_argument(
        "--command-config",
        type=Path,
        help="properties for a secured controller plane (security.protocol, ssl.*, "
        "controller.quorum.http.token)",
    )
    p.add_argument("--records", action="store_true", help="print records, not the image")
    p.add_argument("--from", dest="from_offset", type=int, default=0, help="first offset")
    p.add_argument("--max-records", type=int, default=10_000)


def _image_json(image: MetadataImage) -> dict:
    """The image as JSON; config keys (resource type, name) become "type:name", SCRAM
    credentials user -> mechanism -> credential, with its salt and keys redacted."""
    out = msgspec.to_builtins(
        msgspec.structs.replace(image, configs={}, scram_credentials={}), str_keys=True
    )
    out["configs"] = {f"{t}:{name}": dict(v) for (t, name), v in sorted(image.configs.items())}
    users: dict[str, dict[str, dict]] = {}
    for (user, mechanism), cred in sorted(image.scram_credentials.items()):
        name = ScramMechanism(mechanism).mechanism_name
        users.setdefault(user, {})[name] = loggable_credential(cred)
    out["scram_credentials"] = users
    return out


def _get(url: str, plane: ControllerPlaneClient) -> bytes:
    request = urllib.request.Request(url, headers=plane.headers())
    try:
        with urllib.request.urlopen(  # noqa: S310 - operator-given URL
            request, timeout=10, context=plane.ssl_context
        ) as resp:
            return resp.read()
    except urllib.error.HTTPError as exc:
        # The controller's JSON error says why (e.g. the credentials it wants).
        detail = exc.read()[:500].decode("utf-8", "replace")
        raise OSError(f"{url}: HTTP {exc.code}: {detail}") from None


def run(args: argparse.Namespace) -> int:
    try:
        if args.snapshot is not None:
            image = read_snapshot(args.snapshot)
            if args.records:
                for record in snapshot_records(image):
                    print(json.dumps(loggable_record(record)))
            else:
                print(json.dumps(_image_json(image), indent=2))
            return 0
        values = read_properties(args.command_config) if args.command_config else {}
        plane = plane_client(values)
        base = f"{plane.scheme}://{args.controller}"
        if args.records:
            url = f"{base}/v1/metadata/log?from={args.from_offset}&max_records={args.max_records}"
            body = json.loads(_get(url, plane))
            for item in body["records"]:
                print(json.dumps({"offset": item["offset"], **item["record"]}))
        else:
            print(json.dumps(json.loads(_get(f"{base}/v1/cluster", plane)), indent=2))
        return 0
    except ConfigError as exc:
        print(f"kraft metadata: {exc}", file=sys.stderr)
        return 2
    except (OSError, urllib.error.URLError, SnapshotError, ValueError, KeyError) as exc:
        print(f"kraft metadata: {exc}", file=sys.stderr)
        return 1
