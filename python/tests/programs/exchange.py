"""Two ranks (gloo) exchanging anchor_pilot's own messages through the store,
as a distributed save does; EXCHANGE_CASE picks what is tested:

- exit: rank 0 broadcasts and exits at once while rank 1 is slow to read (rank
  0 hosts the store: it must wait until every rank has read);
- save_fails: rank 0 cannot begin the save (its checkpoint directory is a
  file); every rank must raise, none may wait for a message never sent.
"""
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

import anchor_pilot as ap
from anchor_pilot import pilot as app

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
rank = dist.get_rank()
case = os.environ["EXCHANGE_CASE"]
if case == "exit":
    x = app._Exchange(dist, rank, dist.get_world_size())
    if rank == 0:
        x.broadcast({"dir": "/x"})
        os._exit(0)  # no destroy, no barrier: the store goes with this process
    time.sleep(1.0)
    print("got", x.broadcast(None)["dir"])
    sys.exit(0)
if case == "save_fails":
    model = torch.nn.Linear(2, 1)
    pilot = ap.Pilot(model=model, checkpoint_dir=os.environ["EXCHANGE_CKPT"], save_at=[1], stop_at=1)
    try:
        pilot.maybe_save(1)
    except ap.CheckpointError as e:
        print("raised:", e)
        sys.exit(3)
    sys.exit(0)
raise SystemExit("unknown EXCHANGE_CASE " + case)
