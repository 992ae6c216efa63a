"""Controller quorum (KRaft-style metadata log on Raft) and the `kraft` command line."""
