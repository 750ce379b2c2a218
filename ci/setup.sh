#!/usr/bin/env bash
# Installs what strobe's build and tests need on a fresh Debian machine, if missing:
# a C and a C++ compiler (test programs; libFuzzer, built for ci/fuzz.sh), Linux perf
# (benchmarks compare against it), binutils and xz (tests strip programs and add
# MiniDebugInfo), Chromium (the HTML report is tested in a headless browser) and valgrind
# (ci/san.sh runs the lock-free structures' stress tests under memcheck and helgrind), strace
# (a coverage test records a program strace runs). The test
# programs' USDT probes come from tests/c/usdt.h, so <sys/sdt.h> is not needed.
# It also builds the OpenTelemetry Collector the OTLP tests use (ci/otelcol.sh, Go).
# Safe to run repeatedly; does nothing when everything is present.
set -euo pipefail

need=()
command -v cc >/dev/null 2>&1 || need+=(gcc libc6-dev)
command -v g++ >/dev/null 2>&1 || need+=(g++)
command -v perf >/dev/null 2>&1 || need+=(linux-perf)
command -v objcopy >/dev/null 2>&1 || need+=(binutils)
command -v xz >/dev/null 2>&1 || need+=(xz-utils)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v valgrind >/dev/null 2>&1 || need+=(valgrind)
command -v strace >/dev/null 2>&1 || need+=(strace)
if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "ci/setup.sh: missing packages ${need[*]}; install them (apt-get install ${need[*]}) or run as root" >&2
        exit 1
    fi
    echo "ci/setup.sh: installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${need[@]}" >/dev/null
fi
command -v cargo >/dev/null 2>&1 || { echo "ci/setup.sh: cargo not found; install Rust with rustup" >&2; exit 1; }
# The OpenTelemetry Collector the OTLP profiles tests send to (ci/otelcol.sh).
bash "$(dirname "$0")/otelcol.sh"
