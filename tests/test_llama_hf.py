#!/usr/bin/env python3
"""test_llama_hf.py — Hugging Face Llama weights in and out (lib/weights.h,
lib/checkpoint.h), against what transformers computed.

tests/fixtures/llama-tiny holds a random LlamaForCausalLM written by
transformers (gen_llama.py: GQA with 2 query heads on 1 K/V head, untied
head, rope_theta 500000, bf16 on disk), its tokens and its losses in fp32:
  1. `hanayo eval --init DIR` on it equals transformers' loss within 1e-5
     relative;
  2. three steps of `hanayo train` from it equal three PyTorch AdamW steps:
     the checkpoint's loss within 2e-5 relative (fp32 noise of a few steps);
  3. the checkpoint is what transformers wrote: the same tensor names and
     shapes as the fixture's file (so from_pretrained finds no missing or
     unexpected key: gen_llama.py --check DIR opens it in transformers), a
     config.json of a LlamaForCausalLM with the model's shape, and hanayo
     reads it back (2 evaluates it);
  4. the same weights as two shards with model.safetensors.index.json, in
     fp32, give the same loss; with Llama 3's rope scaling in config.json
     (both the forms transformers writes) the loss is transformers' too;
     `model.from` reads the model block from config.json;
  5. bad input exits 2 with one message naming the cause: a config.json that
     disagrees with the model block (kv heads, rope_theta, tied head; to
     eval and to sample), a sample prompt past seq_len, a resume under
     another shape,
     kv_heads not dividing heads, an unknown model.kind;
  6. configs/tiny-llama.json trains on the synthetic corpus and its loss
     falls;
  7. `hanayo sample --temperature 0` equals transformers' greedy generate
     token for token (llama-tiny/greedy.json, made by
     fixtures/gen_llama_greedy.py), three prompts each, to model.seq_len:
     on the fixture's directory and on its model.safetensors alone; on the
     same weights with a tied head (a directory the test writes: config.json
     with tie_word_embeddings, the file without lm_head.weight); on the
     checkpoint 2 trained (transformers after the same three AdamW steps).

Run from the repository root with numpy; HANAYO is the binary under test.
Prints "llama-hf: N passed, N failed" and exits non-zero on any failure.
"""
import json
import os
import shutil
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import hf_cli as hf  # noqa: E402  (check, hanayo, expect_refused)
import gpt2_ref as ref  # noqa: E402  (the safetensors and shard readers)

FIX = "tests/fixtures/llama-tiny"
CONFIG = FIX + "/hanayo.json"


def eval_loss(*args, config=CONFIG):
    return hf.eval_loss(config, *args)


def sample_greedy(what, cases, *args):
    """`hanayo sample` greedy from each case's prompt to model.seq_len
    equals the case's tokens."""
    for c in cases:
        prompt = ",".join(map(str, c["prompt"]))
        rc, out, err = hf.hanayo("sample", *args, "--prompt-tokens", prompt, "--temperature", "0",
                                 "--max-new", "100")
        got = out.split() if rc == 0 else ["exit %d: %s" % (rc, err.strip()[-200:])]
        hf.check(got == [str(t) for t in c["greedy"]], "sample %s, prompt %s: %s; transformers' "
                 "greedy generate: %s" % (what, prompt, " ".join(got), c["greedy"]))


def main():
    want = json.load(open(FIX + "/expected.json"))
    greedy = json.load(open(FIX + "/greedy.json"))
    tmp = tempfile.mkdtemp(prefix="hy-llama-")
    with open(os.path.join(tmp, "gpt2.json"), "w") as f:
        json.dump({"model_type": "gpt2", "n_layer": 2}, f)
    try:
        # 1. transformers' loss
        loss0 = eval_loss("--init", FIX)
        hf.check(hf.rel(loss0, want["loss0"]) <= 1e-5,
                 "eval of the transformers model: %.7f, transformers %.7f" % (loss0, want["loss0"]))

        # 2. three AdamW steps
        ck = os.path.join(tmp, "ck")
        rc, out, err = hf.hanayo("train", CONFIG, "--set", "init=" + FIX,
                                 "--set", "checkpoint.dir=" + ck)
        hf.check(rc == 0, "train from the fixture: exit %d: %s" % (rc, err.strip()[-300:]))
        step3 = os.path.join(ck, "step_000003")
        loss3 = eval_loss("--init", step3)
        hf.check(hf.rel(loss3, want["loss3"]) <= 2e-5,
                 "after three steps: %.7f, PyTorch %.7f" % (loss3, want["loss3"]))

        # 7. greedy generation (here: the trained checkpoint is at hand)
        hf.check(all(len(greedy[k]["cases"]) == 3 for k in ("untied", "tied", "trained")),
                 "greedy.json holds three cases per model")
        sample_greedy("of the directory", greedy["untied"]["cases"], CONFIG, "--init", FIX)
        sample_greedy("of the file", greedy["untied"]["cases"], CONFIG,
                      "--init", FIX + "/model.safetensors")
        sample_greedy("of the trained checkpoint", greedy["trained"]["cases"], CONFIG,
                      "--init", ck)
        tied = os.path.join(tmp, "tied")
        os.makedirs(tied)
        hf_cfg = json.load(open(FIX + "/config.json"))
        hf_cfg["tie_word_embeddings"] = True
        with open(os.path.join(tied, "config.json"), "w") as f:
            json.dump(hf_cfg, f)
        weights = ref.read_safetensors(FIX + "/model.safetensors")
        del weights["lm_head.weight"]
        ref.write_safetensors(os.path.join(tied, "model.safetensors"), weights, "F32")
        sample_greedy("of the tied head", greedy["tied"]["cases"], CONFIG, "--init", tied,
                      "--set", "model.tie_embeddings=true")

        # 3. the checkpoint as transformers writes one
        theirs = ref.read_safetensors(FIX + "/model.safetensors")
        ours = ref.read_safetensors(step3 + "/model.safetensors") if rc == 0 else {}
        hf.check(sorted(ours) == sorted(theirs),
                 "checkpoint tensor names differ from transformers': missing %s, unexpected %s"
                 % (sorted(set(theirs) - set(ours))[:4], sorted(set(ours) - set(theirs))[:4]))
        hf.check(all(ours[k].shape == theirs[k].shape for k in theirs if k in ours),
                 "checkpoint tensor shapes differ from transformers'")
        cfg = json.load(open(step3 + "/config.json")) if rc == 0 else {}
        hf_cfg = json.load(open(FIX + "/config.json"))
        hf.check(cfg.get("architectures") == ["LlamaForCausalLM"] and
                 cfg.get("model_type") == "llama",
                 "checkpoint config.json is not a LlamaForCausalLM's: %s"
                 % cfg.get("architectures"))
        for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                  "intermediate_size", "vocab_size", "rms_norm_eps", "tie_word_embeddings"):
            hf.check(cfg.get(k) == hf_cfg[k], "checkpoint config.json %s = %s, transformers' %s"
                     % (k, cfg.get(k), hf_cfg[k]))
        hf.check(cfg.get("rope_theta") == hf_cfg["rope_parameters"]["rope_theta"],
                 "checkpoint config.json rope_theta = %s" % cfg.get("rope_theta"))

        # 4. two shards and an index, fp32
        sh = os.path.join(tmp, "sharded")
        os.makedirs(sh)
        shutil.copy(FIX + "/config.json", sh)
        names = sorted(theirs)
        halves = [names[: len(names) // 2], names[len(names) // 2:]]
        index = {"metadata": {}, "weight_map": {}}
        for i, part in enumerate(halves):
            fname = "model-%05d-of-00002.safetensors" % (i + 1)
            ref.write_safetensors(os.path.join(sh, fname), {k: theirs[k] for k in part}, "F32")
            index["weight_map"].update({k: fname for k in part})
        with open(os.path.join(sh, "model.safetensors.index.json"), "w") as f:
            json.dump(index, f)
        loss_sh = eval_loss("--init", sh)
        hf.check(loss_sh == loss0, "sharded fp32 copy: %.7f, the file %.7f" % (loss_sh, loss0))

        # 4b. Llama 3's rope scaling, in transformers 5's config.json form
        # (rope_parameters) and the older one (rope_theta, rope_scaling)
        sc = want["rope_scaling"]
        scaled_sets = ["--set", "model.rope_scaling.factor=%g" % sc["factor"],
                       "--set", "model.rope_scaling.low_freq_factor=%g" % sc["low_freq_factor"],
                       "--set", "model.rope_scaling.high_freq_factor=%g" % sc["high_freq_factor"],
                       "--set", "model.rope_scaling.original_max_position_embeddings=%d"
                       % sc["original_max_position_embeddings"]]
        hf.check(hf.rel(want["loss0_scaled"], want["loss0"]) > 1e-4,
                 "the fixture's scaling moves the loss too little to be checked")
        for form in ("rope_parameters", "rope_scaling"):
            d = os.path.join(tmp, form)
            os.makedirs(d)
            shutil.copy(FIX + "/model.safetensors", d)
            c = dict(hf_cfg)
            if form == "rope_parameters":
                c["rope_parameters"] = dict(sc, rope_theta=hf_cfg["rope_parameters"]["rope_theta"])
            else:
                del c["rope_parameters"]
                c["rope_theta"], c["rope_scaling"] = hf_cfg["rope_parameters"]["rope_theta"], sc
            with open(os.path.join(d, "config.json"), "w") as f:
                json.dump(c, f)
            got = eval_loss("--init", d, *scaled_sets)
            hf.check(hf.rel(got, want["loss0_scaled"]) <= 1e-5,
                     "rope scaling (%s): %.7f, transformers %.7f"
                     % (form, got, want["loss0_scaled"]))
        hf.expect_refused("a config without the file's rope scaling", "factor",
                          "eval", CONFIG, "--init", os.path.join(tmp, "rope_scaling"),
                          "--batches", "1")

        # 4c. model.from: the model block read from config.json
        frm = os.path.join(tmp, "from.json")
        with open(frm, "w") as f:
            json.dump({"model": {"from": FIX, "seq_len": 16},
                       "schedule": {"kind": "1f1b", "ranks": 1, "micro_batches": 1,
                                    "micro_batch_size": 2},
                       "data": {"train": FIX + "/tokens.bin"}, "checkpoint": {"dir": None},
                       "backend": "cpu"}, f)
        rc, out, err = hf.hanayo("check", frm)
        model = json.loads(out)["model"] if rc == 0 else {}
        given = json.load(open(CONFIG))["model"]
        for k, v in given.items():
            hf.check(model.get(k) == v, "model.from: model.%s = %s, the fixture's %s"
                     % (k, model.get(k), v))
        rc, out, err = hf.hanayo("eval", frm, "--init", FIX, "--batches", "1")
        hf.check(rc == 0 and json.loads(out.splitlines()[0])["loss"] == loss0,
                 "model.from: eval %s" % (out.strip() or err.strip()))
        hf.expect_refused("model.from with another kind", "model.kind", "check", frm,
                          "--set", "model.kind=gpt")
        hf.expect_refused("model.from of a GPT-2", "model_type", "check", frm,
                          "--set", "model.from=" + os.path.join(tmp, "gpt2.json"))

        # 5. bad input
        hf.expect_refused("another kv_heads", "num_key_value_heads",
                          "eval", CONFIG, "--init", FIX, "--set", "model.kv_heads=2",
                          "--batches", "1")
        hf.expect_refused("another rope_theta", "rope_theta",
                          "eval", CONFIG, "--init", FIX, "--set", "model.rope_theta=10000",
                          "--batches", "1")
        hf.expect_refused("a tied head", "tie_word_embeddings",
                          "eval", CONFIG, "--init", FIX, "--set", "model.tie_embeddings=true",
                          "--batches", "1")
        hf.expect_refused("a resume under another shape", "model.kv_heads",
                          "train", CONFIG, "--resume", ck, "--steps", "4",
                          "--set", "checkpoint.dir=" + ck, "--set", "model.kv_heads=2")
        hf.expect_refused("kv_heads not dividing heads", "model.kv_heads (3) must divide",
                          "check", CONFIG, "--set", "model.heads=4", "--set", "model.kv_heads=3")
        hf.expect_refused("sample under another kv_heads", "num_key_value_heads",
                          "sample", CONFIG, "--init", FIX, "--set", "model.kv_heads=2",
                          "--prompt-tokens", "1")
        hf.expect_refused("sample of a prompt past seq_len", "model.seq_len 16",
                          "sample", CONFIG, "--init", FIX, "--prompt-tokens",
                          ",".join(["1"] * 17))
        hf.expect_refused("an unknown kind", "model.kind", "check", CONFIG,
                          "--set", "model.kind=mamba")
        hf.expect_refused("gpt with kv heads", "grouped-query", "check", "configs/tiny-gpt.json",
                          "--set", "model.kv_heads=2")

        # 6. the tiny config trains
        data = os.path.join(tmp, "synth.bin")
        rc, out, err = hf.hanayo("data", "synth", "--out", data, "--tokens", "60000", "--vocab",
                                 "512", "--seed", "5")
        hf.check(rc == 0, "data synth: %s" % err.strip())
        rc, out, err = hf.hanayo("train", "configs/tiny-llama.json", "--steps", "30",
                                 "--set", "data.train=" + data, "--set", "data.val=null",
                                 "--set", "checkpoint.dir=null", "--set", "train.log_every=1",
                                 "--set", "backend=cpu")
        losses = [float(line.split()[3]) for line in (out + err).splitlines()
                  if line.startswith("step ") and " loss " in line and "val" not in line]
        hf.check(rc == 0 and len(losses) >= 2 and losses[-1] < losses[0] - 0.3,
                 "tiny-llama: exit %d, losses %s" % (rc, losses[:2] + losses[-1:]))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return hf.finish("llama-hf")


if __name__ == "__main__":
    sys.exit(main())
