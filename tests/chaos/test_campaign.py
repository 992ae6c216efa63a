"""The CI subset of the fault campaign (issue 17): 10 schedules from fixed seeds and 2 from
fresh ones, short profile (3 controllers, 3 brokers, 2-3 faults each). Each must show no
anomaly and every client making progress within 30 s of the last fault healing. A failure
names its seed and the `make chaos` command that replays it.

Skipped, with the reason, where namespaces or loop mounts are unavailable (not root).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.chaos.campaign import fresh_seed, replay_command, run_schedule
from tests.chaos.checker import summary_line
from tests.chaos.net import unsupported_reason
from tests.chaos.schedule import PROFILES, generate

# Together these draw every fault kind of the short profile (41 and 105 bring crash-all
# and disk-full; the others the kills, pauses and partitions). 82 (disk full, a controller
# kill, a whole-cluster crash) once gave duplicates: after the batch the full disk refused,
# the broker answered the next one OUT_OF_ORDER_SEQUENCE_NUMBER and librdkafka bumped its
# epoch, re-sending possibly-written messages (fixed in broker/hosted.py).
FIXED_SEEDS = [41, 105, 1, 2, 3, 82, 5, 8, 9, 10]
FRESH_SEEDS = [fresh_seed(), fresh_seed()]
print(f"fault campaign: fresh seeds this run {FRESH_SEEDS}")

_REASON = unsupported_reason()
pytestmark = pytest.mark.skipif(_REASON is not None, reason=f"fault campaign: {_REASON}")


@pytest.mark.parametrize(
    "seed", FIXED_SEEDS + FRESH_SEEDS,
    ids=[f"fixed-{s}" for s in FIXED_SEEDS] + [f"fresh-{s}" for s in FRESH_SEEDS],
)  # fmt: skip
def test_schedule_has_no_anomaly(seed: int, tmp_path: Path) -> None:
    profile = PROFILES["short"]
    schedule = generate(seed, profile)
    print(schedule.describe())
    result = run_schedule(schedule, tmp_path)
    (tmp_path / f"{seed}.json").write_text(json.dumps(result, indent=1))
    line = summary_line(seed, result, result["seconds"]) if "counts" in result else ""
    print(line)
    assert result.get("ok"), (
        f"fault schedule seed {seed} failed: {line or result.get('error')}\n"
        f"{schedule.describe()}\n"
        f"examples: {json.dumps(result.get('examples', {}))[:3000]}\n"
        f"duplicates: {result.get('duplicate_forensics')}\n"
        f"replay: {replay_command(seed, profile.name)}; details {tmp_path / f'{seed}.json'}, "
        f"node logs {result.get('run_dir')}\n{result.get('logs', '')}"
    )
