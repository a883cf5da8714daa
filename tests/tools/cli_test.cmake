# The volt CLI end to end: info, run against the bundled references, bad input exits 2.
# Invoked by ctest with -DVOLT=<volt binary> -DSRC=<source dir> -DWORK=<scratch dir>.
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})

function(expect_run expected_rc)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL expected_rc)
    message(FATAL_ERROR "'${ARGN}' exited ${rc}, expected ${expected_rc}\nstdout: ${out}\nstderr: ${err}")
  endif()
  set(LAST_OUT "${out}" PARENT_SCOPE)
  set(LAST_ERR "${err}" PARENT_SCOPE)
endfunction()

function(expect_contains text fragment)
  string(FIND "${text}" "${fragment}" pos)
  if(pos EQUAL -1)
    message(FATAL_ERROR "expected '${fragment}' in:\n${text}")
  endif()
endfunction()

expect_run(0 ${VOLT} info ${SRC}/models/small_cnn.onnx)
expect_contains("${LAST_OUT}" "x                        float32[batch,1,28,28]")
expect_contains("${LAST_OUT}" "Conv                     2")
expect_contains("${LAST_OUT}" "parameters: 1450")

expect_run(0 ${VOLT} run ${SRC}/models/mnist_mlp.onnx --input x=${SRC}/models/mnist_mlp.input.npy --output-dir ${WORK}/out)
expect_contains("${LAST_OUT}" "logits: float32[4,10]")
if(NOT EXISTS ${WORK}/out/logits.npy)
  message(FATAL_ERROR "volt run did not write logits.npy")
endif()
expect_run(0 ${VOLT} run ${SRC}/models/small_cnn.onnx --input x=random --shape x=2x1x28x28)
expect_contains("${LAST_OUT}" "probs: float32[2,10]")

# Bad input: a truncated model, a missing file, an unknown input, a wrong shape.
file(READ ${SRC}/models/small_cnn.onnx bytes HEX)
string(SUBSTRING "${bytes}" 0 2000 half)
file(WRITE ${WORK}/truncated.hex "${half}")
execute_process(COMMAND ${CMAKE_COMMAND} -E echo_append "" OUTPUT_FILE ${WORK}/truncated.onnx)
file(WRITE ${WORK}/notonnx.onnx "definitely not an onnx model")
expect_run(2 ${VOLT} run ${WORK}/notonnx.onnx)
expect_contains("${LAST_ERR}" "notonnx.onnx")
expect_run(2 ${VOLT} info ${WORK}/missing.onnx)
expect_contains("${LAST_ERR}" "missing.onnx")
expect_run(2 ${VOLT} run ${SRC}/models/mnist_mlp.onnx --input nope=random)
expect_contains("${LAST_ERR}" "nope")
expect_run(2 ${VOLT} run ${SRC}/models/mnist_mlp.onnx --input x=random --shape x=1x3)
expect_contains("${LAST_ERR}" "[1,3]")

# Output names with path characters are written safely inside the output folder.
expect_run(0 ${VOLT} bench ${SRC}/models/mnist_mlp.onnx --iterations 5 --warmup 1 --json)
expect_contains("${LAST_OUT}" "\"p50_ms\"")
expect_contains("${LAST_OUT}" "\"peak_rss_mib\"")
# Fine-tuning from the command line: a synthetic dataset, three epochs, export, reload.
execute_process(COMMAND /usr/bin/python3 ${SRC}/models/make_dataset.py ${WORK}/data 1024 RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "models/make_dataset.py failed (python3-numpy missing?)")
endif()
expect_run(0 ${VOLT} train ${SRC}/models/mnist_mlp.onnx --input x=${WORK}/data/x.npy --label ${WORK}/data/y.npy
           --loss cross_entropy --optimizer adam --learning-rate 1e-3 --batch 64 --epochs 3 --validation-split 0.2
           --checkpoint ${WORK}/mlp.ckpt --export ${WORK}/tuned.onnx --threads 2)
expect_contains("${LAST_OUT}" "epoch 3: train loss")
string(REGEX MATCH "epoch 3:[^\n]*validation accuracy ([0-9.]+)%" _ "${LAST_OUT}")
if(NOT CMAKE_MATCH_1 OR CMAKE_MATCH_1 LESS 95)
  message(FATAL_ERROR "validation accuracy after 3 epochs is '${CMAKE_MATCH_1}', expected >= 95%\n${LAST_OUT}")
endif()
expect_run(0 ${VOLT} run ${WORK}/tuned.onnx --input x=${WORK}/data/x.npy)
expect_contains("${LAST_OUT}" "logits: float32[1024,10]")
expect_run(2 ${VOLT} train ${SRC}/models/mnist_mlp.onnx --input x=${WORK}/data/x.npy --label ${WORK}/data/y.npy --optimizer lbfgs)
expect_contains("${LAST_ERR}" "lbfgs")
message(STATUS "cli: all checks passed")

# Limits: a run past its deadline or its memory limit is an error (exit 2), never a hang or a kill.
expect_run(2 ${VOLT} run ${SRC}/models/small_cnn.onnx --shape x=4096x1x28x28 --timeout-ms 1)
expect_contains("${LAST_ERR}" "deadline of 1 ms")
expect_run(2 ${VOLT} run ${SRC}/models/small_cnn.onnx --shape x=64x1x28x28 --memory-limit 64K)
expect_contains("${LAST_ERR}" "memory limit of 65536 bytes")
expect_run(2 ${VOLT} bench ${SRC}/models/small_cnn.onnx --batch 4096 --iterations 1 --timeout-ms 1)
expect_contains("${LAST_ERR}" "deadline")
expect_run(2 ${VOLT} run ${SRC}/models/mnist_mlp.onnx --memory-limit 8Q)
expect_contains("${LAST_ERR}" "is not a byte count")

# The Winograd switch: off runs (direct convolutions only), anything but on|off is refused.
expect_run(0 ${VOLT} run ${SRC}/models/small_cnn.onnx --input x=random --winograd off)
expect_run(2 ${VOLT} run ${SRC}/models/small_cnn.onnx --winograd maybe)
expect_contains("${LAST_ERR}" "is not on or off")
