"""What Lightning's SLURMEnvironment makes of a rank's Slurm variables: one line
``slurm detected=D world=W rank=R local=L node=N``, after Lightning's own check that the tasks per
node and nodes match this rank's (elastic's) devices and nodes (it raises otherwise)."""

import os

from lightning.fabric.plugins.environments import SLURMEnvironment

env = SLURMEnvironment()
env.validate_settings(num_devices=int(os.environ["LOCAL_WORLD_SIZE"]), num_nodes=int(os.environ["GROUP_WORLD_SIZE"]))
print(f"slurm detected={SLURMEnvironment.detect()} world={env.world_size()} rank={env.global_rank()} "
      f"local={env.local_rank()} node={env.node_rank()}", flush=True)
