"""A majority of controllers losing power keeps every acknowledged metadata write.

Three controller processes; one is SIGKILLed, so the other two form the majority that
acknowledges 1,000 topic creations; then those two lose power (SIGKILL, then
tests/harness/power_loss.py drops everything written since their last fsync) and all
three restart. With the journal fsynced at Raft's durable points every acknowledged
topic is there. With `controller.quorum.fsync.enable=false` the same schedule loses
them: the test can fail, and does when the fsyncs are gone.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from tests.harness.power_loss import lose_power
from tests.harness.quorum_procs import Client, Cluster, run, topic_names
from tests.harness.quorum_wait import eventually

WRITES = 1_000


def _power_loss_run(tmp_path: Path, fsync: bool) -> tuple[set[str], set[str]]:
    """Acknowledged topic names, and those missing after the power loss."""
    cluster = Cluster(
        tmp_path, controller_props={"controller.quorum.fsync.enable": str(fsync).lower()}
    )
    result: dict[str, set[str]] = {}
    for i in cluster.ids:
        cluster.start(i)

    async def body(api: Client) -> None:
        ids = cluster.ids
        first = await eventually(lambda: api.active(ids), 30, "an active controller")
        await api.register_broker(ids)
        out = next(i for i in ids if i != first)
        cluster.kill(out)  # a crash, not a power loss: it just misses the writes
        majority = [i for i in ids if i != out]
        await eventually(lambda: api.active(majority), 30, "an active controller of two")
        acked: set[str] = set()
        names = iter(range(10 * WRITES))
        stop = asyncio.Event()

        async def writer() -> None:
            for n in names:
                if stop.is_set():
                    return
                name = f"t{n}"
                answer = await api.write(majority, "/v1/topics", {"topics": [{"name": name}]})
                if answer is not None and answer["topics"][0]["error_code"] in (0, 36):
                    acked.add(name)

        writers = [asyncio.create_task(writer()) for _ in range(8)]
        await eventually(
            lambda: asyncio.sleep(0, len(acked) >= WRITES), 60, f"{WRITES} acknowledged writes"
        )
        # Power goes while writes are in flight: the last acknowledgements are the ones an
        # unsynced journal would lose.
        for i in majority:
            os.kill(cluster.nodes[i].pid, signal.SIGKILL)  # type: ignore[arg-type]
        stop.set()
        await asyncio.gather(*writers)
        cluster.stop_all()  # reap
        for i in majority:
            lose_power(cluster.nodes[i].data_dir / "metadata")
        for i in ids:
            cluster.start(i)
        await eventually(lambda: api.active(ids), 30, "an active controller after power loss")
        records = await eventually(lambda: api.converged(ids), 30, "all three to agree")
        result["acked"] = acked
        result["missing"] = acked - topic_names(records)

    try:
        run(cluster, body)
    finally:
        cluster.stop_all()
    return result["acked"], result["missing"]


@pytest.fixture
def ledger(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KRAFT_DURABILITY_LEDGER", "1")


def test_power_loss_of_two_controllers_loses_no_acknowledged_write(
    tmp_path: Path, ledger: None
) -> None:
    acked, missing = _power_loss_run(tmp_path, fsync=True)
    assert not missing, f"{len(missing)} of {len(acked)} acknowledged writes lost"


def test_without_fsync_the_same_power_loss_loses_acknowledged_writes(
    tmp_path: Path, ledger: None
) -> None:
    # The debug switch shows what the fsyncs buy, and that the test above can fail.
    acked, missing = _power_loss_run(tmp_path, fsync=False)
    assert missing, f"all {len(acked)} acknowledged writes survived without fsync"
