#!/usr/bin/env python3
"""Loads an anchor export (docs/models.md, "Export") as Hugging Face does.

    hf_gpt2.py EXPORT_DIR --logits IDS OUT   writes the logits of the token ids
                                             IDS ("1,2,3") to OUT (safetensors,
                                             tensor "logits" [1, T, vocab])
    hf_gpt2.py EXPORT_DIR --check-loss       prints the export's check loss

Either way the directory is loaded with transformers.GPT2LMHeadModel.
from_pretrained (no hub access) and every tensor must be one the model takes:
a missing, unexpected or mis-shaped one exits 1 naming it. Runs under
scripts/torch2-python (transformers is pinned in requirements/torch2.txt).
"""
import json
import sys

import torch
from safetensors.torch import save_file
from transformers import GPT2LMHeadModel


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    model, info = GPT2LMHeadModel.from_pretrained(argv[0], local_files_only=True, output_loading_info=True)
    # lm_head.weight is tied to wte: never in the file, and not missing.
    missing = [k for k in info.get("missing_keys", []) if k != "lm_head.weight"]
    bad = {"missing": missing, "unexpected": list(info.get("unexpected_keys", [])),
           "mismatched": [str(m) for m in info.get("mismatched_keys", [])]}
    if any(bad.values()):
        print("FAIL transformers did not take the export as it stands: " + json.dumps(bad))
        return 1
    if model.lm_head.weight.data_ptr() != model.transformer.wte.weight.data_ptr():
        print("FAIL lm_head is not tied to wte")
        return 1
    model.eval()
    if argv[1] == "--logits":
        ids = torch.tensor([[int(x) for x in argv[2].split(",")]], dtype=torch.long)
        with torch.no_grad():
            logits = model(input_ids=ids).logits
        save_file({"logits": logits.float().contiguous()}, argv[3])
        print("OK logits " + "x".join(str(d) for d in logits.shape))
        return 0
    if argv[1] == "--check-loss":
        n = min(64, model.config.n_positions)
        ids = (torch.arange(n, dtype=torch.long) * 7919 + 13) % model.config.vocab_size
        with torch.no_grad():
            loss = model(input_ids=ids.unsqueeze(0), labels=ids.unsqueeze(0)).loss
        print(json.dumps({"check_loss": loss.item()}))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
