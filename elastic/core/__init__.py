"""The functional core: pure functions of values that decide (DESIGN §2).

Failure kinds and their classification, budgets and backoff, the phase
machine, the controller and its commands, the plan of ranks and environments,
the journal's replay and the timeline model, the option table and the run
configuration, checkpoint rules over gathered facts. Nothing here imports
Ray, starts a process, reads the environment, calls the clock or logs;
``tests/unit/test_layers.py`` keeps it so.
"""
