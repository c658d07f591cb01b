#!/usr/bin/env python3
"""Hugging Face transformers' generate() on a checkpoint directory, as the CUDA backend's yardstick
(issue: the engine on a GPU; docs/GPU.md). Random prompt ids, greedy, eos ignored (min_new_tokens =
max_new_tokens), bf16 on the GPU, with the dynamic and the static cache; prints one line per run
and a JSON line per run with --json. Runs where torch and transformers are installed (the GPU
machine's image has both); rkv itself never depends on Python."""
import argparse
import json
import time

import torch
from transformers import AutoModelForCausalLM


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("model", help="checkpoint directory (config.json + *.safetensors)")
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 64])
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--gen-len", type=int, default=512)
    ap.add_argument("--caches", nargs="+", default=["dynamic", "static"])
    ap.add_argument("--json", action="store_true", help="also print a JSON line per run")
    a = ap.parse_args()
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(a.model, torch_dtype=torch.bfloat16).cuda().eval()
    vocab = model.config.vocab_size
    for cache in a.caches:
        for batch in a.batch:
            ids = torch.randint(3, vocab, (batch, a.prompt_len), device="cuda")
            kwargs = dict(max_new_tokens=a.gen_len, min_new_tokens=a.gen_len, do_sample=False,
                          pad_token_id=0, attention_mask=torch.ones_like(ids))
            if cache == "static":
                kwargs["cache_implementation"] = "static"
            # Warm-up (compilation of the static cache's graphs, cuBLAS handles), then one timed run.
            model.generate(ids, **{**kwargs, "max_new_tokens": 8, "min_new_tokens": 8})
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = model.generate(ids, **kwargs)
            torch.cuda.synchronize()
            seconds = time.perf_counter() - t0
            generated = (out.shape[1] - a.prompt_len) * batch
            rate = generated / seconds
            print(f"transformers {cache} cache, batch {batch}: {generated} tokens in "
                  f"{seconds:.1f} s = {rate:.1f} tokens/s", flush=True)
            if a.json:
                print(json.dumps({"engine": "transformers", "cache": cache, "batch": batch,
                                  "prompt_len": a.prompt_len, "gen_len": a.gen_len,
                                  "seconds": seconds, "tokens_per_second": rate}), flush=True)


if __name__ == "__main__":
    main()
