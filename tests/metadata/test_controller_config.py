"""The controller's configuration file: overrides and defaults, errors that name the
property, and `controller_main` exiting 2 on a bad config.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kraft.controller_config import ConfigError, load_config
from kraft.controller_main import main as controller_main

BASE = [
    "process.roles=controller",
    "node.id=1",
    "controller.quorum.voters=1@127.0.0.1:19091,2@127.0.0.1:19092",
    "controller.quorum.http.endpoints=1@127.0.0.1:19191,2@127.0.0.1:19192",
    "metadata.log.dir=/tmp/unused",
    "controller.quorum.password=p",
]


def test_config_overrides_and_defaults(tmp_path: Path) -> None:
    path = tmp_path / "c.properties"
    path.write_text(
        "\n".join(BASE) + "\nnum.partitions = 3\nlisteners=CONTROLLER://0.0.0.0:19191\n"
    )
    cfg = load_config(path, ["num.partitions=6", "broker.session.timeout.ms=1000"])
    assert (cfg.num_partitions, cfg.session_timeout_ms, cfg.default_replication_factor) == (
        6,
        1000,
        1,
    )
    assert cfg.listener == ("0.0.0.0", 19191) and cfg.http_address(2) == "127.0.0.1:19192"
    assert cfg.max_retained_records == 50_000
    assert cfg.controller_config().num_partitions == 6


@pytest.mark.parametrize(
    ("override", "names"),
    [
        ("node.id=x", "node.id"),
        ("process.roles=broker", "process.roles"),
        ("controller.quorum.voters=1@nohost", "controller.quorum.voters"),
        ("controller.quorum.http.endpoints=1@127.0.0.1:1", "controller.quorum.http.endpoints"),
        ("controller.quorum.password=", "controller.quorum.password"),
        ("listeners=CONTROLLER://127.0.0.1:1", "listeners"),
        ("num.partitions=0", "num.partitions"),
        ("metadata.max.retained.records=many", "metadata.max.retained.records"),
    ],
)
def test_config_errors_name_the_property(override: str, names: str) -> None:
    with pytest.raises(ConfigError, match=names.replace(".", r"\.")):
        load_config(None, [*BASE, override])


def test_main_reports_bad_config_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "c.properties"
    path.write_text("\n".join(BASE[1:]))  # no process.roles
    assert controller_main(["--config", str(path)]) == 2
    assert "process.roles is required" in capsys.readouterr().err
