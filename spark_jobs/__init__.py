"""Spark data source reading topics over the Kafka protocol."""
