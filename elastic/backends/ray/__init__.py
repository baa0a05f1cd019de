"""The Ray backend: one node-pinned agent actor per node, Ray's errors turned into values once. Imports no Ray itself."""
