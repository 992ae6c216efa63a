"""The model the log state machine (tests/storage/test_log_stateful.py) checks a `Log`
against: batches as the log should store them, a settable clock, the configurations it
draws, and the invariants checked after every step (`LogInvariants`, apart from the
rules: what must hold, against what can happen).
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition

from storage.config import LogConfig
from storage.segment import LOG_SUFFIX, segment_name


@dataclass
class ModelBatch:
    base: int
    last: int
    epoch: int
    data: bytes  # exactly as the log should store it (offsets and epoch patched)
    timestamps: list[int]

    @property
    def size(self) -> int:
        return len(self.data)


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


def stored_bytes(batch: bytes, base: int, epoch: int) -> bytes:
    buf = bytearray(batch)
    buf[0:8] = base.to_bytes(8, "big", signed=True)
    buf[12:16] = epoch.to_bytes(4, "big", signed=True)
    return bytes(buf)


configs = st.builds(
    LogConfig,
    segment_bytes=st.sampled_from([600, 1500, 4096]),
    segment_ms=st.sampled_from([5_000, 10**9]),
    segment_index_bytes=st.sampled_from([32, 4096]),
    index_interval_bytes=st.sampled_from([0, 100, 4096]),
    retention_ms=st.sampled_from([-1, 20_000]),
    retention_bytes=st.sampled_from([-1, 2_000]),
)


class LogInvariants:
    """What must hold of `LogMachine` after every step: the log agrees with the model."""

    # -- invariants --------------------------------------------------------------------------

    @invariant()
    def offsets_agree(self) -> None:
        if not hasattr(self, "log"):
            return
        assert self.log.log_end_offset == self.leo
        assert self.log.log_start_offset == self.lso
        assert self.log.recovery_point <= self.leo

    @invariant()
    def epochs_agree(self) -> None:
        if not hasattr(self, "log"):
            return
        cache = self.log.leader_epoch_cache
        assert cache.entries == self.epochs
        for b in self.batches:  # and every readable batch maps to the epoch it carries
            if b.base >= self.lso and b.epoch >= 0:
                assert cache.epoch_for_offset(b.base) == b.epoch, b

    @invariant()
    def files_are_kafka_shaped(self) -> None:
        if not hasattr(self, "log"):
            return
        names = sorted(p.name for p in self.path.glob(f"*{LOG_SUFFIX}"))
        assert names == [segment_name(s.base_offset, LOG_SUFFIX) for s in self.log.segments]

    @precondition(lambda self: hasattr(self, "log"))
    @invariant()
    def log_bytes_match_model(self) -> None:
        """The bytes on disk from the first readable batch equal the model's."""
        if self.leo == self.lso:
            return
        on_disk = b"".join(p.read_bytes() for p in sorted(self.path.glob(f"*{LOG_SUFFIX}")))
        _, expected = self._model_from(self.lso)
        assert on_disk.endswith(expected)
