#!/usr/bin/env python3
"""Turns a post-training run (tools/tiny/post_train.py) into a model the repository ships: the
weights in the layout rkv loads, TriAttention's query statistics of its own, post_training.json
(the base model, method, budget, buffer, held-out dataset, preset, recipe, seeds and every
setting, and the accuracies measured here), the run's log and curves, and a model card.

    /usr/bin/python3 tools/tiny/ship_adapted.py runs/post/chains-gkv96-rlsparse \
        models/rkv-tiny-reasoner-gkv96

The accuracies are rkv's greedy pass@1 on the first 50 problems of the held-out set (on which
nothing is ever trained), at the trained method and budget and with a full cache, for the
adapted model and for the model it started from; the CI test (tests/test_post_training.cpp)
checks the adapted model's figures on every run.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
FILES = ("config.json", "model.safetensors", "generation_config.json", "tokenizer.json",
         "tokenizer_config.json")
HELD_OUT = {"chains": "data/chains_test.jsonl", "redundant": "data/redundant_test.jsonl"}
CALIBRATION = {"chains": "data/calib_chains.txt", "redundant": "data/calib_redundant.txt"}
RECIPE_NAMES = {"rl-sparse": "RL-Sparse (GRPO under the eviction's masks)",
                "rl-full": "RL-Full (GRPO with a full cache, the control)",
                "distill": "Distill (KL to the full-cache model under the eviction's masks)"}
FIRST = 50


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"ship_adapted: {' '.join(cmd)} failed:\n{r.stderr[-2000:]}")
    return r.stdout


def pass_at_1(rkv, model, dataset, preset, method, budget, buffer):
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [rkv, "eval", "-m", model, "--dataset", dataset, "--preset", preset, "--methods",
               method, "--temp", "0", "--limit", str(FIRST), "-o", tmp]
        if method != "fullkv":
            cmd += ["--budgets", str(budget), "--kv-buffer", str(buffer)]
        run(cmd)
        with open(os.path.join(tmp, "summary.json")) as f:
            return json.load(f)["results"][0]["pass_at_1"]


def main() -> None:
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    run_dir, dest = sys.argv[1], sys.argv[2].rstrip("/")
    rkv = sys.argv[3] if len(sys.argv) == 4 else "build/rkv"
    with open(os.path.join(run_dir, "run.json")) as f:
        record = json.load(f)
    s = record["settings"]
    family = s["family"]
    dataset, preset = HELD_OUT[family], family
    os.makedirs(dest, exist_ok=True)
    for name in FILES:
        shutil.copy(os.path.join(run_dir, "model", name), os.path.join(dest, name))
    shutil.copy(os.path.join(run_dir, "log.csv"), os.path.join(dest, "post_training_log.csv"))
    name = os.path.basename(dest)
    title = f"{name}: {record['recipe']} for {s['method']} at budget {s['budget']}"
    run([sys.executable, os.path.join(HERE, "plot_post_training.py"),
         os.path.join(run_dir, "log.csv"), os.path.join(dest, "curves.svg"), title])
    run([rkv, "calibrate", "-m", dest, "-f", CALIBRATION[family], "--separator", "\\n\\n\\n",
         "-o", os.path.join(dest, "query_stats.safetensors")])

    method, budget, buffer = s["method"], s["budget"], s["buffer"]
    measured = {
        "adapted": pass_at_1(rkv, dest, dataset, preset, method, budget, buffer),
        "adapted_full_cache": pass_at_1(rkv, dest, dataset, preset, "fullkv", 0, 0),
        "base": pass_at_1(rkv, s["base"], dataset, preset, method, budget, buffer),
        "base_full_cache": pass_at_1(rkv, s["base"], dataset, preset, "fullkv", 0, 0),
    }
    log = list(open(os.path.join(run_dir, "log.csv")))
    last = log[-1].split(",")
    post = {
        "base_model": s["base"],
        "base_model_sha256": record["base_model_sha256"],
        "method": method,
        "budget": budget,
        "buffer": buffer,
        "dataset": dataset,
        "preset": preset,
        "recipe": record["recipe"],
        "seeds": {"problems_and_sampling": s["seed"], "validation_problems": record[
            "validation_seed"]},
        "hyperparameters": {k: s[k] for k in (
            "problems", "group", "lr", "weight_decay", "temperature", "tau", "clip", "updates",
            "max_new_tokens", "iterations", "token_budget", "micro_batch")},
        "iterations_run": int(last[0]),
        "rollout_tokens": int(last[1]),
        "trained_on": f"tools/tiny/task.py draws ({family}), a seed per iteration, skipping the "
                      f"held-out set ({dataset}) and the {s['val_problems']} validation problems",
        "started": record["started"],
        "rkv": record["rkv"],
        "pass_at_1_first_50": measured,
        "command": f"/usr/bin/python3 tools/tiny/post_train.py --out {run_dir} " + " ".join(
            f"--{k.replace('_', '-')} {s[k]}" for k in (
                "base", "family", "recipe", "method", "budget", "buffer", "problems", "group",
                "lr", "temperature", "tau", "iterations", "eval_every", "seed")),
    }
    with open(os.path.join(dest, "post_training.json"), "w") as f:
        json.dump(post, f, indent=1)
        f.write("\n")
    write_card(dest, name, post, RECIPE_NAMES[record["recipe"]])
    print(json.dumps(measured))


def write_card(dest, name, p, recipe):
    m = p["pass_at_1_first_50"]
    text = f"""# {name}

[{os.path.basename(p['base_model'])}](../{os.path.basename(p['base_model'])}/README.md) after
G-KV's post-training (issue 38; tools/tiny/README.md, "Post-training"): **{recipe}**, for
**{p['method']} at a budget of {p['budget']}** entries per KV head with a buffer of
{p['buffer']}, so that it thinks under its own eviction. Same architecture, tokenizer and chat
template as the model it started from; only the weights changed.

Greedy pass@1 on the first 50 held-out problems ({p['dataset']}, never trained on):

| model | {p['method']} {p['budget']} | full cache |
|---|---:|---:|
| {os.path.basename(p['base_model'])} (the start) | {m['base']:.2f} | {m['base_full_cache']:.2f} |
| {name} | {m['adapted']:.2f} | {m['adapted_full_cache']:.2f} |

The whole accuracy-against-budget picture, every method, is in
[docs/RESULTS.md](../../docs/RESULTS.md#post-training-issue-38).

![training curves](curves.svg)

`curves.svg` draws `post_training_log.csv`: validation pass@1 (greedy, {p['hyperparameters']['problems']}
problems per iteration trained on, validation on 100 problems of their own) at the trained
budget and with a full cache, the rollouts' mean reward, and the loss or KL. Every setting,
seed and the token budget are in `post_training.json`; `query_stats.safetensors` is this
model's own TriAttention calibration (`rkv calibrate` on the family's calibration text).

Reproduce (about {p['rollout_tokens'] // 1_000_000 or 1} million rollout tokens; resumable):

```sh
{p['command']}
/usr/bin/python3 tools/tiny/ship_adapted.py {p['command'].split('--out ')[1].split()[0]} models/{name}
```
"""
    with open(os.path.join(dest, "README.md"), "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
