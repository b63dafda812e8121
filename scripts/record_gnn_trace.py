# Records a PyTorch memory snapshot (with its trace) of gnn_train_varlen (tools/bench/workloads.py)
# under PyTorch's own allocator, for study on a CPU with `cudalloc replay`:
#   python3 scripts/record_gnn_trace.py OUT.pickle
import sys, time, torch
sys.path.insert(0, "tools/bench")
import workloads
torch.manual_seed(0)
torch.cuda.memory._record_memory_history(max_entries=2_000_000, context=None, stacks="python")
step = workloads.gnn_train_varlen(torch)
for i in range(24):
    step(i)
torch.cuda.synchronize()
torch.cuda.memory._dump_snapshot(sys.argv[1])
print("stats", torch.cuda.memory_stats()["reserved_bytes.all.peak"] / 2**30, torch.cuda.memory_stats()["allocated_bytes.all.peak"] / 2**30)
