"""The one reading of a run's journal: the fold, its records, the goodput ledger, the timeline, recovery."""
