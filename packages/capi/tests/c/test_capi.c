/* C tests of libriftco: every handle created, used and freed; every error path of the
 * model, session and sampler functions; NULL and wrong-handle arguments. Run as
 * `test_capi <bundle.rift> <scratch-dir>` (make capi-test runs it, once under ASan). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "riftco.h"

static int failures = 0;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s (last error: %s)\n", __FILE__, \
              __LINE__, #cond, riftco_last_error());                           \
      failures++;                                                              \
    }                                                                          \
  } while (0)

#define OK(call) CHECK((call) == RIFTCO_STATUS_OK)
#define FAILS(call, status)                                                    \
  do {                                                                         \
    RiftcoStatus s_ = (call);                                                  \
    CHECK(s_ == (status));                                                     \
    CHECK(riftco_last_error()[0] != '\0');                                     \
  } while (0)

static char *copy_truncated(const char *src, const char *dir, long keep) {
  static char path[4096];
  snprintf(path, sizeof path, "%s/truncated.rift", dir);
  FILE *in = fopen(src, "rb");
  FILE *out = fopen(path, "wb");
  if (!in || !out) return NULL;
  char buf[4096];
  long left = keep;
  size_t n;
  while (left > 0 && (n = fread(buf, 1, left < 4096 ? (size_t)left : 4096, in)) > 0) {
    fwrite(buf, 1, n, out);
    left -= (long)n;
  }
  fclose(in);
  fclose(out);
  return path;
}

static char *copy_flipped(const char *src, const char *dir, long at) {
  static char path[4096];
  snprintf(path, sizeof path, "%s/flipped.rift", dir);
  FILE *in = fopen(src, "rb");
  if (!in) return NULL;
  fseek(in, 0, SEEK_END);
  long size = ftell(in);
  fseek(in, 0, SEEK_SET);
  unsigned char *bytes = malloc((size_t)size);
  if (fread(bytes, 1, (size_t)size, in) != (size_t)size) size = 0;
  fclose(in);
  if (at < 0) at += size;
  bytes[at] ^= 0x01;
  FILE *out = fopen(path, "wb");
  fwrite(bytes, 1, (size_t)size, out);
  fclose(out);
  free(bytes);
  return path;
}

static int argmax(const float *x, size_t n) {
  size_t best = 0;
  for (size_t i = 1; i < n; i++)
    if (x[i] > x[best]) best = i;
  return (int)best;
}

static void test_version_and_errors(void) {
  CHECK(riftco_abi_version() == ((RIFTCO_ABI_VERSION_MAJOR << 16) | RIFTCO_ABI_VERSION_MINOR));
  CHECK(strcmp(riftco_status_name(RIFTCO_STATUS_OK), "ok") == 0);
  CHECK(strcmp(riftco_status_name(RIFTCO_STATUS_CHECKSUM), "checksum") == 0);
  CHECK(strcmp(riftco_status_name(9999), "unknown") == 0);
  RiftcoModel *m = (RiftcoModel *)0x1;
  FAILS(riftco_model_load(NULL, &m), RIFTCO_STATUS_NULL_HANDLE);
  CHECK(m == NULL);
  FAILS(riftco_model_load("/nonexistent/model.rift", NULL), RIFTCO_STATUS_NULL_HANDLE);
  FAILS(riftco_model_load("/nonexistent/model.rift", &m), RIFTCO_STATUS_IO);
  FAILS(riftco_model_load("/dev/zero", &m), RIFTCO_STATUS_IO);
  FAILS(riftco_model_load("/tmp", &m), RIFTCO_STATUS_IO);
  CHECK(m == NULL);
  /* Frees accept NULL. */
  OK(riftco_model_free(NULL));
  OK(riftco_session_free(NULL));
  OK(riftco_sampler_free(NULL));
  CHECK(riftco_last_error()[0] == '\0');
}

static void test_hostile_files(const char *bundle, const char *dir) {
  RiftcoModel *m = NULL;
  long cuts[] = {0, 4, 8, 9, 100, 1000, 20000};
  for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
    const char *p = copy_truncated(bundle, dir, cuts[i]);
    CHECK(p != NULL);
    RiftcoStatus s = riftco_model_load(p, &m);
    CHECK(s == RIFTCO_STATUS_FORMAT || s == RIFTCO_STATUS_LIMIT);
    CHECK(m == NULL);
  }
  /* A flipped byte in the data: the weights' checksum. */
  FAILS(riftco_model_load(copy_flipped(bundle, dir, -5), &m), RIFTCO_STATUS_CHECKSUM);
  /* A huge header length. */
  FAILS(riftco_model_load(copy_flipped(bundle, dir, 6), &m), RIFTCO_STATUS_LIMIT);
  CHECK(m == NULL);
}

static void test_model_and_sessions(const char *bundle) {
  RiftcoModel *model = NULL;
  OK(riftco_model_load(bundle, &model));
  CHECK(model != NULL);
  RiftcoModelConfig cfg;
  OK(riftco_model_config(model, &cfg));
  CHECK(cfg.vocab_size == 260 && cfg.context_length == 16 && cfg.d_model == 16);
  CHECK(cfg.n_layers == 1 && cfg.n_heads == 2 && cfg.head_dim == 8);
  CHECK(cfg.source == 0 && cfg.weight_format == 0 && cfg.weight_bytes > 0);
  FAILS(riftco_model_config(model, NULL), RIFTCO_STATUS_NULL_HANDLE);
  FAILS(riftco_model_config(NULL, &cfg), RIFTCO_STATUS_NULL_HANDLE);

  /* Strings: the size query, a short buffer, the whole text. */
  size_t needed = 0;
  OK(riftco_model_artifact_id(model, NULL, 0, &needed));
  CHECK(needed == 65);
  char id[65];
  FAILS(riftco_model_artifact_id(model, id, 10, &needed), RIFTCO_STATUS_LIMIT);
  OK(riftco_model_artifact_id(model, id, sizeof id, NULL));
  CHECK(strlen(id) == 64);
  OK(riftco_model_tokenizer_state(model, NULL, 0, &needed));
  char *state = malloc(needed);
  OK(riftco_model_tokenizer_state(model, state, needed, NULL));
  CHECK(state[0] == '{' && strlen(state) + 1 == needed);
  free(state);

  size_t vocab = cfg.vocab_size;
  float *logits = malloc(vocab * sizeof(float));
  RiftcoSession *s = NULL;
  FAILS(riftco_session_create(NULL, &s), RIFTCO_STATUS_NULL_HANDLE);
  OK(riftco_session_create(model, &s));
  /* Wrong handles: a session where a model goes, a model where a session goes. */
  RiftcoSession *s2 = NULL;
  FAILS(riftco_session_create((const RiftcoModel *)s, &s2), RIFTCO_STATUS_WRONG_HANDLE);
  FAILS(riftco_session_step((RiftcoSession *)model, 1), RIFTCO_STATUS_WRONG_HANDLE);
  FAILS(riftco_model_free((RiftcoModel *)s), RIFTCO_STATUS_WRONG_HANDLE);
  int junk[8] = {0};
  FAILS(riftco_session_step((RiftcoSession *)junk, 1), RIFTCO_STATUS_WRONG_HANDLE);

  /* State and argument errors. */
  FAILS(riftco_session_logits(s, logits, vocab), RIFTCO_STATUS_STATE);
  int32_t prompt[5] = {72, 101, 108, 108, 111};
  FAILS(riftco_session_prefill(s, prompt, 0), RIFTCO_STATUS_INVALID_ARGUMENT);
  FAILS(riftco_session_prefill(s, NULL, 3), RIFTCO_STATUS_NULL_HANDLE);
  int32_t bad[2] = {1, 260};
  FAILS(riftco_session_prefill(s, bad, 2), RIFTCO_STATUS_INVALID_ARGUMENT);
  int32_t many[17];
  for (int i = 0; i < 17; i++) many[i] = i;
  FAILS(riftco_session_prefill(s, many, 17), RIFTCO_STATUS_LIMIT);
  FAILS(riftco_session_step(s, -1), RIFTCO_STATUS_INVALID_ARGUMENT);

  OK(riftco_session_prefill(s, prompt, 5));
  size_t len = 0;
  OK(riftco_session_length(s, &len));
  CHECK(len == 5);
  FAILS(riftco_session_logits(s, logits, vocab - 1), RIFTCO_STATUS_INVALID_ARGUMENT);
  FAILS(riftco_session_logits(s, NULL, vocab), RIFTCO_STATUS_NULL_HANDLE);
  OK(riftco_session_logits(s, logits, vocab));
  for (size_t i = 0; i < vocab; i++) CHECK(isfinite(logits[i]));

  /* Greedy sampling is the argmax. */
  RiftcoSamplingParams params;
  OK(riftco_sampling_params_default(&params));
  RiftcoSampler *greedy = NULL;
  OK(riftco_sampler_create(&params, &greedy));
  int32_t token = -1;
  OK(riftco_session_sample(s, greedy, &token));
  CHECK(token == argmax(logits, vocab));
  OK(riftco_sampler_draw(greedy, logits, vocab, &token));
  CHECK(token == argmax(logits, vocab));
  FAILS(riftco_session_sample(s, (RiftcoSampler *)s, &token), RIFTCO_STATUS_WRONG_HANDLE);
  FAILS(riftco_sampler_draw(greedy, logits, 0, &token), RIFTCO_STATUS_INVALID_ARGUMENT);

  /* Bad sampling parameters. */
  RiftcoSampler *bad_sampler = NULL;
  params.temperature = -1.0;
  FAILS(riftco_sampler_create(&params, &bad_sampler), RIFTCO_STATUS_INVALID_ARGUMENT);
  params.temperature = 1.0;
  params.top_p = 1.5;
  FAILS(riftco_sampler_create(&params, &bad_sampler), RIFTCO_STATUS_INVALID_ARGUMENT);
  params.top_p = 0.9;
  params.repetition_penalty = 0.0;
  FAILS(riftco_sampler_create(&params, &bad_sampler), RIFTCO_STATUS_INVALID_ARGUMENT);
  FAILS(riftco_sampler_create(NULL, &bad_sampler), RIFTCO_STATUS_NULL_HANDLE);
  CHECK(bad_sampler == NULL);

  /* Seeded sampling is reproducible. */
  params.repetition_penalty = 1.2;
  params.top_k = 50;
  params.seed = 42;
  RiftcoSampler *a = NULL, *b = NULL;
  OK(riftco_sampler_create(&params, &a));
  OK(riftco_sampler_create(&params, &b));
  OK(riftco_sampler_observe(a, prompt, 5));
  OK(riftco_sampler_observe(b, prompt, 5));
  for (int i = 0; i < 10; i++) {
    int32_t ta, tb;
    OK(riftco_sampler_draw(a, logits, vocab, &ta));
    OK(riftco_sampler_draw(b, logits, vocab, &tb));
    CHECK(ta == tb && ta >= 0 && ta < (int32_t)vocab);
    OK(riftco_sampler_accept(a, ta));
    OK(riftco_sampler_accept(b, tb));
  }

  /* Logit bias and the presence / frequency penalties. */
  int32_t bias_ids[2] = {7, 7};
  double biases[2] = {50.0, 100.0};
  OK(riftco_sampler_set_logit_bias(greedy, bias_ids, biases, 2));
  OK(riftco_sampler_draw(greedy, logits, vocab, &token));
  CHECK(token == 7);
  biases[1] = 101.0;
  FAILS(riftco_sampler_set_logit_bias(greedy, bias_ids, biases, 2), RIFTCO_STATUS_INVALID_ARGUMENT);
  bias_ids[0] = -1;
  FAILS(riftco_sampler_set_logit_bias(greedy, bias_ids, biases, 1), RIFTCO_STATUS_INVALID_ARGUMENT);
  bias_ids[0] = 5000;
  biases[0] = 1.0;
  OK(riftco_sampler_set_logit_bias(greedy, bias_ids, biases, 1));
  FAILS(riftco_sampler_draw(greedy, logits, vocab, &token), RIFTCO_STATUS_INVALID_ARGUMENT);
  OK(riftco_sampler_set_logit_bias(greedy, NULL, NULL, 0));
  RiftcoSamplingParams pen;
  OK(riftco_sampling_params_default(&pen));
  pen.presence_penalty = 2.5;
  FAILS(riftco_sampler_create(&pen, &bad_sampler), RIFTCO_STATUS_INVALID_ARGUMENT);
  pen.presence_penalty = 2.0;
  RiftcoSampler *penalized = NULL;
  OK(riftco_sampler_create(&pen, &penalized));
  int32_t first = -1, second = -1;
  OK(riftco_sampler_draw(penalized, logits, vocab, &first));
  OK(riftco_sampler_accept(penalized, first));
  OK(riftco_sampler_draw(penalized, logits, vocab, &second));
  CHECK(first == argmax(logits, vocab));
  OK(riftco_sampler_free(penalized));

  /* Steps up to and past the context (the window slides), then rollback. */
  for (int i = 0; i < 30; i++) {
    OK(riftco_session_sample(s, a, &token));
    OK(riftco_sampler_accept(a, token));
    OK(riftco_session_step(s, token));
  }
  uint64_t slides = 0;
  OK(riftco_session_slides(s, &slides));
  CHECK(slides >= 1);
  OK(riftco_session_length(s, &len));
  CHECK(len >= 1 && len <= 16);
  FAILS(riftco_session_rollback(s, len + 1), RIFTCO_STATUS_INVALID_ARGUMENT);
  OK(riftco_session_rollback(s, 1));
  FAILS(riftco_session_logits(s, logits, vocab), RIFTCO_STATUS_STATE);
  OK(riftco_session_reset(s));
  OK(riftco_session_length(s, &len));
  CHECK(len == 0);

  /* A batched step equals single steps. */
  RiftcoSession *batch[3] = {NULL, NULL, NULL}, *single[3] = {NULL, NULL, NULL};
  for (int j = 0; j < 3; j++) {
    OK(riftco_session_create(model, &batch[j]));
    OK(riftco_session_create(model, &single[j]));
    OK(riftco_session_prefill(batch[j], prompt, (size_t)(j + 2)));
    OK(riftco_session_prefill(single[j], prompt, (size_t)(j + 2)));
  }
  float *out = malloc(3 * vocab * sizeof(float));
  int32_t next[3] = {3, 30, 255};
  OK(riftco_session_step_batch(batch, next, 3, out));
  for (int j = 0; j < 3; j++) {
    OK(riftco_session_step(single[j], next[j]));
    OK(riftco_session_logits(single[j], logits, vocab));
    CHECK(memcmp(logits, out + (size_t)j * vocab, vocab * sizeof(float)) == 0);
  }
  OK(riftco_session_step_batch(batch, next, 3, NULL));
  RiftcoSession *twice[2] = {batch[0], batch[0]};
  FAILS(riftco_session_step_batch(twice, next, 2, NULL), RIFTCO_STATUS_INVALID_ARGUMENT);
  RiftcoSession *mixed[2] = {batch[0], (RiftcoSession *)greedy};
  FAILS(riftco_session_step_batch(mixed, next, 2, NULL), RIFTCO_STATUS_WRONG_HANDLE);
  FAILS(riftco_session_step_batch(batch, next, 0, NULL), RIFTCO_STATUS_INVALID_ARGUMENT);
  FAILS(riftco_session_step_batch(NULL, next, 2, NULL), RIFTCO_STATUS_NULL_HANDLE);

  size_t used = 0, total = 0;
  OK(riftco_model_cache_pages(model, &used, &total));
  CHECK(used >= 6 && total >= used);
  FAILS(riftco_model_cache_pages(model, NULL, &total), RIFTCO_STATUS_NULL_HANDLE);
  OK(riftco_session_free(single[2]));
  single[2] = NULL;
  size_t after = 0;
  OK(riftco_model_cache_pages(model, &after, &total));
  CHECK(after < used);
  /* Freeing the model first: its sessions keep it alive. */
  OK(riftco_model_free(model));
  OK(riftco_session_step(batch[0], 7));
  for (int j = 0; j < 3; j++) {
    OK(riftco_session_free(batch[j]));
    OK(riftco_session_free(single[j]));
  }
  OK(riftco_session_free(s));
  OK(riftco_sampler_free(a));
  OK(riftco_sampler_free(b));
  OK(riftco_sampler_free(greedy));
  free(out);
  free(logits);
}

static void test_tensors(void) {
  float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {1, 0, 0, 1, 1, 1};
  size_t sa[2] = {2, 3}, sb[2] = {3, 2};
  RiftcoTensor *ta = NULL, *tb = NULL, *tc = NULL, *bad = NULL;
  OK(riftco_tensor_create(a, RIFTCO_DTYPE_F32, sa, 2, &ta));
  OK(riftco_tensor_create(b, RIFTCO_DTYPE_F32, sb, 2, &tb));
  OK(riftco_tensor_matmul(ta, tb, &tc));
  size_t shape[4], ndim = 0;
  OK(riftco_tensor_shape(tc, shape, 4, &ndim));
  CHECK(ndim == 2 && shape[0] == 2 && shape[1] == 2);
  float c[4];
  OK(riftco_tensor_read(tc, RIFTCO_DTYPE_F32, c, sizeof c));
  CHECK(c[0] == 4 && c[1] == 5 && c[2] == 10 && c[3] == 11);
  FAILS(riftco_tensor_read(tc, RIFTCO_DTYPE_F32, c, 3), RIFTCO_STATUS_INVALID_ARGUMENT);
  FAILS(riftco_tensor_matmul(ta, ta, &bad), RIFTCO_STATUS_INVALID_ARGUMENT);
  FAILS(riftco_tensor_add(ta, tb, &bad), RIFTCO_STATUS_INVALID_ARGUMENT);
  FAILS(riftco_tensor_create(a, 9, sa, 2, &bad), RIFTCO_STATUS_INVALID_ARGUMENT);
  FAILS(riftco_tensor_create(NULL, RIFTCO_DTYPE_F32, sa, 2, &bad), RIFTCO_STATUS_NULL_HANDLE);
  FAILS(riftco_tensor_softmax((RiftcoTensor *)&a[0], 0, &bad), RIFTCO_STATUS_WRONG_HANDLE);
  CHECK(bad == NULL);
  RiftcoTensor *outs[6] = {NULL, NULL, NULL, NULL, NULL, NULL};
  OK(riftco_tensor_add(ta, ta, &outs[0]));
  OK(riftco_tensor_mul(ta, ta, &outs[1]));
  OK(riftco_tensor_softmax(ta, 0, &outs[2]));
  OK(riftco_tensor_layer_norm(ta, NULL, NULL, 1e-5f, &outs[3]));
  OK(riftco_tensor_rms_norm(ta, NULL, 1e-6f, &outs[4]));
  size_t sq[3] = {2, 1, 3};
  RiftcoTensor *q = NULL;
  OK(riftco_tensor_create(a, RIFTCO_DTYPE_F32, sq, 3, &q));
  OK(riftco_tensor_attention(q, q, q, 1, 0, 0.0f, &outs[5]));
  uint16_t half[6];
  OK(riftco_tensor_read(ta, RIFTCO_DTYPE_F16, half, sizeof half));
  CHECK(half[0] == 0x3c00 && half[1] == 0x4000);
  for (int i = 0; i < 6; i++) OK(riftco_tensor_free(outs[i]));
  OK(riftco_tensor_free(q));
  OK(riftco_tensor_free(ta));
  OK(riftco_tensor_free(tb));
  OK(riftco_tensor_free(tc));
}

/* Sessions of one model stepped from several threads at once equal the same steps run
 * one after another (the model is shared; each session is used by one thread). */
#define THREADS 4
#define STEPS 24
struct job {
  const RiftcoModel *model;
  int seed;
  float last[260];
  int ok;
};

static void *run_job(void *arg) {
  struct job *j = arg;
  RiftcoSession *s = NULL;
  j->ok = riftco_session_create(j->model, &s) == RIFTCO_STATUS_OK;
  int32_t first = (int32_t)(j->seed * 31 % 260);
  j->ok &= riftco_session_prefill(s, &first, 1) == RIFTCO_STATUS_OK;
  for (int i = 0; i < STEPS; i++)
    j->ok &= riftco_session_step(s, (int32_t)((j->seed * 7 + i * 13) % 260)) == RIFTCO_STATUS_OK;
  j->ok &= riftco_session_logits(s, j->last, 260) == RIFTCO_STATUS_OK;
  j->ok &= riftco_session_free(s) == RIFTCO_STATUS_OK;
  return NULL;
}

static void test_threads(const char *bundle) {
  RiftcoModel *model = NULL;
  OK(riftco_model_load(bundle, &model));
  struct job alone[THREADS], together[THREADS];
  pthread_t threads[THREADS];
  for (int i = 0; i < THREADS; i++) {
    alone[i] = (struct job){.model = model, .seed = i + 1};
    together[i] = alone[i];
    run_job(&alone[i]);
  }
  for (int i = 0; i < THREADS; i++) CHECK(pthread_create(&threads[i], NULL, run_job, &together[i]) == 0);
  for (int i = 0; i < THREADS; i++) {
    CHECK(pthread_join(threads[i], NULL) == 0);
    CHECK(alone[i].ok && together[i].ok);
    CHECK(memcmp(alone[i].last, together[i].last, sizeof alone[i].last) == 0);
  }
  /* The last error is per thread: a failure here leaves the other threads' alone. */
  OK(riftco_model_free(model));
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s BUNDLE.rift SCRATCH_DIR\n", argv[0]);
    return 2;
  }
  test_version_and_errors();
  test_hostile_files(argv[1], argv[2]);
  test_model_and_sessions(argv[1]);
  test_tensors();
  test_threads(argv[1]);
  if (failures) {
    fprintf(stderr, "%d checks failed\n", failures);
    return 1;
  }
  printf("test_capi: all checks passed\n");
  return 0;
}
