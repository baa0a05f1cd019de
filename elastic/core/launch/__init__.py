"""What an attempt launches: the plan of ranks, each rank's command and environment, caches, prewarm fit."""
