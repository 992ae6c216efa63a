"""Storage benchmark: `Log` append and read throughput next to raw file I/O.

    python -m bench.storage_bench [--rounds 5] [--total-mb N] [--fsync] [--profile]

For 16 KiB and 1 MiB record batches (each built once, uncompressed, ~1 KiB random
records), every round writes the same bytes twice to the same filesystem: raw, `os.write`
of the batch to a plain O_APPEND file, and through `Log.append_as_leader`, which
validates the batch (CRC32C), copies it once (the input is immutable `bytes`) to patch
offsets and epoch, indexes it and writes it. Then the log is read back twice: raw
`os.pread` of its segment files, and `Log.read(offset, 1 MiB)` + `FileSlice.read`,
advancing by the batch headers (`iter_batches`) as a consumer would.

Fairness, on a noisy VM:
- The raw and Log writes are interleaved in ~8 MiB slices whose order flips every slice,
  each slice timed on its own, so both see the same machine state. (On this VM, memory
  the balloon has handed back to the host is several times slower to touch the first
  time, and which memory the page cache gets changes from second to second.)
- Before each round an untimed warm-up writes and deletes twice the round's bytes, so
  the page cache mostly gets already-touched memory; its rate is recorded (a low figure
  is that first-touch cost). A cold round dilutes the Log's overhead, so look at the
  per-round ratios too.
- Opening, closing and deleting files are never timed; every file is deleted between
  rounds. Without `--fsync` neither write timing syncs (both measure the write path into
  the page cache, where the Log's own CPU cost shows fully); with `--fsync` both include
  one final fsync (`os.fsync` / `Log.flush`).
- Reads come from the page cache after two untimed passes (so both readers find the
  pages in the same LRU state); the raw and Log read order alternates by round.
- Figures are medians over the rounds; ratios are medians of the per-round ratios.

Then one compaction figure: the log cleaner (storage/cleaner.py) over 100k records of
100 keys (100-byte values, 10 per batch, 1 MiB segments): MB/s of log cleaned and records
per second, median over the rounds (`--compaction-only` runs just this, writing no JSON).

Prints a table and writes JSON to bench/results/storage.json (or --out).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import dataclasses
import datetime as dt
import gc
import io
import json
import os
import platform
import pstats
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from storage.cleaner import clean_log, plan_cleaning
from storage.config import LogConfig
from storage.log import Log
from storage.record_batch import iter_batches, validate_batch
from storage.records import Record, build_batch

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "bench" / "results" / "storage.json"
KIB = 1024
MIB = 1024 * 1024
MB = 1_000_000  # throughput unit: MB/s = 10^6 bytes per second
READ_MAX_BYTES = MIB  # Log.read max_bytes and raw pread chunk
INTERLEAVE_BYTES = 8 * MIB  # raw and Log writes alternate in slices of this size
RECORD_VALUE_BYTES = 1000
RECORD_KEY_BYTES = 16
TARGET_APPEND_RATIO = 0.8  # acceptance: Log append >= 0.8 x raw write, 1 MiB batches

# (label, target batch size, default total MiB written per run)
SIZES: list[tuple[str, int, int]] = [("16 KiB", 16 * KIB, 256), ("1 MiB", MIB, 512)]


@dataclasses.dataclass
class Batch:
    label: str
    data: bytes
    records: int


def make_batch(label: str, target: int, rng: random.Random) -> Batch:
    """One valid uncompressed batch of ~1 KiB random records, as large as fits `target`."""

    def build(n: int) -> bytes:
        records = [
            Record(value=rng.randbytes(RECORD_VALUE_BYTES), key=rng.randbytes(RECORD_KEY_BYTES))
            for _ in range(n)
        ]
        return build_batch(records, now_ms=int(time.time() * 1000))

    per_record = len(build(2)) - len(build(1))
    n = max(1, (target - len(build(1))) // per_record + 1)
    data = build(n)
    while len(data) > target and n > 1:  # varints grow with the offset delta; step back
        n -= 1
        data = build(n)
    validate_batch(data)
    return Batch(label, data, n)


# -- timed runs ---------------------------------------------------------------------------


def warm_up(directory: Path, total: int) -> float:
    """Write and delete `total` bytes (untimed for the results); returns its MB/s."""
    path = directory / "warmup.bin"
    chunk = bytes(MIB)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        t0 = time.perf_counter()
        left = total
        while left > 0:
            left -= os.write(fd, chunk[: min(left, MIB)])
        elapsed = time.perf_counter() - t0
    finally:
        os.close(fd)
        path.unlink()
    return total / elapsed / MB


def timed_writes(
    directory: Path, log: Log, batch: bytes, count: int, fsync: bool, log_first: bool
) -> tuple[float, float]:
    """Write `batch` `count` times both raw and through `log`; (raw seconds, Log seconds).

    The two runs are interleaved in slices of ~INTERLEAVE_BYTES (the order flips every
    slice), each slice timed on its own, so both see the same machine state: on this VM
    the cost of fresh memory for the page cache changes from second to second.
    """
    path = directory / "raw.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    size = len(batch)
    per_slice = max(1, INTERLEAVE_BYTES // size)
    write = os.write
    append = log.append_as_leader
    clock = time.perf_counter
    raw_s = log_s = 0.0
    try:
        done = 0
        flip = log_first
        while done < count:
            n = min(per_slice, count - done)
            for kind in ("log", "raw") if flip else ("raw", "log"):
                if kind == "raw":
                    t0 = clock()
                    for _ in range(n):
                        if write(fd, batch) != size:
                            raise OSError("short write")
                    raw_s += clock() - t0
                else:
                    t0 = clock()
                    for _ in range(n):
                        append(batch, leader_epoch=0)
                    log_s += clock() - t0
            done += n
            flip = not flip
        if fsync:
            for kind in ("log", "raw") if log_first else ("raw", "log"):
                t0 = clock()
                if kind == "raw":
                    os.fsync(fd)
                    raw_s += clock() - t0
                else:
                    log.flush()
                    log_s += clock() - t0
    finally:
        os.close(fd)
        path.unlink()
    return raw_s, log_s


def log_append(log: Log, batch: bytes, count: int, fsync: bool) -> float:
    """append_as_leader `batch` `count` times; returns seconds (used by --profile)."""
    append = log.append_as_leader
    t0 = time.perf_counter()
    for _ in range(count):
        append(batch, leader_epoch=0)
    if fsync:
        log.flush()
    return time.perf_counter() - t0


def raw_read(paths: list[Path]) -> tuple[float, int]:
    """Sequential os.pread of the files in READ_MAX_BYTES chunks; (seconds, bytes)."""
    total = 0
    pread = os.pread
    t0 = time.perf_counter()
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            pos = 0
            while data := pread(fd, READ_MAX_BYTES, pos):
                pos += len(data)
        finally:
            os.close(fd)
        total += pos
    return time.perf_counter() - t0, total


def log_read(log: Log) -> tuple[float, int]:
    """Read the whole log with Log.read(max_bytes=1 MiB); (seconds, bytes of whole batches).

    A slice may end inside a batch; the next read starts at that batch again, so only
    whole batches count as bytes read.
    """
    offset = log.log_start_offset
    end = log.log_end_offset
    total = 0
    read = log.read
    t0 = time.perf_counter()
    while offset < end:
        data = read(offset, READ_MAX_BYTES).read()
        last = None
        for view in iter_batches(data):
            total += view.size
            last = view
        if last is None:
            raise RuntimeError(f"Log.read at offset {offset} returned no whole batch")
        offset = last.next_offset
    return time.perf_counter() - t0, total


def segment_paths(log: Log) -> list[Path]:
    return [seg.log_path for seg in log.segments]


def check_log(log: Log, batch: Batch, count: int) -> None:
    """Untimed sanity checks: every offset assigned, first batch intact and patched."""
    expected = count * batch.records
    if log.log_end_offset != expected:
        raise RuntimeError(f"log end offset {log.log_end_offset}, expected {expected}")
    if log.size_in_bytes != count * len(batch.data):
        raise RuntimeError(f"log holds {log.size_in_bytes} bytes, not {count * len(batch.data)}")
    for offset in (0, expected - 1):
        view = validate_batch(log.read(offset, 0).read())  # min_one_message: one batch
        if view.last_offset < offset or view.base_offset > offset:
            raise RuntimeError(f"read at {offset} returned offsets {view!r}")
        if view.partition_leader_epoch != 0:
            raise RuntimeError(f"leader epoch not stamped: {view!r}")


# -- one size -----------------------------------------------------------------------------


def bench_size(
    batch: Batch, total_bytes: int, rounds: int, fsync: bool, warmup: bool, directory: Path
) -> dict:
    size = len(batch.data)
    count = max(1, total_bytes // size)
    nbytes = count * size
    per_round: list[dict] = []
    warmups: list[float] = []
    for r in range(rounds):
        row: dict = {"round": r + 1}
        gc.collect()
        if warmup:  # both files live at once: warm twice their size
            warmups.append(round(warm_up(directory, 2 * nbytes), 1))
        log = Log(directory / "bench-0", LogConfig())
        try:
            raw_s, log_s = timed_writes(directory, log, batch.data, count, fsync, r % 2 == 1)
            row["raw_write_mb_s"] = nbytes / raw_s / MB
            row["log_append_mb_s"] = nbytes / log_s / MB
            check_log(log, batch, count)
            paths = segment_paths(log)
            # Untimed: the first read of a just-written page marks it referenced, the
            # second moves it to the active LRU list (a cost the second reader alone
            # would pay); after two passes both timed readers see the same page state.
            for _ in range(2):
                raw_read(paths)
            reads: list[tuple[str, Callable[[], tuple[float, int]]]] = [
                ("raw_read_mb_s", lambda paths=paths: raw_read(paths)),
                ("log_read_mb_s", lambda log=log: log_read(log)),
            ]
            if r % 2:
                reads.reverse()
            for key, fn in reads:
                gc.collect()
                seconds, got = fn()
                if got != nbytes:
                    raise RuntimeError(f"{key}: read {got} bytes, wrote {nbytes}")
                row[key] = nbytes / seconds / MB
        finally:
            log.delete()
        row["append_ratio"] = row["log_append_mb_s"] / row["raw_write_mb_s"]
        row["read_ratio"] = row["log_read_mb_s"] / row["raw_read_mb_s"]
        per_round.append({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()})

    def med(key: str) -> float:
        return round(statistics.median(x[key] for x in per_round), 3)

    return {
        "batch": batch.label,
        "batch_bytes": size,
        "records_per_batch": batch.records,
        "batches_per_run": count,
        "bytes_per_run": nbytes,
        "raw_write_mb_s": med("raw_write_mb_s"),
        "log_append_mb_s": med("log_append_mb_s"),
        "append_ratio": med("append_ratio"),
        "raw_read_mb_s": med("raw_read_mb_s"),
        "log_read_mb_s": med("log_read_mb_s"),
        "read_ratio": med("read_ratio"),
        "rounds": per_round,
        "warmup_write_mb_s": warmups,
    }


# -- profiling ----------------------------------------------------------------------------


def profile_size(batch: Batch, total_bytes: int, directory: Path, top: int = 20) -> str:
    """cProfile of Log append and Log read for one batch size; the report as text."""
    count = max(1, total_bytes // len(batch.data))
    out = io.StringIO()
    warm_up(directory, count * len(batch.data))
    log = Log(directory / "bench-0", LogConfig())
    try:
        for title, fn in (
            ("Log.append_as_leader", lambda: log_append(log, batch.data, count, False)),
            ("Log.read + iter_batches", lambda: log_read(log)[0]),
        ):
            prof = cProfile.Profile()
            prof.enable()
            seconds = fn()
            prof.disable()
            rate = count * len(batch.data) / seconds / MB
            print(
                f"\n== cProfile: {title}, {batch.label} batches x {count} "
                f"({rate:.0f} MB/s under the profiler) ==",
                file=out,
            )
            pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    finally:
        log.delete()
    return out.getvalue()


# -- reporting ----------------------------------------------------------------------------


def bench_compaction(directory: Path, rounds: int, rng: random.Random) -> dict:
    """One cleaning pass over 100k records of 100 keys, timed alone (the appends not)."""
    records, keys, per_batch = 100_000, 100, 10
    config = LogConfig(cleanup_policy="compact", segment_bytes=MIB)
    batches = [
        build_batch(
            [
                Record(rng.randbytes(100), b"key-%03d" % rng.randrange(keys), timestamp=1)
                for _ in range(per_batch)
            ],
            now_ms=1,
        )
        for _ in range(records // per_batch)
    ]
    runs = []
    for r in range(rounds):
        log = Log(directory / f"compaction-{r}" / "t-0", config)
        for batch in batches:
            log.append_as_leader(batch, 0)
        log.roll()
        plan = plan_cleaning(log, None, None, now_ms=10)
        gc.collect()
        started = time.perf_counter()
        stats = clean_log(plan, now_ms=10)
        elapsed = time.perf_counter() - started
        assert stats.completed and stats.records_read == records
        runs.append((stats.bytes_read / elapsed / 1e6, records / elapsed, stats.bytes_after))
        log.delete()
    return {
        "records": records,
        "keys": keys,
        "records_per_batch": per_batch,
        "cleaned_mb_s": round(statistics.median(x[0] for x in runs), 1),
        "records_per_s": round(statistics.median(x[1] for x in runs)),
        "bytes_before": sum(len(b) for b in batches),
        "bytes_after": runs[0][2],
    }


def print_compaction(res: dict) -> None:
    print(
        f"compaction: {res['records']} records of {res['keys']} keys, "
        f"{res['bytes_before'] / 1e6:.1f} MB -> {res['bytes_after'] / 1e3:.1f} kB: "
        f"{res['cleaned_mb_s']:.1f} MB/s, {res['records_per_s']} records/s (median)"
    )


def machine_info() -> dict:
    info: dict = {
        "nproc": os.cpu_count(),
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
    }
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                info["mem_total_mib"] = int(line.split()[1]) // 1024
                break
    return info


def filesystem_of(path: Path) -> str | None:
    """The mount (device, type) holding `path`, from /proc/mounts."""
    best = None
    with contextlib.suppress(OSError):
        real = str(path.resolve())
        for line in Path("/proc/mounts").read_text().splitlines():
            dev, mnt, fstype, *_ = line.split()
            if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and (
                best is None or len(mnt) > len(best[1])
            ):
                best = (dev, mnt, fstype)
    return f"{best[0]} on {best[1]} ({best[2]})" if best else None


def git(*args: str) -> str | None:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        res = subprocess.run(
            ["git", "-C", str(REPO), *args], capture_output=True, text=True, timeout=5
        )
        if res.returncode == 0:
            return res.stdout.strip()
    return None


def write_results(
    out: Path,
    benchmark: str,
    code_dirs: tuple[str, ...],
    body: dict,
    elapsed_s: float,
) -> None:
    """Every bench's JSON: what ran where and when (date, commit, whether `code_dirs`
    had uncommitted changes, the machine), then its own `body` (settings, target,
    results), and the run time. Prints where it went."""
    doc = {
        "benchmark": benchmark,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "git_commit": git("rev-parse", "HEAD"),
        "uncommitted_changes": bool(git("status", "--porcelain", "--", *code_dirs)),
        "machine": machine_info(),
        **body,
        "elapsed_s": round(elapsed_s, 1),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {out.relative_to(REPO) if out.is_relative_to(REPO) else out}")
    print(f"elapsed {elapsed_s:.1f} s")


def print_table(results: list[dict]) -> None:
    head = (
        f"{'batch':>7} {'bytes/batch':>11} {'written':>9} | {'raw write':>9} {'Log append':>10} "
        f"{'ratio':>5} | {'raw read':>8} {'Log read':>8} {'ratio':>5}"
    )
    print(head)
    print("-" * len(head))
    for res in results:
        print(
            f"{res['batch']:>7} {res['batch_bytes']:>11} "
            f"{res['bytes_per_run'] / MIB:>5.0f} MiB | "
            f"{res['raw_write_mb_s']:>9.0f} {res['log_append_mb_s']:>10.0f} "
            f"{res['append_ratio']:>5.2f} | "
            f"{res['raw_read_mb_s']:>8.0f} {res['log_read_mb_s']:>8.0f} {res['read_ratio']:>5.2f}"
        )
    for res in results:
        appends = " ".join(f"{x['append_ratio']:.2f}" for x in res["rounds"])
        reads = " ".join(f"{x['read_ratio']:.2f}" for x in res["rounds"])
        print(f"{res['batch']:>7} per-round ratios: append {appends}; read {reads}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.storage_bench",
        description="Log append/read throughput next to raw os.write/os.pread on one disk.",
    )
    parser.add_argument("--rounds", type=int, default=5, help="rounds per size (default 5)")
    parser.add_argument(
        "--total-mb",
        type=int,
        default=None,
        help="MiB written per run for every batch size (default: 256 for 16 KiB, 512 for 1 MiB)",
    )
    parser.add_argument(
        "--fsync",
        action="store_true",
        help="include one final fsync in both write timings (default: no fsync in either)",
    )
    parser.add_argument(
        "--no-warmup", action="store_true", help="skip the untimed warm-up write before each run"
    )
    parser.add_argument(
        "--dir",
        type=Path,
        default=REPO / "bench",
        help="where the scratch directory goes (default: bench/, the repo's filesystem)",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON results file")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="afterwards, cProfile Log append and read for 16 KiB batches and print top costs",
    )
    parser.add_argument("--seed", type=int, default=1, help="seed for the record values")
    parser.add_argument(
        "--compaction-only",
        action="store_true",
        help="run only the log cleaner figure and print it (no JSON written)",
    )
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    if args.total_mb is not None and args.total_mb < 1:
        parser.error("--total-mb must be >= 1")

    started = time.perf_counter()
    config = LogConfig()
    rng = random.Random(args.seed)
    if args.compaction_only:
        args.dir.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=".storage-bench-", dir=args.dir))
        try:
            print_compaction(bench_compaction(scratch, args.rounds, rng))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return 0
    batches = [
        (make_batch(label, min(target, config.max_message_bytes), rng), default_mb)
        for label, target, default_mb in SIZES
    ]
    args.dir.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".storage-bench-", dir=args.dir))
    filesystem = filesystem_of(scratch)
    mode = (
        "final fsync included in both write timings"
        if args.fsync
        else "no fsync in either write timing (page-cache write path)"
    )
    print(f"storage bench: {args.rounds} rounds per size, medians; writes: {mode}")
    print(f"scratch dir: {scratch} [{filesystem or 'unknown filesystem'}]")
    print(
        "reads: page cache, 1 MiB per Log.read / os.pread; "
        "MB/s = 10^6 bytes/s; ratio = Log / raw (median of per-round ratios)\n"
    )
    results = []
    profile_text = ""
    try:
        for batch, default_mb in batches:
            total = (args.total_mb or default_mb) * MIB
            results.append(
                bench_size(batch, total, args.rounds, args.fsync, not args.no_warmup, scratch)
            )
        compaction = bench_compaction(scratch, args.rounds, rng)
        if args.profile:
            small = batches[0][0]
            profile_text = profile_size(small, (args.total_mb or batches[0][1]) * MIB, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    print_table(results)
    print_compaction(compaction)
    large = next(r for r in results if r["batch"] == "1 MiB")
    met = large["append_ratio"] >= TARGET_APPEND_RATIO
    print(
        f"\ntarget: 1 MiB Log append >= {TARGET_APPEND_RATIO:.2f} x raw write: "
        f"{'met' if met else 'NOT met'} ({large['append_ratio']:.2f})"
    )
    warm = [w for r in results for w in r["warmup_write_mb_s"]]
    if warm:
        print(
            f"untimed warm-up writes ran at {min(warm):.0f}..{max(warm):.0f} MB/s "
            "(a low figure is the VM's first touch of memory, see the module docstring)"
        )
    elapsed = time.perf_counter() - started

    write_results(
        args.out,
        "storage",
        ("storage",),
        {
            "settings": {
                "rounds": args.rounds,
                "fsync_in_timing": args.fsync,
                "warmup": not args.no_warmup,
                "read_max_bytes": READ_MAX_BYTES,
                "reads": "page cache",
                "record_value_bytes": RECORD_VALUE_BYTES,
                "record_key_bytes": RECORD_KEY_BYTES,
                "compression": "none",
                "append": "Log.append_as_leader(bytes, leader_epoch=0)",
                "scratch_filesystem": filesystem,
                "log_config": dataclasses.asdict(config),
                "units": "MB/s = 10^6 bytes per second; ratios are medians of per-round Log/raw",
                "seed": args.seed,
            },
            "target": {
                "append_ratio_1mib": TARGET_APPEND_RATIO,
                "measured": large["append_ratio"],
                "met": met,
            },
            "results": results,
            "compaction": compaction,
        },
        elapsed,
    )
    if profile_text:
        print(profile_text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
