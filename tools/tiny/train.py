#!/usr/bin/env python3
"""Trains the tiny reasoning model on the CPU with Debian's python3-torch and writes it in the
Hugging Face layout (config.json, model.safetensors, tokenizer.json, generation_config.json).

The architecture is Llama (RMSNorm, RoPE, SwiGLU, grouped-query attention, tied embeddings), the
same computation as transformers' LlamaForCausalLM, so rkv loads the result as any Llama
checkpoint. Training data is drawn on the fly from task.py with a seed per step (problems of the
held-out set are skipped), and the loss is taken on the chain-of-thought tokens only.

    python3 tools/tiny/train.py --out models/rkv-tiny-reasoner            # the model to ship
    python3 tools/tiny/train.py --out /tmp/m --steps 50 --save-every 25   # a quick smoke run

It saves the checkpoint every --save-every steps (and at the end) and appends to
OUT/train_log.csv (step, tokens seen, loss, learning rate, seconds). --resume continues from the
optimizer state it keeps in OUT.state.pt. Install `libopenblas0-pthread` first: with Debian's
default reference BLAS torch runs about 4x slower.
"""
import argparse
import csv
import json
import math
import os
import random
import struct
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import task  # noqa: E402
import tokenizer  # noqa: E402

HELD_OUT_SEED = 7  # tools/tiny/task.py --seed 7 writes the committed test set


class Config:
    def __init__(self, args):
        self.vocab_size = tokenizer.VOCAB_SIZE
        self.hidden = args.hidden
        self.layers = args.layers
        self.heads = args.heads
        self.kv_heads = args.kv_heads
        self.head_dim = args.hidden // args.heads
        self.ffn = args.ffn
        self.rope_theta = 10000.0
        self.eps = 1e-5
        self.max_pos = 2048

    def hf(self) -> dict:
        return {
            "architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "vocab_size": self.vocab_size, "hidden_size": self.hidden,
            "intermediate_size": self.ffn, "num_hidden_layers": self.layers,
            "num_attention_heads": self.heads, "num_key_value_heads": self.kv_heads,
            "head_dim": self.head_dim, "hidden_act": "silu",
            "max_position_embeddings": self.max_pos, "rms_norm_eps": self.eps,
            "rope_theta": self.rope_theta, "rope_scaling": None, "attention_bias": False,
            "mlp_bias": False, "tie_word_embeddings": True, "torch_dtype": "float32",
            "bos_token_id": None, "eos_token_id": tokenizer.EOS_ID,
        }


class RMSNorm(torch.nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Block(torch.nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.c = c
        lin = lambda i, o: torch.nn.Linear(i, o, bias=False)  # noqa: E731
        self.input_layernorm = RMSNorm(c.hidden, c.eps)
        self.q_proj = lin(c.hidden, c.heads * c.head_dim)
        self.k_proj = lin(c.hidden, c.kv_heads * c.head_dim)
        self.v_proj = lin(c.hidden, c.kv_heads * c.head_dim)
        self.o_proj = lin(c.heads * c.head_dim, c.hidden)
        self.post_attention_layernorm = RMSNorm(c.hidden, c.eps)
        self.gate_proj = lin(c.hidden, c.ffn)
        self.up_proj = lin(c.hidden, c.ffn)
        self.down_proj = lin(c.ffn, c.hidden)
        # Model.forward_with_qk sets `capture`; a forward then leaves the attention's queries and
        # keys (after RoPE, one key per KV head) in `qk`
        self.capture, self.qk = False, None

    def forward(self, x, cos, sin, mask):
        c = self.c
        b, t, _ = x.shape
        h = self.input_layernorm(x)
        q = self.q_proj(h).view(b, t, c.heads, c.head_dim).transpose(1, 2)
        k = self.k_proj(h).view(b, t, c.kv_heads, c.head_dim).transpose(1, 2)
        v = self.v_proj(h).view(b, t, c.kv_heads, c.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if self.capture:
            self.qk = (q, k)
        group = c.heads // c.kv_heads
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(c.head_dim) + mask
        attn = torch.softmax(scores, dim=-1) @ v
        x = x + self.o_proj(attn.transpose(1, 2).reshape(b, t, c.heads * c.head_dim))
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class FactoredEmbedding(torch.nn.Module):
    """The (tied) embedding matrix, with the tokens of tokenizer.FACTORS built from their parts:
    vector(` e-9`) = space + first[e] + mark[-] + last[9], where first[u] = unit[u] + first_only[u]
    and last[u] = unit[u] + last_only[u]. A token found by content (the value binding `3:e`, the
    statement token `e=a`) then shares its vector for `e` with the token that looks it up (` e`,
    `e=a`), from the first step: the lookup is a match of shared parts, which a small model
    learns in a few hundred steps, not a match of thousands of unrelated rows, which it does not
    (tools/tiny/README.md). `weight` is the full matrix; export writes it as an ordinary
    embedding, so the checkpoint is a plain Llama."""

    def __init__(self, c: Config):
        super().__init__()
        units = {u: i for i, u in enumerate(tokenizer.UNITS)}
        marks = {m: i for i, m in enumerate(tokenizer.MARKS)}
        n = len(units)
        init = lambda *shape: torch.nn.Parameter(torch.randn(*shape) * 0.02)  # noqa: E731
        self.own = init(c.vocab_size, c.hidden)  # tokens that are not factored
        self.unit, self.first_only, self.last_only = init(n, c.hidden), init(n, c.hidden), init(
            n, c.hidden)
        self.mark, self.space = init(len(marks), c.hidden), init(1, c.hidden)
        index = torch.zeros(4, c.vocab_size, dtype=torch.long)  # factored?, first, mark, last
        present = torch.zeros(4, c.vocab_size)  # space, first, mark, last
        for tid, (space, first, mark, last) in tokenizer.FACTORS.items():
            index[0, tid] = 1
            present[0, tid] = float(space)
            index[1, tid], present[1, tid] = units[first], 1.0
            if mark is not None:
                index[2, tid], present[2, tid] = marks[mark], 1.0
            if last is not None:
                index[3, tid], present[3, tid] = units[last], 1.0
        self.register_buffer("index", index, persistent=False)
        self.register_buffer("present", present, persistent=False)
        self.residual = False  # factored rows are parts + own (refactor)

    @property
    def weight(self) -> torch.Tensor:
        i, p = self.index, self.present[..., None]
        parts = (p[0] * self.space[0] + p[1] * (self.unit + self.first_only)[i[1]] +
                 p[2] * self.mark[i[2]] + p[3] * (self.unit + self.last_only)[i[3]])
        if self.residual:
            parts = parts + self.own
        return torch.where(i[0, :, None].bool(), parts, self.own)

    def forward(self, ids):
        return F.embedding(ids, self.weight)

    def refactor(self, matrix: torch.Tensor) -> float:
        """Starts from `matrix` (an exported model's embedding) and keeps the factoring: the
        parts are the least-squares fit of the factored rows, and each factored row also gets
        its own residual (`own`, added to its parts from now on), so the weight equals `matrix`
        exactly. For a model trained factored the residual is ~0. Returns its largest entry."""
        fact = self.index[0].bool()
        rows = fact.nonzero().squeeze(1)
        n, m = self.unit.shape[0], self.mark.shape[0]
        # columns: space | unit | first_only | last_only | mark
        a = torch.zeros(len(rows), 1 + 3 * n + m, dtype=torch.float64)
        r = torch.arange(len(rows))
        i, p = self.index[:, rows], self.present[:, rows].double()
        a[:, 0] = p[0]
        a[r, 1 + i[1]] += p[1]
        a[r, 1 + n + i[1]] += p[1]
        a[r, 1 + i[3]] += p[3]
        a[r, 1 + 2 * n + i[3]] += p[3]
        a[r, 1 + 3 * n + i[2]] += p[2]
        x = torch.linalg.lstsq(a, matrix[rows].double(), driver="gelsd").solution
        with torch.no_grad():
            self.space.copy_(x[0:1])
            self.unit.copy_(x[1:1 + n])
            self.first_only.copy_(x[1 + n:1 + 2 * n])
            self.last_only.copy_(x[1 + 2 * n:1 + 3 * n])
            self.mark.copy_(x[1 + 3 * n:])
            self.residual = False
            fitted = self.weight
            own = matrix.clone()
            own[rows] = matrix[rows] - fitted[rows]
            self.own.copy_(own)
        self.residual = True
        return float((matrix[rows] - fitted[rows]).abs().max())


class Model(torch.nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.c = c
        self.embed_tokens = FactoredEmbedding(c)
        self.blocks = torch.nn.ModuleList(Block(c) for _ in range(c.layers))
        self.norm = RMSNorm(c.hidden, c.eps)
        for blk in self.blocks:
            for m in (blk.q_proj, blk.k_proj, blk.v_proj, blk.gate_proj, blk.up_proj):
                torch.nn.init.normal_(m.weight, std=0.02)
            for m in (blk.o_proj, blk.down_proj):
                torch.nn.init.normal_(m.weight, std=0.02 / math.sqrt(2 * c.layers))

    def forward(self, ids, masks=None):
        """Logits [batch, t, vocab]. `masks`: None (causal attention), or one boolean tensor per
        layer, [batch, kv_heads, t, t], True where a query position may attend to a key
        position: the attention an evicting KV cache left each (layer, KV head), as
        tools/tiny/masks.py builds it from an rkv trace; a KV head's mask applies to every query
        head of its group."""
        c = self.c
        t = ids.shape[1]
        inv = 1.0 / (c.rope_theta ** (torch.arange(0, c.head_dim, 2, dtype=torch.float32) /
                                      c.head_dim))
        freqs = torch.outer(torch.arange(t, dtype=torch.float32), inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[None, None], emb.sin()[None, None]
        causal = torch.full((t, t), float("-inf")).triu(1)
        table = self.embed_tokens.weight
        x = F.embedding(ids, table)
        group = c.heads // c.kv_heads
        for i, blk in enumerate(self.blocks):
            if masks is None:
                mask = causal
            else:
                m = masks[i]
                mask = torch.zeros(m.shape).masked_fill(~m, float("-inf"))
                mask = mask.repeat_interleave(group, dim=1)
            x = blk(x, cos, sin, mask)
        return self.norm(x) @ table.T

    def forward_with_qk(self, ids, masks=None):
        """forward's logits, and per layer the attention's (q [batch, heads, t, d], k [batch,
        kv_heads, t, d]) after RoPE (post_train.py's retention loss reads them)."""
        for blk in self.blocks:
            blk.capture = True
        try:
            logits = self(ids, masks)
            return logits, [blk.qk for blk in self.blocks]
        finally:
            for blk in self.blocks:
                blk.capture, blk.qk = False, None

    def hf_tensors(self) -> dict:
        out = {"model.embed_tokens.weight": self.embed_tokens.weight,
               "model.norm.weight": self.norm.weight}
        for i, blk in enumerate(self.blocks):
            p = f"model.layers.{i}."
            out[p + "input_layernorm.weight"] = blk.input_layernorm.weight
            out[p + "post_attention_layernorm.weight"] = blk.post_attention_layernorm.weight
            for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
                out[p + f"self_attn.{name}.weight"] = getattr(blk, name).weight
            for name in ("gate_proj", "up_proj", "down_proj"):
                out[p + f"mlp.{name}.weight"] = getattr(blk, name).weight
        return out


def write_safetensors(path: str, tensors: dict) -> None:
    """Writes float32 tensors in the safetensors layout (8-byte header size, JSON header, data)."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        data = tensors[name].detach().to(torch.float32).contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)
    os.replace(tmp, path)


def export(model: Model, out: str) -> None:
    os.makedirs(out, exist_ok=True)
    write_safetensors(os.path.join(out, "model.safetensors"), model.hf_tensors())
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(model.c.hf(), f, indent=1)
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": tokenizer.EOS_ID, "pad_token_id": tokenizer.EOS_ID,
                   "do_sample": False, "max_new_tokens": 1024}, f, indent=1)
    tokenizer.write(out)


def read_safetensors(path: str) -> dict:
    """The float32 tensors of a safetensors file (what write_safetensors writes)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        assert meta["dtype"] == "F32", (name, meta["dtype"])
        a, b = meta["data_offsets"]
        out[name] = torch.frombuffer(bytearray(data[a:b]), dtype=torch.float32).view(
            meta["shape"])
    return out


def load_exported(model: Model, model_dir: str) -> None:
    """Loads an exported model (model.safetensors of the same shape) into `model`; the embedding
    stays factored, refitted to the exported matrix (FactoredEmbedding.refactor)."""
    tensors = read_safetensors(os.path.join(model_dir, "model.safetensors"))
    residual = model.embed_tokens.refactor(tensors.pop("model.embed_tokens.weight"))
    print(f"embedding refactored: largest residual {residual:.2e}", flush=True)
    with torch.no_grad():
        model.norm.weight.copy_(tensors.pop("model.norm.weight"))
        for i, blk in enumerate(model.blocks):
            p = f"model.layers.{i}."
            blk.input_layernorm.weight.copy_(tensors.pop(p + "input_layernorm.weight"))
            blk.post_attention_layernorm.weight.copy_(
                tensors.pop(p + "post_attention_layernorm.weight"))
            for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
                getattr(blk, name).weight.copy_(tensors.pop(p + f"self_attn.{name}.weight"))
            for name in ("gate_proj", "up_proj", "down_proj"):
                getattr(blk, name).weight.copy_(tensors.pop(p + f"mlp.{name}.weight"))
    assert not tensors, f"unused tensors in {model_dir}: {sorted(tensors)}"


def from_exported(model_dir: str) -> Model:
    """A Model of an exported checkpoint's shape (its config.json) with its weights."""
    with open(os.path.join(model_dir, "config.json")) as f:
        hf = json.load(f)
    c = Config(argparse.Namespace(hidden=hf["hidden_size"], layers=hf["num_hidden_layers"],
                                  heads=hf["num_attention_heads"],
                                  kv_heads=hf["num_key_value_heads"], ffn=hf["intermediate_size"]))
    model = Model(c)
    load_exported(model, model_dir)
    return model


def held_out_problems(family: str = "chains", rate: float = task.REDUNDANCY) -> set:
    return {p["problem"] for p in task.problems(HELD_OUT_SEED, 200, family, rate)}


def make_batch(step: int, size: int, seed: int, excluded: set, short=None,
               family: str = "chains", rate: float = task.REDUNDANCY):
    """(ids, targets) for one step; targets are -100 on prompt and padding positions. `short`,
    a (min, max) pair, draws the curriculum's shorter programs."""
    rng = random.Random(seed * 1_000_003 + step)
    seqs = []
    while len(seqs) < size:
        if family == "chains":  # the first model's draws, unchanged
            p = task.make_problem(rng, *short) if short else task.make_problem(rng)
        else:
            p = task.make(rng, family, short, rate)
        if p["problem"] in excluded:
            continue
        prompt = tokenizer.encode(p["problem"])
        answer = tokenizer.encode(p["solution"]) + [tokenizer.EOS_ID]
        seqs.append((prompt, answer))
    length = max(len(a) + len(b) for a, b in seqs)
    ids = torch.full((size, length), tokenizer.EOS_ID, dtype=torch.long)
    targets = torch.full((size, length), -100, dtype=torch.long)
    for i, (prompt, answer) in enumerate(seqs):
        full = prompt + answer
        ids[i, : len(full)] = torch.tensor(full)
        # position j predicts token j + 1; only chain-of-thought tokens are targets
        targets[i, len(prompt) - 1 : len(full) - 1] = torch.tensor(answer)
    return ids, targets


def add_shape_args(ap: argparse.ArgumentParser) -> None:
    """The model-shape flags (Config reads them), shared with lookup_probe.py."""
    ap.add_argument("--hidden", type=int, default=192, help="hidden size (default 192)")
    ap.add_argument("--layers", type=int, default=4, help="layers (default 4)")
    ap.add_argument("--heads", type=int, default=4, help="query heads (default 4)")
    ap.add_argument("--kv-heads", type=int, default=2, help="key/value heads (default 2)")
    ap.add_argument("--ffn", type=int, default=512, help="MLP intermediate size (default 512)")


def main() -> None:
    ap = argparse.ArgumentParser(description="Train the tiny reasoning model (tools/tiny).")
    ap.add_argument("--out", required=True, help="output directory (Hugging Face layout)")
    ap.add_argument("--steps", type=int, default=900, help="optimizer steps (default 900)")
    ap.add_argument("--short-steps", type=int, default=300,
                    help="first steps drawn from shorter programs, a curriculum (default 300)")
    ap.add_argument("--short-min", type=int, default=4,
                    help="fewest computed statements of the curriculum's programs (default 4)")
    ap.add_argument("--short-max", type=int, default=12,
                    help="most computed statements of the curriculum's programs (default 12)")
    ap.add_argument("--init-from", default="",
                    help="start from the weights of this .state.pt, or of an exported model "
                         "directory (its embedding then trains as an ordinary one); a fresh "
                         "optimizer and schedule")
    ap.add_argument("--family", choices=sorted(task.FAMILIES), default="chains",
                    help="task family (tools/tiny/task.py; default chains, the first model's)")
    ap.add_argument("--redundancy", type=float, default=task.REDUNDANCY,
                    help=f"redundant family's rate (default {task.REDUNDANCY})")
    ap.add_argument("--batch", type=int, default=16, help="sequences per step (default 16)")
    ap.add_argument("--lr", type=float, default=1e-3,
                    help="peak learning rate (default 1e-3; 3e-3 keeps lookup from forming)")
    ap.add_argument("--warmup", type=int, default=50, help="warm-up steps (default 50)")
    add_shape_args(ap)
    ap.add_argument("--seed", type=int, default=1, help="seed of weights and data (default 1)")
    ap.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    ap.add_argument("--save-every", type=int, default=100,
                    help="checkpoint interval in steps (default 100)")
    ap.add_argument("--resume", action="store_true", help="continue from OUT.state.pt")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    model = Model(Config(args))
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.01)
    state_path = args.out.rstrip("/") + ".state.pt"
    log_path = os.path.join(args.out, "train_log.csv")
    start, tokens_seen, elapsed0 = 0, 0, 0.0
    if args.resume and os.path.exists(state_path):
        state = torch.load(state_path)
        if state.get("unfactored"):
            model.embed_tokens.index[0].zero_()
        model.embed_tokens.residual = bool(state.get("residual"))
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start, tokens_seen, elapsed0 = state["step"], state["tokens"], state["elapsed"]
        print(f"resumed at step {start}", flush=True)
    else:
        if os.path.isdir(args.init_from):
            load_exported(model, args.init_from)
            print(f"weights from the exported model {args.init_from}", flush=True)
        elif args.init_from:
            state = torch.load(args.init_from)
            if state.get("unfactored"):
                model.embed_tokens.index[0].zero_()
            model.embed_tokens.residual = bool(state.get("residual"))
            model.load_state_dict(state["model"])
            print(f"weights from {args.init_from}", flush=True)
        if os.path.exists(log_path):
            os.remove(log_path)
    os.makedirs(args.out, exist_ok=True)
    excluded = held_out_problems(args.family, args.redundancy)
    print(f"model: {n_params / 1e6:.2f}M parameters; {args.steps} steps of {args.batch} sequences",
          flush=True)

    def lr_at(step):
        if step < args.warmup:
            return args.lr * (step + 1) / args.warmup
        progress = (step - args.warmup) / max(1, args.steps - args.warmup)
        return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))

    t0 = time.time() - elapsed0
    window = []
    for step in range(start, args.steps):
        short = (args.short_min, args.short_max) if step < args.short_steps else None
        ids, targets = make_batch(step, args.batch, args.seed, excluded, short, args.family,
                                  args.redundancy)
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        logits = model(ids)
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1),
                               ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        tokens_seen += int((targets != -100).sum())
        window.append(loss.item())
        done = step + 1
        if done % 10 == 0 or done == args.steps:
            elapsed = time.time() - t0
            mean = sum(window) / len(window)
            window = []
            print(f"step {done}/{args.steps} loss {mean:.4f} lr {lr_at(step):.2e} "
                  f"{elapsed:.0f}s ({tokens_seen / elapsed:.0f} target tok/s)", flush=True)
            new = not os.path.exists(log_path)
            with open(log_path, "a", newline="") as f:
                w = csv.writer(f)
                if new:
                    w.writerow(["step", "target_tokens", "loss", "lr", "seconds"])
                w.writerow([done, tokens_seen, f"{mean:.5f}", f"{lr_at(step):.3e}", f"{elapsed:.1f}"])
        if done % args.save_every == 0 or done == args.steps:
            export(model, args.out)
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": done,
                        "tokens": tokens_seen, "elapsed": time.time() - t0,
                        "unfactored": not bool(model.embed_tokens.index[0].any()),
                        "residual": model.embed_tokens.residual}, state_path)
            print(f"saved {args.out} at step {done}", flush=True)


if __name__ == "__main__":
    main()
