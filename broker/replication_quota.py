"""A replication byte-rate quota (Kafka's ReplicationQuotaManager, follower side):
`follower.replication.throttled.rate` bytes/s for the replicas being added by a
reassignment. Sans-I/O: bytes and `now_ms` in, "is the quota exceeded" out.

As Kafka's (its Rate over a SampledStat), the rate is measured over samples of
`replication.quota.window.size.seconds` (1 s) kept for `replication.quota.window.num`
windows (11): the bytes of the live samples over the time since the oldest one began,
counted as at least `window.num - 1` whole windows, so a short burst after a quiet
spell is allowed (about 10 s worth of the rate, with the defaults). The fetcher leaves
the throttled partitions out of its requests while the quota is exceeded, and records
the bytes their answers carried.
"""

from __future__ import annotations

from collections import deque

UNLIMITED = None  # Kafka's default rate is Long.MAX_VALUE: no throttling


class ReplicationQuota:
    def __init__(
        self, rate_bytes_per_s: int | None = UNLIMITED, window_ms: int = 1000, windows: int = 11
    ) -> None:
        self.rate_bytes_per_s = rate_bytes_per_s
        self.window_ms = window_ms
        self.windows = windows
        self._samples: deque[list[int]] = deque()  # [window start ms, bytes]

    def _expire(self, now_ms: int) -> None:
        horizon = now_ms - self.window_ms * self.windows
        while self._samples and self._samples[0][0] <= horizon:
            self._samples.popleft()

    def record(self, nbytes: int, now_ms: int) -> None:
        if nbytes <= 0:
            return
        if self._samples and now_ms < self._samples[-1][0] + self.window_ms:
            self._samples[-1][1] += nbytes
        else:
            self._samples.append([now_ms, nbytes])
        self._expire(now_ms)

    def rate(self, now_ms: int) -> float:
        """Bytes per second over the live samples."""
        self._expire(now_ms)
        if not self._samples:
            return 0.0
        elapsed_ms = now_ms - self._samples[0][0]
        full_windows = elapsed_ms // self.window_ms
        if full_windows < self.windows - 1:
            elapsed_ms += (self.windows - 1 - full_windows) * self.window_ms
        return sum(b for _, b in self._samples) * 1000 / max(1, elapsed_ms)

    def is_exceeded(self, now_ms: int) -> bool:
        limit = self.rate_bytes_per_s
        return limit is not None and self.rate(now_ms) > limit
