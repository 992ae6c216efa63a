"""`kraft dump-log`: print each batch of a segment file, and its records with
--print-data-log, in kafka-dump-log's format."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from storage.record_batch import RecordBatchError, validate_batch
from storage.records import decode_batch


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    dump = sub.add_parser("dump-log", help="print the batches of a .log segment file")
    dump.add_argument("file")
    dump.add_argument("--print-data-log", action="store_true", help="also print records")


def run(args: argparse.Namespace) -> int:
    """Print each batch of a segment file (and its records with --print-data-log)."""
    path = Path(args.file)
    try:
        data = path.read_bytes()
    except OSError as exc:
        print(f"kraft dump-log: {exc}", file=sys.stderr)
        return 2
    pos = 0
    print(f"Dumping {path}")
    while pos < len(data):
        try:
            view = validate_batch(data, pos)
        except RecordBatchError as exc:
            print(f"invalid batch at position {pos}: {exc}")
            return 1
        print(
            f"baseOffset: {view.base_offset} lastOffset: {view.last_offset} "
            f"count: {view.record_count} baseSequence: {view.base_sequence} "
            f"producerId: {view.producer_id} producerEpoch: {view.producer_epoch} "
            f"partitionLeaderEpoch: {view.partition_leader_epoch} "
            f"isTransactional: {str(view.is_transactional).lower()} "
            f"isControl: {str(view.is_control).lower()} position: {pos} "
            f"CreateTime: {view.max_timestamp} size: {view.size} "
            f"magic: {view.magic} compresscodec: {view.compression} crc: {view.crc} isvalid: true"
        )
        if args.print_data_log:
            for rec in decode_batch(view).records:
                key = rec.key.decode("utf-8", "replace") if rec.key is not None else None
                value = rec.value.decode("utf-8", "replace") if rec.value is not None else None
                print(
                    f"| offset: {rec.offset} CreateTime: {rec.timestamp} "
                    f"key: {key} payload: {value}"
                )
        pos += view.size
    return 0
