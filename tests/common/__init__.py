"""Tests of common/: the protocol vocabulary, clock and properties loader."""
