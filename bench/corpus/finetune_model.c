/* Fine-tunes one model through the C API, as a user would with default options: a trainer
 * (mse on the first output, Adam at the given rate), a target that is the model's own prediction
 * perturbed, 10 steps on one fixed batch, whose losses must go down (the evaluation loss before
 * and after is reported too); then the tuned model exported, and the trainer's prediction written
 * for the caller to compare with ONNX Runtime's on the export. Prints one JSON line; exits 1 at the
 * first failure, naming it.
 *
 *   volt_finetune MODEL OUT_DIR LEARNING_RATE NAME:DTYPE:D1xD2x...:FILE.bin...
 *
 * DTYPE is volt_dtype's number; FILE.bin holds the raw elements (bench/corpus/finetune_corpus.py
 * writes them). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "volt/volt.h"

enum { kSteps = 10, kMaxInputs = 16 };

static void json_string(const char* s) {
  putchar('"');
  for (; *s; ++s) {
    if (*s == '"' || *s == '\\')
      printf("\\%c", *s);
    else if ((unsigned char)*s < 0x20)
      putchar(' ');
    else
      putchar(*s);
  }
  putchar('"');
}

static int failed(const char* stage) {
  printf("{\"ok\": false, \"stage\": \"%s\", \"error\": ", stage);
  json_string(volt_last_error());
  printf("}\n");
  return 1;
}

static size_t element_size(volt_dtype t) {
  switch (t) {
    case VOLT_FLOAT:
    case VOLT_INT32:
    case VOLT_UINT32:
      return 4;
    case VOLT_DOUBLE:
    case VOLT_INT64:
    case VOLT_UINT64:
      return 8;
    case VOLT_FLOAT16:
    case VOLT_BFLOAT16:
    case VOLT_INT16:
    case VOLT_UINT16:
      return 2;
    default:
      return 1;
  }
}

/* NAME:DTYPE:D1xD2:FILE into a tensor; the name is cut out of `spec` in place. */
static volt_tensor* read_input(char* spec, const char** name) {
  char* fields[4];
  for (int i = 0; i < 3; ++i) {
    fields[i] = spec;
    spec = strchr(spec, ':');
    if (!spec) return NULL;
    *spec++ = '\0';
  }
  fields[3] = spec;
  *name = fields[0];
  const volt_dtype dtype = (volt_dtype)atoi(fields[1]);
  int64_t shape[8];
  size_t rank = 0;
  int64_t numel = 1;
  for (char* d = fields[2]; *d && rank < 8;) {
    shape[rank] = strtoll(d, &d, 10);
    numel *= shape[rank++];
    if (*d == 'x') ++d;
  }
  FILE* f = fopen(fields[3], "rb");
  if (!f) return NULL;
  const size_t bytes = (size_t)numel * element_size(dtype);
  void* data = malloc(bytes ? bytes : 1);
  const size_t got = fread(data, 1, bytes, f);
  fclose(f);
  volt_tensor* t = NULL;
  if (got == bytes) volt_tensor_create(dtype, shape, rank, data, &t);
  free(data);
  return t;
}

static float half_to_float(uint16_t h) {
  const uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 31, man = h & 1023;
  uint32_t bits;
  if (exp == 0) {
    const float v = ldexpf((float)man, -24);
    return sign ? -v : v;
  }
  bits = exp == 31 ? sign | 0x7f800000u | (man << 13) : sign | ((exp + 112) << 23) | (man << 13);
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

static uint16_t float_to_half(float f) {
  uint32_t bits;
  memcpy(&bits, &f, 4);
  const uint16_t sign = (uint16_t)((bits >> 16) & 0x8000);
  const int exp = (int)((bits >> 23) & 255) - 127 + 15;
  const uint32_t man = bits & 0x7fffff;
  if (exp >= 31) return sign | 0x7c00;
  if (exp <= 0) return sign; /* tiny targets flush to zero: fine for a perturbation */
  return (uint16_t)(sign | (exp << 10) | ((man + 0x1000) >> 13));
}

/* The target: the prediction moved by about 10% of its magnitude (plus 0.01) up or down, by a
 * fixed pseudo-random sign per element. */
static volt_tensor* perturbed(const volt_tensor* p) {
  const int64_t n = volt_tensor_numel(p);
  const volt_dtype t = volt_tensor_dtype(p);
  if (t != VOLT_FLOAT && t != VOLT_FLOAT16 && t != VOLT_DOUBLE) return NULL;
  void* data = malloc((size_t)(n ? n : 1) * element_size(t));
  uint32_t state = 12345;
  for (int64_t i = 0; i < n; ++i) {
    state = state * 1664525u + 1013904223u;
    const double s = (state >> 31) ? 1.0 : -1.0;
    double v = t == VOLT_FLOAT    ? ((const float*)volt_tensor_data(p))[i]
               : t == VOLT_DOUBLE ? ((const double*)volt_tensor_data(p))[i]
                                  : half_to_float(((const uint16_t*)volt_tensor_data(p))[i]);
    if (!isfinite(v)) v = 0;
    v += s * (0.1 * fabs(v) + 0.01);
    if (t == VOLT_FLOAT)
      ((float*)data)[i] = (float)v;
    else if (t == VOLT_DOUBLE)
      ((double*)data)[i] = v;
    else
      ((uint16_t*)data)[i] = float_to_half((float)v);
  }
  volt_tensor* out = NULL;
  volt_tensor_create(t, volt_tensor_shape(p), volt_tensor_rank(p), data, &out);
  free(data);
  return out;
}

int main(int argc, char** argv) {
  if (argc < 5 || argc - 4 > kMaxInputs - 1) {
    fprintf(stderr, "usage: %s MODEL OUT_DIR LEARNING_RATE NAME:DTYPE:D1xD2:FILE.bin...\n",
            argv[0]);
    return 2;
  }
  const char* names[kMaxInputs];
  const volt_tensor* inputs[kMaxInputs];
  size_t n = 0;
  for (int i = 4; i < argc; ++i, ++n) {
    volt_tensor* t = read_input(argv[i], &names[n]);
    if (!t) {
      printf("{\"ok\": false, \"stage\": \"input\", \"error\": ");
      json_string(argv[i]);
      printf("}\n");
      return 1;
    }
    inputs[n] = t;
  }
  volt_train_options* opts = volt_train_options_create();
  if (volt_train_options_set(opts, "loss", "mse") ||
      volt_train_options_set(opts, "optimizer", "adam") ||
      volt_train_options_set(opts, "learning_rate", argv[3]) ||
      volt_train_options_set(opts, "threads", "2"))
    return failed("options");
  volt_trainer* tr = NULL;
  if (volt_trainer_create(argv[1], opts, &tr)) return failed("create");
  volt_train_options_free(opts);

  /* predict gives every output: a session on the same file says how many there are. */
  volt_session* probe = NULL;
  if (volt_session_create(argv[1], NULL, &probe)) return failed("session");
  const size_t outputs = volt_session_output_count(probe);
  volt_session_free(probe);
  volt_tensor** prediction = calloc(outputs, sizeof(volt_tensor*));
  volt_tensor** tuned = calloc(outputs, sizeof(volt_tensor*));
  if (volt_trainer_predict(tr, n, names, inputs, outputs, prediction)) return failed("predict");
  volt_tensor* label = perturbed(prediction[0]);
  if (!label) {
    printf("{\"ok\": false, \"stage\": \"label\", \"error\": \"the first output is not float\"}\n");
    return 1;
  }
  names[n] = "label";
  inputs[n] = label;
  float before = 0, after = 0, loss = 0, first_step = 0;
  if (volt_trainer_evaluate(tr, n + 1, names, inputs, &before)) return failed("evaluate");
  for (int s = 0; s < kSteps; ++s) {
    if (volt_trainer_step(tr, n + 1, names, inputs, &loss)) return failed("step");
    if (s == 0) first_step = loss;
  }
  if (volt_trainer_evaluate(tr, n + 1, names, inputs, &after)) return failed("evaluate");

  char path[4096];
  snprintf(path, sizeof path, "%s/tuned.onnx", argv[2]);
  if (volt_trainer_export(tr, path)) return failed("export");
  if (volt_trainer_predict(tr, n, names, inputs, outputs, tuned)) return failed("predict");
  snprintf(path, sizeof path, "%s/prediction.bin", argv[2]);
  FILE* f = fopen(path, "wb");
  if (!f) return failed("write");
  fwrite(volt_tensor_data(tuned[0]), element_size(volt_tensor_dtype(tuned[0])),
         (size_t)volt_tensor_numel(tuned[0]), f);
  fclose(f);
  /* Training mode decides (BatchNormalization on batch statistics, Dropout on): the loss the
   * last step reports against the first's. The evaluation losses are reported beside it; they
   * may rise while the running statistics move toward this one batch's. */
  const int lowered = loss < first_step;
  printf(
      "{\"ok\": %s, \"before\": %.9g, \"after\": %.9g, \"first_step\": %.9g, \"last_step\": "
      "%.9g}\n",
      lowered ? "true" : "false", before, after, first_step, loss);
  for (size_t i = 0; i < outputs; ++i) {
    volt_tensor_free(tuned[i]);
    volt_tensor_free(prediction[i]);
  }
  free(tuned);
  free(prediction);
  volt_tensor_free(label);
  for (size_t i = 0; i < n; ++i) volt_tensor_free((volt_tensor*)inputs[i]);
  volt_trainer_free(tr);
  return lowered ? 0 : 1;
}
