/* volt — stable C API. Plain C, opaque handles. Every fallible call returns a volt_status;
 * volt_last_error() gives the message of the last failed call on the calling thread. No
 * exception or crash crosses this boundary. Element types use ONNX TensorProto numbers. */
#ifndef VOLT_H
#define VOLT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  VOLT_OK = 0,
  VOLT_ERR_INVALID_ARGUMENT,
  VOLT_ERR_INVALID_MODEL,
  VOLT_ERR_NOT_IMPLEMENTED,
  VOLT_ERR_IO,
  VOLT_ERR_OUT_OF_MEMORY,
  VOLT_ERR_RUNTIME,
  VOLT_ERR_DEVICE,
  VOLT_ERR_CANCELLED,
  VOLT_ERR_TIMEOUT,
  VOLT_STATUS_FORCE_INT32 = 0x7fffffff
} volt_status;

typedef enum {
  VOLT_UNDEFINED = 0,
  VOLT_FLOAT = 1,
  VOLT_UINT8 = 2,
  VOLT_INT8 = 3,
  VOLT_UINT16 = 4,
  VOLT_INT16 = 5,
  VOLT_INT32 = 6,
  VOLT_INT64 = 7,
  VOLT_STRING = 8,
  VOLT_BOOL = 9,
  VOLT_FLOAT16 = 10,
  VOLT_DOUBLE = 11,
  VOLT_UINT32 = 12,
  VOLT_UINT64 = 13,
  VOLT_COMPLEX64 = 14,
  VOLT_COMPLEX128 = 15,
  VOLT_BFLOAT16 = 16,
  VOLT_DTYPE_FORCE_INT32 =
      0x7fffffff /* keeps the enum int-sized: any int a caller passes is a valid value */
} volt_dtype;

typedef struct volt_tensor volt_tensor;
typedef struct volt_options volt_options;
typedef struct volt_session volt_session;
typedef struct volt_train_options volt_train_options;
typedef struct volt_trainer volt_trainer;
typedef struct volt_run_options volt_run_options;

const char* volt_version(void);
const char* volt_last_error(void);

/* Tensors. volt_tensor_create copies `data` (numel * element size bytes; for VOLT_STRING an
 * array of NUL-terminated char pointers). */
volt_status volt_tensor_create(volt_dtype dtype, const int64_t* shape, size_t rank,
                               const void* data, volt_tensor** out);
volt_dtype volt_tensor_dtype(const volt_tensor* t);
size_t volt_tensor_rank(const volt_tensor* t);
const int64_t* volt_tensor_shape(const volt_tensor* t);
const void* volt_tensor_data(const volt_tensor* t);
int64_t volt_tensor_numel(const volt_tensor* t);
void volt_tensor_free(volt_tensor* t);

/* A 2-D sparse matrix in CSR form (copies the arrays): row r's non-zeros are
 * values[row_offsets[r] .. row_offsets[r+1]) in columns col_indices[same range]. row_offsets has
 * rows + 1 entries, non-decreasing from 0 to nnz; columns lie in [0, cols) and need not be sorted
 * within a row. A CSR tensor may be fed to any 2-D input of its dtype: MatMul/Gemm read it
 * sparse, other consumers get a dense copy. volt_tensor_shape gives {rows, cols},
 * volt_tensor_data the nnz values. */
volt_status volt_tensor_create_csr(volt_dtype dtype, int64_t rows, int64_t cols, int64_t nnz,
                                   const int64_t* row_offsets, const int64_t* col_indices,
                                   const void* values, volt_tensor** out);
int volt_tensor_is_csr(const volt_tensor* t);
int64_t volt_tensor_csr_nnz(const volt_tensor* t);
const int64_t* volt_tensor_csr_row_offsets(const volt_tensor* t);
const int64_t* volt_tensor_csr_col_indices(const volt_tensor* t);

/* Options: "threads", "device" ("cpu", "cuda:0"), "precision" ("fp32", "fp16", "bf16", "int8":
 * Conv/MatMul/Gemm weights quantized per channel at load, activations dynamically),
 * "optimize" ("0".."2"), "memory_limit" (bytes one run may hold; a run that would pass it
 * fails with VOLT_ERR_OUT_OF_MEMORY before allocating; "0": the machine's physical memory),
 * "plan_cache_size" (execution plans kept, one per distinct set of input shapes; default 64). */
volt_options* volt_options_create(void);
volt_status volt_options_set(volt_options* o, const char* key, const char* value);
void volt_options_free(volt_options* o);

volt_status volt_session_create(const char* model_path, const volt_options* opts,
                                volt_session** out);
volt_status volt_session_create_from_memory(const void* bytes, size_t size,
                                            const volt_options* opts, volt_session** out);
size_t volt_session_input_count(const volt_session* s);
const char* volt_session_input_name(const volt_session* s, size_t i);
size_t volt_session_output_count(const volt_session* s);
const char* volt_session_output_name(const volt_session* s, size_t i);
/* output_names NULL: all outputs, in graph order (n_outputs must then equal the output count).
 * Each outputs[i] is a new tensor the caller frees. */
volt_status volt_session_run(volt_session* s, size_t n_inputs, const char* const* input_names,
                             const volt_tensor* const* inputs, size_t n_outputs,
                             const char* const* output_names, volt_tensor** outputs);
/* Per-run options: "timeout_ms" (> 0: the run ends with VOLT_ERR_TIMEOUT once past it; checked
 * between nodes and inside Loop/Scan iterations). volt_run_options_cancel may be called from any
 * thread: runs using these options end with VOLT_ERR_CANCELLED, and so do later ones until
 * volt_run_options_reset. Free the options only after the runs using them have returned. */
volt_run_options* volt_run_options_create(void);
volt_status volt_run_options_set(volt_run_options* o, const char* key, const char* value);
void volt_run_options_cancel(volt_run_options* o);
void volt_run_options_reset(volt_run_options* o);
void volt_run_options_free(volt_run_options* o);
/* volt_session_run with run options (NULL: none). */
volt_status volt_session_run_with_options(volt_session* s, const volt_run_options* run_options,
                                          size_t n_inputs, const char* const* input_names,
                                          const volt_tensor* const* inputs, size_t n_outputs,
                                          const char* const* output_names, volt_tensor** outputs);
void volt_session_free(volt_session* s);

/* Fine-tuning. Option keys: loss (cross_entropy | mse | model_output), prediction, label,
 * optimizer (sgd | adam | adamw | adagrad), learning_rate, momentum, nesterov, beta1, beta2,
 * epsilon, weight_decay, max_grad_norm, trainable, freeze (comma-separated weight name prefixes:
 * initializers, float Constant outputs, weights inside If branches; by default every float
 * constant with more than one element that a gradient of the loss reaches), threads, device (cpu |
 * cuda:N), precision (fp32 | mixed_fp16: fp16 compute, fp32 master weights, dynamic loss scaling),
 * seed, sparse_gradients (auto | off: embedding tables read only by Gather get row-sparse
 * gradients), lazy_update (on | off: with row-sparse gradients, update only the touched rows),
 * accumulate_steps (N micro-batches, i.e. calls of volt_trainer_step, per optimizer step; one
 * that fails discards those summed so far),
 * distributed (auto: MPI when launched by mpirun | off | mpi: data-parallel training; each rank
 * passes its own shard, of the same size on every rank, to volt_trainer_step; weights start from
 * rank 0's; checkpoints and exports are written by rank 0 and are no-ops elsewhere),
 * sparse_allreduce_threshold (0.3: row-sparse gradients travel as rows while the ranks' union of
 * rows covers at most this fraction of the table, as a dense all-reduce past it). An unknown key
 * or bad value is an error. */
volt_train_options* volt_train_options_create(void);
volt_status volt_train_options_set(volt_train_options* o, const char* key, const char* value);
void volt_train_options_free(volt_train_options* o);
volt_status volt_trainer_create(const char* model_path, const volt_train_options* opts,
                                volt_trainer** out);
/* One optimization step; the batch holds the model inputs and the label. */
volt_status volt_trainer_step(volt_trainer* t, size_t n_inputs, const char* const* input_names,
                              const volt_tensor* const* inputs, float* loss /* may be NULL */);
volt_status volt_trainer_evaluate(volt_trainer* t, size_t n_inputs, const char* const* input_names,
                                  const volt_tensor* const* inputs, float* loss);
/* The model's outputs in evaluation mode (like volt_session_run with all outputs). */
volt_status volt_trainer_predict(volt_trainer* t, size_t n_inputs, const char* const* input_names,
                                 const volt_tensor* const* inputs, size_t n_outputs,
                                 volt_tensor** outputs);
volt_status volt_trainer_set_learning_rate(volt_trainer* t, float learning_rate);
/* precision mixed_fp16: the current loss scale and the steps skipped because their scaled
 * gradients overflowed (1 and 0 in fp32). Either pointer may be NULL. */
volt_status volt_trainer_loss_scale(const volt_trainer* t, float* scale, int64_t* skipped_steps);
/* This process's rank and the number of ranks (0 and 1 for a single process). Either pointer may
 * be NULL. */
volt_status volt_trainer_rank(const volt_trainer* t, int* rank, int* world);
volt_status volt_trainer_save_checkpoint(volt_trainer* t, const char* path);
volt_status volt_trainer_load_checkpoint(volt_trainer* t, const char* path);
volt_status volt_trainer_export(volt_trainer* t,
                                const char* onnx_path); /* inference model with the tuned weights */
void volt_trainer_free(volt_trainer* t);

#ifdef __cplusplus
}
#endif

#endif /* VOLT_H */
