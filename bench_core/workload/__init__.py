"""What is run: the model registry, synthetic tasks and the precisions."""
