/*
 * weights.h — loading a model's weights from a safetensors file with
 * Hugging Face GPT-2 names, or from a Hugging Face Llama checkpoint, into
 * a runtime; and the Llama names and layouts files are written in.
 *
 * The files are those transformers writes for GPT2LMHeadModel (and
 * hanayo's own checkpoints, checkpoint.h): tensor names as model.h gives
 * them, with or without a "transformer." prefix; F32, BF16 or F16; wte
 * with the real vocabulary's rows or with the padded vocabulary's. Every
 * parameter must be there with its shape, and every tensor must be a
 * parameter, except the ones Hugging Face files carry beside them: the
 * attention-mask buffers (".attn.bias", ".attn.masked_bias") and the tied
 * lm_head.weight. Config key `init` loads a file at start-up
 * (hy_runtime_create); a checkpoint's model.safetensors loads the same way.
 *
 *
 * Post-LN BERT (BertForMaskedLM, model.norm "post") is read the same way
 * as a Llama, with BertConfig's config.json: q, k and v are fused into
 * the [C, 3C] qkv, every Linear is transposed, tensor names may carry
 * BertForMaskedLM's "bert." prefix or none (BertModel's); the tied
 * decoder's weight and bias (cls.predictions.decoder.*, which must equal
 * the word embedding and cls.predictions.bias), a pooler and
 * BertForPreTraining's next-sentence head (cls.seq_relationship.*) are
 * ignored. A hanayo BERT file records its model.norm ("hanayo_norm";
 * absent: "pre"), which must be the config's.
 *
 * A Llama (LlamaForCausalLM) is read from a directory holding config.json
 * and model.safetensors, or the shards model-0000k-of-0000n.safetensors
 * that model.safetensors.index.json lists; or from one safetensors file
 * (a hanayo checkpoint's model.safetensors). Hugging Face keeps q, k and
 * v, and gate and up, as separate nn.Linear weights [out, in]; model.h's
 * fused [in, out] parameters are their rows concatenated, transposed
 * (hy_weights_llama_pieces). config.json must describe the config's
 * model: every field that shapes the weights or their function
 * (hidden_size, num_hidden_layers, num_attention_heads,
 * num_key_value_heads, intermediate_size, vocab_size, rms_norm_eps,
 * rope_theta and Llama 3's rope scaling, tie_word_embeddings), else
 * HY_ERR_INPUT naming the field.
 *
 * It talks to the runtime through runtime.h only: each tensor is put as it
 * is read (hy_runtime_put), then the compute copies are refreshed once
 * (hy_runtime_refresh); hy_weights_read reads the same into host blocks.
 */
#ifndef HY_WEIGHTS_H
#define HY_WEIGHTS_H

#include "error.h"
#include "model.h"
#include "runtime.h"

/* Replaces rt's weights with those of the file at path (a Llama: also a
 * Hugging Face checkpoint's directory). Errors name the
 * file and the tensor: a missing parameter, a shape the config's model
 * does not have, a tensor that is not a parameter, a value that is NaN or
 * infinite (HY_ERR_INPUT); an unreadable file as safetensors.h reports
 * it. A hanayo checkpoint's weights also record their model's kind and
 * heads (metadata "hanayo_model", "hanayo_heads"), which must be the
 * config's: GPT and BERT tensors share names and shapes. Other files
 * (Hugging Face's) are checked by their shapes alone. */
int hy_weights_load(hy_runtime *rt, const char *path, hy_error *err);

/* The same checks and values into host memory instead of a runtime:
 * blocks[s] holds stage s's parameter block of m (m->stage_numel[s]
 * floats, wte's padding rows left as they were). What generation loads
 * (sample.h), which runs no training runtime. */
int hy_weights_read(const hy_model *m, const char *path, float *const *blocks, hy_error *err);

/* The n values just read from tensor `name` of the file at path must all
 * be finite and, with nonneg, >= 0 (AdamW's second moments): else
 * HY_ERR_INPUT naming the file, the tensor, the first bad value and its
 * index. A NaN or infinity in weights makes every step of a run
 * non-finite, so it is refused at the load, as the bad input it is. */
int hy_weights_check(const char *path, const char *name, const float *v, size_t n, int nonneg,
                     hy_error *err);

/* The Hugging Face tensors a Llama parameter is made of: a name and its
 * rows. A 2-D parameter other than the embedding and the head is stored
 * transposed: the pieces' rows, stacked in order, are the columns of the
 * [in, out] parameter. */
typedef struct {
    char name[96];
    size_t rows;
} hy_weights_piece;

/* Are m's files in Hugging Face's names and layouts, through the pieces
 * below (a Llama, post-LN BERT)? GPT's and pre-LN BERT's parameters are
 * their files' tensors as they are. */
int hy_weights_hf_layout(const hy_model *m);

/* p's pieces into pieces[] (at most 3: q, k, v; gate, up); returns how
 * many. m is in Hugging Face's layout (hy_weights_hf_layout). Post-LN
 * BERT's carry BertForMaskedLM's names ("bert.embeddings...",
 * "bert.encoder.layer.N...", "cls.predictions..."); a file may have them
 * without "bert." too. */
int hy_weights_hf_pieces(const hy_model *m, const hy_param *p, hy_weights_piece pieces[3]);

/* Does Hugging Face store p as the transpose of its layout here (a
 * Linear's [out, in] weight; not an embedding)? */
int hy_weights_hf_transposed(const hy_param *p);

/* dst[c * rows + r] = src[r * cols + c]: the [rows, cols] matrix src as
 * [cols, rows]. */
void hy_weights_transpose(float *dst, const float *src, size_t rows, size_t cols);

#endif
