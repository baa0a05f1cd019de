"""Which Ray cluster a run uses and its life: the address decided without Ray, joining with token authentication, and the embedded cluster's head and its one owner, the keeper."""
