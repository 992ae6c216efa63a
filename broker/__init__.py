"""The Kafka-protocol broker."""
