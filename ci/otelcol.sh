#!/usr/bin/env bash
# Builds the OpenTelemetry Collector that strobe's OTLP profiles tests run against
# (tests/otelcol: the OTLP receiver, the OTLP, debug and file exporters, every collector
# module pinned to the v0.161.0 release) into $CARGO_TARGET_DIR/otelcol/otelcol. Called
# by ci/setup.sh; does nothing when the binary is newer than tests/otelcol.
#
# Modules come from the Go module proxy as the machine has it (GOPROXY); go.sum pins
# their checksums. Measured on the 2-core VM: about 5 minutes with empty module and build
# caches (about 450 MB of modules, 550 MB of build cache), about 6 s with warm caches.
set -euo pipefail
cd "$(dirname "$0")/.."

out="${CARGO_TARGET_DIR:-$PWD/target}/otelcol/otelcol"
if [ -x "$out" ] && [ -z "$(find tests/otelcol -newer "$out" -type f | head -1)" ]; then
    exit 0
fi
# The go tool as strobe-testprogs finds it: $GO, else on PATH, else /usr/local/go/bin/go.
go="${GO:-$(command -v go || true)}"
if [ -z "$go" ] && [ -x /usr/local/go/bin/go ]; then go=/usr/local/go/bin/go; fi
[ -n "$go" ] || {
    echo "ci/otelcol.sh: go not found (set \$GO or put go on PATH); install Go 1.26 or newer to build the collector the OTLP tests use" >&2
    exit 1
}
mkdir -p "$(dirname "$out")"
echo "ci/otelcol.sh: building the OpenTelemetry Collector v0.161.0 (tests/otelcol)"
start=$(date +%s)
log="$(dirname "$out")/build.log"
if ! (cd tests/otelcol && GOFLAGS=-mod=mod "$go" build -trimpath -o "$out.tmp" .) >"$log" 2>&1; then
    echo "ci/otelcol.sh: the collector did not build; the end of $log:" >&2
    tail -30 "$log" >&2
    exit 1
fi
mv "$out.tmp" "$out"
echo "ci/otelcol.sh: built $out in $(( $(date +%s) - start )) s"
