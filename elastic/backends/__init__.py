"""Backends: where the node agents run."""
