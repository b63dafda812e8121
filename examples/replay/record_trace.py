#!/usr/bin/env python3
"""Record a PyTorch allocation trace, for `cudalloc replay`.

    python3 examples/replay/record_trace.py TRACE.json [STEPS]

Runs a small transformer's training steps under PyTorch's own allocator with its memory
history on, and writes PyTorch's snapshot (segments and device_traces) as JSON. Nothing of
cudalloc runs here: the trace is what PyTorch did, to be replayed on the CPU under cudalloc's
policy and under a model of PyTorch's.
"""
import json
import sys

import torch

if len(sys.argv) not in (2, 3):
    sys.exit(__doc__)
path = sys.argv[1]
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 4
torch.manual_seed(0)
torch.cuda.memory._record_memory_history(max_entries=1_000_000, context=None)

layer = torch.nn.TransformerEncoderLayer(d_model=512, nhead=8, dim_feedforward=2048,
                                         batch_first=True)
model = torch.nn.TransformerEncoder(layer, num_layers=6).cuda()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
for step in range(steps):
    length = (128, 256, 192, 320)[step % 4]  # varying shapes, as real batches have
    x = torch.randn(16, length, 512, device="cuda")
    loss = model(x).square().mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)

snapshot = torch.cuda.memory._snapshot()
torch.cuda.memory._record_memory_history(enabled=None)
with open(path, "w") as f:
    json.dump({"segments": snapshot["segments"], "device_traces": snapshot["device_traces"]}, f)
events = sum(len(t) for t in snapshot["device_traces"])
print(f"{path}: {events} events, PyTorch peak reserved {torch.cuda.max_memory_reserved()} bytes")
