"""The benchmark workloads: one definition of each model and training / inference step.

Used by tools/bench/torch_workloads.py (all of them), examples/offload/adamw_offload.py and
examples/multi_gpu/ddp_gpt2.py and tests/python/preload_frameworks.py (GPT-2 small). The
workloads are those of shared/traces/record_traces.py (the reference traces): same models,
configurations, batch sizes and seeds. Importing this module needs neither torch nor
transformers: every builder takes the torch module and imports the rest itself.
"""
import random

# GPT-2 small as the gpt2_train workload trains it: 12 layers, 768 wide, 12 heads, 1024
# positions; batches of 8 x 1024 tokens.
GPT2_SMALL = {"n_layer": 12, "n_embd": 768, "n_head": 12, "n_positions": 1024}
GPT2_VOCAB = 50257
GPT2_BATCH = (8, 1024)


def gpt2_small():
    """A GPT-2 small language model on the CPU (move it with .cuda())."""
    from transformers import GPT2Config, GPT2LMHeadModel
    return GPT2LMHeadModel(GPT2Config(**GPT2_SMALL))


def gpt2_tokens(torch, generator=None, device="cuda"):
    """One batch of random token ids of GPT2_BATCH's shape."""
    return torch.randint(0, GPT2_VOCAB, GPT2_BATCH, device=device, generator=generator)


def lm_loss(torch, model, x):
    """The language-model loss of `x` (labels = inputs) under bf16 autocast."""
    with torch.autocast("cuda", dtype=torch.bfloat16):
        return model(input_ids=x, labels=x).loss


class Gpt2Train:
    """gpt2_train's step: GPT-2 small on the GPU, AdamW lr 1e-4; step(i) draws a batch, runs
    forward and backward, calls before_update(optimizer), optimizer.step(),
    after_update(optimizer), and returns the loss (detached)."""

    def __init__(self, torch, before_update=None, after_update=None):
        self.torch = torch
        self.model = gpt2_small().cuda()
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4)
        self.before_update, self.after_update = before_update, after_update

    def __call__(self, i):
        loss = lm_loss(self.torch, self.model, gpt2_tokens(self.torch))
        loss.backward()
        if self.before_update:
            self.before_update(self.optimizer)
        self.optimizer.step()
        if self.after_update:
            self.after_update(self.optimizer)
        self.optimizer.zero_grad(set_to_none=True)
        return loss.detach()


# The other workloads. Each builder takes the torch module and returns step(i) -> a 0-dim
# tensor: the loss of a training step, a checksum of the outputs of an inference step.

def _causal_lm_varlen(torch, m, rng, lengths):
    """Training step of a causal LM on 16384 tokens of a length drawn from `lengths`."""
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)

    def step(i):
        L = rng.choice(lengths)
        B = max(1, 16384 // L)
        x = torch.randint(0, 32000, (B, L), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = m(input_ids=x, labels=x).loss
        loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
        return loss.detach()
    return step


def llama_train_varlen(torch):
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=12,
                      num_attention_heads=16, num_key_value_heads=16, vocab_size=32000,
                      max_position_embeddings=4096)
    m = LlamaForCausalLM(cfg).cuda()
    m.gradient_checkpointing_enable()
    m.train()
    return _causal_lm_varlen(torch, m, random.Random(1),
                             [128, 256, 384, 512, 768, 1024, 1536, 2048])


def moe_train(torch):
    from transformers import MixtralConfig, MixtralForCausalLM
    cfg = MixtralConfig(hidden_size=768, intermediate_size=1536, num_hidden_layers=8,
                        num_attention_heads=12, num_key_value_heads=4, num_local_experts=8,
                        num_experts_per_tok=2, vocab_size=32000, max_position_embeddings=4096)
    m = MixtralForCausalLM(cfg).cuda().train()
    return _causal_lm_varlen(torch, m, random.Random(5), [256, 512, 1024, 2048])


def resnet50_train(torch):
    import torchvision
    m = torchvision.models.resnet50().cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    scaler = torch.amp.GradScaler()

    def step(i):
        x = torch.randn(128, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
        y = torch.randint(0, 1000, (128,), device="cuda")
        with torch.autocast("cuda", dtype=torch.float16):
            loss = torch.nn.functional.cross_entropy(m(x), y)
        scaler.scale(loss).backward(); scaler.step(opt); scaler.update()
        opt.zero_grad(set_to_none=True)
        return loss.detach()
    return step


def vit_train(torch):
    import torchvision
    m = torchvision.models.vit_b_16().cuda()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)

    def step(i):
        x = torch.randn(64, 3, 224, 224, device="cuda")
        y = torch.randint(0, 1000, (64,), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(m(x), y)
        loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
        return loss.detach()
    return step


def _varlen_inference(torch, m, seed, max_batch, lengths, vocab, checksum):
    """Inference on random token batches: batch in 1..max_batch, length in lengths."""
    rng = random.Random(seed)

    def step(i):
        B, L = rng.randint(1, max_batch), rng.randint(*lengths)
        x = torch.randint(0, vocab, (B, L), device="cuda")
        with torch.inference_mode():
            return checksum(m(input_ids=x))
    return step


def bert_infer_varlen(torch):
    from transformers import BertConfig, BertModel
    m = BertModel(BertConfig()).cuda().eval().half()
    return _varlen_inference(torch, m, 2, 64, (16, 512), 30522,
                             lambda out: out.last_hidden_state.sum(dtype=torch.float32))


def gpt2_generate(torch):
    from transformers import GPT2Config, GPT2LMHeadModel
    m = GPT2LMHeadModel(GPT2Config(n_layer=24, n_embd=1024, n_head=16)).cuda().eval().half()
    rng = random.Random(3)

    def step(i):
        B, L, N = rng.randint(1, 16), rng.randint(16, 256), rng.randint(32, 256)
        x = torch.randint(0, 50257, (B, L), device="cuda")
        with torch.inference_mode():
            out = m.generate(input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=N,
                             min_new_tokens=N, do_sample=True, pad_token_id=0)
            weights = torch.arange(1, out.shape[1] + 1, device=out.device)
            return (out * weights).sum()  # token ids weighted by position
    return step


def gpt2_infer_varlen(torch):
    """record_traces.py's gpt2_infer_varlen: batch and length change at every step."""
    from transformers import GPT2Config, GPT2LMHeadModel
    m = GPT2LMHeadModel(GPT2Config(n_layer=24, n_embd=1024, n_head=16)).cuda().eval().half()
    return _varlen_inference(torch, m, 7, 48, (16, 1024), 50257,
                             lambda out: out.logits.sum(dtype=torch.float32))


def gnn_train_varlen(torch):
    """A graph network trained on graphs whose node and edge counts change at every step."""
    from torch_geometric.nn import SAGEConv

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = torch.nn.ModuleList(
                [SAGEConv(128, 256), SAGEConv(256, 256), SAGEConv(256, 16)])

        def forward(self, x, edge_index):
            for k, conv in enumerate(self.convs):
                x = conv(x, edge_index)
                if k + 1 < len(self.convs):
                    x = torch.nn.functional.relu(x)
            return x

    m = Net().cuda()
    opt = torch.optim.Adam(m.parameters(), lr=1e-3)
    rng = random.Random(11)

    def step(i):
        n = rng.randint(20_000, 400_000)
        e = n * rng.randint(4, 16)
        g = torch.Generator(device="cuda").manual_seed(i)
        x = torch.randn(n, 128, device="cuda", generator=g)
        edge_index = torch.randint(0, n, (2, e), device="cuda", generator=g)
        y = torch.randint(0, 16, (n,), device="cuda", generator=g)
        loss = torch.nn.functional.cross_entropy(m(x, edge_index), y)
        loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
        return loss.detach()
    return step


def _maskrcnn_batch(torch, rng):
    imgs, tgts = [], []
    for _ in range(4):
        h, w = rng.randint(480, 1024), rng.randint(480, 1024)
        imgs.append(torch.rand(3, h, w, device="cuda"))
        k = rng.randint(1, 12)
        xy = torch.rand(k, 2, device="cuda") * torch.tensor([w * 0.6, h * 0.6], device="cuda")
        wh = torch.rand(k, 2, device="cuda") * 100 + 20
        boxes = torch.cat([xy, xy + wh], 1)
        masks = torch.zeros(k, h, w, dtype=torch.uint8, device="cuda")
        for j in range(k):
            x0, y0, x1, y1 = [int(v) for v in boxes[j].tolist()]
            masks[j, y0:y1, x0:x1] = 1
        labels = torch.randint(1, 91, (k,), device="cuda")
        tgts.append(dict(boxes=boxes, labels=labels, masks=masks))
    return imgs, tgts


def maskrcnn_train(torch):
    import torchvision
    m = torchvision.models.detection.maskrcnn_resnet50_fpn(
        weights=None, weights_backbone=None, num_classes=91).cuda().train()
    opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
    rng = random.Random(4)

    def step(i):
        imgs, tgts = _maskrcnn_batch(torch, rng)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = sum(m(imgs, tgts).values())
        loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
        return loss.detach()
    return step


def t5_train(torch):
    from transformers import T5Config, T5ForConditionalGeneration
    cfg = T5Config(d_model=768, d_ff=3072, num_layers=12, num_heads=12,
                   decoder_start_token_id=0, pad_token_id=0)
    m = T5ForConditionalGeneration(cfg).cuda().train()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    rng = random.Random(6)

    def step(i):
        B, L, T = rng.randint(8, 32), rng.randint(64, 512), rng.randint(16, 128)
        x = torch.randint(0, 32000, (B, L), device="cuda")
        y = torch.randint(0, 32000, (B, T), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = m(input_ids=x, labels=y).loss
        loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
        return loss.detach()
    return step


# name: (builder, default steps, modules it needs, what step() returns). The defaults keep a
# default run (5 main workloads x 3 modes) near 4 minutes on an H200; gpt2_generate keeps
# record_traces.py's 6 steps (its token count), the fixed-shape ones get 18 timed steps.
WORKLOADS = {
    "gpt2_train": (Gpt2Train, 20, ["transformers"], "loss"),
    "llama_train_varlen": (llama_train_varlen, 24, ["transformers"], "loss"),
    "resnet50_train": (resnet50_train, 20, ["torchvision"], "loss"),
    "vit_train": (vit_train, 20, ["torchvision"], "loss"),
    "gpt2_generate": (gpt2_generate, 6, ["transformers"], "checksum"),
    "bert_infer_varlen": (bert_infer_varlen, 60, ["transformers"], "checksum"),
    "maskrcnn_train": (maskrcnn_train, 10, ["torchvision"], "loss"),
    "moe_train": (moe_train, 12, ["transformers"], "loss"),
    "t5_train": (t5_train, 12, ["transformers"], "loss"),
    "gpt2_infer_varlen": (gpt2_infer_varlen, 58, ["transformers"], "checksum"),
    "gnn_train_varlen": (gnn_train_varlen, 24, ["torch_geometric"], "loss"),
}
MAIN_WORKLOADS = ["gpt2_train", "llama_train_varlen", "resnet50_train", "vit_train",
                  "gpt2_generate"]

