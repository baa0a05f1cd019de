"""Restart decisions: the kind-to-action table, windowed budgets, backoff, the crash loop, user exit rules."""
