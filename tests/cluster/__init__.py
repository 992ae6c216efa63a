"""Whole-cluster tests: controllers and brokers as processes, driven by real clients."""
