"""Metadata image benchmark: a snapshot of a 1,000,000-partition image, written and loaded.

    python -m bench.image_bench [--topics 1000] [--partitions 1000] [--brokers 12]
                                [--rf 3] [--out bench/results/image.json]

Builds a `MetadataImage` of `--topics` x `--partitions` partitions (replication factor
`--rf`, replicas spread round-robin over `--brokers` registered brokers, no processes),
writes it with `metadata_log.snapshot.write_snapshot` (encode + fsync) and loads it
back with `read_snapshot` in a fresh subprocess, so that process's peak RSS
(`resource.getrusage(RUSAGE_SELF).ru_maxrss`) is what a broker or tool pays to load it.
The loaded image is compared with the built one (same partitions, same registrations).

Targets: write < 10 s, load < 10 s, load peak RSS < 2 GB. Prints figures and writes JSON
to bench/results/image.json (or --out).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from bench.storage_bench import write_results
from metadata_log.image import (
    BrokerRegistration,
    MetadataImage,
    PartitionRegistration,
    TopicImage,
)
from metadata_log.records import Endpoint

REPO = Path(__file__).resolve().parent.parent
TARGET_WRITE_S = 10.0
TARGET_LOAD_S = 10.0
TARGET_RSS_MB = 2048.0


def build_image(topics: int, partitions: int, brokers: int, rf: int) -> MetadataImage:
    """An image as a controller would hold it after creating the topics."""
    regs = {
        b: BrokerRegistration(
            b,
            uuid.UUID(int=b).hex,
            100 + b,
            (Endpoint("PLAINTEXT", "127.0.0.1", 9000 + b),),
            None,
            False,
        )
        for b in range(brokers)
    }
    image_topics: dict[str, TopicImage] = {}
    topic_ids: dict[str, str] = {}
    n = 0
    for t in range(topics):
        name = f"topic-{t:05d}"
        tid = str(uuid.UUID(int=(t + 1) << 64))
        parts = {}
        for p in range(partitions):
            replicas = tuple((n + i) % brokers for i in range(rf))
            # Vary the shape a little: some partitions have a shrunk ISR or a later epoch.
            isr = replicas if n % 7 else replicas[:-1]
            parts[p] = PartitionRegistration(replicas, isr, replicas[0], n % 5, n % 11)
            n += 1
        image_topics[tid] = TopicImage(name, tid, parts)
        topic_ids[name] = tid
    return MetadataImage(
        offset=12_345_678,
        controller_epoch=3,
        controller_id=3000,
        brokers=regs,
        topics=image_topics,
        topic_ids=topic_ids,
        next_producer_id=5000,
    )


def _load_child(path: str) -> None:
    """Subprocess body: load the snapshot, print seconds, peak RSS and a digest."""
    from metadata_log.snapshot import read_snapshot

    t0 = time.perf_counter()
    image = read_snapshot(Path(path))
    load_s = time.perf_counter() - t0
    rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    n = sum(len(t.partitions) for t in image.topics.values())
    print(
        json.dumps(
            {
                "load_s": load_s,
                "peak_rss_mb": rss_kb / 1024,
                "partitions": n,
                "digest": digest(image),
            }
        )
    )


def digest(image: MetadataImage) -> str:
    """A cheap fingerprint of every partition (compares built and loaded images)."""
    import hashlib

    h = hashlib.blake2b(digest_size=16)
    for tid in sorted(image.topics):
        t = image.topics[tid]
        h.update(f"{t.name}/{tid}".encode())
        for p in sorted(t.partitions):
            r = t.partitions[p]
            h.update(
                repr(
                    (
                        p,
                        r.replicas,
                        r.isr,
                        r.leader,
                        r.leader_epoch,
                        r.partition_epoch,
                        r.removing_replicas,
                        r.adding_replicas,
                    )
                ).encode()
            )
    h.update(repr((image.offset, sorted(image.brokers.items()), image.next_producer_id)).encode())
    return h.hexdigest()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--topics", type=int, default=1000)
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--brokers", type=int, default=12)
    ap.add_argument("--rf", type=int, default=3)
    ap.add_argument("--dir", type=Path, default=None, help="scratch directory's parent")
    ap.add_argument("--out", type=Path, default=REPO / "bench/results/image.json")
    ap.add_argument("--load-child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.load_child:
        _load_child(args.load_child)
        return 0

    from metadata_log.snapshot import write_snapshot

    started = time.perf_counter()
    t0 = time.perf_counter()
    image = build_image(args.topics, args.partitions, args.brokers, args.rf)
    build_s = time.perf_counter() - t0
    total = args.topics * args.partitions
    print(f"built an image of {total:,} partitions in {build_s:.1f} s")
    with tempfile.TemporaryDirectory(prefix="image-bench-", dir=args.dir) as tmp:
        path = Path(tmp) / "snapshot.bin"
        t0 = time.perf_counter()
        write_snapshot(path, image)
        write_s = time.perf_counter() - t0
        size_mb = path.stat().st_size / 1e6
        print(f"write: {write_s:.2f} s, {size_mb:.1f} MB")
        expected = digest(image)
        del image
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        out = subprocess.run(
            [sys.executable, "-m", "bench.image_bench", "--load-child", str(path)],
            check=True,
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO,
        )
        child = json.loads(out.stdout.strip().splitlines()[-1])
    ok_image = child["partitions"] == total and child["digest"] == expected
    print(
        f"load:  {child['load_s']:.2f} s, peak RSS {child['peak_rss_mb']:.0f} MB "
        f"(loaded image {'matches' if ok_image else 'DIFFERS'})"
    )
    met = {
        "write_s": write_s < TARGET_WRITE_S,
        "load_s": child["load_s"] < TARGET_LOAD_S,
        "load_peak_rss_mb": child["peak_rss_mb"] < TARGET_RSS_MB,
        "image_round_trips": ok_image,
    }
    print("targets:", ", ".join(f"{k} {'met' if v else 'MISSED'}" for k, v in met.items()))
    body = {
        "settings": {
            "topics": args.topics,
            "partitions_per_topic": args.partitions,
            "brokers": args.brokers,
            "rf": args.rf,
        },
        "target": {
            "write_s": TARGET_WRITE_S,
            "load_s": TARGET_LOAD_S,
            "load_peak_rss_mb": TARGET_RSS_MB,
        },
        "results": {
            "partitions": total,
            "build_s": round(build_s, 2),
            "write_s": round(write_s, 2),
            "snapshot_mb": round(size_mb, 1),
            "load_s": round(child["load_s"], 2),
            "load_peak_rss_mb": round(child["peak_rss_mb"]),
            "met": met,
        },
    }
    write_results(args.out, "image", ("metadata_log",), body, time.perf_counter() - started)
    return 0 if all(met.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
