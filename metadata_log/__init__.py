"""The cluster metadata log: typed records, image, delta, snapshots (no I/O)."""
