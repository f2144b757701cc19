/*
 * embedding.c — token + learned position embedding (GPT-2's wte and wpe;
 * BERT adds its token-type row 0), CPU backend.
 *
 *   forward   out[b,t,:] = wte[tokens[b,t],:] + type[:] + wpe[t,:]
 *   backward  dwte[tokens[b,t],:] += dout[b,t,:]
 *             dwpe[t,:]           += dout[b,t,:]
 * A token that occurs several times adds its gradient once per occurrence,
 * and with a tied LM head dwte also receives the head's gradient: hence
 * accumulation, as everywhere. Token ids are trusted to lie in [0, V);
 * lib/data checks them where they are read. wpe NULL (Llama: positions
 * enter through RoPE inside attention) leaves the token embedding alone.
 */
#include "ops.h"

void hy_cpu_embedding_forward(float *out, const int *tokens, const float *wte,
                              const float *wpe, const float *type, int B, int T, int C) {
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            size_t bt = (size_t)b * T + t;
            float *o = out + bt * C;
            const float *te = wte + (size_t)tokens[bt] * C;
            for (int i = 0; i < C; i++) o[i] = te[i];
            /* Hugging Face BERT's order: (word + token type) + position */
            if (type != NULL)
                for (int i = 0; i < C; i++) o[i] += type[i];
            if (wpe != NULL) {
                const float *pe = wpe + (size_t)t * C;
                for (int i = 0; i < C; i++) o[i] += pe[i];
            }
        }
    }
}

void hy_cpu_embedding_backward(float *dwte, float *dwpe, const float *dout,
                               const int *tokens, int B, int T, int C) {
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            size_t bt = (size_t)b * T + t;
            const float *d = dout + bt * C;
            if (dwte != NULL) {
                float *dte = dwte + (size_t)tokens[bt] * C;
                for (int i = 0; i < C; i++) dte[i] += d[i];
            }
            if (dwpe != NULL) {
                float *dpe = dwpe + (size_t)t * C;
                for (int i = 0; i < C; i++) dpe[i] += d[i];
            }
        }
    }
}
