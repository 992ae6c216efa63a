"""Tests of storage/: the log, segments, checkpoints, compaction (Kafka's log layer)."""
