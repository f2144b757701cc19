#!/usr/bin/env python3
"""test_bert_hf.py — Hugging Face BERT weights in and out for post-LN BERT
(model.norm "post": lib/weights.h, lib/checkpoint.h, lib/hfconfig.h),
against what transformers computed.

tests/fixtures/bert-tiny holds a random BertForMaskedLM written by
transformers (gen_bert.py: 2 layers, hidden 32, layer_norm_eps 1e-12, bf16
on disk), its tokens and its masked-LM losses in fp32 on hanayo's masked
batches (gpt2_ref.py's mask_tokens, pinned here to hy_mask_tokens' bytes):
  1. `hanayo eval --init DIR` on it equals transformers' loss within 1e-5
     relative, and so does the file alone and a copy without the "bert."
     prefix, with BertForPreTraining's extra tensors, in fp32;
  2. three steps of `hanayo train` from it equal three PyTorch AdamW steps:
     the checkpoint's loss within 2e-5 relative;
  3. the checkpoint is what transformers wrote: the same tensor names and
     shapes as the fixture's file (gen_bert.py --check DIR opens it in
     transformers) and a BertForMaskedLM config.json; hanayo reads it back
     (2 evaluates it) and resumes from it;
  4. `model.from` reads the model block from config.json;
  5. a run shorter than the position table (model.positions 16,
     model.seq_len 8): eval equals transformers' loss on the same tokens
     and masks as 4 sequences of 8 (`loss0_t8`), also through model.from
     with --set model.seq_len=8; a checkpoint trained so holds all 16
     rows and says max_position_embeddings 16, evaluates at seq_len 16,
     and resumes at 8; another table (--init, eval of the checkpoint, a
     resume), a resume at another seq_len, and model.from with a seq_len
     past the table are refused naming the key;
  6. bad input exits 2 with one message naming the cause: hidden_act
     "relu", an intermediate_size other than 4 x hidden, model.from of a
     config.json with no layers, a decoder that is not the word embedding, a pre-LN BERT's
     weights loaded as post-LN and the other way round, model.norm on a
     GPT.

Run from the repository root with numpy; HANAYO is the binary under test.
Prints "bert-hf: N passed, N failed" and exits non-zero on any failure.
"""
import json
import math
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import hf_cli as hf  # noqa: E402  (check, hanayo, expect_refused)
import gpt2_ref as ref  # noqa: E402  (the safetensors reader, BERT's masking)

FIX = "tests/fixtures/bert-tiny"
CONFIG = FIX + "/hanayo.json"


def eval_loss(*args, config=CONFIG):
    return hf.eval_loss(config, *args)


def hf_dir(tmp, name, cfg_changes=None, weights=None):
    """A copy of the fixture's directory with config.json changed and
    (weights: a dict) other tensors, fp32."""
    d = os.path.join(tmp, name)
    os.makedirs(d)
    cfg = json.load(open(FIX + "/config.json"))
    cfg.update(cfg_changes or {})
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    if weights is None:
        shutil.copy(FIX + "/model.safetensors", d)
    else:
        ref.write_safetensors(os.path.join(d, "model.safetensors"), weights, "F32")
    return d


def main():
    want = json.load(open(FIX + "/expected.json"))
    tmp = tempfile.mkdtemp(prefix="hy-bert-")
    try:
        hf.check(ref.mask_pin_holds(), "gpt2_ref.mask_tokens differs from hy_mask_tokens")

        # 1. transformers' loss, from the directory, the file, other names
        loss0 = eval_loss("--init", FIX)
        hf.check(hf.rel(loss0, want["loss0"]) <= 1e-5,
                 "eval of the transformers model: %.7f, transformers %.7f" % (loss0, want["loss0"]))
        hf.check(eval_loss("--init", FIX + "/model.safetensors") == loss0, "eval of the file alone")
        theirs = ref.read_safetensors(FIX + "/model.safetensors")
        bare = {(k[5:] if k.startswith("bert.") else k): v for k, v in theirs.items()}
        bare["pooler.dense.weight"] = theirs["cls.predictions.transform.dense.weight"]
        bare["cls.seq_relationship.bias"] = theirs["cls.predictions.bias"][:2]
        bare["cls.predictions.decoder.weight"] = theirs["bert.embeddings.word_embeddings.weight"]
        d = hf_dir(tmp, "bare", weights=bare)
        hf.check(hf.rel(eval_loss("--init", d), loss0) <= 1e-6,
                 "names without bert., with a pooler and a tied decoder, fp32")

        # 2. three AdamW steps
        ck = os.path.join(tmp, "ck")
        rc, out, err = hf.hanayo("train", CONFIG, "--set", "init=" + FIX,
                                 "--set", "checkpoint.dir=" + ck)
        hf.check(rc == 0, "train from the fixture: exit %d: %s" % (rc, err.strip()[-300:]))
        step3 = os.path.join(ck, "step_000003")
        loss3 = eval_loss("--init", step3)
        hf.check(hf.rel(loss3, want["loss3"]) <= 2e-5,
                 "after three steps: %.7f, PyTorch %.7f" % (loss3, want["loss3"]))

        # 3. the checkpoint as transformers writes one, read back, resumed
        ours = ref.read_safetensors(step3 + "/model.safetensors") if rc == 0 else {}
        hf.check(sorted(ours) == sorted(theirs),
                 "checkpoint tensor names differ from transformers': missing %s, unexpected %s"
                 % (sorted(set(theirs) - set(ours))[:4], sorted(set(ours) - set(theirs))[:4]))
        hf.check(all(ours[k].shape == theirs[k].shape for k in theirs if k in ours),
                 "checkpoint tensor shapes differ from transformers'")
        cfg = json.load(open(step3 + "/config.json")) if rc == 0 else {}
        hf_cfg = json.load(open(FIX + "/config.json"))
        hf.check(cfg.get("architectures") == ["BertForMaskedLM"] and
                 cfg.get("model_type") == "bert",
                 "checkpoint config.json is not a BertForMaskedLM's: %s" % cfg.get("architectures"))
        for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                  "vocab_size", "max_position_embeddings", "type_vocab_size", "hidden_act",
                  "layer_norm_eps", "tie_word_embeddings"):
            hf.check(cfg.get(k) == hf_cfg[k], "checkpoint config.json %s = %s, transformers' %s"
                     % (k, cfg.get(k), hf_cfg[k]))
        # no padding row: BertConfig's default pad_token_id 0 would freeze
        # row 0 of the word embeddings in PyTorch, which hanayo trains
        hf.check("pad_token_id" in cfg and cfg["pad_token_id"] is None,
                 "checkpoint config.json pad_token_id = %s, not null" % cfg.get("pad_token_id", "absent"))
        rc, out, err = hf.hanayo("train", CONFIG, "--resume", ck, "--steps", "4",
                                 "--set", "checkpoint.dir=" + ck)
        hf.check(rc == 0 and os.path.isdir(os.path.join(ck, "step_000004")),
                 "resume of the checkpoint: exit %d: %s" % (rc, err.strip()[-300:]))

        # 4. model.from: the model block from config.json
        frm = os.path.join(tmp, "from.json")
        with open(frm, "w") as f:
            json.dump({"model": {"from": FIX},
                       "schedule": {"kind": "1f1b", "ranks": 1, "micro_batches": 1,
                                    "micro_batch_size": 2},
                       "train": {"seed": want["seed"]},
                       "data": {"train": FIX + "/tokens.bin"}, "checkpoint": {"dir": None},
                       "backend": "cpu"}, f)
        rc, out, err = hf.hanayo("check", frm)
        model = json.loads(out)["model"] if rc == 0 else {}
        given = json.load(open(CONFIG))["model"]
        for k, v in given.items():
            hf.check(model.get(k) == v, "model.from: model.%s = %s, the fixture's %s"
                     % (k, model.get(k), v))
        hf.check(eval_loss("--init", FIX, config=frm) == loss0, "model.from: eval")

        # 5. a run shorter than the position table
        short = ("--set", "model.seq_len=8", "--set", "schedule.micro_batch_size=4")
        loss_t8 = eval_loss("--init", FIX, *short)
        hf.check(hf.rel(loss_t8, want["loss0_t8"]) <= 1e-5,
                 "eval at seq_len 8 of 16 positions: %.7f, transformers %.7f"
                 % (loss_t8, want["loss0_t8"]))
        rc, out, err = hf.hanayo("check", frm, "--set", "model.seq_len=8")
        model = json.loads(out)["model"] if rc == 0 else {}
        hf.check(model.get("seq_len") == 8 and model.get("positions") == 16,
                 "model.from with --set model.seq_len=8: seq_len %s, positions %s: %s"
                 % (model.get("seq_len"), model.get("positions"), err.strip()))
        hf.check(eval_loss("--init", FIX, *short, config=frm) == loss_t8,
                 "model.from with --set model.seq_len=8: eval")
        ck8 = os.path.join(tmp, "ck8")
        rc, out, err = hf.hanayo("train", CONFIG, "--steps", "1", "--set", "init=" + FIX,
                                 "--set", "checkpoint.dir=" + ck8, *short)
        hf.check(rc == 0, "train at seq_len 8: exit %d: %s" % (rc, err.strip()[-300:]))
        hf.check("seq_len 8 of 16 positions" in out, "train's model line: %s"
                 % [l for l in out.splitlines() if l.startswith("model:")])
        s1 = os.path.join(ck8, "step_000001")
        ours = ref.read_safetensors(s1 + "/model.safetensors") if rc == 0 else {}
        table = ours.get("bert.embeddings.position_embeddings.weight")
        hf.check(table is not None and table.shape == (16, 32),
                 "the seq_len 8 checkpoint's position table: %s"
                 % (None if table is None else str(table.shape)))
        cfg = json.load(open(s1 + "/config.json")) if rc == 0 else {}
        hf.check(cfg.get("max_position_embeddings") == 16,
                 "the seq_len 8 checkpoint's config.json: max_position_embeddings %s"
                 % cfg.get("max_position_embeddings"))
        loss16 = eval_loss("--init", s1)
        hf.check(math.isfinite(loss16), "the seq_len 8 checkpoint evaluates at seq_len 16")
        rc, out, err = hf.hanayo("train", CONFIG, "--resume", ck8, "--steps", "2",
                                 "--set", "checkpoint.dir=" + ck8, *short)
        hf.check(rc == 0 and os.path.isdir(os.path.join(ck8, "step_000002")),
                 "resume at seq_len 8: exit %d: %s" % (rc, err.strip()[-300:]))
        hf.expect_refused("a table of 8 rows for the file's 16", "--set model.positions=16",
                          "eval", CONFIG, "--init", FIX, "--set", "model.seq_len=8",
                          "--set", "model.positions=8")
        hf.expect_refused("a table of 32 rows for the checkpoint's 16", "model.positions = 16",
                          "eval", CONFIG, "--init", s1, "--set", "model.positions=32")
        hf.expect_refused("a resume with another table", "model.positions = 16",
                          "train", CONFIG, "--resume", ck8, "--steps", "3",
                          "--set", "checkpoint.dir=" + ck8, "--set", "model.positions=32", *short)
        hf.expect_refused("a resume at another seq_len", "model.seq_len = 8",
                          "train", CONFIG, "--resume", ck8, "--steps", "3",
                          "--set", "checkpoint.dir=" + ck8, "--set", "schedule.micro_batch_size=4")
        hf.expect_refused("model.from with seq_len past the table",
                          "model.positions (16) is below model.seq_len (32)",
                          "check", frm, "--set", "model.seq_len=32")

        # 6. bad input
        d = hf_dir(tmp, "relu", {"hidden_act": "relu"})
        hf.expect_refused("hidden_act relu", "hidden_act", "eval", CONFIG, "--init", d)
        hf.expect_refused("model.from of hidden_act relu", "hidden_act", "check", frm,
                          "--set", "model.from=" + d)
        d = hf_dir(tmp, "none", {"num_hidden_layers": 0})
        hf.expect_refused("model.from of no layers", "num_hidden_layers", "check", frm,
                          "--set", "model.from=" + d)
        untied = dict(theirs)
        untied["cls.predictions.decoder.weight"] = theirs["bert.embeddings.word_embeddings.weight"] * 2
        d = hf_dir(tmp, "untied", weights=untied)
        hf.expect_refused("an untied decoder", "cls.predictions.decoder.weight", "eval", CONFIG,
                          "--init", d)
        d = hf_dir(tmp, "wide", {"intermediate_size": 96})
        hf.expect_refused("intermediate_size not 4 x hidden", "intermediate_size",
                          "eval", CONFIG, "--init", d)
        hf.expect_refused("another layer_norm_eps", "layer_norm_eps",
                          "eval", CONFIG, "--init", FIX, "--set", "model.norm_eps=1e-5")
        pre = os.path.join(tmp, "pre")
        rc, out, err = hf.hanayo("train", CONFIG, "--steps", "1", "--set", "model.norm=pre",
                                 "--set", "checkpoint.dir=" + pre)
        hf.check(rc == 0, "a pre-LN BERT trains: %s" % err.strip()[-300:])
        pre1 = os.path.join(pre, "step_000001")
        hf.expect_refused("pre-LN weights as post-LN", "model.norm",
                          "eval", CONFIG, "--init", pre1 + "/model.safetensors")
        hf.expect_refused("post-LN weights as pre-LN", "model.norm",
                          "eval", CONFIG, "--init", step3 + "/model.safetensors",
                          "--set", "model.norm=pre")
        hf.expect_refused("a resume as the other norm", "model.norm",
                          "train", CONFIG, "--resume", ck, "--steps", "5",
                          "--set", "checkpoint.dir=" + ck, "--set", "model.norm=pre")
        hf.expect_refused("model.norm post on a GPT", "model.norm", "check",
                          "configs/tiny-gpt.json", "--set", "model.norm=post")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return hf.finish("bert-hf")


if __name__ == "__main__":
    sys.exit(main())
