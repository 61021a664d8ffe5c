"""Writes tests/unit/checkpoint/dcp/: a torch.distributed.checkpoint save that
test_dcp.cpp reads without torch (a model's tensors, an int tensor, and
non-tensor values DCP pickles into the shard: a float, a string, a list).

    scripts/torch2-python tests/support/make_dcp_fixture.py tests/unit/checkpoint/dcp
"""
import os
import shutil
import sys
import warnings

import torch
import torch.distributed.checkpoint as dcp

out = sys.argv[1]
shutil.rmtree(out, ignore_errors=True)
torch.manual_seed(0)
state = {"model": {"w": torch.randn(4, 3), "b": torch.zeros(3)}, "step": torch.tensor(5),
         "extra": {"lr": 0.1, "name": "fixture", "seen": [1, 2, 3]}}
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # "torch.distributed is ... uninitialized": one process, as intended
    dcp.save(state, checkpoint_id=out)
print(sorted(os.listdir(out)), torch.__version__)
