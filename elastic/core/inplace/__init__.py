"""In-place restarts, the launcher's decisions: the world that survivors and spares re-form after a loss."""
