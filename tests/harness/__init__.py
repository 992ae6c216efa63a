"""Shared test harness: process clusters, clients and models other test files import."""
