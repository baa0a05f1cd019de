"""The decider: observations in, records and commands out; the phases, the attempt, the drain, exit hangs, capacity, progress."""
