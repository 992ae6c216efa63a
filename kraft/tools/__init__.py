"""The `kraft` command line (cli.py) and the local-cluster launcher `kraft dev`, the tests
and the benchmarks share. The only part of kraft/ that may import broker/: the
controller's own code never does."""
