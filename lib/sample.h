/*
 * sample.h — generation: a trained GPT's or Llama's continuation of a
 * prompt, token by token, with a KV cache (`hanayo sample`, docs/cli.md
 * "Generating text").
 *
 * The whole model runs on one rank of a backend, whatever the config's
 * pipeline schedule: generation has one sequence and no backward, so
 * there is nothing for stages to overlap. Its blocks are transformer.h's
 * (hy_block_forward, the block of the model's kind), the same code
 * training runs, with attention over a cache: per layer K and V
 * [1, seq_len, kv_heads·head_dim] in the rank's memory (a Llama's
 * grouped-query heads keep only their kv heads). A Llama's RoPE turns q
 * and k at their positions in the sequence, from the cache's first free
 * row on; a GPT's learned positions are wpe's rows from there.
 * The prompt runs as one prefill (its keys and values go into the cache
 * and only its last position goes through the head), then each new token
 * is one step of one position, never a recompute of what came before.
 *
 * Sampling is on the host, from the last position's logits: greedy
 * (argmax, the lowest id on a tie, as torch.argmax) at temperature 0,
 * else softmax(logits / T) over the top-k logits, drawn with rng.h's
 * stream of the seed, so one seed gives one sample on every machine.
 *
 * A BERT has no next token to predict (its attention sees both ways):
 * it is refused.
 */
#ifndef HY_SAMPLE_H
#define HY_SAMPLE_H

#include <stdint.h>

#include "backend.h"
#include "error.h"
#include "model.h"
#include "rng.h"

typedef struct hy_sampler hy_sampler;

typedef struct {
    int max_new;           /* tokens to generate at most */
    double temperature;    /* 0: greedy */
    int top_k;             /* > 0: draw among the k largest logits only; 0: among all */
    uint64_t seed;         /* the draws' stream (unused when greedy) */
    int stop_token;        /* generation ends after this token; -1: none */
} hy_sample_params;

/* Why generation ended. */
typedef enum {
    HY_SAMPLE_MAX_NEW,     /* max_new tokens were generated */
    HY_SAMPLE_STOP_TOKEN,  /* the stop token came */
    HY_SAMPLE_SEQ_LEN      /* prompt and tokens fill model.seq_len positions */
} hy_sample_end;

/* A sampler of the GPT or Llama of `shape` on rank 0 of be (which it
 * borrows: be must outlive it), with the weights of host block `block`
 * (the one stage's parameter block of hy_model_build(shape, 1 stage)). A
 * BERT, or a backend without the cache ops (or a Llama's), is
 * HY_ERR_INPUT. */
int hy_sampler_create(hy_sampler **out, hy_backend *be, const hy_model_shape *shape,
                      const float *block, hy_error *err);

/* The same with the weights of the safetensors file at path (a Llama:
 * also a Hugging Face checkpoint's directory), checked as training's
 * `init` is (weights.h; checkpoint.h's hy_checkpoint_verify_file when it
 * lies in a checkpoint: *unverified 1 for one without checksums). */
int hy_sampler_open(hy_sampler **out, hy_backend *be, const hy_model_shape *shape,
                    const char *path, int *unverified, hy_error *err);

void hy_sampler_destroy(hy_sampler *s);

/* Empties the cache: the next feed starts at position 0. */
void hy_sampler_reset(hy_sampler *s);

/* Tokens in the cache: the position the next feed starts at. */
int hy_sampler_position(const hy_sampler *s);

/* Runs tokens[0..n) at the next n positions, their keys and values into
 * the cache, and sets logits (host, shape.vocab floats) to the next-token
 * logits of the last. A token outside the vocabulary, or more tokens than
 * the cache has positions left (model.seq_len), is HY_ERR_INPUT. */
int hy_sampler_feed(hy_sampler *s, const int *tokens, int n, float *logits, hy_error *err);

/* The next-token logits of the last of tokens[0..n) without the cache:
 * the whole sequence through the blocks' training attention
 * (attention_fwd), as a recompute per token would run it. The cache is
 * not touched. What feed must equal (tests/test_sample.c). */
int hy_sampler_forward_full(hy_sampler *s, const int *tokens, int n, float *logits,
                            hy_error *err);

/* The next token from logits[0..V) under p (temperature, top_k), with one
 * draw of rng when not greedy. logits are left as they were. */
int hy_sample_pick(const float *logits, int V, const hy_sample_params *p, hy_rng *rng,
                   int *token, hy_error *err);

/* A prompt generation takes: at least one token, at most seq_len, each an
 * id of the vocabulary; else HY_ERR_INPUT saying which. */
int hy_sample_check_prompt(const hy_model_shape *shape, const int *prompt, int n, hy_error *err);

/* Called with each token as it is generated; non-zero stops generation
 * with that status (err set by it). */
typedef int (*hy_sample_emit)(void *ctx, int token, hy_error *err);

/* Generation from the empty cache: prompt[0..n_prompt) as one prefill,
 * then one token per step, each given to emit, until max_new tokens, the
 * stop token (given to emit too), or prompt and tokens fill seq_len
 * positions (*end says which; a prompt of seq_len tokens gets none). A
 * prompt hy_sample_check_prompt refuses is refused. *n_new: the tokens
 * generated. */
int hy_sample_generate(hy_sampler *s, const int *prompt, int n_prompt, const hy_sample_params *p,
                       hy_sample_emit emit, void *ctx, int *n_new, hy_sample_end *end,
                       hy_error *err);

#endif
