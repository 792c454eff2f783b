/* chat: talk to a Riftco model on stdin/stdout through libriftco.
 *
 *   chat MODEL.rift [--max-tokens N] [--temperature T] [--top-k K] [--top-p P] [--seed S]
 *
 * Each line read is a user message. With the bundle's chat template the conversation so
 * far is templated and the reply streams until a stop id; a tokenizer without a template
 * continues the line's text. Tokens are decoded incrementally (UTF-8 is held back across
 * token boundaries), so the reply prints as it is drawn. Build: `make capi` (or
 * `cc chat.c $(pkg-config --cflags --libs --static riftco)`). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "riftco.h"

#define TRY(call)                                                                   \
  do {                                                                              \
    RiftcoStatus s_ = (call);                                                       \
    if (s_ != RIFTCO_STATUS_OK) {                                                   \
      fprintf(stderr, "chat: %s: %s: %s\n", #call, riftco_status_name(s_),          \
              riftco_last_error());                                                 \
      exit(1);                                                                      \
    }                                                                               \
  } while (0)

#define MAX_TURNS 256

static char *copy_text(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  memcpy(d, s, n);
  return d;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s MODEL.rift [--max-tokens N] [--temperature T] [--top-k K] "
                    "[--top-p P] [--seed S]\n", argv[0]);
    return 2;
  }
  int max_tokens = 128;
  RiftcoSamplingParams params;
  TRY(riftco_sampling_params_default(&params));
  for (int i = 2; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--max-tokens")) max_tokens = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--temperature")) params.temperature = atof(argv[i + 1]);
    else if (!strcmp(argv[i], "--top-k")) params.top_k = (uint32_t)atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--top-p")) params.top_p = atof(argv[i + 1]);
    else if (!strcmp(argv[i], "--seed")) params.seed = strtoull(argv[i + 1], NULL, 10);
    else {
      fprintf(stderr, "chat: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  RiftcoModel *model;
  RiftcoTokenizer *tok;
  TRY(riftco_model_load(argv[1], &model));
  TRY(riftco_tokenizer_load(argv[1], &tok));
  RiftcoModelConfig cfg;
  TRY(riftco_model_config(model, &cfg));
  size_t n_stops = 0;
  uint32_t stops[64];
  TRY(riftco_tokenizer_stop_ids(tok, true, stops, 64, &n_stops));
  RiftcoSession *session;
  TRY(riftco_session_create(model, &session));

  const char *roles[MAX_TURNS];
  char *contents[MAX_TURNS];
  size_t lens[MAX_TURNS], turns = 0;
  size_t cap = cfg.context_length * 4 + 64;
  uint32_t *ids = malloc(cap * sizeof *ids);
  int32_t *prompt = malloc(cap * sizeof *prompt);
  uint8_t *text = malloc(RIFTCO_TOKENIZER_MAX_PUSH_BYTES);
  char line[4096];
  while (turns + 2 <= MAX_TURNS && fgets(line, sizeof line, stdin)) {
    line[strcspn(line, "\n")] = '\0';
    roles[turns] = "user";
    contents[turns] = copy_text(line);
    lens[turns] = strlen(line);
    turns++;
    size_t n = 0;
    RiftcoStatus st = riftco_tokenizer_apply_chat_template(
        tok, roles, (const char *const *)contents, lens, turns, true, ids, cap, &n);
    if (st != RIFTCO_STATUS_OK) /* no template: continue the text */
      TRY(riftco_tokenizer_encode(tok, (const uint8_t *)line, strlen(line), 0, ids, cap, &n));
    if (n == 0) {
      TRY(riftco_tokenizer_eos_id(tok, &ids[0]));
      n = 1;
    }
    size_t keep = n < cfg.context_length ? n : cfg.context_length - 1; /* the newest tokens */
    for (size_t i = 0; i < keep; i++) prompt[i] = (int32_t)ids[n - keep + i];
    RiftcoSampler *sampler;
    TRY(riftco_sampler_create(&params, &sampler));
    TRY(riftco_sampler_observe(sampler, prompt, keep));
    TRY(riftco_session_reset(session));
    TRY(riftco_session_prefill(session, prompt, keep));
    RiftcoTokenDecoder *dec;
    TRY(riftco_tokenizer_decoder_new(tok, RIFTCO_DECODE_SKIP_SPECIAL, &dec));
    size_t reply_len = 0, reply_cap = 256;
    char *reply = malloc(reply_cap);
    for (int t = 0; t < max_tokens; t++) {
      int32_t token;
      TRY(riftco_session_sample(session, sampler, &token));
      int stop = 0;
      for (size_t k = 0; k < n_stops; k++) stop |= (uint32_t)token == stops[k];
      if (stop) break;
      TRY(riftco_sampler_accept(sampler, token));
      size_t got = 0;
      TRY(riftco_tokenizer_decoder_push(dec, (uint32_t)token, text,
                                        RIFTCO_TOKENIZER_MAX_PUSH_BYTES, &got));
      fwrite(text, 1, got, stdout);
      fflush(stdout);
      if (reply_len + got + 1 > reply_cap) reply = realloc(reply, reply_cap = 2 * (reply_len + got + 1));
      memcpy(reply + reply_len, text, got);
      reply_len += got;
      TRY(riftco_session_step(session, token));
    }
    size_t got = 0;
    TRY(riftco_tokenizer_decoder_flush(dec, text, RIFTCO_TOKENIZER_MAX_PUSH_BYTES, &got));
    fwrite(text, 1, got, stdout);
    if (reply_len + got + 1 > reply_cap) reply = realloc(reply, reply_len + got + 1);
    memcpy(reply + reply_len, text, got);
    reply_len += got;
    reply[reply_len] = '\0';
    printf("\n");
    fflush(stdout);
    roles[turns] = "assistant";
    contents[turns] = reply;
    lens[turns] = reply_len;
    turns++;
    TRY(riftco_tokenizer_decoder_free(dec));
    TRY(riftco_sampler_free(sampler));
  }
  for (size_t i = 0; i < turns; i++) free(contents[i]);
  free(ids);
  free(prompt);
  free(text);
  TRY(riftco_session_free(session));
  TRY(riftco_tokenizer_free(tok));
  TRY(riftco_model_free(model));
  return 0;
}
