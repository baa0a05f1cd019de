"""A dead driver's ranks kept by their spawner for a lease and taken over by the next driver: the pure rules."""
