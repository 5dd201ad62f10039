"""Where a configuration runs: here, in a fresh process, on torchrun workers, through SLURM, or (mode serve) against a serving engine's process."""
