"""The node's watcher thread and its jobs: hangs, signs of life, steps, silence, and what says a rank had finished."""
