"""common/properties.py: the one `.properties` loader and its typed getters, and the
agreed meaning of port 0 in the broker's and the controller's configs."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from broker.config import from_properties as broker_config
from common.properties import ConfigError, Properties, parse_properties
from kraft.controller_config import from_properties as controller_config

BROKER = {
    "process.roles": "broker",
    "node.id": "4",
    "controller.quorum.http.endpoints": "1@127.0.0.1:19191",
    "listeners": "PLAINTEXT://127.0.0.1:9092",
    "log.dirs": "/tmp/a",
}
CONTROLLER = {
    "process.roles": "controller",
    "node.id": "1",
    "controller.quorum.voters": "1@127.0.0.1:19091",
    "controller.quorum.http.endpoints": "1@127.0.0.1:19191",
    "metadata.log.dir": "/tmp/unused",
    "controller.quorum.password": "p",
}


def test_parse_properties_reads_javas_subset() -> None:
    text = "# comment\n! also\na=1\nb : 2\nc 3\nd=x\\\n   y\ne=tab\\tend\nf\\=g=h\na=last\n"
    assert parse_properties(text) == {
        "a": "last",
        "b": "2",
        "c": "3",
        "d": "xy",
        "e": "tab\tend",
        "f=g": "h",
    }


def test_typed_getters_use_the_value_then_the_defaults_table_then_the_default() -> None:
    props = Properties(
        {"n": " 7 ", "blank": "  ", "flag": "TRUE", "items": "a, b,,c"},
        {"tabled": "3", "blank": "5"},
    )
    assert props.get_int("n", min=0) == 7
    assert props.get_int("blank", min=0) == 5  # blank is unset: the table's default
    assert props.get_int("tabled", 9, min=0) == 3
    assert props.get_int("absent", 9, min=0) == 9
    assert props.get_bool("flag") is True and props.get_bool("absent", False) is False
    assert props.get_list("items") == ["a", "b", "c"] and props.get_list("absent") == []
    assert props.get_string("absent") is None and props.required("n") == "7"


@pytest.mark.parametrize(
    ("values", "call", "message"),
    [
        ({}, lambda p: p.required("x.y"), "x.y is required"),
        ({}, lambda p: p.get_int("x.y", min=0), "x.y is required"),
        ({"x.y": "ten"}, lambda p: p.get_int("x.y", min=0), "x.y must be an integer, got 'ten'"),
        ({"x.y": "-1"}, lambda p: p.get_int("x.y", min=0, max=5), "x.y must be >= 0, got -1"),
        ({"x.y": "yes"}, lambda p: p.get_bool("x.y"), "x.y must be true or false, got 'yes'"),
        ({"x.y": "a:1"}, lambda p: p.get_listeners("x.y"), "x.y: expected NAME://host:port"),
        ({"x.y": "1@h"}, lambda p: p.get_node_addresses("x.y"), "x.y: expected host:port"),
        ({"x.y": "1@h:1,1@h:2"}, lambda p: p.get_node_addresses("x.y"), "node 1 appears twice"),
        ({"x.y": "P://h:65536"}, lambda p: p.get_listeners("x.y"), "port 65536 is out of range"),
    ],
)
def test_errors_name_the_property_and_the_value(
    values: dict[str, str], call: Callable[[Properties], object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        call(Properties(values))


# -- port 0 ---------------------------------------------------------------------------------
# Kafka's meaning: port 0 in `listeners` binds an ephemeral port. An address another process
# connects to (controller.quorum.voters, controller.quorum.http.endpoints) cannot be port 0,
# and a controller's HTTP listener must be its entry in controller.quorum.http.endpoints.


def test_port_0_in_a_brokers_listeners_is_an_ephemeral_port() -> None:
    cfg = broker_config({**BROKER, "listeners": "PLAINTEXT://127.0.0.1:0"})
    assert (cfg.listener.host, cfg.listener.port) == ("127.0.0.1", 0)


@pytest.mark.parametrize(
    ("config", "base", "change", "named"),
    [
        (broker_config, BROKER, {"controller.quorum.http.endpoints": "1@127.0.0.1:0"},
         "controller.quorum.http.endpoints"),
        (controller_config, CONTROLLER, {"controller.quorum.http.endpoints": "1@127.0.0.1:0"},
         "controller.quorum.http.endpoints"),
        (controller_config, CONTROLLER, {"controller.quorum.voters": "1@127.0.0.1:0"},
         "controller.quorum.voters"),
        (controller_config, CONTROLLER, {"listeners": "CONTROLLER://127.0.0.1:0"}, "listeners"),
    ],
)  # fmt: skip
def test_port_0_is_refused_where_others_connect(
    config: Callable[[dict[str, str]], object],
    base: dict[str, str],
    change: dict[str, str],
    named: str,
) -> None:
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        config({**base, **change})


def test_a_controllers_listener_matches_its_http_endpoint() -> None:
    cfg = controller_config({**CONTROLLER, "listeners": "CONTROLLER://0.0.0.0:19191"})
    assert cfg.listener == ("0.0.0.0", 19191)
