"""Builds the TorchScript fixtures of tests/e2e/test_torchscript.cpp.

Run with /usr/bin/python3 (python3-torch). Writes into OUT_DIR:
  gpt.pt           a small GPT-like language model over bytes (vocab 256) with
                   dropout: forward(inputs, targets) -> mean loss (the contract)
  no_targets.pt    forward(inputs) only
  non_scalar.pt    forward returns the per-token losses [B, T]
  tuple_return.pt  forward returns (logits, loss)
  frozen.pt        every parameter has requires_grad=False
  tied.pt          gpt.pt with the LM head tied to the token embedding (one tensor, two names)
  pickled.pt       torch.save(model): a pickle, not a TorchScript archive
"""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d: int, heads: int, block: int, p: float):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, dropout=p, batch_first=True)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d), nn.Dropout(p))
        self.register_buffer("mask", torch.triu(torch.full((block, block), float("-inf")), diagonal=1))

    def forward(self, x):
        t = x.size(1)
        h = self.ln1(x)
        a, _ = self.attn(h, h, h, attn_mask=self.mask[:t, :t], need_weights=False)
        x = x + a
        return x + self.mlp(self.ln2(x))


class TinyLM(nn.Module):
    def __init__(self, vocab: int = 256, d: int = 32, heads: int = 2, layers: int = 2, block: int = 64, p: float = 0.1):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(block, d)
        self.drop = nn.Dropout(p)
        self.blocks = nn.ModuleList([Block(d, heads, block, p) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def logits(self, inputs):
        pos = torch.arange(inputs.size(1), device=inputs.device)
        x = self.drop(self.wte(inputs) + self.wpe(pos))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln_f(x))

    def forward(self, inputs, targets):
        logits = self.logits(inputs)
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


class NoTargets(TinyLM):
    def forward(self, inputs):
        return self.logits(inputs).mean()


class NonScalar(TinyLM):
    def forward(self, inputs, targets):
        logits = self.logits(inputs)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1), reduction="none")
        return loss.view(inputs.size(0), inputs.size(1))


class TupleReturn(TinyLM):
    def forward(self, inputs, targets):
        logits = self.logits(inputs)
        return logits, F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


def main(out: str) -> None:
    torch.manual_seed(0)
    for name, cls in [("gpt", TinyLM), ("no_targets", NoTargets), ("non_scalar", NonScalar),
                      ("tuple_return", TupleReturn), ("frozen", TinyLM), ("tied", TinyLM)]:
        m = cls()
        if name == "frozen":
            for p in m.parameters():
                p.requires_grad_(False)
        if name == "tied":
            m.head.weight = m.wte.weight
        torch.jit.script(m).save(f"{out}/{name}.pt")
    torch.save(TinyLM(), f"{out}/pickled.pt")


if __name__ == "__main__":
    main(sys.argv[1])
