"""The driver's watches beside its loop: the latest complete checkpoint (and the scan that finds it), compilation caches, and nodes joining while the run could grow."""
