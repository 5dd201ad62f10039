"""One configuration in this process: the session, its timed window, the warm-up's estimate, profiling, the DDP
worker side."""
