"""The spawner process: the subreaper that forks, signals, reaps and sweeps a node's ranks, and its link to the agent."""
