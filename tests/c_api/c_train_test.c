/* Fine-tuning through the C API, from a program compiled as C: options, steps, evaluation,
 * checkpoint round trip, export and reload, and misuse (NULL handles, unknown options, wrong
 * shapes or dtypes, a missing label), each checked for its status and message. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "volt/volt.h"

static int failures = 0;
#define CHECK(cond)                                                                            \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      fprintf(stderr, "%s:%d: check failed: %s (last error: %s)\n", __FILE__, __LINE__, #cond, \
              volt_last_error());                                                              \
      ++failures;                                                                              \
    }                                                                                          \
  } while (0)
#define CHECK_MSG(fragment) CHECK(strstr(volt_last_error(), fragment) != NULL)

enum { N = 32, F = 784 };

/* Two well separated classes (0 and 1) as a tiny synthetic task. */
static void make_batch(float* x, int64_t* y, unsigned seed) {
  srand(seed);
  for (int i = 0; i < N; ++i) {
    y[i] = i % 2;
    for (int j = 0; j < F; ++j)
      x[i * F + j] = (float)rand() / (float)RAND_MAX * 0.2f +
                     (y[i] ? (j < F / 2 ? 0.8f : 0.0f) : (j < F / 2 ? 0.0f : 0.8f));
  }
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: c_train_test MODEL.onnx SCRATCH_DIR\n");
    return 2;
  }
  char ckpt[4096], exported[4096];
  snprintf(ckpt, sizeof ckpt, "%s/c_train.ckpt", argv[2]);
  snprintf(exported, sizeof exported, "%s/c_tuned.onnx", argv[2]);

  volt_train_options* o = volt_train_options_create();
  CHECK(o != NULL);
  CHECK(volt_train_options_set(o, "optimizer", "adam") == VOLT_OK);
  CHECK(volt_train_options_set(o, "learning_rate", "0.001") == VOLT_OK);
  CHECK(volt_train_options_set(o, "loss", "cross_entropy") == VOLT_OK);
  CHECK(volt_train_options_set(o, "optimiser", "adam") == VOLT_ERR_INVALID_ARGUMENT);
  CHECK_MSG("optimiser");
  CHECK(volt_train_options_set(o, "beta1", "1.5") == VOLT_ERR_INVALID_ARGUMENT);
  CHECK_MSG("beta1");
  CHECK(volt_train_options_set(NULL, "loss", "mse") == VOLT_ERR_INVALID_ARGUMENT);

  volt_trainer* t = NULL;
  CHECK(volt_trainer_create("/nonexistent.onnx", o, &t) == VOLT_ERR_IO);
  CHECK(t == NULL);
  CHECK(volt_trainer_create(argv[1], o, &t) == VOLT_OK);
  volt_train_options_free(o);
  if (!t) return 1;

  float* x = malloc(sizeof(float) * N * F);
  int64_t y[N];
  make_batch(x, y, 1);
  const int64_t xs[2] = {N, F}, ys[1] = {N};
  volt_tensor *xt = NULL, *yt = NULL;
  CHECK(volt_tensor_create(VOLT_FLOAT, xs, 2, x, &xt) == VOLT_OK);
  CHECK(volt_tensor_create(VOLT_INT64, ys, 1, y, &yt) == VOLT_OK);
  const char* names[2] = {"x", "label"};
  const volt_tensor* batch[2] = {xt, yt};

  float first = 0, loss = 0;
  CHECK(volt_trainer_evaluate(t, 2, names, batch, &first) == VOLT_OK);
  for (int i = 0; i < 20; ++i)
    CHECK(volt_trainer_step(t, 2, names, batch, i == 19 ? &loss : NULL) == VOLT_OK);
  CHECK(isfinite(loss) && loss < first * 0.5f);

  /* The same batch as a CSR matrix trains too, to the same loss as the dense batch. */
  {
    int64_t* off = malloc(sizeof(int64_t) * (N + 1));
    int64_t* col = malloc(sizeof(int64_t) * N * F);
    float* val = malloc(sizeof(float) * N * F);
    int64_t nnz = 0;
    off[0] = 0;
    for (int64_t r = 0; r < N; ++r) {
      for (int64_t c = 0; c < F; ++c)
        if (x[r * F + c] != 0) {
          col[nnz] = c;
          val[nnz++] = x[r * F + c];
        }
      off[r + 1] = nnz;
    }
    volt_tensor* csr = NULL;
    CHECK(volt_tensor_create_csr(VOLT_FLOAT, N, F, nnz, off, col, val, &csr) == VOLT_OK);
    const volt_tensor* sparse_batch[2] = {csr, yt};
    float dense_loss = 0, sparse_loss = 0;
    CHECK(volt_trainer_evaluate(t, 2, names, batch, &dense_loss) == VOLT_OK);
    CHECK(volt_trainer_evaluate(t, 2, names, sparse_batch, &sparse_loss) == VOLT_OK);
    CHECK(fabsf(dense_loss - sparse_loss) <= 1e-5f * fabsf(dense_loss));
    CHECK(volt_trainer_step(t, 2, names, sparse_batch, &sparse_loss) == VOLT_OK);
    CHECK(isfinite(sparse_loss) && fabsf(sparse_loss - dense_loss) <= 1e-5f * fabsf(dense_loss));
    volt_tensor_free(csr);
    free(off);
    free(col);
    free(val);
  }
  CHECK(volt_trainer_set_learning_rate(t, 0.0005f) == VOLT_OK);

  /* fp32 has no loss scaling; mixed_fp16 starts at 2^16 and trains the same batch. */
  {
    float scale = 0;
    int64_t skipped = -1;
    CHECK(volt_trainer_loss_scale(t, &scale, &skipped) == VOLT_OK);
    CHECK(scale == 1.0f && skipped == 0);
    volt_train_options* mo = volt_train_options_create();
    CHECK(volt_train_options_set(mo, "precision", "mixed_fp16") == VOLT_OK);
    CHECK(volt_train_options_set(mo, "learning_rate", "0.01") == VOLT_OK);
    volt_trainer* mixed = NULL;
    CHECK(volt_trainer_create(argv[1], mo, &mixed) == VOLT_OK);
    CHECK(volt_trainer_loss_scale(mixed, &scale, NULL) == VOLT_OK && scale == 65536.0f);
    float mixed_first = 0, mixed_last = 0;
    for (int i = 0; i < 10; ++i)
      CHECK(volt_trainer_step(mixed, 2, names, batch, i == 0 ? &mixed_first : &mixed_last) ==
            VOLT_OK);
    CHECK(isfinite(mixed_last) && mixed_last < mixed_first);
    CHECK(volt_trainer_loss_scale(NULL, &scale, NULL) == VOLT_ERR_INVALID_ARGUMENT);
    volt_trainer_free(mixed);
    volt_train_options_free(mo);
  }

  /* Checkpoint round trip: a second trainer resumes where the first was. */
  CHECK(volt_trainer_save_checkpoint(t, ckpt) == VOLT_OK);
  volt_trainer* t2 = NULL;
  CHECK(volt_trainer_create(argv[1], NULL, &t2) == VOLT_OK);
  CHECK(volt_trainer_load_checkpoint(t2, ckpt) ==
        VOLT_ERR_INVALID_ARGUMENT); /* sgd trainer, adam checkpoint */
  CHECK_MSG("optimizer");
  volt_trainer_free(t2);

  /* Export, reload as a session, compare with the trainer's evaluation outputs. */
  CHECK(volt_trainer_export(t, exported) == VOLT_OK);
  volt_session* s = NULL;
  CHECK(volt_session_create(exported, NULL, &s) == VOLT_OK);
  volt_tensor *from_session = NULL, *from_trainer = NULL;
  const char* xname[1] = {"x"};
  const volt_tensor* xonly[1] = {xt};
  CHECK(volt_session_run(s, 1, xname, xonly, 1, NULL, &from_session) == VOLT_OK);
  CHECK(volt_trainer_predict(t, 1, xname, xonly, 1, &from_trainer) == VOLT_OK);
  if (from_session && from_trainer)
    CHECK(memcmp(volt_tensor_data(from_session), volt_tensor_data(from_trainer),
                 sizeof(float) * N * 10) == 0);
  volt_tensor_free(from_session);
  volt_tensor_free(from_trainer);
  volt_session_free(s);

  /* Misuse. */
  CHECK(volt_trainer_step(NULL, 2, names, batch, &loss) == VOLT_ERR_INVALID_ARGUMENT);
  CHECK(volt_trainer_step(t, 1, xname, xonly, &loss) == VOLT_ERR_INVALID_ARGUMENT);
  CHECK_MSG("label");
  const volt_tensor* swapped[2] = {yt, xt};
  CHECK(volt_trainer_step(t, 2, names, swapped, &loss) == VOLT_ERR_INVALID_ARGUMENT);
  const int64_t bad_shape[2] = {N, F - 1};
  volt_tensor* bad = NULL;
  CHECK(volt_tensor_create(VOLT_FLOAT, bad_shape, 2, x, &bad) == VOLT_OK);
  const volt_tensor* bad_batch[2] = {bad, yt};
  CHECK(volt_trainer_step(t, 2, names, bad_batch, &loss) == VOLT_ERR_INVALID_ARGUMENT);
  CHECK_MSG("783");
  volt_tensor_free(bad);
  CHECK(volt_trainer_evaluate(t, 2, names, batch, NULL) == VOLT_ERR_INVALID_ARGUMENT);
  CHECK(volt_trainer_set_learning_rate(t, -1.0f) == VOLT_ERR_INVALID_ARGUMENT);
  CHECK(volt_trainer_save_checkpoint(t, "/nonexistent-dir/x.ckpt") == VOLT_ERR_IO);
  CHECK(volt_trainer_load_checkpoint(t, "/nonexistent.ckpt") == VOLT_ERR_IO);
  CHECK(volt_trainer_export(NULL, exported) == VOLT_ERR_INVALID_ARGUMENT);
  volt_trainer_free(NULL);

  volt_tensor_free(xt);
  volt_tensor_free(yt);
  volt_trainer_free(t);
  free(x);
  unlink(ckpt);
  unlink(exported);
  if (failures == 0) printf("c_train: all checks passed\n");
  return failures == 0 ? 0 : 1;
}
