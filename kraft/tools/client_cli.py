"""`kraft topics`, `kraft produce` and `kraft consume`: kafka-topics.sh,
kafka-console-producer.sh and kafka-console-consumer.sh over the Kafka protocol.

They are ordinary Kafka clients (confluent-kafka's AdminClient, Producer and Consumer)
and work against any broker; `--command-config` takes a Java client's properties for a
secured one (common/client_config.py). The consumer reads by assign(): no consumer
group is used (nor needs an ACL).
Errors (unknown topic, unreachable broker, refused request) end in one line on stderr
and exit status 1.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from typing import Any, BinaryIO

from kraft.tools.client_common import (
    DEFAULT_TIMEOUT_MS,
    CliError,
    bootstrap_parser,
    client_conf,
    cluster_metadata,
    describe_error,
    resolve_connection,
    run_reporting,
    timeout_parser,
    unreachable,
    wait_future,
    watched,
)

COMMANDS = ("topics", "produce", "consume")


def add_parsers(sub: Any) -> None:
    """Register `topics`, `produce` and `consume` on the `kraft` subparsers."""
    common = bootstrap_parser()
    topics = sub.add_parser("topics", help="create, list, describe or delete topics")
    tsub = topics.add_subparsers(dest="topics_command", required=True)
    tops_timeout = timeout_parser()
    create = tsub.add_parser("create", parents=[common, tops_timeout], help="create a topic")
    create.add_argument("--topic", required=True)
    create.add_argument(
        "--partitions", type=int, default=-1, help="default: the broker's num.partitions"
    )
    create.add_argument(
        "--replication-factor",
        type=int,
        default=-1,
        help="default: the broker's default.replication.factor",
    )
    create.add_argument(
        "--config", action="append", default=[], metavar="KEY=VALUE", help="topic config"
    )
    tsub.add_parser("list", parents=[common, tops_timeout], help="print topic names")
    describe = tsub.add_parser(
        "describe", parents=[common, tops_timeout], help="partitions: leader, replicas, isr"
    )
    describe.add_argument("--topic", help="default: every topic")
    delete = tsub.add_parser("delete", parents=[common, tops_timeout], help="delete a topic")
    delete.add_argument("--topic", required=True)

    produce = sub.add_parser(
        "produce", parents=[common], help="send stdin lines to a topic (console producer)"
    )
    produce.add_argument("--topic", required=True)
    produce.add_argument(
        "--acks", default="all", choices=["all", "-1", "0", "1"], help="default: all"
    )
    produce.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="parse.key=true, key.separator=SEP (default tab)",
    )
    produce.add_argument(
        "--producer-property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a librdkafka producer setting",
    )
    produce.add_argument(
        "--timeout-ms",
        type=int,
        default=30_000,
        help="a message not delivered within this long fails (default 30000)",
    )

    consume = sub.add_parser(
        "consume", parents=[common], help="print a topic's records (console consumer)"
    )
    consume.add_argument("--topic", required=True)
    consume.add_argument("--from-beginning", action="store_true")
    consume.add_argument("--partition", type=int, help="default: every partition")
    consume.add_argument(
        "--offset",
        default=None,
        help="an offset, 'earliest' or 'latest' (default latest, earliest with "
        "--from-beginning); needs --partition",
    )
    consume.add_argument(
        "--isolation-level",
        choices=("read_uncommitted", "read_committed"),
        default="read_uncommitted",
        help="read_committed: only committed transactions' records, up to the last stable "
        "offset (default read_uncommitted, as kafka-console-consumer)",
    )
    consume.add_argument("--max-messages", type=int, help="exit after this many records")
    consume.add_argument("--timeout-ms", type=int, help="exit when no record arrives for this long")
    consume.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="print.key=true, key.separator=SEP (default tab), print.partition=true, "
        "print.offset=true",
    )
    consume.add_argument(
        "--consumer-property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a librdkafka consumer setting",
    )


def run(args: argparse.Namespace) -> int:
    """Run a parsed `topics`, `produce` or `consume` command; return the exit status."""
    name = args.command if args.command != "topics" else f"topics {args.topics_command}"

    def action() -> int:
        resolve_connection(args)
        if args.command == "topics":
            return _topics(args)
        if args.command == "produce":
            return _produce(args, sys.stdin.buffer)
        if args.command == "consume":
            return _consume(args, sys.stdout.buffer)
        raise CliError(f"unknown command {args.command}")

    return run_reporting(name, action)


# -- helpers -----------------------------------------------------------------------------


def _pairs(items: list[str], what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CliError(f"{what} {item!r} is not KEY=VALUE")
        out[key.strip()] = value
    return out


def _flag(props: dict[str, str], key: str) -> bool:
    return props.get(key, "false").strip().lower() == "true"


def _separator(props: dict[str, str]) -> str:
    sep = props.get("key.separator", "\t")
    if not sep:
        raise CliError("key.separator must not be empty")
    return sep


def _topic_metadata(client: Any, bootstrap: str, topic: str, timeout_s: float) -> Any:
    """The topic's metadata from `client`, or CliError if the brokers or the topic are not
    there. Leaders may still be unknown for a moment after creation: wait for them."""
    from confluent_kafka import KafkaError, KafkaException

    deadline = time.monotonic() + timeout_s
    while True:
        remaining = max(0.1, deadline - time.monotonic())
        try:
            md = client.list_topics(topic, timeout=remaining)
        except KafkaException as exc:
            raise unreachable(bootstrap, describe_error(exc)) from None
        t = md.topics.get(topic)
        err = t.error if t is not None else None
        if t is None or (err is not None and err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
            raise CliError(f"topic '{topic}' does not exist")
        if err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            # Waiting will not change it: an ACL has to be added first.
            raise CliError(f"topic '{topic}': {err.str()} ({err.name()})")
        ready = err is None and t.partitions and all(p.leader >= 0 for p in t.partitions.values())
        if ready:
            return t
        if time.monotonic() >= deadline:
            why = err.str() if err is not None else "partitions without a leader"
            raise CliError(f"topic '{topic}' is not available: {why}")
        time.sleep(0.1)


# -- topics ------------------------------------------------------------------------------


def _topics(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import AdminClient

    timeout_s = args.timeout_ms / 1000
    admin = watched(AdminClient(client_conf(args)))
    cmd = args.topics_command
    if cmd == "create":
        return _topics_create(admin, args, timeout_s)
    if cmd == "delete":
        return _topics_delete(admin, args, timeout_s)
    md = cluster_metadata(admin, args.bootstrap_server, timeout_s)
    if cmd == "list":
        for name in sorted(md.topics):
            print(name)
        return 0
    # describe
    if args.topic is not None:
        # Metadata for every topic: a request naming the topic could auto-create it.
        if args.topic not in md.topics:
            raise CliError(f"topic '{args.topic}' does not exist")
        names = [args.topic]
    else:
        names = sorted(md.topics)
    for name in names:
        _print_topic(md.topics[name])
    return 0


def _print_topic(t: Any) -> None:
    parts = [t.partitions[i] for i in sorted(t.partitions)]
    rf = len(parts[0].replicas) if parts else 0
    topic_id = getattr(t, "topic_id", None)
    head = f"Topic: {t.topic}\t"
    if topic_id is not None:
        head += f"TopicId: {topic_id}\t"
    print(f"{head}PartitionCount: {len(parts)}\tReplicationFactor: {rf}")
    for p in parts:
        leader = p.leader if p.leader >= 0 else "none"
        print(
            f"\tTopic: {t.topic}\tPartition: {p.id}\tLeader: {leader}\t"
            f"Replicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isrs))}"
        )


def _topics_create(admin: Any, args: argparse.Namespace, timeout_s: float) -> int:
    from confluent_kafka.admin import NewTopic

    config = _pairs(args.config, "--config")
    new = NewTopic(
        args.topic,
        num_partitions=args.partitions,
        replication_factor=args.replication_factor,
        config=config,
    )
    futures = admin.create_topics([new], operation_timeout=timeout_s, request_timeout=timeout_s)
    wait_future(futures[args.topic], args.bootstrap_server, timeout_s)
    print(f"Created topic {args.topic}.")
    return 0


def _topics_delete(admin: Any, args: argparse.Namespace, timeout_s: float) -> int:
    futures = admin.delete_topics(
        [args.topic], operation_timeout=timeout_s, request_timeout=timeout_s
    )
    wait_future(futures[args.topic], args.bootstrap_server, timeout_s)
    print(f"Deleted topic {args.topic}.")
    return 0


# -- produce -----------------------------------------------------------------------------


def _produce(args: argparse.Namespace, stdin: BinaryIO) -> int:
    from confluent_kafka import KafkaError, Producer

    props = _pairs(args.property, "--property")
    parse_key = _flag(props, "parse.key")
    sep = _separator(props).encode()
    acks = "all" if args.acks == "-1" else args.acks
    conf = client_conf(
        args,
        acks=acks,
        **{"message.timeout.ms": args.timeout_ms, "linger.ms": 5},
    )
    conf.update(_pairs(args.producer_property, "--producer-property"))
    producer = watched(Producer(conf))
    # The producer's own metadata request: the broker may auto-create the topic.
    _topic_metadata(producer, args.bootstrap_server, args.topic, args.timeout_ms / 1000)

    failures: list[str] = []

    def on_delivery(err: KafkaError | None, _msg: Any) -> None:
        if err is not None:
            failures.append(f"{err.str()} ({err.name()})")

    sent = 0
    for lineno, raw in enumerate(stdin, 1):
        line = raw.rstrip(b"\n")
        if line.endswith(b"\r"):
            line = line[:-1]
        key: bytes | None = None
        if parse_key:
            key, found, value = line.partition(sep)
            if not found:
                producer.flush(args.timeout_ms / 1000)
                raise CliError(f"no key separator found on line number {lineno}: {line!r}")
        else:
            value = line
        while True:
            try:
                producer.produce(args.topic, value=value, key=key, on_delivery=on_delivery)
                break
            except BufferError:  # local queue full: let deliveries drain
                producer.poll(0.1)
        sent += 1
        producer.poll(0)
    remaining = producer.flush(args.timeout_ms / 1000 + 5)
    if remaining:
        failures.append(f"{remaining} message(s) still undelivered at exit")
    if failures:
        first = failures[0]
        more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
        raise CliError(f"{len(failures)} of {sent} message(s) not delivered: {first}{more}")
    return 0


# -- consume -----------------------------------------------------------------------------


def _start_offset(args: argparse.Namespace) -> int:
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END

    if args.offset is None:
        return OFFSET_BEGINNING if args.from_beginning else OFFSET_END
    if args.partition is None:
        raise CliError("--offset needs --partition")
    if args.offset == "earliest":
        return OFFSET_BEGINNING
    if args.offset == "latest":
        return OFFSET_END
    try:
        offset = int(args.offset)
    except ValueError:
        raise CliError(f"--offset {args.offset!r}: an offset, 'earliest' or 'latest'") from None
    if offset < 0:
        raise CliError(f"--offset {offset}: must not be negative")
    return offset


def _consumer_conf(args: argparse.Namespace) -> dict[str, Any]:
    conf = client_conf(
        args,
        **{
            "group.id": "kraft-console-consumer",  # required by the client; never joined
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "allow.auto.create.topics": False,
            "enable.partition.eof": False,
            # librdkafka defaults to read_committed; the console consumer to uncommitted.
            "isolation.level": args.isolation_level,
        },
    )
    conf.update(_pairs(args.consumer_property, "--consumer-property"))
    return conf


def _consume(args: argparse.Namespace, out: BinaryIO) -> int:
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    props = _pairs(args.property, "--property")
    print_key = _flag(props, "print.key")
    print_partition = _flag(props, "print.partition")
    print_offset = _flag(props, "print.offset")
    sep = _separator(props).encode()
    start = _start_offset(args)
    if args.max_messages is not None and args.max_messages <= 0:
        return 0
    consumer = watched(Consumer(_consumer_conf(args)))
    # SIGTERM ends the loop like Ctrl-C does.
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    count = 0
    try:
        meta_timeout = (args.timeout_ms or DEFAULT_TIMEOUT_MS) / 1000
        t = _topic_metadata(consumer, args.bootstrap_server, args.topic, max(meta_timeout, 1.0))
        if args.partition is not None:
            if args.partition not in t.partitions:
                raise CliError(
                    f"topic '{args.topic}' has no partition {args.partition} "
                    f"({len(t.partitions)} partitions)"
                )
            ids = [args.partition]
        else:
            ids = sorted(t.partitions)
        consumer.assign([TopicPartition(args.topic, p, start) for p in ids])
        idle_deadline = (
            time.monotonic() + args.timeout_ms / 1000 if args.timeout_ms is not None else None
        )
        while args.max_messages is None or count < args.max_messages:
            wait = 0.5
            if idle_deadline is not None:
                wait = min(wait, max(0.0, idle_deadline - time.monotonic()))
            msg = consumer.poll(wait)
            if msg is None:
                if idle_deadline is not None and time.monotonic() >= idle_deadline:
                    break
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF or err.retriable():
                    continue
                if err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
                    # librdkafka looks up the coordinator of the group.id it insists on;
                    # this consumer never joins or commits, so it needs no group ACL.
                    continue
                raise CliError(f"{err.str()} ({err.name()})")
            parts: list[bytes] = []
            if print_partition:
                parts.append(b"Partition:%d" % msg.partition())
            if print_offset:
                parts.append(b"Offset:%d" % msg.offset())
            if print_key:
                key = msg.key()
                parts.append(key if key is not None else b"null")
            value = msg.value()
            parts.append(value if value is not None else b"null")
            out.write(sep.join(parts) + b"\n")
            out.flush()
            count += 1
            if idle_deadline is not None:
                idle_deadline = time.monotonic() + args.timeout_ms / 1000
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        consumer.close()
    print(f"Processed a total of {count} messages", file=sys.stderr)
    return 0


def _raise_interrupt(signum: int, frame: Any) -> None:
    del signum, frame
    raise KeyboardInterrupt
