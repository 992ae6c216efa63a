"""Topics of many partitions on a real cluster (tests/cluster/test_scale_partitions.py,
test_acks_all_many_partitions.py): create them with one CreateTopics, then wait until
every broker's own Metadata answer names a live leader for every partition."""

from __future__ import annotations

from confluent_kafka.admin import AdminClient, NewTopic

from bench.scale_bench import broker_leaders
from tests.harness.cluster_procs import ProcCluster, wait_for


def create_and_wait_for_leaders(
    cluster: ProcCluster, names: list[str], partitions: int, deadline_s: float
) -> set[int]:
    """RF 3 topics `names` of `partitions` each; the broker ids, once every broker names a
    leader among them for all of them (each broker waited on for `deadline_s`)."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    futures = admin.create_topics(
        [NewTopic(n, partitions, 3) for n in names], operation_timeout=120, request_timeout=180
    )
    for f in futures.values():
        f.result(180)
    brokers = {b.node_id for b in cluster.brokers}
    for b in cluster.brokers:

        def all_led(b=b) -> bool:  # type: ignore[no-untyped-def]
            leaders = broker_leaders(b.host, b.port, names)
            return len(leaders) == len(names) * partitions and all(
                v in brokers for v in leaders.values()
            )

        wait_for(all_led, deadline_s, f"broker {b.node_id} to name a leader for every partition",
                 cluster.logs)  # fmt: skip
    return brokers
