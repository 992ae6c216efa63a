"""Compacted logs for the cleaner tests: a fake clock, a compact LogConfig, appends of
key/value pairs, a consumer loop that reads across the gaps, and a crash injector for the
cleaner's file swap (renames and unlinks).
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from storage.cleaner import CleanerStats, clean_log, plan_cleaning
from storage.compression import Compression
from storage.config import LogConfig
from storage.log import Log
from storage.record_batch import iter_batches
from storage.records import Record, build_batch, decode_batch

T0 = 1_700_000_000_000
Rec = tuple[int, bytes | None, bytes | None]  # offset, key, value


class Clock:
    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def compact_config(**overrides: object) -> LogConfig:
    base: dict[str, object] = {
        "segment_bytes": 1024,
        "cleanup_policy": "compact",
        "min_cleanable_dirty_ratio": 0.0,
        "index_interval_bytes": 100,
    }
    return LogConfig(**{**base, **overrides})  # type: ignore[arg-type]


def new_log(path: Path, config: LogConfig | None = None, clock: Clock | None = None) -> Log:
    return Log(path / "t-0", config or compact_config(), clock=clock or Clock())


def append(
    log: Log,
    pairs: list[tuple[bytes | None, bytes | None]],
    per_batch: int = 1,
    codec: Compression = Compression.NONE,
    epoch: int = 0,
    **batch_args: object,
) -> None:
    for i in range(0, len(pairs), per_batch):
        records = [Record(v, k, timestamp=T0 + i) for k, v in pairs[i : i + per_batch]]
        log.append_as_leader(build_batch(records, compression=codec, **batch_args), epoch)  # type: ignore[arg-type]


def read_all(log: Log, start: int | None = None, max_bytes: int = 1 << 20) -> list[Rec]:
    """A consumer loop from `start` (the log start) to the LEO across gaps."""
    offset = log.log_start_offset if start is None else start
    out: list[Rec] = []
    while offset < log.log_end_offset:
        views = list(iter_batches(log.read(offset, max_bytes).read()))
        if not views:
            break
        for v in views:
            out += [
                (r.offset, r.key, r.value) for r in decode_batch(v).records if r.offset >= offset
            ]
        offset = views[-1].next_offset
    return out


def latest(records: list[Rec]) -> dict[bytes | None, bytes | None]:
    return {k: v for _o, k, v in records}


def clean(log: Log, now: int = T0, upper_bound: int | None = None) -> CleanerStats:
    return clean_log(plan_cleaning(log, log.cleaner_checkpoint, upper_bound, now), now)


def pairs_for(n: int, keys: int, offset: int = 0) -> list[tuple[bytes | None, bytes | None]]:
    return [(b"k%d" % (i % keys), b"v%d" % (i + offset)) for i in range(n)]


class SimulatedCrash(Exception):
    pass


@contextmanager
def crash_at(step: int | None) -> Iterator[list[str]]:
    """Count renames and unlinks; raise at call number `step` (a process crash: nothing
    after it happens). Yields the names of the calls made."""
    calls: list[str] = []
    real_replace, real_unlink = os.replace, pathlib.Path.unlink

    def hook(name: str, real: Callable[..., object]) -> Callable[..., object]:
        def wrapper(*args: object, **kwargs: object) -> object:
            if step is not None and len(steps(calls)) == step:
                raise SimulatedCrash(name)
            calls.append(f"{name} {args[0]}")
            return real(*args, **kwargs)

        return wrapper

    real_fsync = os.fsync

    def fsync(fd: int) -> None:  # recorded, never a crash point
        calls.append(f"fsync {os.readlink(f'/proc/self/fd/{fd}')}")
        real_fsync(fd)

    os.replace = hook("replace", real_replace)  # type: ignore[assignment]
    pathlib.Path.unlink = hook("unlink", real_unlink)  # type: ignore[method-assign]
    os.fsync = fsync
    try:
        yield calls
    finally:
        os.replace = real_replace
        pathlib.Path.unlink = real_unlink  # type: ignore[method-assign]
        os.fsync = real_fsync


def steps(calls: list[str]) -> list[str]:
    return [c for c in calls if not c.startswith("fsync")]


def abandon(log: Log) -> None:
    """What a crash leaves: no flush, no index write; just let the descriptors go."""
    for seg in log.segments:
        seg.file.close()
