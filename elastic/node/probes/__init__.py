"""What a node finds out, when asked, about its host and its ranks' processes: GPUs, how a process holds a signal, a checkpoint write under way, a stop sign, stack dumps."""
