"""`kraft dev --secure` as a process, stopped and started again: the cluster stays
secured (with or without `--secure` the second time), the client config it printed keeps
working with the same user, and no secret reaches its output or the nodes' logs.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from common.properties import read_properties
from tests.harness.cli import kraft, ok
from tests.harness.dev_cluster import READY, Cluster, DevProcess


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path, secure=True)
    try:
        yield c
    finally:
        for d in c.procs:
            d.kill_everything()


def secrets_of(data: Path) -> list[str]:
    values = read_properties(data / "security" / "secrets.properties")
    return [values[k] for k in ("admin.password", "controller.quorum.http.token",
                                "user.password")]  # fmt: skip


def test_restart_keeps_security_and_the_printed_config(cluster: Cluster) -> None:
    cluster.start()
    assert cluster.client_config is not None and cluster.admin_config is not None
    first_config = cluster.client_config.read_text()
    ok(kraft("topics", "create", "--topic", "kept", "--command-config", str(cluster.admin_config)))
    cluster.stop()

    # Without --secure: the data dir's cluster is secured, and comes back so.
    again = DevProcess(cluster.data)
    cluster.procs.append(again)
    again.wait_for_line(READY, 120)
    assert "existing secured cluster" in "\n".join(again.lines)
    again.wait_for_line("ready:", 10)
    assert cluster.client_config.read_text() == first_config
    listed = kraft("topics", "list", "--command-config", str(cluster.admin_config))
    assert "kept" in ok(listed).split()
    # alice logs in with the config printed the first time (she sees no topic: no ACLs).
    assert ok(kraft("topics", "list", "--command-config", str(cluster.client_config))) == ""
    cluster.stop()

    logs = [p.read_text(errors="replace") for p in cluster.data.glob("*/*.log")]
    output = ["\n".join(d.lines) for d in cluster.procs]
    assert len(logs) == 6
    for secret in secrets_of(cluster.data):
        for text in logs + output:
            assert secret not in text
