"""`kraft dev --secure`'s plan and configuration, without starting anything: ports, the
properties each node gets (Kafka's names; the token is ours), the certificates, the
secrets kept 0600 and reused across restarts, and the client configs it hands out.
"""

from __future__ import annotations

import json
import ssl
import stat
from pathlib import Path

import pytest

from common.client_config import load_command_config
from common.controller_plane import plane_client
from common.jaas import client_credentials, parse_jaas_config, plain_users
from common.properties import read_properties
from common.tls import client_context, listener_properties, server_context
from kraft.tools.launcher import LauncherError
from kraft.tools.local_cluster import load_cluster, plan_cluster, write_configs
from kraft.tools.local_security import (
    AUTHORIZER,
    admin_properties,
    client_properties,
    load_or_create,
    write_client_configs,
)
from tests.harness.cli import kraft, one_line_error


@pytest.fixture
def planned(tmp_path: Path):
    cluster = plan_cluster(tmp_path / "data", 3, 2, secure=True)
    write_configs(cluster)
    return cluster


def private(path: Path) -> bool:
    return stat.S_IMODE(path.stat().st_mode) == 0o600


def test_base_port_gives_brokers_an_inter_broker_port(tmp_path: Path) -> None:
    cluster = plan_cluster(tmp_path, 3, 3, 19092, secure=True)
    assert [b.port for b in cluster.brokers] == [19092, 19093, 19094]
    assert cluster.internal_ports == {4: 19392, 5: 19393, 6: 19394}
    assert plan_cluster(tmp_path, 3, 3, 19092).internal_ports == {}
    with pytest.raises(LauncherError, match="no room"):
        plan_cluster(tmp_path, 3, 3, 65300, secure=True)


def test_free_ports_are_all_distinct(tmp_path: Path) -> None:
    cluster = plan_cluster(tmp_path, 3, 3, secure=True)
    ports = [n.port for n in cluster.nodes] + [c.raft_port for c in cluster.controllers]
    ports += list(cluster.internal_ports.values())
    assert len(set(ports)) == len(ports) == 12


def test_broker_properties(planned) -> None:
    sec = planned.security
    b = planned.brokers[0]
    props = read_properties(b.properties_path)
    internal = planned.internal_ports[b.node_id]
    assert props["listeners"] == f"SASL_SSL://{b.address},INTERNAL://{b.host}:{internal}"
    assert props["listener.security.protocol.map"] == (
        "SASL_SSL:SASL_SSL,INTERNAL:SASL_SSL,CONTROLLER:SSL"
    )
    assert props["inter.broker.listener.name"] == "INTERNAL"
    assert props["sasl.enabled.mechanisms"] == "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
    assert props["listener.name.internal.sasl.enabled.mechanisms"] == "PLAIN"
    assert props["sasl.mechanism.inter.broker.protocol"] == "PLAIN"
    assert props["authorizer.class.name"] == AUTHORIZER
    assert props["super.users"] == "User:admin"
    assert props["controller.quorum.http.token"] == sec.http_token
    # The broker logs in as admin between brokers, and accepts admin on both listeners.
    internal_jaas = parse_jaas_config(props["listener.name.internal.plain.sasl.jaas.config"])
    assert client_credentials(props["listener.name.internal.plain.sasl.jaas.config"]) == (
        "admin",
        sec.admin_password,
    )
    assert plain_users(internal_jaas) == {"admin": sec.admin_password}
    client_jaas = parse_jaas_config(props["listener.name.sasl_ssl.plain.sasl.jaas.config"])
    assert plain_users(client_jaas) == {"admin": sec.admin_password}
    for mechanism in ("scram-sha-256", "scram-sha-512"):
        entry = parse_jaas_config(props[f"listener.name.sasl_ssl.{mechanism}.sasl.jaas.config"])
        assert entry.module.endswith("ScramLoginModule") and not entry.options
    assert private(b.properties_path)


def test_the_certificates_serve_tls_for_brokers_and_controllers(planned) -> None:
    """A real handshake between the broker's listener context and a client trusting the
    CA, checking the host name 127.0.0.1; and the brokers' controller-plane client."""
    broker = read_properties(planned.brokers[0].properties_path)
    server = server_context(listener_properties(broker, "SASL_SSL"))
    client = client_context({"ssl.truststore.location": str(planned.security.ca)})
    handshake(server, client, "127.0.0.1")
    handshake(server, client, "localhost")
    # Towards the controllers the broker is an https client with the token, presenting
    # its client certificate.
    plane = plane_client(broker)
    assert plane.scheme == "https" and plane.token == planned.security.http_token
    assert plane.ssl_context is not None
    controller = read_properties(planned.controllers[0].properties_path)
    ctl_server = server_context(listener_properties(controller, "CONTROLLER"))
    assert ctl_server.verify_mode == ssl.CERT_OPTIONAL  # ssl.client.auth=requested
    peer = handshake(ctl_server, plane.ssl_context, "127.0.0.1")
    assert peer is not None and "kraft-dev-client" in str(peer["subject"])


def handshake(server: ssl.SSLContext, client: ssl.SSLContext, host: str) -> dict | None:
    """Drive both ends of a TLS handshake in memory; the server's view of the client
    certificate."""
    s_in, s_out, c_in, c_out = (ssl.MemoryBIO() for _ in range(4))
    s = server.wrap_bio(s_in, s_out, server_side=True)
    c = client.wrap_bio(c_in, c_out, server_hostname=host)
    done = {s: False, c: False}
    for _ in range(20):
        for end in (c, s):
            if not done[end]:
                try:
                    end.do_handshake()
                    done[end] = True
                except ssl.SSLWantReadError:
                    pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if all(done.values()):
            return s.getpeercert()
    raise AssertionError("the handshake did not finish")


def test_controller_properties(planned) -> None:
    for c in planned.controllers:
        props = read_properties(c.properties_path)
        assert props["listener.security.protocol.map"] == "CONTROLLER:SSL"
        assert props["controller.quorum.http.token"] == planned.security.http_token
        assert props["ssl.keystore.location"] == str(planned.security.server_keystore)
        assert props["ssl.client.auth"] == "requested"
        assert props["super.users"] == "User:CN=kraft-dev-client"
        assert private(c.properties_path)


def test_security_is_reused_and_kept_private(planned, tmp_path: Path) -> None:
    sec = planned.security
    again = load_or_create(planned.data_dir)
    assert again == sec and again.http_token == sec.http_token
    assert again.ca.read_bytes() == sec.ca.read_bytes()
    for path in (sec.server_keystore, sec.client_keystore, sec.directory / "secrets.properties"):
        assert private(path)
    text = repr(sec)
    for secret in (sec.admin_password, sec.http_token, sec.user_password):
        assert secret not in text
    other = load_or_create(tmp_path / "other")
    assert other.http_token != sec.http_token


def test_cluster_json_and_properties_bring_the_secure_cluster_back(planned) -> None:
    planned.write_json()
    desc = json.loads((planned.data_dir / "cluster.json").read_text())
    assert desc["secure"] is True
    loaded = load_cluster(planned.data_dir)
    assert loaded is not None and loaded.secure
    assert loaded.internal_ports == planned.internal_ports
    (planned.data_dir / "cluster.json").unlink()
    from_props = load_cluster(planned.data_dir)
    assert from_props is not None and from_props.secure
    assert from_props.internal_ports == planned.internal_ports
    assert [b.port for b in from_props.brokers] == [b.port for b in planned.brokers]


def test_client_configs_are_java_properties_the_tools_read(planned) -> None:
    sec = planned.security
    bootstrap = planned.bootstrap_servers
    client, admin = write_client_configs(sec, planned.data_dir, bootstrap)
    assert private(client) and private(admin)
    java = read_properties(client)
    assert java == client_properties(sec, bootstrap)
    assert java["security.protocol"] == "SASL_SSL"
    assert java["sasl.mechanism"] == "SCRAM-SHA-512"
    assert java["ssl.truststore.type"] == "PEM"
    assert java["ssl.truststore.location"] == str(sec.ca)
    assert client_credentials(java["sasl.jaas.config"]) == ("alice", sec.user_password)
    rd = load_command_config(client)
    assert (rd["sasl.username"], rd["sasl.password"]) == ("alice", sec.user_password)
    assert rd["ssl.ca.location"] == str(sec.ca)
    assert rd["bootstrap.servers"] == bootstrap
    rd_admin = load_command_config(admin)
    assert rd_admin["sasl.mechanism"] == "PLAIN"
    assert read_properties(admin) == admin_properties(sec, bootstrap)
    assert (rd_admin["sasl.username"], rd_admin["sasl.password"]) == ("admin", sec.admin_password)


def test_secure_refuses_a_data_dir_made_without_it(tmp_path: Path) -> None:
    plain = plan_cluster(tmp_path / "data", 1, 1)
    plain.data_dir.mkdir()
    plain.write_json()
    proc = kraft("dev", "--secure", "--data-dir", str(tmp_path / "data"))
    one_line_error(proc, "made without --secure")
    assert not (tmp_path / "data" / "security").exists()
