"""What acts on one host: the process spawner and supervisor, the node agent,
the hang watcher, stack dumps, log followers, cgroups and GPU discovery."""
