"""Controller quorum (KRaft-style metadata log on Raft); the `kraft` command line is in
kraft/tools/."""
