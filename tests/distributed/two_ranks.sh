#!/usr/bin/env bash
# Runs a command under `mpirun -np 2`, first checking that this machine can start a two-rank MPI
# job at all (MPI_Init on both ranks): where it cannot (no usable transport in a sandbox), the
# test is reported skipped (exit 77) with mpirun's reason, not failed.
#   two_ranks.sh MPIEXEC DISTRIBUTED_TEST COMMAND...
set -uo pipefail
mpiexec=$1 probe=$2
shift 2
if ! out=$(timeout 60 "$mpiexec" --oversubscribe -np 2 "$probe" --gtest_list_tests 2>&1); then
  echo "SKIP: this machine cannot start a two-rank MPI job:"
  echo "$out" | tail -n 20
  exit 77
fi
exec "$@"
