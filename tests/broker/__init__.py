"""Tests of broker/: the Kafka protocol layer, partitions and replication."""
