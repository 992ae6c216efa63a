"""The AlterPartition case of bench/controller_bench.py: ISR changes committed through a
real 3-controller quorum, as brokers send them.

Set-up (untimed): 3 fake brokers register and unfence over the HTTP API (the bench runs
with a 600 s session timeout, so nobody heartbeats afterwards), and one topic of
`changes` partitions, RF 3, is created. Each round changes the ISR of every partition
once (`changes` changes): odd rounds shrink each ISR to its leader, even rounds grow it
back to all three replicas; a round is timed from its first request to its last answer,
and every change must be answered NONE (the partition epochs are followed from the
answers).

Two ways to send them:
- `batched`: each broker sends its partitions' changes in AlterPartition requests across
  partitions (POST /v1/partitions/alter-many, `chunk` partitions per request, 0 = all of
  them), the three brokers at once: what broker/alter_partition.py does.
- `single`: one partition per request (POST /v1/partitions/alter), `concurrency`
  requests in flight: what brokers did before, one task per partition.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

import aiohttp
import msgspec

from metadata_log.image import MetadataImage
from metadata_log.snapshot import decode_snapshot

BROKERS = (1, 2, 3)
TOPIC = "bench-alter"


class BenchError(RuntimeError):
    pass


async def _post(session: aiohttp.ClientSession, url: str, body: Any) -> Any:
    async with session.post(url, data=msgspec.json.encode(body), timeout=_TIMEOUT) as resp:
        data = await resp.read()
        if resp.status >= 300:
            raise BenchError(f"POST {url}: HTTP {resp.status} {data[:200]!r}")
        return msgspec.json.decode(data) if data else None


_TIMEOUT = aiohttp.ClientTimeout(total=30)


async def _image(session: aiohttp.ClientSession, base: str) -> MetadataImage:
    async with session.get(f"{base}/v1/metadata/snapshot", timeout=_TIMEOUT) as resp:
        resp.raise_for_status()
        return decode_snapshot(await resp.read())


async def set_up(session: aiohttp.ClientSession, base: str, partitions: int) -> dict[int, int]:
    """Register and unfence the brokers, create the topic; broker id -> broker epoch."""
    epochs: dict[int, int] = {}
    for b in BROKERS:
        reg = await _post(
            session,
            f"{base}/v1/brokers/register",
            {
                "broker_id": b,
                "incarnation_id": f"bench-{b}-{time.time_ns()}",
                "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 19000 + b}],
            },
        )
        epochs[b] = reg["broker_epoch"]
    offset = (await _image(session, base)).offset + 1
    for b in BROKERS:
        hb = await _post(
            session,
            f"{base}/v1/brokers/heartbeat",
            {"broker_id": b, "broker_epoch": epochs[b], "current_metadata_offset": offset},
        )
        if hb["is_fenced"]:
            raise BenchError(f"broker {b} is still fenced: {hb}")
    topic = {"name": TOPIC, "num_partitions": partitions, "replication_factor": len(BROKERS)}
    created = await _post(session, f"{base}/v1/topics", {"topics": [topic]})
    if created["topics"][0]["error_code"] != 0:
        raise BenchError(f"topic not created: {created}")
    return epochs


class _State:
    """What the brokers believe of each partition (from the image, then the answers)."""

    def __init__(self, image: MetadataImage) -> None:
        topic = image.topic_by_name(TOPIC)
        if topic is None:
            raise BenchError("the topic is not in the image")
        self.topic_id = topic.topic_id
        self.parts = {
            p: {
                "leader": r.leader,
                "leader_epoch": r.leader_epoch,
                "partition_epoch": r.partition_epoch,
                "replicas": list(r.replicas),
            }
            for p, r in topic.partitions.items()
        }

    def item(self, p: int, shrink: bool) -> dict[str, Any]:
        s = self.parts[p]
        return {
            "partition": p,
            "leader_epoch": s["leader_epoch"],
            "partition_epoch": s["partition_epoch"],
            "new_isr": [s["leader"]] if shrink else s["replicas"],
        }

    def answered(self, p: int, answer: dict[str, Any]) -> None:
        if answer["error_code"] != 0:
            raise BenchError(f"partition {p}: error {answer['error_code']} {answer}")
        self.parts[p]["partition_epoch"] = answer["partition_epoch"]


async def _round_batched(
    session: aiohttp.ClientSession,
    base: str,
    state: _State,
    epochs: dict[int, int],
    shrink: bool,
    chunk: int,
) -> int:
    requests = 0

    async def broker(b: int) -> None:
        nonlocal requests
        mine = [p for p, s in sorted(state.parts.items()) if s["leader"] == b]
        size = chunk or len(mine) or 1
        for i in range(0, len(mine), size):
            items = [state.item(p, shrink) for p in mine[i : i + size]]
            body = {
                "broker_id": b,
                "broker_epoch": epochs[b],
                "topics": [{"topic_id": state.topic_id, "partitions": items}],
            }
            requests += 1
            resp = await _post(session, f"{base}/v1/partitions/alter-many", body)
            if resp["error_code"] != 0:
                raise BenchError(f"broker {b}: request error {resp}")
            for r in resp["results"]:
                state.answered(r["partition"], r)

    await asyncio.gather(*(broker(b) for b in BROKERS))
    return requests


async def _round_single(
    session: aiohttp.ClientSession,
    base: str,
    state: _State,
    epochs: dict[int, int],
    shrink: bool,
    concurrency: int,
) -> int:
    todo = sorted(state.parts)

    async def worker() -> None:
        while todo:
            p = todo.pop()
            s = state.parts[p]
            body = {
                "broker_id": s["leader"],
                "broker_epoch": epochs[s["leader"]],
                "topic_id": state.topic_id,
                **state.item(p, shrink),
            }
            state.answered(p, await _post(session, f"{base}/v1/partitions/alter", body))

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return len(state.parts)


async def alter_partition_case(
    session: aiohttp.ClientSession,
    address: str,
    *,
    changes: int,
    rounds: int,
    modes: list[str],
    chunk: int,
    concurrency: int,
) -> dict[str, Any]:
    base = f"http://{address}"
    epochs = await set_up(session, base, changes)
    state = _State(await _image(session, base))
    out: dict[str, Any] = {"partitions": changes, "rounds": rounds}
    shrink = True
    for mode in modes:
        rows = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            if mode == "batched":
                requests = await _round_batched(session, base, state, epochs, shrink, chunk)
            else:
                requests = await _round_single(session, base, state, epochs, shrink, concurrency)
            elapsed = time.perf_counter() - t0
            rows.append(
                {
                    "shrink": shrink,
                    "seconds": round(elapsed, 4),
                    "changes_per_s": round(changes / elapsed, 1),
                    "requests": requests,
                }
            )
            shrink = not shrink
        rates = [r["changes_per_s"] for r in rows]
        out[mode] = {
            "rounds": rows,
            "median_changes_per_s": round(statistics.median(rates), 1),
            "min_changes_per_s": min(rates),
            "max_changes_per_s": max(rates),
            **({"chunk": chunk} if mode == "batched" else {"concurrency": concurrency}),
        }
        print(
            f"  AlterPartition {mode}: {changes} changes per round, median "
            f"{out[mode]['median_changes_per_s']:.0f} changes/s "
            f"(min {min(rates):.0f}, max {max(rates):.0f}; {rows[-1]['requests']} requests "
            "per round)",
            flush=True,
        )
    return out
