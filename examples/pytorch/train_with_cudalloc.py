#!/usr/bin/env python3
"""Train a small PyTorch model with cudalloc as the CUDA allocator.

From a source checkout, after building libcudalloc.so into build/:
    PYTHONPATH=tools/python python3 examples/pytorch/train_with_cudalloc.py
(or point CUDALLOC_LIBRARY at libcudalloc.so).
"""
import os
import sys

# So that the example also runs straight from a checkout without PYTHONPATH.
sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                             "tools", "python"))

# 1. Install cudalloc first: PyTorch can swap its allocator only before the first CUDA
#    tensor exists. Calling enable() later raises cudalloc.TooLateError.
import cudalloc

cudalloc.enable()

import torch  # noqa: E402  (imported after enable() on purpose, though only CUDA use matters)

# 2. Train as usual; every CUDA tensor now comes from cudalloc.
model = torch.nn.Sequential(
    torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 10)
).cuda()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

for step in range(10):
    x = torch.randn(256, 512, device="cuda")
    y = torch.randint(0, 10, (256,), device="cuda")
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step}: loss {loss.item():.4f}")

# 3. torch.cuda.memory_summary() does not work with a pluggable allocator; ask cudalloc.
print(cudalloc.memory_summary())
stats = cudalloc.stats()  # {name: {"current", "peak", "total"}}
print(f"peak allocated: {stats['allocated_bytes']['peak'] / 2**20:.1f} MiB")

# torch.cuda.empty_cache() reaches cudalloc through the allocator's reset hook.
del model, optimizer, x, y, loss
torch.cuda.empty_cache()
print(f"reserved after empty_cache: {cudalloc.stats()['reserved_bytes']['current']} bytes")
