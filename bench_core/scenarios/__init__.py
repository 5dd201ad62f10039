"""Questions answered with several runs: an A/B verdict (`bench compare`) and the GPU self-test (`bench selftest`)."""
