/* bench_capi: batch-1 greedy decode through libriftco's C ABI, no Python in the loop.
 *
 *   bench_capi MODEL [--prompt P] [--gen N] [--repeats R] [--batch B]
 *
 * Loads MODEL (.rift or GGUF), prefills P tokens, then decodes N tokens greedily (step +
 * sample), R times; prints one JSON line per repeat: {"prefill_tok_s": ..., "decode_tok_s": ...}.
 * With --batch B > 1, B sessions decode together through riftco_session_step_batch (the
 * continuous-batching call) and decode_tok_s counts the tokens of all of them.
 * bench/bench_capi.py runs it in alternating rounds beside llama-bench (or riftco's
 * in-process decoder) and prints the ratios. The thread count is RAYON_NUM_THREADS. */
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "riftco.h"

#define TRY(call)                                                                  \
  do {                                                                             \
    if ((call) != RIFTCO_STATUS_OK) {                                              \
      fprintf(stderr, "bench_capi: %s: %s\n", #call, riftco_last_error());         \
      return 1;                                                                    \
    }                                                                              \
  } while (0)

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s MODEL [--prompt P] [--gen N] [--repeats R]\n", argv[0]);
    return 2;
  }
  int prompt_len = 1, gen = 128, repeats = 1, batch = 1;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--prompt")) prompt_len = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--gen")) gen = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--repeats")) repeats = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--batch")) batch = atoi(argv[i + 1]);
  }
  RiftcoModel *model;
  TRY(riftco_model_load(argv[1], &model));
  RiftcoModelConfig cfg;
  TRY(riftco_model_config(model, &cfg));
  if (prompt_len < 1 || (size_t)prompt_len + (size_t)gen > cfg.context_length) {
    fprintf(stderr, "bench_capi: prompt + gen must be within the context of %u\n", cfg.context_length);
    return 2;
  }
  int32_t *prompt = malloc((size_t)prompt_len * sizeof *prompt);
  for (int i = 0; i < prompt_len; i++) prompt[i] = (int32_t)((i * 7919 + 13) % cfg.vocab_size);
  RiftcoSamplingParams params;
  TRY(riftco_sampling_params_default(&params));
  RiftcoSampler *greedy;
  TRY(riftco_sampler_create(&params, &greedy));
  if (batch > 1) {
    RiftcoSession **ss = calloc((size_t)batch, sizeof *ss);
    int32_t *next = malloc((size_t)batch * sizeof *next);
    for (int j = 0; j < batch; j++) TRY(riftco_session_create(model, &ss[j]));
    for (int r = 0; r < repeats; r++) {
      for (int j = 0; j < batch; j++) {
        TRY(riftco_session_reset(ss[j]));
        prompt[0] = (int32_t)((j * 31 + 7) % cfg.vocab_size);
        TRY(riftco_session_prefill(ss[j], prompt, (size_t)prompt_len));
      }
      double t1 = now();
      for (int i = 0; i < gen; i++) {
        for (int j = 0; j < batch; j++) TRY(riftco_session_sample(ss[j], greedy, &next[j]));
        TRY(riftco_session_step_batch(ss, next, (size_t)batch, NULL));
      }
      double t2 = now();
      printf("{\"batch\": %d, \"decode_tok_s\": %.3f}\n", batch, (double)batch * gen / (t2 - t1));
      fflush(stdout);
    }
    for (int j = 0; j < batch; j++) TRY(riftco_session_free(ss[j]));
    free(ss);
    free(next);
  }
  RiftcoSession *s;
  TRY(riftco_session_create(model, &s));
  for (int r = 0; r < repeats && batch <= 1; r++) {
    TRY(riftco_session_reset(s));
    double t0 = now();
    TRY(riftco_session_prefill(s, prompt, (size_t)prompt_len));
    double t1 = now();
    for (int i = 0; i < gen; i++) {
      int32_t token;
      TRY(riftco_session_sample(s, greedy, &token));
      TRY(riftco_session_step(s, token));
    }
    double t2 = now();
    printf("{\"prefill_tok_s\": %.3f, \"decode_tok_s\": %.3f}\n", prompt_len / (t1 - t0),
           gen / (t2 - t1));
    fflush(stdout);
  }
  TRY(riftco_session_free(s));
  TRY(riftco_sampler_free(greedy));
  TRY(riftco_model_free(model));
  free(prompt);
  return 0;
}
