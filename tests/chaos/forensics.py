"""After a run with duplicates: where each copy sits in every broker's log, with the batch's
producer id, producer epoch and sequence. Two copies under one producer epoch and one
sequence mean the broker failed to deduplicate a retry; copies under two epochs mean the
client re-sent the message after bumping its epoch (librdkafka does so for in-flight
messages whose first attempt may have been written: confluentinc/librdkafka#4953), which
no broker can deduplicate.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from storage.record_batch import iter_batches
from storage.records import decode_batch


def locate(log_dirs: dict[int, Path], tp: str, values: set[str]) -> list[dict[str, Any]]:
    """Every copy of `values` in partition `tp` ("topic/partition") on every broker."""
    topic, _, part = tp.rpartition("/")
    found: list[dict[str, Any]] = []
    for broker, log_dir in sorted(log_dirs.items()):
        for seg in sorted((log_dir / f"{topic}-{part}").glob("*.log")):
            try:
                data = seg.read_bytes()
            except OSError:
                continue
            for view in iter_batches(data):
                try:
                    batch = decode_batch(view)
                except Exception:  # noqa: BLE001, S112 - a torn tail: skip it
                    continue
                for i, rec in enumerate(batch.records):
                    value = rec.value.decode() if rec.value else ""
                    if value in values:
                        found.append({
                            "broker": broker, "value": value, "offset": rec.offset,
                            "producer_id": batch.producer_id,
                            "producer_epoch": batch.producer_epoch,
                            "sequence": batch.base_sequence + i,
                            "leader_epoch": batch.partition_leader_epoch,
                        })  # fmt: skip
    return found


def explain_duplicates(log_dirs: dict[int, Path], examples: list[dict[str, Any]]) -> list[str]:
    """One line per duplicated value: its copies and which side re-sent it."""
    lines = []
    for ex in examples:
        tps = {tp for tp, _ in ex["at"]}
        copies = [c for tp in tps for c in locate(log_dirs, tp, {ex["value"]})]
        ids = {(c["producer_id"], c["producer_epoch"], c["sequence"]) for c in copies}
        epochs = {(c["producer_id"], c["producer_epoch"]) for c in copies}
        if len(ids) == 1 and len({c["offset"] for c in copies}) > 1:
            why = "same producer epoch and sequence twice: the broker did not deduplicate"
        elif len(epochs) > 1:
            why = "copies under different producer epochs: the client re-sent after an epoch bump"
        else:
            why = "copies under one epoch, different sequences"
        desc = sorted({(c["offset"], c["producer_id"], c["producer_epoch"], c["sequence"],
                        c["leader_epoch"]) for c in copies})  # fmt: skip
        lines.append(
            f"{ex['value']}: (offset, pid, producer epoch, seq, leader epoch) {desc}: {why}"
        )
    return lines
