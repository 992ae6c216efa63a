"""Partition logs on disk in Kafka's own formats: batches, segments, indexes, checkpoints."""
