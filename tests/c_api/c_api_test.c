/* The C API from a program compiled as C: a full inference round trip, and misuse that must
 * come back as statuses with messages. Exits non-zero on the first failed check. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "volt/volt.h"

static int failures = 0;
#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                              \
    }                                                                          \
  } while (0)
#define CHECK_MSG(fragment) CHECK(strstr(volt_last_error(), fragment) != NULL)

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: c_api_test MODEL.onnx\n");
    return 2;
  }
  CHECK(strlen(volt_version()) > 0);

  volt_options* opts = volt_options_create();
  CHECK(opts != NULL);
  CHECK(volt_options_set(opts, "threads", "2") == VOLT_OK);
  CHECK(volt_options_set(opts, "threads", "many") == VOLT_ERR_INVALID_ARGUMENT);
  CHECK_MSG("threads");
  CHECK(volt_options_set(opts, "colour", "blue") == VOLT_ERR_INVALID_ARGUMENT);
  CHECK_MSG("colour");
  CHECK(volt_options_set(NULL, "threads", "1") == VOLT_ERR_INVALID_ARGUMENT);

  volt_session* s = NULL;
  CHECK(volt_session_create("/nonexistent/model.onnx", opts, &s) == VOLT_ERR_IO);
  CHECK(s == NULL);
  CHECK_MSG("nonexistent");
  CHECK(volt_session_create(NULL, opts, &s) == VOLT_ERR_INVALID_ARGUMENT);
  CHECK(volt_session_create_from_memory("garbage", 7, NULL, &s) == VOLT_ERR_INVALID_MODEL);
  CHECK(volt_session_create(argv[1], opts, &s) == VOLT_OK);
  volt_options_free(opts);
  if (!s) return 1;
  CHECK(volt_session_input_count(s) == 1);
  CHECK(strcmp(volt_session_input_name(s, 0), "x") == 0);
  CHECK(volt_session_output_count(s) == 1);
  CHECK(strcmp(volt_session_output_name(s, 0), "logits") == 0);
  CHECK(volt_session_input_name(s, 5) == NULL);

  int64_t shape[2] = {2, 784};
  float* data = calloc(2 * 784, sizeof(float));
  for (int i = 0; i < 2 * 784; ++i) data[i] = (float)(i % 17) / 17.0f;
  volt_tensor* x = NULL;
  CHECK(volt_tensor_create(VOLT_FLOAT, shape, 2, data, &x) == VOLT_OK);
  CHECK(volt_tensor_rank(x) == 2 && volt_tensor_shape(x)[1] == 784 &&
        volt_tensor_dtype(x) == VOLT_FLOAT);
  const char* names[1] = {"x"};
  const volt_tensor* inputs[1] = {x};
  volt_tensor* out[1] = {NULL};
  CHECK(volt_session_run(s, 1, names, inputs, 1, NULL, out) == VOLT_OK);
  CHECK(out[0] != NULL && volt_tensor_shape(out[0])[0] == 2 && volt_tensor_shape(out[0])[1] == 10);
  volt_tensor_free(out[0]);

  /* Misuse. */
  const char* bad_names[1] = {"nope"};
  CHECK(volt_session_run(s, 1, bad_names, inputs, 1, NULL, out) == VOLT_ERR_INVALID_ARGUMENT);
  CHECK_MSG("nope");
  CHECK(out[0] == NULL);
  CHECK(volt_session_run(s, 0, NULL, NULL, 1, NULL, out) == VOLT_ERR_INVALID_ARGUMENT);
  CHECK_MSG("missing");
  int64_t wrong_shape[2] = {2, 783};
  volt_tensor* bad = NULL;
  CHECK(volt_tensor_create(VOLT_FLOAT, wrong_shape, 2, data, &bad) == VOLT_OK);
  const volt_tensor* bad_inputs[1] = {bad};
  CHECK(volt_session_run(s, 1, names, bad_inputs, 1, NULL, out) == VOLT_ERR_INVALID_ARGUMENT);
  CHECK_MSG("783");
  volt_tensor_free(bad);
  int64_t ids[2] = {1, 2};
  int64_t id_shape[2] = {1, 2};
  CHECK(volt_tensor_create(VOLT_INT64, id_shape, 2, ids, &bad) == VOLT_OK);
  bad_inputs[0] = bad;
  CHECK(volt_session_run(s, 1, names, bad_inputs, 1, NULL, out) == VOLT_ERR_INVALID_ARGUMENT);
  CHECK_MSG("int64");
  volt_tensor_free(bad);
  CHECK(volt_session_run(NULL, 1, names, inputs, 1, NULL, out) == VOLT_ERR_INVALID_ARGUMENT);
  CHECK(volt_session_run(s, 1, names, inputs, 3, NULL, out) == VOLT_ERR_INVALID_ARGUMENT);
  CHECK(volt_tensor_create((volt_dtype)99, shape, 2, data, &bad) == VOLT_ERR_INVALID_ARGUMENT);
  CHECK(volt_tensor_create(VOLT_FLOAT, shape, 2, NULL, &bad) == VOLT_ERR_INVALID_ARGUMENT);
  int64_t neg[1] = {-4};
  CHECK(volt_tensor_create(VOLT_FLOAT, neg, 1, data, &bad) == VOLT_ERR_INVALID_ARGUMENT);
  CHECK_MSG("negative");

  /* A CSR input: the same logits as its dense form (the sparse product sums in another
   * order: 1e-5 relative). */
  {
    int64_t off[3] = {0, 3, 5};
    int64_t col[5] = {700, 3, 40, 0, 783};
    float val[5] = {0.5f, -1.0f, 2.0f, 0.25f, 1.5f};
    float* dense = calloc(2 * 784, sizeof(float));
    for (int r = 0; r < 2; ++r)
      for (int64_t i = off[r]; i < off[r + 1]; ++i) dense[r * 784 + col[i]] += val[i];
    volt_tensor* csr = NULL;
    volt_tensor* dx = NULL;
    CHECK(volt_tensor_create_csr(VOLT_FLOAT, 2, 784, 5, off, col, val, &csr) == VOLT_OK);
    CHECK(volt_tensor_is_csr(csr) && !volt_tensor_is_csr(x) && volt_tensor_csr_nnz(csr) == 5);
    CHECK(volt_tensor_rank(csr) == 2 && volt_tensor_shape(csr)[1] == 784);
    CHECK(volt_tensor_csr_row_offsets(csr)[2] == 5 && volt_tensor_csr_col_indices(csr)[0] == 700);
    CHECK(((const float*)volt_tensor_data(csr))[4] == 1.5f);
    CHECK(volt_tensor_create(VOLT_FLOAT, shape, 2, dense, &dx) == VOLT_OK);
    const volt_tensor* sparse_in[1] = {csr};
    const volt_tensor* dense_in[1] = {dx};
    volt_tensor* sparse_out[1] = {NULL};
    volt_tensor* dense_out[1] = {NULL};
    CHECK(volt_session_run(s, 1, names, sparse_in, 1, NULL, sparse_out) == VOLT_OK);
    CHECK(volt_session_run(s, 1, names, dense_in, 1, NULL, dense_out) == VOLT_OK);
    if (sparse_out[0] && dense_out[0]) {
      const float* a = volt_tensor_data(sparse_out[0]);
      const float* b = volt_tensor_data(dense_out[0]);
      for (int i = 0; i < 20; ++i) CHECK(fabsf(a[i] - b[i]) <= 1e-5f * (1.0f + fabsf(b[i])));
    }
    volt_tensor_free(sparse_out[0]);
    volt_tensor_free(dense_out[0]);
    volt_tensor_free(csr);
    volt_tensor_free(dx);
    free(dense);
    /* Bad CSR: each says what is wrong. */
    volt_tensor* badcsr = NULL;
    int64_t decreasing[3] = {0, 3, 2};
    CHECK(volt_tensor_create_csr(VOLT_FLOAT, 2, 784, 5, decreasing, col, val, &badcsr) ==
          VOLT_ERR_INVALID_ARGUMENT);
    CHECK_MSG("decrease");
    CHECK(badcsr == NULL);
    int64_t short_end[3] = {0, 3, 4};
    CHECK(volt_tensor_create_csr(VOLT_FLOAT, 2, 784, 5, short_end, col, val, &badcsr) ==
          VOLT_ERR_INVALID_ARGUMENT);
    CHECK_MSG("nnz");
    CHECK(volt_tensor_create_csr(VOLT_FLOAT, 2, 700, 5, off, col, val, &badcsr) ==
          VOLT_ERR_INVALID_ARGUMENT);
    CHECK_MSG("column index 700");
    CHECK(volt_tensor_create_csr(VOLT_FLOAT, -2, 784, 5, off, col, val, &badcsr) ==
          VOLT_ERR_INVALID_ARGUMENT);
    CHECK_MSG("negative");
    CHECK(volt_tensor_create_csr(VOLT_FLOAT, 2, 784, 5, NULL, col, val, &badcsr) ==
          VOLT_ERR_INVALID_ARGUMENT);
    CHECK(volt_tensor_create_csr(VOLT_FLOAT, 2, 784, 5, off, col, val, NULL) ==
          VOLT_ERR_INVALID_ARGUMENT);
    CHECK(volt_tensor_is_csr(NULL) == 0 && volt_tensor_csr_row_offsets(x) == NULL);
  }

  /* Run options: a deadline, cancellation, and their misuse. */
  volt_run_options* ro = volt_run_options_create();
  CHECK(ro != NULL);
  CHECK(volt_run_options_set(ro, "timeout_ms", "soon") == VOLT_ERR_INVALID_ARGUMENT);
  CHECK_MSG("timeout_ms");
  CHECK(volt_run_options_set(ro, "priority", "1") == VOLT_ERR_INVALID_ARGUMENT);
  CHECK_MSG("priority");
  CHECK(volt_run_options_set(NULL, "timeout_ms", "1") == VOLT_ERR_INVALID_ARGUMENT);
  CHECK(volt_run_options_set(ro, "timeout_ms", "60000") == VOLT_OK);
  CHECK(volt_session_run_with_options(s, ro, 1, names, inputs, 1, NULL, out) == VOLT_OK);
  volt_tensor_free(out[0]);
  out[0] = NULL;
  volt_run_options_cancel(ro);
  CHECK(volt_session_run_with_options(s, ro, 1, names, inputs, 1, NULL, out) == VOLT_ERR_CANCELLED);
  CHECK_MSG("cancelled");
  CHECK(out[0] == NULL);
  volt_run_options_reset(ro);
  CHECK(volt_session_run_with_options(s, ro, 1, names, inputs, 1, NULL, out) == VOLT_OK);
  volt_tensor_free(out[0]);
  out[0] = NULL;
  CHECK(volt_session_run_with_options(s, NULL, 1, names, inputs, 1, NULL, out) == VOLT_OK);
  volt_tensor_free(out[0]);
  out[0] = NULL;
  volt_run_options_cancel(NULL);
  volt_run_options_free(ro);

  /* A memory limit the run cannot fit in: an error before allocating, and the session stays
   * usable. */
  volt_options* small = volt_options_create();
  CHECK(volt_options_set(small, "memory_limit", "1024") == VOLT_OK);
  CHECK(volt_options_set(small, "memory_limit", "-5") == VOLT_ERR_INVALID_ARGUMENT);
  CHECK(volt_options_set(small, "plan_cache_size", "0") == VOLT_ERR_INVALID_ARGUMENT);
  CHECK(volt_options_set(small, "plan_cache_size", "4") == VOLT_OK);
  CHECK(volt_options_set(small, "winograd", "maybe") == VOLT_ERR_INVALID_ARGUMENT);
  CHECK(volt_options_set(small, "winograd", "off") == VOLT_OK);
  volt_session* limited = NULL;
  CHECK(volt_session_create(argv[1], small, &limited) == VOLT_OK);
  volt_options_free(small);
  CHECK(volt_session_run(limited, 1, names, inputs, 1, NULL, out) == VOLT_ERR_OUT_OF_MEMORY);
  CHECK_MSG("memory limit");
  volt_session_free(limited);

  volt_tensor_free(x);
  volt_tensor_free(NULL);
  volt_session_free(s);
  volt_session_free(NULL);
  free(data);
  if (failures == 0) printf("c_api: all checks passed\n");
  return failures == 0 ? 0 : 1;
}
