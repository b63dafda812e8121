"""The PyTorch memory features that tools/bench/torch_dropin.py checks, one function each.

Each takes the torch module and returns a dict: "detail" (a short text for the table) and,
where the work is deterministic, "value" (compared across allocators by the parent). A
feature that does not work raises. They run in a fresh process each (torch_dropin.py), so
any one of them may change global settings.
"""
import copy
import os
import pickle
import tempfile

FEATURES = {}  # name -> (group, function)
ENV = {}  # name -> environment of its child (set before the allocator is installed)


def feature(name, group, env=None):
    def register(fn):
        FEATURES[name] = (group, fn)
        ENV[name] = env or {}
        return fn
    return register


def _keepers(torch, n=8, numel=1 << 18):
    """Tensors allocated after a capture, each filled with its index: a replay that writes
    into memory the graph does not own shows up as a changed element."""
    return [torch.full((numel,), float(i), device="cuda") for i in range(n)]


def _wrong_elements(keepers):
    return sum(int((t != float(i)).sum()) for i, t in enumerate(keepers))


# ---- The features the pluggable path lacked ----------------------------------------------

@feature("graph_capture", "graphs")
def graph_capture(torch):
    x = torch.randn(1 << 20, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            (x * 2 + 1).sin()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        a = x * 2          # freed inside the capture: the graph keeps writing its memory
        b = a + 1
        del a
        out = b.sin()
        del b
    keepers = _keepers(torch)
    for _ in range(20):
        x.copy_(torch.randn_like(x))
        g.replay()
    torch.cuda.synchronize()
    wrong = _wrong_elements(keepers)
    err = float((out - (x * 2 + 1).sin()).abs().max())
    assert wrong == 0, f"{wrong} elements of later tensors overwritten by replays"
    assert err < 1e-5, f"graph output differs from eager by {err}"
    return {"detail": "20 replays, later tensors intact"}


@feature("make_graphed_callables", "graphs")
def graphed_callables(torch):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                                torch.nn.Linear(128, 10)).cuda()
    ref = copy.deepcopy(model)
    sample = torch.randn(32, 64, device="cuda", requires_grad=True)
    graphed = torch.cuda.make_graphed_callables(model, (sample,))
    keepers = _keepers(torch)
    worst = 0.0
    for _ in range(5):
        inp = torch.randn(32, 64, device="cuda")
        a, b = inp.clone().requires_grad_(), inp.clone().requires_grad_()
        out = graphed(a)
        out.sum().backward()
        expect = ref(b)
        expect.sum().backward()
        worst = max(worst, float((out - expect).abs().max()),
                    float((a.grad - b.grad).abs().max()))
    wrong = _wrong_elements(keepers)
    assert wrong == 0, f"{wrong} elements of later tensors overwritten"
    assert worst < 1e-4, f"outputs or input gradients differ from eager by {worst}"
    return {"detail": "5 steps: outputs and gradients match eager"}


@feature("decode_graphs_shared_pool", "graphs")
def decode_graphs(torch):
    # vLLM/SGLang style: one graph per batch size, all in one pool, replayed in turn.
    pool = torch.cuda.graph_pool_handle()
    w = torch.randn(256, 256, device="cuda") / 16
    graphs = {}
    for bs in (1, 2, 4, 8, 16):
        xin = torch.zeros(bs, 256, device="cuda")
        torch.tanh(xin @ w) @ w  # warm-up
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, pool=pool):
            h = torch.tanh(xin @ w)
            y = h @ w
            del h
        graphs[bs] = (g, xin, y)
    keepers = _keepers(torch)
    worst = 0.0
    for it in range(60):
        bs = (1, 2, 4, 8, 16)[it % 5]
        g, xin, y = graphs[bs]
        xin.copy_(torch.randn(bs, 256, device="cuda"))
        g.replay()
        worst = max(worst, float((y - torch.tanh(xin @ w) @ w).abs().max()))
    wrong = _wrong_elements(keepers)
    assert wrong == 0, f"{wrong} elements of later tensors overwritten"
    assert worst < 1e-4, f"replayed outputs differ from eager by {worst}"
    del graphs
    return {"detail": "5 graphs, 1 pool, 60 replays"}


def _mlp(torch):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.GELU(),
                               torch.nn.Linear(256, 128)).cuda()


@feature("compile_reduce_overhead", "graphs")
def compile_reduce_overhead(torch):
    model = _mlp(torch)
    compiled = torch.compile(model, mode="reduce-overhead")
    worst = 0.0
    with torch.no_grad():
        for _ in range(8):
            x = torch.randn(64, 128, device="cuda")
            out = compiled(x).clone()
            worst = max(worst, float((out - model(x)).abs().max()))
    assert worst < 1e-3, f"compiled output differs by {worst}"
    return {"detail": f"8 calls, max diff {worst:.1e}"}


@feature("cudagraph_tree_branches", "graphs")
def cudagraph_tree_branches(torch):
    # Cudagraph trees (reduce-overhead's default): f then g, and f then h, are two branches
    # of one tree; recording the second rewinds the pool to f's checkpoint
    # (getCheckpointState / setCheckpointPoolState), counted here.
    import torch._inductor.config as inductor_config
    assert inductor_config.triton.cudagraph_trees, "cudagraph trees are off"
    calls = {"checkpoint": 0, "restore": 0}
    real_get, real_set = torch._C._cuda_getCheckpointState, torch._C._cuda_setCheckpointPoolState

    def counted_get(*args):
        calls["checkpoint"] += 1
        return real_get(*args)

    def counted_set(*args):
        calls["restore"] += 1
        return real_set(*args)

    torch._C._cuda_getCheckpointState, torch._C._cuda_setCheckpointPoolState = counted_get, counted_set
    torch.manual_seed(0)
    w = [torch.randn(256, 256, device="cuda") / 16 for _ in range(3)]
    f = torch.compile(lambda x: (x @ w[0]).relu(), mode="reduce-overhead")
    g = torch.compile(lambda x: (x @ w[1]).sigmoid(), mode="reduce-overhead")
    h = torch.compile(lambda x: (x @ w[2]).tanh(), mode="reduce-overhead")
    worst = 0.0
    with torch.no_grad():
        for i in range(12):
            torch.compiler.cudagraph_mark_step_begin()
            x = torch.randn(64, 256, device="cuda")
            second, op = (g, torch.sigmoid) if i % 2 == 0 else (h, torch.tanh)
            out = second(f(x)).clone()
            expect = op((x @ w[0]).relu() @ w[1 if i % 2 == 0 else 2])
            worst = max(worst, float((out - expect).abs().max()))
    assert worst < 1e-2, f"tree outputs differ by {worst}"
    assert calls["restore"] > 0, f"no branch was rewound ({calls})"
    return {"detail": f"{calls['checkpoint']} checkpoints, {calls['restore']} restores, "
                      f"max diff {worst:.1e}"}


@feature("cudnn_benchmark", "kernels")
def cudnn_benchmark(torch):
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(16, 32, 3, padding=1).cuda()
    x = torch.randn(8, 16, 64, 64, device="cuda")
    expect = conv(x).detach()
    torch.backends.cudnn.benchmark = True
    out = conv(x)
    out.sum().backward()
    torch.cuda.synchronize()
    err = float((out - expect).abs().max())
    assert err < 1e-2, f"benchmarked conv differs by {err}"
    return {"detail": "conv forward+backward"}


@feature("memory_stats", "observability")
def memory_stats(torch):
    base = torch.cuda.memory_allocated()
    t = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
    held = torch.cuda.memory_allocated()
    assert held - base >= 64 << 20, f"memory_allocated grew by {held - base}"
    assert torch.cuda.memory_reserved() >= held
    assert torch.cuda.max_memory_allocated() >= held
    assert torch.cuda.max_memory_reserved() >= torch.cuda.memory_reserved()
    stats = torch.cuda.memory_stats()
    keys = ["allocated_bytes.all.current", "reserved_bytes.all.peak", "active_bytes.all.current",
            "requested_bytes.all.current", "segment.all.current", "allocation.all.allocated",
            "num_alloc_retries", "num_ooms"]
    missing = [k for k in keys if k not in stats]
    assert not missing, f"memory_stats lacks {missing}"
    del t
    torch.cuda.reset_peak_memory_stats()
    assert torch.cuda.max_memory_allocated() < held, "reset_peak_memory_stats kept the peak"
    summary = torch.cuda.memory_summary()
    assert "Allocated memory" in summary
    return {"detail": f"{len(stats)} keys"}


def _make_tagged_tensor(torch):
    return torch.empty(3 << 20, dtype=torch.uint8, device="cuda")


@feature("memory_history_snapshot", "observability")
def memory_history(torch):
    torch.cuda.memory._record_memory_history(stacks="python", max_entries=100000)
    t = _make_tagged_tensor(torch)
    snap = torch.cuda.memory._snapshot()
    addr = t.data_ptr()
    frames = []
    for seg in snap["segments"]:
        block_addr = seg["address"]
        for block in seg["blocks"]:
            if block_addr == addr:
                frames = block.get("frames", [])
            block_addr += block["size"]
    names = [f.get("name", "") for f in frames]
    assert "_make_tagged_tensor" in names, f"no stack for the block: frames {names[:5]}"
    actions = {e["action"] for trace in snap["device_traces"] for e in trace}
    assert "alloc" in actions, f"trace actions {actions}"
    path = os.path.join(tempfile.mkdtemp(), "snap.pickle")
    torch.cuda.memory._dump_snapshot(path)
    with open(path, "rb") as f:
        dumped = pickle.load(f)
    torch.cuda.memory._record_memory_history(enabled=None)
    assert dumped["segments"]
    return {"detail": f"{len(frames)} frames, {sum(map(len, snap['device_traces']))} events",
            "snapshot": path}


@feature("memory_snapshot", "observability")
def memory_snapshot(torch):
    t = torch.empty(5 << 20, dtype=torch.uint8, device="cuda")
    segments = torch.cuda.memory_snapshot()
    total = sum(s["total_size"] for s in segments)
    assert total >= 5 << 20, f"segments hold {total} bytes"
    del t
    return {"detail": f"{len(segments)} segments"}


@feature("out_of_memory_error", "errors")
def out_of_memory_error(torch):
    total = torch.cuda.get_device_properties(0).total_memory
    try:
        torch.empty(total * 2, dtype=torch.uint8, device="cuda")
    except torch.cuda.OutOfMemoryError as e:
        text = str(e)
        assert text.startswith("CUDA out of memory."), text[:80]
        torch.empty(1 << 20, device="cuda")  # still usable afterwards
        return {"detail": text.split(".")[0]}
    raise AssertionError("no OutOfMemoryError")


@feature("out_of_memory_observer", "errors")
def out_of_memory_observer(torch):
    calls = []
    torch._C._cuda_attach_out_of_memory_observer(
        lambda device, allocated, device_total, device_free: calls.append(device))
    total = torch.cuda.get_device_properties(0).total_memory
    try:
        torch.empty(total * 2, dtype=torch.uint8, device="cuda")
    except torch.cuda.OutOfMemoryError:
        pass
    assert calls, "the observer was not called"
    return {"detail": f"called {len(calls)}x"}


@feature("mempool", "pools")
def mempool(torch):
    pool = torch.cuda.MemPool()
    with torch.cuda.use_mem_pool(pool):
        inside = torch.empty(5 << 20, dtype=torch.uint8, device="cuda")
    outside = torch.empty(5 << 20, dtype=torch.uint8, device="cuda")
    segments = pool.snapshot()

    def holds(addr):
        return any(s["address"] <= addr < s["address"] + s["total_size"] for s in segments)

    assert holds(inside.data_ptr()), "the pool's snapshot lacks the tensor made inside it"
    assert not holds(outside.data_ptr()), "a tensor made outside the pool is in it"
    count = pool.use_count()
    assert count >= 1, f"use_count {count}"
    del inside, outside
    return {"detail": f"use_count {count}"}


def _ipc_child(queue, answers):
    import torch
    t = queue.get()
    answers.put(float(t.sum()))


@feature("cuda_ipc_plain", "pools", env={"CUDALLOC_CONF": "vmm:0"})
def cuda_ipc_plain(torch):
    return cuda_ipc(torch)


def _share_with_child(torch, child_mode=None, numel=1000):
    """Sends a CUDA tensor to a spawned child, which sums it. The child installs the same
    allocator as this process (torch_dropin._setup), or the one of `child_mode`."""
    import os
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    queue, answers = ctx.Queue(), ctx.Queue()
    mode_env = "CUDALLOC_DROPIN_MODE"
    saved = os.environ.get(mode_env)
    if child_mode is not None:
        os.environ[mode_env] = child_mode  # what the child's import of the harness installs
    try:
        proc = ctx.Process(target=_ipc_child, args=(queue, answers), daemon=True)
        proc.start()
    finally:
        if saved is not None:
            os.environ[mode_env] = saved
    t = torch.arange(numel, dtype=torch.float32, device="cuda")
    t.untyped_storage()._share_cuda_()  # raises here if the memory cannot be shared
    queue.put(t)
    got = answers.get(timeout=60)
    proc.join(60)
    assert got == float(t.sum()), f"child saw sum {got}"
    return {"detail": "child read the tensor"}


@feature("cuda_ipc", "pools")
def cuda_ipc(torch):
    return _share_with_child(torch)


@feature("cuda_ipc_large", "pools")
def cuda_ipc_large(torch):
    # 24 MiB: more than one page, at an offset inside the first.
    return _share_with_child(torch, numel=6 << 20)


@feature("cuda_ipc_cross", "pools",
         env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
def cuda_ipc_cross(torch):
    # Across allocators: PyTorch's own (with expandable segments, whose handles are of the
    # same kind as cudalloc's paged ones) shares with a child under cudalloc, and cudalloc
    # shares with a child under PyTorch's own allocator.
    import os
    mine = os.environ.get("CUDALLOC_DROPIN_MODE")
    other = "cudalloc" if mine == "native" else "native"
    result = _share_with_child(torch, child_mode=other, numel=3 << 20)
    result["detail"] = f"a child under {other} read the tensor"
    return result


# ---- Features that must keep working ----------------------------------------------------

@feature("memory_fraction", "limits")
def memory_fraction(torch):
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(0.1)
    small = torch.empty(int(total * 0.05), dtype=torch.uint8, device="cuda")
    try:
        torch.empty(int(total * 0.2), dtype=torch.uint8, device="cuda")
        raise AssertionError("an allocation above the fraction succeeded")
    except torch.cuda.OutOfMemoryError:
        pass
    except RuntimeError as e:  # the pluggable path raises a plain RuntimeError
        assert "out of memory" in str(e)
    del small
    return {"detail": "0.1 enforced"}


def _reserved(torch):
    """Reserved bytes by the allocator's own figure; the device's used memory where it has
    none (the pluggable path), which other processes on the GPU also move."""
    try:
        return torch.cuda.memory_reserved()
    except RuntimeError:
        free, total = torch.cuda.mem_get_info()
        return total - free


@feature("empty_cache", "limits")
def empty_cache(torch):
    t = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    del t
    before = _reserved(torch)
    torch.cuda.empty_cache()
    released = before - _reserved(torch)
    assert released >= 200 << 20, f"released {released} bytes"
    return {"detail": f"{released >> 20} MiB back"}


@feature("record_stream", "streams")
def record_stream(torch):
    side = torch.cuda.Stream()
    results = []
    for i in range(20):
        x = torch.full((1 << 22,), float(i), device="cuda")
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.cuda._sleep(1000000)
            y = x * 2
        x.record_stream(side)
        del x
        torch.full((1 << 22,), -1.0, device="cuda")  # may reuse x's memory only after side
        results.append(y)
    torch.cuda.synchronize()
    wrong = sum(int((y != 2.0 * i).sum()) for i, y in enumerate(results))
    assert wrong == 0, f"{wrong} wrong elements"
    return {"detail": "20 cross-stream frees"}


@feature("caching_allocator_alloc", "streams")
def caching_allocator_alloc(torch):
    p = torch.cuda.caching_allocator_alloc(1 << 20)
    assert p != 0
    torch.cuda.caching_allocator_delete(p)
    return {"detail": "alloc/delete"}


@feature("amp_checkpoint", "training")
def amp_checkpoint(torch):
    from torch.utils.checkpoint import checkpoint
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.GELU())
                                  for _ in range(4)]).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cuda")
    data = torch.randn(8, 64, 256, device="cuda", generator=None)
    losses = []
    for step in range(5):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            h = data[step]
            for block in model:
                h = checkpoint(block, h, use_reentrant=False)
            loss = h.float().pow(2).mean()
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        losses.append(round(float(loss), 6))
    return {"detail": f"loss {losses[-1]}", "value": losses}


@feature("compile_default", "kernels")
def compile_default(torch):
    model = _mlp(torch)
    compiled = torch.compile(model)
    x = torch.randn(64, 128, device="cuda")
    with torch.no_grad():
        err = float((compiled(x) - model(x)).abs().max())
    assert err < 1e-3, f"compiled output differs by {err}"
    return {"detail": f"max diff {err:.1e}"}


@feature("triton_kernel", "kernels")
def triton_kernel(torch):
    import triton
    import triton.language as tl

    @triton.jit
    def add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask),
                 mask=mask)

    n = 1 << 20
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.empty_like(x)
    add[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
    assert torch.allclose(out, x + y)
    return {"detail": "add kernel"}


@feature("lightning_device_stats", "frameworks")
def lightning_fit(torch):
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import DeviceStatsMonitor
    from lightning.pytorch.loggers import CSVLogger

    class Tiny(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(32, 1)

        def training_step(self, batch, _):
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(256, 32), torch.randn(256, 1))
    loader = torch.utils.data.DataLoader(data, batch_size=32)
    trainer = pl.Trainer(max_epochs=1, accelerator="gpu", devices=1,
                         callbacks=[DeviceStatsMonitor()], enable_progress_bar=False,
                         enable_model_summary=False, logger=CSVLogger(tempfile.mkdtemp()),
                         enable_checkpointing=False)
    trainer.fit(Tiny(), loader)
    return {"detail": "fit with DeviceStatsMonitor"}


@feature("hf_generate", "frameworks")
def hf_generate(torch):
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1000, n_positions=256)
    model = GPT2LMHeadModel(config).cuda().eval()
    ids = torch.randint(0, 1000, (2, 16), device="cuda")
    out = model.generate(ids, max_new_tokens=32, do_sample=False, pad_token_id=0)
    return {"detail": f"{out.shape[1]} tokens", "value": out[0, -8:].tolist()}


@feature("dataloader_pin_memory", "frameworks")
def pin_memory_loader(torch):
    data = torch.utils.data.TensorDataset(torch.arange(4096, dtype=torch.float32))
    loader = torch.utils.data.DataLoader(data, batch_size=256, pin_memory=True, num_workers=2)
    total = 0.0
    for (batch,) in loader:
        assert batch.is_pinned()
        total += float(batch.cuda(non_blocking=True).sum())
    assert total == float(sum(range(4096)))
    return {"detail": "16 pinned batches"}


@feature("accelerate_find_batch_size", "frameworks")
def accelerate_batch(torch):
    from accelerate.utils import find_executable_batch_size
    total = torch.cuda.get_device_properties(0).total_memory

    @find_executable_batch_size(starting_batch_size=1024)
    def run(batch_size):
        t = torch.empty(batch_size * (total // 256), dtype=torch.uint8, device="cuda")
        del t
        return batch_size

    found = run()  # depends on the free memory of the moment: not compared across modes
    assert 64 <= found < 256, f"found batch size {found}"
    return {"detail": f"batch size {found}"}


@feature("profiler_memory", "observability")
def profiler_memory(torch):
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                 profile_memory=True) as prof:
        t = torch.empty(16 << 20, dtype=torch.uint8, device="cuda")
        del t
    table = prof.key_averages().table(sort_by="self_device_memory_usage", row_limit=5)
    assert "aten::empty" in table
    return {"detail": "profile_memory"}
