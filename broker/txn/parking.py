"""Requests that wait for the previous transaction of their producer to complete.

Kafka's coordinator answers AddPartitionsToTxn / AddOffsetsToTxn with
CONCURRENT_TRANSACTIONS while the producer's last transaction is still writing its
markers (PrepareCommit / PrepareAbort), and clients retry after a backoff (librdkafka
and the Java client wait 20 ms). A producer that begins its next transaction right
after a commit hits that every time, so each small transaction pays the backoff.

Here such a request is parked instead and re-run as soon as the transaction completes,
which answers it with what it would have got from the retry, minus the backoff. A
request parked longer than `max_wait_ms` (markers held up by a partition without a
leader) gets CONCURRENT_TRANSACTIONS after all, as Kafka would have answered at once,
and the client retries as usual. Unloading the coordinator's partition answers what it
parked with NOT_COORDINATOR.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

Out = TypeVar("Out")

MAX_WAIT_MS = 500  # longer than any healthy completion, far below request.timeout.ms


@dataclass(slots=True)
class _Parked(Generic[Out]):
    deadline_ms: int
    retry: Callable[[int], list[Out]]  # run the request again (now_ms)
    refuse: Callable[[int], list[Out]]  # answer it with an error code


class ParkedRequests(Generic[Out]):
    def __init__(self, max_wait_ms: int = MAX_WAIT_MS) -> None:
        self.max_wait_ms = max_wait_ms
        self._by_id: dict[str, list[_Parked[Out]]] = {}

    def park(self, transactional_id: str, now_ms: int, retry: Callable[[int], list[Out]],
             refuse: Callable[[int], list[Out]]) -> None:
        entry = _Parked(now_ms + self.max_wait_ms, retry, refuse)
        self._by_id.setdefault(transactional_id, []).append(entry)

    def release(self, transactional_id: str, now_ms: int) -> list[Out]:
        """The transaction completed (or failed to): run its parked requests again."""
        out: list[Out] = []
        for p in self._by_id.pop(transactional_id, []):
            out += p.retry(now_ms)
        return out

    def refuse(self, transactional_id: str, code: int) -> list[Out]:
        out: list[Out] = []
        for p in self._by_id.pop(transactional_id, []):
            out += p.refuse(code)
        return out

    def expire(self, now_ms: int, code: int) -> list[Out]:
        """Requests parked past their deadline get `code`."""
        out: list[Out] = []
        for tid in list(self._by_id):
            keep = []
            for p in self._by_id[tid]:
                if p.deadline_ms <= now_ms:
                    out += p.refuse(code)
                else:
                    keep.append(p)
            if keep:
                self._by_id[tid] = keep
            else:
                del self._by_id[tid]
        return out

    def next_deadline_ms(self) -> int | None:
        deadlines = [p.deadline_ms for ps in self._by_id.values() for p in ps]
        return min(deadlines) if deadlines else None
