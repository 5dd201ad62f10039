"""Where a configuration runs: here, in a fresh process, on torchrun workers or through SLURM."""
