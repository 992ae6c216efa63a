"""Where pysyncobj must wait for the disk: Raft's durable points, with group commit.

Raft is safe across power loss only if a voter's log is on disk before anyone counts it:
- a follower acknowledges entries (`next_node_idx` with success) only after they are
  synced: the leader commits on that answer;
- the leader counts its own log toward the majority only after it is synced;
- the term and vote are synced before a vote is answered (DurableJournal does this
  inside `setCurrentTerm`, which pysyncobj calls before it sends the answer);
- a snapshot (pysyncobj's "full dump") is synced before the journal prefix it replaces
  is dropped.

pysyncobj has no hook for any of this, so this module supplies its three seams:
- `DurableTransport`, passed as SyncObj's `transportClass`: a follower's
  acknowledgements are held back and sent after the poll round that produced them, once
  one fsync has covered every entry received in the round (group commit: a burst of
  append_entries costs one fsync, not one each). On the leader, the journal is synced
  before an acknowledgement is processed, and at the end of every tick (an on-tick
  callback): the leader's commit index is computed at the start of the next tick, or
  after an acknowledgement, so it never counts an unsynced entry of its own.
- the journal: pysyncobj builds its journal with `createJournal(path)`; for the paths
  registered here it gets a `DurableJournal` (kraft/raft_journal.py).
- the snapshot: pysyncobj's serializer renames the dump with `atomicReplace`; for the
  registered dump paths the file is fsynced before, and the directory after.
These are replacements of module attributes of pysyncobj (pinned in pyproject.toml),
made once and only effective for the paths a Quorum registers.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pysyncobj.serializer
import pysyncobj.syncobj
from pysyncobj.transport import TCPTransport

from kraft.raft_journal import DurableJournal, Ledger, replace_file


@dataclass(frozen=True)
class Durability:
    fsync: bool = True  # controller.quorum.fsync.enable (a debug switch when off)
    ledger: bool = False  # tests: write down durable points (tests/harness/power_loss.py)


_registered: dict[str, Durability] = {}
_lock = threading.Lock()
_original_create = pysyncobj.syncobj.createJournal
_original_replace = pysyncobj.serializer.atomicReplace


def _create_journal(journal_file: str | None) -> Any:
    durability = _registered.get(str(journal_file)) if journal_file else None
    if durability is None:
        return _original_create(journal_file)
    return DurableJournal(journal_file, fsync=durability.fsync, ledger=durability.ledger)


def _atomic_replace(old_path: str, new_path: str) -> Any:
    durability = _registered.get(str(new_path))
    if durability is None:
        return _original_replace(old_path, new_path)
    target = Path(new_path)
    ledger = Ledger(target.parent) if durability.ledger else None
    replace_file(Path(old_path), target, fsync=durability.fsync, ledger=ledger)
    return True


def register(journal_file: Path, dump_file: Path, durability: Durability) -> None:
    """Have pysyncobj use the durable journal and snapshot rename for these paths."""
    with _lock:
        _registered[str(journal_file)] = durability
        _registered[str(dump_file)] = durability
        pysyncobj.syncobj.createJournal = _create_journal
        pysyncobj.serializer.atomicReplace = _atomic_replace


class DurableTransport(TCPTransport):
    """pysyncobj's TCP transport, holding back acknowledgements until they are durable."""

    def __init__(self, syncObj: Any, selfNode: Any, otherNodes: Any) -> None:  # noqa: N803
        super().__init__(syncObj, selfNode, otherNodes)
        # SyncObj builds its journal before its transport (pysyncobj 0.3.17), and only
        # the tick thread touches either.
        self.journal = getattr(syncObj, "_SyncObj__raftLog", None)  # no public handle
        if not isinstance(self.journal, DurableJournal):
            raise RuntimeError(
                "pysyncobj did not build the durable journal: its internals changed "
                "(kraft/raft_durability.py is written against pysyncobj 0.3.17)"
            )
        self._held: list[tuple[Any, Any]] = []
        poller = syncObj._poller  # noqa: SLF001
        poll = poller.poll

        def poll_then_release(timeout: float) -> None:
            poll(timeout)
            self.release()

        # Every message is handled inside the poller's round: after it returns, one
        # fsync covers all entries the round appended, then their acknowledgements go.
        poller.poll = poll_then_release
        syncObj.addOnTickCallback(self.sync)

    def sync(self) -> None:
        sync = getattr(self.journal, "sync", None)
        if sync is not None:
            sync()

    def release(self) -> None:
        if not self._held:
            return
        self.sync()
        held, self._held = self._held, []
        for node, message in held:
            super().send(node, message)

    def send(self, node: Any, message: Any) -> bool:
        if isinstance(message, dict) and message.get("type") == "next_node_idx":
            self._held.append((node, message))
            return True
        return super().send(node, message)

    def _onMessageReceived(self, node: Any, message: Any) -> None:  # noqa: N802
        if isinstance(message, dict) and message.get("type") == "next_node_idx":
            self.sync()  # the leader is about to count this answer with its own log
        super()._onMessageReceived(node, message)
