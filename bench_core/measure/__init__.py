"""What is measured besides time: environment, FLOPs and MFU, efficiency columns, telemetry."""
