"""What is measured besides time: the environment, FLOPs and MFU, efficiency columns, noise flags, telemetry (NVML, RAPL, psutil)."""
