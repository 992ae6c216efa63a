"""LeaderEpochCache: Kafka's LeaderEpochFileCache semantics and its checkpoint file."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.checkpoint import LEADER_EPOCH_CHECKPOINT
from storage.epoch_cache import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    EpochEntry,
    LeaderEpochCache,
)

UNDEFINED = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
ENTRIES = [(2, 10), (4, 20), (6, 30)]
LEO = 40


def cache_with(path: Path | None, entries: list[tuple[int, int]]) -> LeaderEpochCache:
    cache = LeaderEpochCache(path)
    for epoch, offset in entries:
        assert cache.assign(epoch, offset)
    assert cache.entries == [EpochEntry(e, o) for e, o in entries]
    return cache


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / LEADER_EPOCH_CHECKPOINT


def as_tuples(cache: LeaderEpochCache) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in cache.entries]


# -- assign ------------------------------------------------------------------------------------


def test_empty_cache_without_a_file_is_undefined() -> None:
    cache = LeaderEpochCache(None)
    assert cache.is_empty()
    assert cache.latest_epoch == UNDEFINED_EPOCH
    assert cache.earliest_entry is None
    assert not cache.needs_rebuild


def test_assign_appends_new_epochs_and_writes_the_file(path: Path) -> None:
    cache = cache_with(path, ENTRIES)
    assert cache.latest_epoch == 6
    assert cache.earliest_entry == EpochEntry(2, 10)
    assert path.read_text() == "0\n3\n2 10\n4 20\n6 30\n"


@pytest.mark.parametrize("offset", [30, 31, 1000])
def test_assign_of_the_latest_epoch_at_or_after_its_start_is_ignored(
    path: Path, offset: int
) -> None:
    cache = cache_with(path, ENTRIES)
    path.write_text("sentinel")  # a no-op assign must not rewrite the file
    assert not cache.assign(6, offset)
    assert as_tuples(cache) == ENTRIES
    assert path.read_text() == "sentinel"


@pytest.mark.parametrize(
    ("epoch", "offset", "expected"),
    [
        # same epoch, earlier start: the entry moves back (Kafka: startOffset < latest's)
        (6, 25, [(2, 10), (4, 20), (6, 25)]),
        # lower epoch than the latest: every entry with epoch >= it goes
        (5, 35, [(2, 10), (4, 20), (5, 35)]),
        (4, 35, [(2, 10), (4, 35)]),
        # higher epoch, lower start: every entry with start >= it goes
        (7, 15, [(2, 10), (7, 15)]),
        (7, 30, [(2, 10), (4, 20), (7, 30)]),  # equal start offset is removed too
        (7, 5, [(7, 5)]),
        # both lower
        (3, 12, [(2, 10), (3, 12)]),
        (1, 0, [(1, 0)]),
        # plain append
        (7, 31, [(2, 10), (4, 20), (6, 30), (7, 31)]),
    ],
)
def test_assign_removes_entries_that_would_break_monotonicity(
    path: Path, epoch: int, offset: int, expected: list[tuple[int, int]]
) -> None:
    cache = cache_with(path, ENTRIES)
    assert cache.assign(epoch, offset)
    assert as_tuples(cache) == expected
    assert as_tuples(LeaderEpochCache(path)) == expected  # flushed


def test_assign_without_flush_leaves_the_file_alone(path: Path) -> None:
    cache = cache_with(path, ENTRIES)
    assert cache.assign(7, 50, flush=False)
    assert path.read_text() == "0\n3\n2 10\n4 20\n6 30\n"
    cache.flush()
    assert path.read_text() == "0\n4\n2 10\n4 20\n6 30\n7 50\n"


# -- end_offset_for ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("requested", "expected"),
    [
        (UNDEFINED_EPOCH, UNDEFINED),
        (6, (6, LEO)),  # the latest epoch ends at the LEO
        (5, (4, 30)),  # between entries: floor epoch, start of the next higher one
        (4, (4, 30)),
        (3, (2, 20)),
        (2, (2, 20)),
        (1, (1, 10)),  # below every known epoch: itself, first start offset
        (0, (0, 10)),
        (7, UNDEFINED),  # above every known epoch
        (100, UNDEFINED),
    ],
)
def test_end_offset_for_has_kafkas_semantics(requested: int, expected: tuple[int, int]) -> None:
    cache = cache_with(None, ENTRIES)
    assert cache.end_offset_for(requested, LEO) == expected


@pytest.mark.parametrize("requested", [UNDEFINED_EPOCH, 0, 5])
def test_end_offset_for_on_an_empty_cache_is_undefined(requested: int) -> None:
    assert LeaderEpochCache(None).end_offset_for(requested, LEO) == UNDEFINED


# -- truncation --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("end_offset", "expected"),
    [
        (31, ENTRIES),
        (30, [(2, 10), (4, 20)]),
        (25, [(2, 10), (4, 20)]),
        (20, [(2, 10)]),
        (11, [(2, 10)]),
        (10, []),
        (0, []),
    ],
)
def test_truncate_from_end_drops_epochs_starting_at_or_after_the_end(
    path: Path, end_offset: int, expected: list[tuple[int, int]]
) -> None:
    cache = cache_with(path, ENTRIES)
    cache.truncate_from_end(end_offset)
    assert as_tuples(cache) == expected
    assert as_tuples(LeaderEpochCache(path)) == expected


def test_truncate_from_end_with_a_negative_offset_is_a_no_op(path: Path) -> None:
    cache = cache_with(path, ENTRIES)
    cache.truncate_from_end(-1)
    assert as_tuples(cache) == ENTRIES


@pytest.mark.parametrize(
    ("start_offset", "expected"),
    [
        (0, ENTRIES),
        (9, ENTRIES),
        (10, ENTRIES),
        (15, [(2, 15), (4, 20), (6, 30)]),
        (20, [(4, 20), (6, 30)]),
        (25, [(4, 25), (6, 30)]),
        (30, [(6, 30)]),
        (35, [(6, 35)]),
    ],
)
def test_truncate_from_start_keeps_the_epoch_current_at_the_new_start(
    path: Path, start_offset: int, expected: list[tuple[int, int]]
) -> None:
    cache = cache_with(path, ENTRIES)
    cache.truncate_from_start(start_offset)
    assert as_tuples(cache) == expected
    assert as_tuples(LeaderEpochCache(path)) == expected


def test_clear_empties_the_cache_and_the_file(path: Path) -> None:
    cache = cache_with(path, ENTRIES)
    cache.clear()
    assert cache.is_empty()
    assert path.read_text() == "0\n0\n"


# -- persistence -------------------------------------------------------------------------------


def test_reload_gives_the_same_entries(path: Path) -> None:
    cache_with(path, ENTRIES)
    reloaded = LeaderEpochCache(path)
    assert as_tuples(reloaded) == ENTRIES
    assert not reloaded.needs_rebuild
    assert reloaded.end_offset_for(3, LEO) == (2, 20)


def test_a_kafka_written_file_loads(path: Path) -> None:
    path.write_text("0\n2\n0 0\n3 117\n")
    cache = LeaderEpochCache(path)
    assert as_tuples(cache) == [(0, 0), (3, 117)]
    assert not cache.needs_rebuild


def test_an_empty_but_valid_file_does_not_need_a_rebuild(path: Path) -> None:
    path.write_text("0\n0\n")
    cache = LeaderEpochCache(path)
    assert cache.is_empty()
    assert not cache.needs_rebuild


def test_a_missing_file_needs_a_rebuild(path: Path) -> None:
    cache = LeaderEpochCache(path)
    assert cache.is_empty()
    assert cache.needs_rebuild


@pytest.mark.parametrize(
    "content",
    [
        b"garbage",
        b"",
        b"0\n",
        b"\xff\xfe\x00\x01",
        b"1\n1\n2 10\n",  # unknown version
        b"0\n3\n2 10\n4 20\n",  # count says more than there are
        b"0\n1\n2 10\n4 20\n",  # count says fewer
        b"0\n-1\n",
        b"0\nx\n2 10\n",
        b"0\n1\n2 ten\n",
        b"0\n1\n2\n",  # missing field
        b"0\n1\n2 10 3\n",  # extra field
        b"0\n2\n4 10\n2 20\n",  # epochs out of order
        b"0\n2\n2 20\n4 10\n",  # offsets out of order
        b"0\n2\n2 10\n2 20\n",  # the same epoch twice
    ],
)
def test_a_corrupt_file_gives_an_empty_cache_that_needs_a_rebuild(
    path: Path, content: bytes
) -> None:
    path.write_bytes(content)
    cache = LeaderEpochCache(path)
    assert cache.is_empty()
    assert cache.needs_rebuild
    # And the cache is usable: the next assign writes a valid file.
    assert cache.assign(1, 0)
    assert path.read_text() == "0\n1\n1 0\n"


# -- property ----------------------------------------------------------------------------------


def kafka_model(ops: list[tuple[str, int, int]]) -> list[tuple[int, int]]:
    """An independent transcription of LeaderEpochFileCache's assign/truncate rules."""
    entries: list[tuple[int, int]] = []
    for op, a, b in ops:
        if op == "assign":
            if entries and entries[-1][0] == a and b >= entries[-1][1]:
                continue
            while entries and (entries[-1][0] >= a or entries[-1][1] >= b):
                entries.pop()
            entries.append((a, b))
        elif op == "end":
            while entries and entries[-1][1] >= a:
                entries.pop()
        else:
            removed = []
            while entries and entries[0][1] <= a:
                removed.append(entries.pop(0))
            if removed:
                entries.insert(0, (removed[-1][0], a))
    return entries


operations = st.lists(
    st.one_of(
        st.tuples(st.just("assign"), st.integers(0, 12), st.integers(0, 60)),
        st.tuples(st.just("end"), st.integers(0, 60), st.just(0)),
        st.tuples(st.just("start"), st.integers(0, 60), st.just(0)),
    ),
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(ops=operations)
def test_random_operations_keep_the_cache_monotonic(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, int, int]]
) -> None:
    path = tmp_path_factory.mktemp("epochs") / LEADER_EPOCH_CHECKPOINT
    cache = LeaderEpochCache(path)
    for i, (op, a, b) in enumerate(ops):
        if op == "assign":
            cache.assign(a, b)
        elif op == "end":
            cache.truncate_from_end(a)
        else:
            cache.truncate_from_start(a)
        entries = as_tuples(cache)
        assert all(x[0] < y[0] for x, y in zip(entries, entries[1:], strict=False)), entries
        assert all(x[1] <= y[1] for x, y in zip(entries, entries[1:], strict=False)), entries
        assert entries == kafka_model(ops[: i + 1])
    if ops:
        assert as_tuples(LeaderEpochCache(path)) == as_tuples(cache)
