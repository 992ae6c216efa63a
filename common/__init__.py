"""The lowest layer, shared by every other package (as Kafka's `org.apache.kafka.common`):
the protocol vocabulary (error codes, API keys, varints and tagged fields), the clock, and
the `.properties` loader. It imports nothing of ours."""
