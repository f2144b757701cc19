/*
 * cmd_sample.c — `hanayo sample`: text from a trained GPT or Llama (lib/sample.h),
 * its flags and what it prints.
 *
 * The weights come as eval takes them (--init: a file, a checkpoint or a
 * checkpoint.dir's newest; else the config's init); the prompt as ids or,
 * with a tokenizer.json, as text (lib/tokenizer.h). The whole model runs
 * on one rank of the config's backend, whatever its schedule says.
 * stdout is the sample alone, written token by token as it comes: ids on
 * one line, or with a tokenizer the text. stderr says which backend and
 * weights, and why generation ended.
 */
#include <assert.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "backend.h"
#include "cli.h"
#include "run.h"
#include "sample.h"
#include "tokenizer.h"

static const char usage_sample[] =
    "usage: hanayo sample CONFIG [--init WEIGHTS|DIR] (--prompt-tokens IDS |\n"
    "                     --prompt TEXT --tokenizer FILE) [--tokenizer FILE]\n"
    "                     [--max-new N] [--temperature T] [--top-k K] [--seed S]\n"
    "                     [--stop-token ID] [--set key=value]...\n"
    "\n"
    "Continues a prompt with the model of CONFIG (a GPT or a Llama), one token\n"
    "at a time over a KV cache, and prints the new tokens as they come: their\n"
    "ids on one line, or with --tokenizer their text. The whole model runs on\n"
    "one rank of the config's backend (the schedule's stages are not used:\n"
    "generation has no backward to overlap).\n"
    "\n"
    "  --init WEIGHTS|DIR  the weights: a safetensors file (Hugging Face GPT-2\n"
    "                    names), a checkpoint (step_NNNNNN directory), a\n"
    "                    checkpoint.dir (its newest) or a Hugging Face Llama\n"
    "                    directory; default: the config's init\n"
    "  --prompt-tokens IDS the prompt as token ids, e.g. 464,2068 or \"464 2068\"\n"
    "  --prompt TEXT     the prompt as text, encoded with --tokenizer\n"
    "  --tokenizer FILE  a byte-level BPE tokenizer.json (GPT-2's kind): encodes\n"
    "                    --prompt and prints the sample as text\n"
    "  --max-new N       generate at most N tokens (default 64)\n"
    "  --temperature T   0: greedy (the most likely token, as transformers'\n"
    "                    greedy generate); else sample from softmax(logits / T)\n"
    "                    (default 1)\n"
    "  --top-k K         sample among the K most likely tokens only (default 0: all)\n"
    "  --seed S          the draws' seed: one seed, one sample (default 1)\n"
    "  --stop-token ID   end after generating this token, e.g. 50256 for GPT-2's\n"
    "                    <|endoftext|> (default: none)\n"
    "  --set key=value   override a config key, e.g. backend=cpu\n"
    "\n"
    "Generation ends after N tokens, at the stop token, or when the prompt and\n"
    "the new tokens fill model.seq_len positions (said on stderr). A prompt\n"
    "longer than model.seq_len, an id outside model.vocab, or a tokenizer file\n"
    "that is not byte-level BPE or has fewer ids than model.vocab is refused\n"
    "(exit 2).\n";

typedef struct {
    hy_flag_list sets;
    const char *init, *prompt_tokens, *prompt, *tokenizer;
    int max_new, top_k, seed, stop_token;
    double temperature;
} sample_args;

#define SAMPLE(field) offsetof(sample_args, field)
static const hy_flag sample_flags[] = {
    { .name = "--init", .kind = HY_FLAG_STRING, .off = SAMPLE(init),
      .example = "checkpoints/tiny-gpt" },
    { .name = "--prompt-tokens", .kind = HY_FLAG_STRING, .off = SAMPLE(prompt_tokens),
      .example = "464,2068" },
    { .name = "--prompt", .kind = HY_FLAG_STRING, .off = SAMPLE(prompt),
      .example = "\"Once upon a time\"" },
    { .name = "--tokenizer", .kind = HY_FLAG_STRING, .off = SAMPLE(tokenizer),
      .example = "tokenizer.json" },
    { .name = "--max-new", .kind = HY_FLAG_INT, .off = SAMPLE(max_new), .example = "64",
      .lo = 1, .hi = 1000000 },
    { .name = "--temperature", .kind = HY_FLAG_REAL, .off = SAMPLE(temperature), .example = "0.8",
      .lo = 0, .hi = 100 },
    { .name = "--top-k", .kind = HY_FLAG_INT, .off = SAMPLE(top_k), .example = "40",
      .lo = 0, .hi = 100000000 },
    { .name = "--seed", .kind = HY_FLAG_INT, .off = SAMPLE(seed), .example = "7",
      .lo = 0, .hi = INT_MAX },
    { .name = "--stop-token", .kind = HY_FLAG_INT, .off = SAMPLE(stop_token), .example = "50256",
      .lo = 0, .hi = 100000000 },
    CLI_SET_FLAG(sample_args, "backend=cpu"),
    { .name = NULL },
};
static const hy_args_spec sample_spec = {
    .command = "sample", .flags = sample_flags, .operand = "config file",
    .synopsis = "hanayo sample CONFIG --init WEIGHTS|DIR --prompt-tokens IDS" };

/* --prompt-tokens: ids separated by commas and/or spaces, into a
 * malloc'd *ids. */
static int parse_ids(const char *text, int **ids, int *n, hy_error *err) {
    size_t cap = strlen(text) / 2 + 1;
    *ids = malloc(cap * sizeof **ids);
    *n = 0;
    if (!*ids) return hy_fail(err, HY_ERR_RUNTIME, "out of memory");
    for (const char *p = text; *p;) {
        if (*p == ',' || *p == ' ') {
            p++;
            continue;
        }
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || (*end && *end != ',' && *end != ' ') || v < 0 || v > INT_MAX)
            return hy_fail(err, HY_ERR_INPUT, "--prompt-tokens '%s': '%.*s' is not a token id "
                           "(ids are whole numbers >= 0, separated by commas or spaces)", text,
                           (int)strcspn(p, ", "), p);
        (*ids)[(*n)++] = (int)v;
        p = end;
    }
    if (*n == 0)
        return hy_fail(err, HY_ERR_INPUT, "--prompt-tokens '%s' holds no token id", text);
    return HY_OK;
}

/* Where the tokens go as they come. */
typedef struct {
    FILE *out;
    const hy_tokenizer *tk;   /* NULL: ids */
    int printed;
} emit_ctx;

static int emit_token(void *ctx, int token, hy_error *err) {
    emit_ctx *e = ctx;
    if (e->tk) {
        const char *bytes;
        size_t len;
        int rc = hy_tokenizer_decode(e->tk, token, &bytes, &len, err);
        if (rc) return rc;
        fwrite(bytes, 1, len, e->out);
    } else {
        fprintf(e->out, "%s%d", e->printed ? " " : "", token);
    }
    e->printed++;
    fflush(e->out);
    return HY_OK;
}

/* Why generation ended, on warn. */
static void say_end(FILE *warn, hy_sample_end end, int n_prompt, int n_new,
                    const hy_run *run) {
    if (end == HY_SAMPLE_SEQ_LEN)
        fprintf(warn, "sample: stopped at model.seq_len %d: the prompt's %d tokens and %d new "
                "ones fill every position\n", run->model.seq_len, n_prompt, n_new);
    else if (end == HY_SAMPLE_STOP_TOKEN)
        fprintf(warn, "sample: %d tokens, the last the stop token\n", n_new);
    else
        fprintf(warn, "sample: %d tokens\n", n_new);
}

static int sample_run(const sample_args *a, const hy_run *run, const char *weights,
                      hy_error *err) {
    hy_tokenizer *tk = NULL;
    hy_backend *be = NULL;
    hy_sampler *sp = NULL;
    int *prompt = NULL, n_prompt = 0, unverified = 0, n_new = 0, rc = HY_OK;
    hy_sample_end end = HY_SAMPLE_MAX_NEW;
    if (a->tokenizer) rc = hy_tokenizer_load(&tk, a->tokenizer, err);
    /* Every id the model can give must have a text to print. */
    if (!rc && tk && hy_tokenizer_size(tk) < run->model.vocab)
        rc = hy_fail(err, HY_ERR_INPUT, "--tokenizer %s has %d ids, but model.vocab is %d: the "
                     "model can generate ids the tokenizer has no text for; is it the model's "
                     "tokenizer?", a->tokenizer, hy_tokenizer_size(tk), run->model.vocab);
    if (!rc && a->prompt) rc = hy_tokenizer_encode(tk, a->prompt, &prompt, &n_prompt, err);
    if (!rc && a->prompt_tokens) rc = parse_ids(a->prompt_tokens, &prompt, &n_prompt, err);
    /* Before anything is opened: a bad prompt is said alone. */
    hy_model_shape shape = hy_model_shape_of(&run->model);
    if (!rc) rc = hy_sample_check_prompt(&shape, prompt, n_prompt, err);
    /* One rank: the whole model on rank 0's device (the run was
     * resolved for one rank). */
    assert(run->backend.ranks == 1);
    hy_backend_choice chosen;
    if (!rc) rc = hy_backend_open(&run->backend, &be, &chosen, err);
    if (!rc) rc = hy_sampler_open(&sp, be, &shape, weights, &unverified, err);
    if (!rc) {
        fprintf(stderr, "backend: %s, one rank\nweights: %s%s\n", chosen.why, weights,
                unverified ? " (a checkpoint without checksums: loaded unverified)" : "");
        fflush(stderr);
    }
    hy_sample_params p = { .max_new = a->max_new, .temperature = a->temperature,
                           .top_k = a->top_k, .seed = (uint64_t)a->seed,
                           .stop_token = a->stop_token };
    emit_ctx e = { .out = stdout, .tk = tk, .printed = 0 };
    if (!rc) rc = hy_sample_generate(sp, prompt, n_prompt, &p, emit_token, &e, &n_new, &end, err);
    /* The sample so far stays printed; its line ends either way. */
    if (e.printed) fputc('\n', stdout);
    if (!rc) say_end(stderr, end, n_prompt, n_new, run);
    hy_sampler_destroy(sp);
    if (be) be->ops->destroy(be);
    free(prompt);
    hy_tokenizer_free(tk);
    return rc;
}

static int cmd_sample(const cli_command *cmd, int argc, char **argv, hy_error *err) {
    sample_args a = { .sets = { 0 }, .max_new = 64, .temperature = 1.0, .top_k = 0, .seed = 1,
                      .stop_token = -1 };
    hy_args_result got;
    int rc = cli_read_args(cmd, argc, argv, &a, &got, err);
    if (rc || got.help) {
        hy_flag_list_free(&a.sets);
        return rc;
    }
    if (!a.prompt_tokens == !a.prompt)
        rc = hy_fail(err, HY_ERR_INPUT, a.prompt ? "sample: give the prompt once, as "
                     "--prompt-tokens IDS or as --prompt TEXT, not both"
                     : "sample needs a prompt: --prompt-tokens IDS (e.g. --prompt-tokens "
                     "464,2068), or --prompt TEXT with --tokenizer FILE");
    else if (a.prompt && !a.tokenizer)
        rc = hy_fail(err, HY_ERR_INPUT, "sample --prompt needs --tokenizer FILE (a "
                     "tokenizer.json) to turn the text into ids; or give --prompt-tokens IDS");
    hy_run run;
    memset(&run, 0, sizeof run);
    char file[PATH_MAX];
    if (!rc) rc = cli_load_run(&run, got.operand, &a.sets, HY_CONFIG_FOR_ONE_RANK, err);
    if (!rc && !a.init && !run.init)
        rc = hy_fail(err, HY_ERR_INPUT, "sample needs weights: --init WEIGHTS|DIR (a "
                     "safetensors file, a checkpoint, or a checkpoint.dir), or an init key "
                     "in the config");
    if (!rc) rc = a.init ? cli_weights_file("--init", a.init, file, err)
                         : (snprintf(file, sizeof file, "%s", run.init), HY_OK);
    if (!rc) rc = sample_run(&a, &run, file, err);
    hy_run_free(&run);
    hy_flag_list_free(&a.sets);
    return rc;
}

const cli_command cli_sample_command = {"sample", cmd_sample, usage_sample, &sample_spec, NULL, 0};
