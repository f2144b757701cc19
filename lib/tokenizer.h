/*
 * tokenizer.h — a byte-level BPE tokenizer read from a Hugging Face
 * tokenizer.json (GPT-2's kind), for `hanayo sample`: token ids to text and
 * a prompt's text to ids, in C (the tokenizers library is Python's).
 *
 * Accepted: model.type "BPE" with the ByteLevel decoder (GPT-2's byte ↔
 * unicode map: each byte is one printable character of the vocabulary's
 * strings), model.vocab and model.merges (as "a b" strings or [a, b]
 * pairs), and added_tokens (special tokens such as <|endoftext|>, decoded
 * as their text). Anything else (a WordPiece or Unigram model, another
 * decoder) is refused naming what the file has.
 *
 * Decoding needs the vocabulary alone. Encoding is GPT-2's: the text is
 * split at added tokens' texts, then pre-tokenized with GPT-2's pattern
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * with these classes: letters are ASCII letters and every non-ASCII
 * character, numbers the ASCII digits, white space the ASCII white space
 * (so non-ASCII digits, punctuation and spaces count as letters: text in
 * ASCII splits exactly as GPT-2's does); ByteLevel's add_prefix_space is
 * honoured; then each piece's bytes are mapped to the byte characters and
 * merged by the merges' ranks, lowest first. A tokenizer.json with a
 * normalizer, or whose pre-tokenizer is not ByteLevel, is refused for
 * encoding (decoding still works): its ids would not be the ones the
 * model was trained on.
 */
#ifndef HY_TOKENIZER_H
#define HY_TOKENIZER_H

#include <stddef.h>

#include "error.h"

typedef struct hy_tokenizer hy_tokenizer;

/* Reads the tokenizer.json at path. HY_ERR_INPUT for a file that cannot be
 * read, is not JSON, or is not a byte-level BPE tokenizer, naming the file
 * and the JSON path at fault. */
int hy_tokenizer_load(hy_tokenizer **out, const char *path, hy_error *err);
void hy_tokenizer_free(hy_tokenizer *tk);

/* One past the largest id it knows (vocabulary and added tokens). */
int hy_tokenizer_size(const hy_tokenizer *tk);

/* The bytes of token id (not NUL-terminated; a token may hold part of a
 * UTF-8 character, completed by the next). HY_ERR_INPUT for an id it does
 * not have. */
int hy_tokenizer_decode(const hy_tokenizer *tk, int id, const char **bytes, size_t *len,
                        hy_error *err);

/* The ids of text (NUL-terminated), into a malloc'd *ids of *n. HY_ERR_INPUT
 * when the file cannot encode (see the top) or a piece has a byte no
 * token covers. */
int hy_tokenizer_encode(const hy_tokenizer *tk, const char *text, int **ids, int *n,
                        hy_error *err);

#endif
