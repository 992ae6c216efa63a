"""broker/allocator.py: with the broker's malloc settings, buffers of a fetch over TLS
(a ~1 MiB record slice, then the TLS layer's ~1 MiB output of it), allocated and freed
over and over, stop costing page faults: the heap top is no longer given back to the
kernel and taken again for every slice. Counted in fresh processes, by page faults."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CYCLES = 100
SCRIPT = """
import resource, sys
from broker.allocator import tune_malloc

if sys.argv[1] == "tuned" and not tune_malloc():
    print("unsupported")
    sys.exit()

def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

def fetch_over_tls():
    record_slice = bytes(1 << 20)
    tls_output = bytes((1 << 20) + (64 << 10))
    del record_slice, tls_output

first = bytes(1 << 20)  # freeing it raises glibc's adaptive thresholds, as a request does
del first
for _ in range(3):
    fetch_over_tls()
before = faults()
for _ in range(int(sys.argv[2])):
    fetch_over_tls()
print(faults() - before)
"""


def page_faults(mode: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode, str(CYCLES)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout.strip()


def test_fetch_buffers_stop_faulting_once_tuned() -> None:
    default = page_faults("default")
    tuned = page_faults("tuned")
    if tuned == "unsupported":
        pytest.skip("the C library is not glibc: tune_malloc does nothing")
    if int(default) < CYCLES:
        pytest.skip(f"this glibc keeps the heap top by itself here ({default} faults)")
    assert int(tuned) < CYCLES // 10, f"{tuned} page faults in {CYCLES} cycles"
