"""`make chaos`: run fault schedules against a cluster of namespaced hosts and check each
run's history. One schedule: set up the hosts, start the cluster, create the topics, start
the workload, run the nemesis, heal, wait (at most LIVENESS_WINDOW_S) for every producer
and consumer to make progress, stop the clients, wait (at most CONVERGE_WINDOW_S) for
every broker's metadata to match the controllers', drain, check, tear down.

    python -m tests.chaos.campaign --schedules 20            # fresh seeds, printed
    python -m tests.chaos.campaign --seed 1234 --profile full # replay one
    python -m tests.chaos.campaign --schedules 200 --jobs 2   # two at a time

A failing schedule prints its seed and the command that replays it; results (the
schedule, the nemesis's events, the checker's verdict) go to OUT/<seed>.json and a
summary to OUT/summary.json.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from tests.chaos.checker import check, summary_line
from tests.chaos.converge import wait_converged
from tests.chaos.faults import Nemesis
from tests.chaos.forensics import explain_duplicates
from tests.chaos.hosts import NsCluster
from tests.chaos.net import unsupported_reason
from tests.chaos.schedule import PROFILES, Schedule, generate
from tests.chaos.workload import Workload, create_topics, drain

LIVENESS_WINDOW_S = 30.0
CONVERGE_WINDOW_S = 30.0  # for every broker's metadata to match the controllers'
DEFAULT_OUT = Path(".cache/chaos")  # per-seed JSON, not committed


def fresh_seed() -> int:
    return int.from_bytes(os.urandom(4), "big") ^ (time.time_ns() & 0xFFFF)


def replay_command(seed: int, profile: str) -> str:
    return f"make chaos SEED={seed} PROFILE={profile}"


def wait_progress(w: Workload, since: float, window_s: float) -> list[str]:
    """Wait until every client progressed after `since`, at most `window_s`; returns the
    clients that did not."""
    deadline = time.monotonic() + window_s
    while True:
        behind = [c for c in w.clients if not w.history.progressed(c, since)]
        if not behind or time.monotonic() > deadline:
            return behind
        time.sleep(0.2)


def run_schedule(schedule: Schedule, work_dir: Path) -> dict[str, Any]:
    """One schedule, start to verdict; always tears its hosts down."""
    started = time.monotonic()
    p = schedule.profile
    topics = schedule.topic_names()
    run_dir = Path(tempfile.mkdtemp(prefix=f"chaos-{schedule.seed}-", dir=work_dir))
    cluster = NsCluster(run_dir, p.n_controllers, p.n_brokers)
    nemesis = Nemesis(cluster, schedule)
    result: dict[str, Any] = {"seed": schedule.seed, "profile": p.name,
                              "schedule": schedule.describe().splitlines()}  # fmt: skip
    workload: Workload | None = None
    phases: dict[str, float] = {}
    result["phases_s"] = phases
    mark = [started]

    def phase(name: str) -> None:
        now = time.monotonic()
        phases[name] = round(now - mark[0], 1)
        mark[0] = now

    try:
        cluster.start()
        create_topics(cluster.bootstrap, topics, p.partitions)
        workload = Workload(cluster.bootstrap, topics, p.partitions,
                            client_log=run_dir / "clients.log")  # fmt: skip
        workload.start()
        # Faults start once every client has made progress: the baseline works.
        behind = wait_progress(workload, 0.0, 30.0)
        if behind:
            raise RuntimeError(f"clients {behind} made no progress before any fault")
        phase("start")
        t0 = time.monotonic()
        heal_t = nemesis.run(t0)
        phase("faults")
        behind = wait_progress(workload, heal_t, LIVENESS_WINDOW_S)
        result["recovered_after_s"] = round(time.monotonic() - heal_t, 2)
        result["stalled_clients"] = [
            workload.describe_consumer(c) if c in workload.consumers else {"producer": c}
            for c in behind
        ]
        phase("recover")
        workload.stop()
        phase("stop")
        # The final read comes after every broker caught up with the controllers.
        result["unconverged_brokers"] = wait_converged(
            cluster.controllers, cluster.brokers, topics, CONVERGE_WINDOW_S
        )
        phase("converge")
        drained = drain(cluster.bootstrap, topics, p.partitions)
        phase("drain")
        h = workload.history
        history = {
            "sends": h.sends, "polls": h.polls, "drain": drained,
            "liveness": {"heal_t": heal_t, "window_s": LIVENESS_WINDOW_S,
                         "producers": workload.producers, "consumers": workload.consumers},
        }  # fmt: skip
        result.update(check(history))
        if result["counts"]["duplicate"]:
            dirs = {b.node_id: b.data_dir / "logs" for b in cluster.brokers}
            result["duplicate_forensics"] = explain_duplicates(
                dirs, result["examples"]["duplicate"]
            )
        if not result["ok"]:
            # The whole history, for the diagnosis (the run dir is kept).
            (run_dir / "history.json").write_text(json.dumps(history) + "\n")
        result["admin"] = h.admin
        result["client_errors"] = sorted(set(h.client_errors))[:20]
    except Exception as exc:  # noqa: BLE001 - a run that breaks is a failed schedule
        result.update(ok=False, error=repr(exc)[:2000], logs=cluster.logs(15))
    finally:
        if workload is not None:
            workload.stop(5)
        result["events"] = nemesis.events
        cluster.close()
        if result.get("ok"):
            shutil.rmtree(run_dir, ignore_errors=True)
        else:
            result["run_dir"] = str(run_dir)  # node logs kept for the diagnosis
    result["seconds"] = round(time.monotonic() - started, 1)
    return result


def _run_seed(seed: int, profile_name: str, work_dir: Path) -> dict[str, Any]:
    schedule = generate(seed, PROFILES[profile_name])
    print(schedule.describe(), flush=True)
    return run_schedule(schedule, work_dir)


def _results(
    seeds: list[int], profile_name: str, work_dir: Path, jobs: int
) -> Iterator[dict[str, Any]]:
    """Each schedule's result, in the order they finish. With jobs > 1 every schedule runs
    in a fresh process (its clients' threads and librdkafka handles die with it); their
    clusters are apart anyway (own namespaces, bridge, /24, data dir, ports per host)."""
    if jobs <= 1:
        for seed in seeds:
            yield _run_seed(seed, profile_name, work_dir)
        return
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(jobs, mp_context=ctx, max_tasks_per_child=1) as pool:
        futures = [pool.submit(_run_seed, seed, profile_name, work_dir) for seed in seeds]
        for fut in as_completed(futures):
            yield fut.result()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--schedules", type=int, default=20)
    ap.add_argument("--seed", type=int, action="append", help="replay these seeds only")
    ap.add_argument("--first-seed", type=int, help="seeds FIRST.. instead of fresh ones")
    ap.add_argument("--profile", choices=sorted(PROFILES), default="full")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--print-only", action="store_true", help="print the schedules, run none")
    ap.add_argument("--jobs", type=int, default=1,
                    help="schedules at once, each in its own process and namespaces")  # fmt: skip
    args = ap.parse_args(argv)
    if args.seed:
        seeds = args.seed
    elif args.first_seed is not None:
        seeds = list(range(args.first_seed, args.first_seed + args.schedules))
    else:
        seeds = [fresh_seed() for _ in range(args.schedules)]
    profile = PROFILES[args.profile]
    if args.print_only:
        for seed in seeds:
            print(generate(seed, profile).describe())
        return 0
    reason = unsupported_reason()
    if reason:
        print(f"fault campaign skipped: {reason}")
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    work_dir = Path(tempfile.mkdtemp(prefix="kraft-chaos-"))
    print(f"fault campaign: {len(seeds)} schedules, profile {profile.name}, seeds {seeds}")
    results = []
    for r in _results(seeds, profile.name, work_dir, args.jobs):
        seed = r["seed"]
        # A seed replayed twice in one campaign keeps both results.
        path = args.out / f"{seed}.json"
        n = 1
        while path.exists() and any(x["seed"] == seed for x in results):
            n += 1
            path = args.out / f"{seed}-{n}.json"
        path.write_text(json.dumps(r, indent=1) + "\n")
        print(f"  {summary_line(seed, r, r['seconds']) if 'counts' in r else r.get('error')}")
        for line in r.get("duplicate_forensics", []):
            print(f"    duplicate {line}")
        if not r.get("ok"):
            print(f"  FAILED schedule, seed {seed}; replay: {replay_command(seed, profile.name)}"
                  f"\n  details: {path}", flush=True)  # fmt: skip
        results.append(r)
    failed = [r["seed"] for r in results if not r.get("ok")]
    secs = [r["seconds"] for r in results]
    summary = {
        "profile": profile.name, "schedules": len(results), "failed_seeds": failed,
        "seconds_per_schedule": round(sum(secs) / max(1, len(secs)), 1),
        "results": [{k: r.get(k) for k in ("seed", "ok", "counts", "sends", "seconds",
                                           "recovered_after_s", "error")} for r in results],
    }  # fmt: skip
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(
        f"fault campaign: {len(results) - len(failed)}/{len(results)} passed, "
        f"{summary['seconds_per_schedule']} s per schedule; failed seeds: {failed or 'none'}"
    )
    if not failed:
        shutil.rmtree(work_dir, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
