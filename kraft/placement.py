"""Replica placement for new partitions: Kafka's rack-aware round-robin.

As in Kafka's AdminUtils.assignReplicasToBrokers: brokers are listed alternating racks,
each partition's first replica walks that list round-robin from a start index, and the
followers are shifted so that leaders and followers spread evenly; with racks, each
partition takes at most one replica per rack until every rack has one. Deterministic
(the start index and shift are inputs), so the controller stays replayable.
"""

from __future__ import annotations

from collections.abc import Sequence


class PlacementError(ValueError):
    pass


def rack_alternated(brokers: Sequence[tuple[int, str | None]]) -> list[int]:
    """Broker ids ordered rack by rack in turn: [r1b1, r2b1, r3b1, r1b2, ...]."""
    by_rack: dict[str | None, list[int]] = {}
    for broker_id, rack in sorted(brokers):
        by_rack.setdefault(rack, []).append(broker_id)
    racks = sorted(by_rack, key=lambda r: (r is None, r or ""))
    out: list[int] = []
    i = 0
    while len(out) < len(brokers):
        for rack in racks:
            if i < len(by_rack[rack]):
                out.append(by_rack[rack][i])
        i += 1
    return out


def assign_replicas(
    brokers: Sequence[tuple[int, str | None]],
    num_partitions: int,
    replication_factor: int,
    *,
    start_index: int = 0,
    first_partition: int = 0,
) -> dict[int, list[int]]:
    """Replica lists for partitions first_partition .. first_partition+num_partitions-1."""
    if replication_factor < 1:
        raise PlacementError("replication factor must be at least 1")
    if replication_factor > len(brokers):
        raise PlacementError(
            f"Unable to replicate the partition {replication_factor} time(s): the target "
            f"replication factor of {replication_factor} cannot be reached because only "
            f"{len(brokers)} broker(s) are registered."
        )
    racks = dict(brokers)
    ordered = rack_alternated(brokers)
    n = len(ordered)
    n_racks = len(set(racks.values()))
    start = start_index % n
    shift = start_index % n
    out: dict[int, list[int]] = {}
    for i in range(num_partitions):
        p = first_partition + i
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        replicas = [ordered[first]]
        used_racks = {racks[ordered[first]]}
        k = 0
        while len(replicas) < replication_factor:
            step = 1 + (shift + k) % (n - 1) if n > 1 else 0
            candidate = ordered[(first + step) % n]
            k += 1
            if candidate in replicas:
                if k > 4 * n:  # cannot happen with rf <= n; a guard against a tight loop
                    raise PlacementError("placement did not converge")
                continue
            # Prefer a new rack until every rack holds a replica of this partition.
            if racks[candidate] in used_racks and len(used_racks) < n_racks and k <= 2 * n:
                continue
            replicas.append(candidate)
            used_racks.add(racks[candidate])
        out[p] = replicas
    return out
