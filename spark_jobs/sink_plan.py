"""What one task of the "kraft" sink needs to write: the driver's plan, as plain data.

The driver (`writer.plan_sink`) makes it and the executors (`sink_task`) use it; it
lives here, below both, so neither imports the other's side.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class SinkPlan:
    """What a task needs to write (plain data, so it pickles to the executors)."""

    producer_config: dict[str, str]
    topic: str | None  # the `topic` option; None: every row's `topic` column
    columns: tuple[str, ...]  # the sink columns present in the DataFrame
    flush_timeout_s: float = field(default=130.0)
