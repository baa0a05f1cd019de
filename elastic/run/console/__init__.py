"""What the user sees while a run goes: the non-blocking console writer, structlog's set-up, the events in words at each verbosity, and the live status line."""
