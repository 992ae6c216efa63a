"""`kraft metadata`: print the cluster metadata image or its records, like Kafka's
kafka-metadata-shell, from a running controller (HTTP) or a snapshot file."""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from pathlib import Path

import msgspec

from common.scram import ScramMechanism
from metadata_log.image import MetadataImage
from metadata_log.redactor import loggable_credential, loggable_record
from metadata_log.snapshot import SnapshotError, read_snapshot, snapshot_records


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("metadata", help="print the metadata image or records")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--controller", help="a controller's HTTP address, host:port")
    src.add_argument("--snapshot", type=Path, help="a metadata snapshot file")
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


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as resp:  # noqa: S310 - operator-given URL
        return resp.read()


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
        base = f"http://{args.controller}"
        if args.records:
            url = f"{base}/v1/metadata/log?from={args.from_offset}&max_records={args.max_records}"
            body = json.loads(_get(url))
            for item in body["records"]:
                print(json.dumps({"offset": item["offset"], **item["record"]}))
        else:
            print(json.dumps(json.loads(_get(f"{base}/v1/cluster")), indent=2))
        return 0
    except (OSError, urllib.error.URLError, SnapshotError, ValueError, KeyError) as exc:
        print(f"kraft metadata: {exc}", file=sys.stderr)
        return 1
