// hello: greedy continuation of token ids from C++, RAII over libriftco's handles.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>
#include "riftco.h"

template <class T> using Owned = std::unique_ptr<T, RiftcoStatus (*)(T *)>;
static void ok(RiftcoStatus s) { if (s) { std::fprintf(stderr, "%s\n", riftco_last_error()); std::exit(1); } }

int main(int argc, char **argv) {
  if (argc < 3) { std::fprintf(stderr, "usage: %s MODEL ID...\n", argv[0]); return 2; }
  RiftcoModel *m; ok(riftco_model_load(argv[1], &m)); Owned<RiftcoModel> model(m, riftco_model_free);
  RiftcoSession *s; ok(riftco_session_create(m, &s)); Owned<RiftcoSession> session(s, riftco_session_free);
  RiftcoSamplingParams p; ok(riftco_sampling_params_default(&p));
  RiftcoSampler *g; ok(riftco_sampler_create(&p, &g)); Owned<RiftcoSampler> greedy(g, riftco_sampler_free);
  std::vector<int32_t> ids;
  for (int i = 2; i < argc; i++) ids.push_back(std::atoi(argv[i]));
  ok(riftco_session_prefill(s, ids.data(), ids.size()));
  for (int t = 0; t < 16; t++) { int32_t next; ok(riftco_session_sample(s, g, &next)); std::printf("%d ", next); ok(riftco_session_step(s, next)); }
  std::printf("\n");
}
