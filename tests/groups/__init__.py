"""Tests of the group coordinator (broker/group/), in-process and with real clients."""
