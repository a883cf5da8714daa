# Sourced by tools/build and .ci/run: when ccache is installed, CMake compiles through it, with
# paths taken relative to the clone, so that a build from a fresh clone on a machine that built
# volt before (CI runs on the developer's machine) reuses the objects instead of compiling again.
if command -v ccache >/dev/null 2>&1; then
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache \
         CMAKE_CUDA_COMPILER_LAUNCHER=ccache
  CCACHE_BASEDIR="$(pwd)"
  export CCACHE_BASEDIR CCACHE_NOHASHDIR=1
fi
