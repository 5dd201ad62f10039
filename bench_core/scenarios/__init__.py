"""Questions answered with several runs: the largest batch that fits, an A/B verdict, the GPU self-test."""
