"""One configuration in this process: the session, its timed window, profiling, the DDP worker side."""
