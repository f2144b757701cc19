/*
 * cmd_data.c — `hanayo data synth|info` (cmd_data.h): the usage, the two
 * subcommands' flags, and what they print of lib/data.h's synthetic
 * corpus, shard writer and shard figures.
 */
#include "cmd_data.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "data.h"
#include "outfile.h"

static const char usage_data[] =
    "usage: hanayo data synth --out FILE --tokens N --vocab V [--seed S]\n"
    "                         [--format u16|u32] [--val-out FILE [--val-tokens N]]\n"
    "       hanayo data info SHARD [--vocab V] [--json]\n"
    "\n"
    "Token shards are llm.c's formats: a 1024-byte header (magic, version,\n"
    "token count), then the token ids: u16 (magic 20240520, version 1) holds\n"
    "uint16 ids, u32 (magic 20240801, version 7) uint32 ids for vocabularies\n"
    "above 65536 (Llama 3's 128256).\n"
    "\n"
    "synth writes a deterministic synthetic corpus with learnable structure\n"
    "(a sparse random Markov chain mixed with repeated phrases: about 1.6\n"
    "bits per token at vocab 512, against 9 for random ids), so a new model's\n"
    "loss falls at once. The same seed gives the same bytes.\n"
    "  --out FILE          the shard to write (atomically; the directory must exist)\n"
    "  --tokens N          its token count, 1..2147483647\n"
    "  --vocab V           ids 0..V-1, 2..2147483647: the config's model.vocab\n"
    "  --seed S            0..2147483647 (default 1)\n"
    "  --format u16|u32    the shard format (default: u16 when V <= 65536)\n"
    "  --val-out FILE      also write a validation shard: the same language,\n"
    "                      different text\n"
    "  --val-tokens N      its token count (default: a tenth of --tokens)\n"
    "\n"
    "info checks a shard and prints its format, token count, file size, the\n"
    "ids seen and entropy estimates in bits/token (unigram when every id is\n"
    "below 4194304; next|prev when every id is below 4096).\n"
    "  --vocab V           also check every id is below V (exit 2 if not)\n"
    "  --json              print one JSON line instead\n";

/* ---- synth ----------------------------------------------------------------- */

static int synth_one(const char *path, long long n, int vocab, hy_shard_format format,
                     uint64_t seed, uint32_t stream, void *buf, FILE *out, hy_error *err) {
    int rc = hy_synth_ids(buf, format, (size_t)n, vocab, seed, stream, err);
    if (rc == HY_OK) rc = hy_shard_write_ids(path, buf, format, (size_t)n, err);
    if (rc == HY_OK)
        fprintf(out, "wrote %s: %lld tokens (%lld bytes, %s), vocab %d, seed %llu, "
                "stream %u\n", path, n, HY_SHARD_HEADER_BYTES + (long long)format * n,
                hy_shard_format_name(format), vocab, (unsigned long long)seed,
                (unsigned)stream);
    return rc;
}

int cli_data_synth(const cli_data_synth_request *rq, FILE *out, hy_error *err) {
    if (!rq->out || !*rq->out)
        return hy_fail(err, HY_ERR_INPUT, "data synth needs --out FILE");
    if (rq->tokens < 1 || rq->tokens > (long long)HY_SHARD_MAX_TOKENS)
        return hy_fail(err, HY_ERR_INPUT, "data synth: --tokens %lld is out of "
                       "range; give 1 to %u", rq->tokens, HY_SHARD_MAX_TOKENS);
    if (rq->val_out && (rq->val_tokens < 1 ||
                        rq->val_tokens > (long long)HY_SHARD_MAX_TOKENS))
        return hy_fail(err, HY_ERR_INPUT, "data synth: --val-tokens %lld is out "
                       "of range; give 1 to %u", rq->val_tokens, HY_SHARD_MAX_TOKENS);
    /* The same file under two spellings too (outfile.h): the validation
     * shard would replace the training shard just written. */
    if (rq->val_out && (strcmp(rq->out, rq->val_out) == 0 || hy_outfile_same(rq->out, rq->val_out)))
        return hy_fail(err, HY_ERR_INPUT, "data synth: --out %s and --val-out %s are the same "
                       "file; give two files", rq->out, rq->val_out);
    /* 0: the smallest that holds the vocabulary. */
    hy_shard_format format = rq->format ? rq->format
                                        : rq->vocab <= 65536 ? HY_SHARD_U16 : HY_SHARD_U32;
    if (format == HY_SHARD_U16 && rq->vocab > 65536)
        return hy_fail(err, HY_ERR_INPUT, "data synth: --vocab %d does not fit --format u16 "
                       "(uint16 ids: at most 65536); give --format u32", rq->vocab);
    long long most = rq->val_out && rq->val_tokens > rq->tokens ? rq->val_tokens
                                                                 : rq->tokens;
    void *buf = malloc((size_t)most * (size_t)format);
    if (!buf)
        return hy_fail(err, HY_ERR_RUNTIME, "data synth: out of memory for "
                       "%lld tokens", most);
    int rc = synth_one(rq->out, rq->tokens, rq->vocab, format, rq->seed, 0, buf, out, err);
    if (rc == HY_OK && rq->val_out)
        rc = synth_one(rq->val_out, rq->val_tokens, rq->vocab, format, rq->seed, 1, buf,
                       out, err);
    free(buf);
    if (rc == HY_OK) {
        double h = hy_synth_entropy_bits(rq->vocab), u = log2(rq->vocab);
        fprintf(out, "source entropy rate ~%.2f bits/token = %.2f nats (a "
                "uniform guess: %.2f bits = %.2f nats); the training loss "
                "should fall well below %.2f\n", h, h * M_LN2, u, u * M_LN2,
                u * M_LN2);
    }
    return rc;
}

/* Read as ints (their ranges fit), then put into cli_data_synth_request. */
typedef struct {
    const char *out, *val_out;
    int tokens, val_tokens, vocab, seed;
    int format;   /* index in format_names; -1: not given */
} synth_args;

static const char *const format_names[] = { "u16", "u32", NULL };

#define SYNTH(field) offsetof(synth_args, field)
static const hy_flag synth_flags[] = {
    { .name = "--out", .kind = HY_FLAG_STRING, .off = SYNTH(out), .example = "data/train.bin" },
    { .name = "--tokens", .kind = HY_FLAG_INT, .off = SYNTH(tokens), .example = "1000000",
      .lo = 1, .hi = INT_MAX },
    { .name = "--vocab", .kind = HY_FLAG_INT, .off = SYNTH(vocab), .example = "512",
      .lo = 2, .hi = INT_MAX },
    { .name = "--format", .kind = HY_FLAG_CHOICE, .off = SYNTH(format), .example = "u32",
      .choices = format_names },
    { .name = "--seed", .kind = HY_FLAG_INT, .off = SYNTH(seed), .example = "1",
      .lo = 0, .hi = INT_MAX },
    { .name = "--val-out", .kind = HY_FLAG_STRING, .off = SYNTH(val_out),
      .example = "data/val.bin" },
    { .name = "--val-tokens", .kind = HY_FLAG_INT, .off = SYNTH(val_tokens),
      .example = "100000", .lo = 1, .hi = INT_MAX },
    { .name = NULL },
};
static const hy_args_spec synth_spec = {
    .command = "data synth", .flags = synth_flags, .operand_hint = "give it as --out FILE" };

static int data_synth(const cli_command *cmd, int argc, char **argv, hy_error *err) {
    synth_args a = { .out = NULL, .seed = 1, .format = -1 };
    hy_args_result got;
    int rc = cli_read_args(cmd, argc, argv, &a, &got, err);
    if (rc != HY_OK || got.help) return rc;
    if (!a.out || !a.tokens || !a.vocab)
        return hy_fail(err, HY_ERR_INPUT, "data synth needs %s; e.g. hanayo "
                       "data synth --out data/train.bin --tokens 1000000 --vocab 512",
                       !a.out ? "--out FILE" : !a.tokens ? "--tokens N" : "--vocab V");
    if (a.val_tokens && !a.val_out)
        return hy_fail(err, HY_ERR_INPUT, "data synth: --val-tokens needs "
                       "--val-out FILE for the validation shard");
    if (a.val_out && !a.val_tokens)
        a.val_tokens = a.tokens / 10 > 0 ? a.tokens / 10 : 1;
    cli_data_synth_request rq = { .out = a.out, .tokens = a.tokens, .val_out = a.val_out,
                                  .val_tokens = a.val_tokens, .vocab = a.vocab,
                                  .seed = (uint64_t)a.seed,
                                  .format = a.format < 0 ? 0 : a.format == 0 ? HY_SHARD_U16
                                                                            : HY_SHARD_U32 };
    return cli_data_synth(&rq, stdout, err);
}

/* ---- info ------------------------------------------------------------------ */

static int info_json(const char *path, const hy_shard_stats *in, int vocab, FILE *out,
                     hy_error *err) {
    json_t *o = json_pack("{s:s, s:s, s:I, s:I, s:i, s:I}", "path", path,
                          "format", hy_shard_format_name(in->format),
                          "tokens", (json_int_t)in->tokens, "bytes",
                          (json_int_t)in->file_bytes, "max_token", in->max_token,
                          "vocab_seen", (json_int_t)in->max_token + 1);
    int rc = o ? HY_OK : hy_fail(err, HY_ERR_RUNTIME, "out of memory");
    if (rc == HY_OK) {
        json_object_set_new(o, "vocab", vocab > 0 ? json_integer(vocab) : json_null());
        json_object_set_new(o, "unigram_bits",
                            isnan(in->unigram_bits) ? json_null() : json_real(in->unigram_bits));
        json_object_set_new(o, "bigram_bits",
                            isnan(in->bigram_bits) ? json_null() : json_real(in->bigram_bits));
        char *s = json_dumps(o, JSON_PRESERVE_ORDER | JSON_COMPACT |
                                JSON_REAL_PRECISION(6));
        if (s) fprintf(out, "%s\n", s);
        else rc = hy_fail(err, HY_ERR_RUNTIME, "out of memory");
        free(s);
    }
    json_decref(o);
    return rc;
}

int cli_data_info(const char *path, int vocab, int json, FILE *out, hy_error *err) {
    hy_shard_stats in;
    int rc = hy_shard_info(path, vocab, &in, err);
    if (rc == HY_OK && json) rc = info_json(path, &in, vocab, out, err);
    else if (rc == HY_OK) {
        long long range = vocab > 0 ? vocab : (long long)in.max_token + 1;
        int u16 = in.format == HY_SHARD_U16;
        fprintf(out, "shard        %s\n", path);
        fprintf(out, "format       %s: llm.c magic %d, version %d, %s ids\n",
                hy_shard_format_name(in.format), u16 ? HY_SHARD_MAGIC : HY_SHARD32_MAGIC,
                u16 ? HY_SHARD_VERSION : HY_SHARD32_VERSION, u16 ? "uint16" : "uint32");
        fprintf(out, "tokens       %zu\n", in.tokens);
        fprintf(out, "file size    %llu bytes\n", (unsigned long long)in.file_bytes);
        fprintf(out, "vocab seen   %lld (largest id %d)%s\n", (long long)in.max_token + 1,
                in.max_token, vocab > 0 ? "; all below the vocab given" : "");
        if (isnan(in.unigram_bits))
            fprintf(out, "entropy      not estimated: ids up to %d need too large a count "
                    "table", in.max_token);
        else
            fprintf(out, "entropy      %.3f bits/token unigram", in.unigram_bits);
        if (!isnan(in.bigram_bits)) fprintf(out, ", %.3f next|prev", in.bigram_bits);
        fprintf(out, " (uniform over %lld ids: %.3f)\n", range, log2((double)range));
    }
    return rc;
}

typedef struct {
    int vocab, json;
} info_args;

static const hy_flag info_flags[] = {
    { .name = "--vocab", .kind = HY_FLAG_INT, .off = offsetof(info_args, vocab),
      .example = "512", .lo = 1, .hi = INT_MAX },
    { .name = "--json", .kind = HY_FLAG_SWITCH, .off = offsetof(info_args, json) },
    { .name = NULL },
};
static const hy_args_spec info_spec = {
    .command = "data info", .flags = info_flags, .operand = "shard",
    .synopsis = "hanayo data info SHARD [--vocab V] [--json]",
    .second_operand = "data info takes one shard" };

static int data_info(const cli_command *cmd, int argc, char **argv, hy_error *err) {
    info_args a = { .vocab = 0, .json = 0 };
    hy_args_result got;
    int rc = cli_read_args(cmd, argc, argv, &a, &got, err);
    if (rc != HY_OK || got.help) return rc;
    return cli_data_info(got.operand, a.vocab, a.json, stdout, err);
}

/* ---- The command ----------------------------------------------------------- */

/* The subcommands name themselves in flag errors ("unknown flag '--x' for
 * 'data synth'; run 'hanayo data synth --help'"). */
static const cli_command data_commands[] = {
    {"synth", data_synth, usage_data, &synth_spec, NULL, 0},
    {"info", data_info, usage_data, &info_spec, NULL, 0},
};
static int cmd_data(const cli_command *cmd, int argc, char **argv, hy_error *err) {
    return cli_run_subcommand(cmd, argc, argv, err);
}

const cli_command cli_data_command = {"data", cmd_data, usage_data, NULL, data_commands, 2};
