#!/usr/bin/env python3
"""Turns a post-training run (tools/tiny/post_train.py) into a model the repository ships: the
weights in the layout rkv loads, TriAttention's query statistics of its own, post_training.json
(the base model, method, budget, buffer, held-out dataset, preset, recipe, seeds and every
setting, and the accuracies measured here), the run's log and curves, and a model card.

    /usr/bin/python3 tools/tiny/ship_adapted.py runs/post/chains-gkv96-distill-anchor \
        models/rkv-tiny-reasoner-gkv96 --iteration 20

The accuracies are rkv's greedy pass@1 on the first 50 problems of the held-out set (on which
nothing is ever trained), at the trained method and budget and with a full cache, for the
adapted model and for the model it started from; the CI test (tests/test_post_training.cpp)
checks the adapted model's figures on every run.
"""
import argparse
import csv
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from post_train import run  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
FILES = ("config.json", "model.safetensors", "generation_config.json", "tokenizer.json",
         "tokenizer_config.json")
HELD_OUT = {"chains": "data/chains_test.jsonl", "redundant": "data/redundant_test.jsonl"}
CALIBRATION = {"chains": "data/calib_chains.txt", "redundant": "data/calib_redundant.txt"}
RECIPE_NAMES = {"rl-sparse": "RL-Sparse (GRPO under the eviction's masks)",
                "rl-full": "RL-Full (GRPO with a full cache, the control)",
                "distill": "Distill (KL to the full-cache model under the eviction's masks)",
                "distill-on-policy": "Distill on its own samples (KL to the full-cache model on "
                                     "the compressed model's samples, under their masks)"}
FIRST = 50


def pass_at_1(rkv, model, dataset, preset, method, budget, buffer):
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [rkv, "eval", "-m", model, "--dataset", dataset, "--preset", preset, "--methods",
               method, "--temp", "0", "--limit", str(FIRST), "-o", tmp]
        if method != "fullkv":
            cmd += ["--budgets", str(budget), "--kv-buffer", str(buffer)]
        run(cmd, "an evaluation")
        with open(os.path.join(tmp, "summary.json")) as f:
            return json.load(f)["results"][0]["pass_at_1"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", help="a post_train.py run directory")
    ap.add_argument("dest", help="the model directory to write (models/NAME)")
    ap.add_argument("--iteration", type=int, default=-1,
                    help="ship the weights validated at this iteration (RUN/checkpoints/N; "
                         "chosen on the validation problems, never the held-out ones) instead "
                         "of the last ones")
    ap.add_argument("--rkv", default="build/rkv", help="the rkv binary (default build/rkv)")
    a = ap.parse_args()
    run_dir, dest, rkv = a.run_dir, a.dest.rstrip("/"), a.rkv
    with open(os.path.join(run_dir, "run.json")) as f:
        record = json.load(f)
    s = record["settings"]
    s.setdefault("full_weight", 0.0)  # runs from before the options
    s.setdefault("keep_weight", 0.0)
    keeping = s["keep_weight"] > 0
    keep_keys = ("keep_weight", "keep_need", "keep_theta", "keep_tau", "keep_margin")
    family = s["family"]
    dataset, preset = HELD_OUT[family], family
    os.makedirs(dest, exist_ok=True)
    weights = os.path.join(run_dir, "model")
    if a.iteration >= 0:
        weights = os.path.join(run_dir, "checkpoints", str(a.iteration))
        if not os.path.isdir(weights):
            sys.exit(f"ship_adapted: no checkpoint {weights} (one is kept at every validation)")
    for name in FILES:
        shutil.copy(os.path.join(weights, name), os.path.join(dest, name))
    shutil.copy(os.path.join(run_dir, "log.csv"), os.path.join(dest, "post_training_log.csv"))
    name = os.path.basename(dest)
    title = f"{name}: {record['recipe']} for {s['method']} at budget {s['budget']}"
    run([sys.executable, os.path.join(HERE, "plot_post_training.py"),
         os.path.join(run_dir, "log.csv"), os.path.join(dest, "curves.svg"), title], "the plot")
    run([rkv, "calibrate", "-m", dest, "-f", CALIBRATION[family], "--separator", "\\n\\n\\n",
         "-o", os.path.join(dest, "query_stats.safetensors")], "the calibration")

    method, budget, buffer = s["method"], s["budget"], s["buffer"]
    measured = {
        "adapted": pass_at_1(rkv, dest, dataset, preset, method, budget, buffer),
        "adapted_full_cache": pass_at_1(rkv, dest, dataset, preset, "fullkv", 0, 0),
        "base": pass_at_1(rkv, s["base"], dataset, preset, method, budget, buffer),
        "base_full_cache": pass_at_1(rkv, s["base"], dataset, preset, "fullkv", 0, 0),
    }
    with open(os.path.join(run_dir, "log.csv"), newline="") as f:
        log = list(csv.DictReader(f))
    if a.iteration >= 0:
        log = [r for r in log if int(r["iteration"]) <= a.iteration]
    last = log[-1]
    # a run resumed with a larger --iterations records its first one: reproducing the weights
    # shipped takes at least as many iterations as the one shipped
    s["iterations"] = max(s["iterations"], int(last["iteration"]))
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
            "max_new_tokens", "iterations", "token_budget", "micro_batch", "full_weight")
            + (keep_keys if keeping else ())},
        "iteration_shipped": int(last["iteration"]),
        "rollout_tokens": int(last["rollout_tokens"]),
        "validation_at_iteration_shipped": {"method": last["val_method"],
                                            "full_cache": last["val_full"]},
        "trained_on": f"tools/tiny/task.py draws ({family}), a seed per iteration, skipping the "
                      f"held-out set ({dataset}) and the {s['val_problems']} validation problems",
        "started": record["started"],
        "rkv": record["rkv"],
        "pass_at_1_first_50": measured,
        "command": f"/usr/bin/python3 tools/tiny/post_train.py --out {run_dir} " + " ".join(
            f"--{k.replace('_', '-')} {s[k]}" for k in (
                "base", "family", "recipe", "method", "budget", "buffer", "problems", "group",
                "lr", "temperature", "tau", "full_weight") + (keep_keys if keeping else ()) + (
                "iterations", "eval_every", "seed")),
    }
    with open(os.path.join(dest, "post_training.json"), "w") as f:
        json.dump(post, f, indent=1)
        f.write("\n")
    recipe = RECIPE_NAMES[record["recipe"]]
    if keeping:
        needed = {"attention": "the entries the full-cache model attends to later",
                  "tokens": "the statement and binding tokens the chain reads again"}
        recipe += (", with the retention loss (tools/tiny/retention.py: gkv's score pushed above "
                   f"the eviction line for {needed[s.get('keep_need', 'tokens')]})")
    write_card(dest, name, post, recipe)
    print(json.dumps(measured))


def write_card(dest, name, p, recipe):
    m = p["pass_at_1_first_50"]
    h = p["hyperparameters"]
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

That is {100 * (m['adapted'] - m['base']):+.0f} points at the trained budget on these {FIRST}
problems, where one problem is {100 / FIRST:.0f} points (issue 38 asks for 20).

The whole accuracy-against-budget picture, every method, is in
[docs/RESULTS.md](../../docs/RESULTS.md#post-training-issue-38).

![training curves](curves.svg)

`curves.svg` draws `post_training_log.csv`: per iteration ({h['problems']} fresh problems x
{h['group']} samples), the samples' mean reward (for Distill, the full-cache teacher's) and the
loss or KL; every few iterations the
greedy pass@1 on 100 validation problems of their own, at the trained budget and with a full
cache. The weights shipped are those validated at iteration {p['iteration_shipped']}
(validation: {p['validation_at_iteration_shipped']['method']} at the budget,
{p['validation_at_iteration_shipped']['full_cache']} with a full cache). Every setting, the
seeds and the token budget are in `post_training.json`; `query_stats.safetensors` is this
model's own TriAttention calibration (`rkv calibrate` on the family's calibration text).

Reproduce ({p['rollout_tokens']:,} rollout tokens to the iteration shipped; resumable):

```sh
{p['command']}
/usr/bin/python3 tools/tiny/ship_adapted.py {p['command'].split('--out ')[1].split()[0]} models/{name} --iteration {p['iteration_shipped']}
```
"""
    with open(os.path.join(dest, "README.md"), "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
