#!/usr/bin/env bash
# Builds and runs the kernel micro-benchmark: bench/run-kernels.sh [ARGS for build/bench-kernels]
# e.g. bench/run-kernels.sh -t 2 --isa avx512
set -eu
cd "$(dirname "$0")/.."
make -s -j2 build/libcaldrix.a
cc -O2 -std=c11 -D_GNU_SOURCE -pthread -Iinclude -Isrc bench/kernels.c build/libcaldrix.a \
   $(pkg-config --libs libcurl libmicrohttpd libpcre2-8 libutf8proc jansson 2>/dev/null) -lm -o build/bench-kernels
exec build/bench-kernels "$@"
