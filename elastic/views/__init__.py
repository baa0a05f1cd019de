"""Pure renderings of a folded run: ``elastic status``, ``report.json``, the timeline's HTML and SVG."""
