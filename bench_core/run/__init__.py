"""One configuration in this process: the session, its timed window, the warm-up's estimate, profiling, the memory
estimate, the DDP and sharded (FSDP2, tensor parallel, activation checkpointing) worker side."""
