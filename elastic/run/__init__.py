"""The driver's shell: the driver loop, the run directory and its journal,
metrics, the console, logging set-up, ``elastic status``, ``report.json``,
the timeline drawing and the checkpoint directory scan."""
