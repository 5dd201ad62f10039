"""Questions answered with several runs: an A/B verdict (`bench compare`), the GPU self-test (`bench selftest`) and the whole machine's acceptance run (`bench acceptance`)."""
