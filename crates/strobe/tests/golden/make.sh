#!/usr/bin/env bash
# Records the golden files' inputs again: strobe recordings in agent mode (with and
# without stacks, with and without windows) and in kernel mode, and perf.data files Linux
# perf writes (plain, -g, a leader-sampling group), with the files they need to be
# symbolized the same on any machine:
#
# - symfs/: the test programs, recorded from /tmp/strobe-golden/ (`strobe report --symfs`
#   reads them there; libraries are left out, so their samples stay `[unknown in ...]`);
# - kallsyms: the lines of this machine's /proc/kallsyms the perf.data files' kernel
#   samples need (`strobe report --kallsyms`);
# - buildid/: the vDSO perf saved beside its files (`PERF_BUILDID_DIR`).
#
# A recording made live is not deterministic: after this script, run the golden test
# with STROBE_BLESS=1 to write the expected outputs again, and commit both.
#
# usage: bash crates/strobe/tests/golden/make.sh   (as root, with perf and a built strobe)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../../.." && pwd)"
cd "$root"
cargo build -q -p strobe -p strobe-testprogs
strobe="$root/target/debug/strobe"
progs="$(dirname "$(find target/debug/build -path '*strobe-testprogs-*/out/perf_mix' | head -1)")"
work=/tmp/strobe-golden
rm -rf "$work" && mkdir -p "$work"
for p in perf_mix perf_threads; do cp "$progs/$p" "$work/$p"; done
in="$here/inputs"
rm -rf "$in" "$here/symfs" "$here/buildid" "$here/kallsyms"
mkdir -p "$in" "$here/symfs/tmp/strobe-golden" "$here/buildid"
cp "$work/perf_mix" "$work/perf_threads" "$here/symfs/tmp/strobe-golden/"

group='{task-clock/period=1ms/,page-faults,context-switches}'
fixed='{task-clock/period=1ms,window=0/,page-faults,context-switches}'
cd "$work"
"$strobe" record -o "$in/agent-stacks.strobe" -e "$group" -- ./perf_mix 80
"$strobe" record -o "$in/agent-nostacks.strobe" -e "$group" --call-graph none -- ./perf_mix 80
"$strobe" record -o "$in/agent-fixed.strobe" -e "$fixed" --call-graph fp -- ./perf_threads 25
"$strobe" record -o "$in/kernel.strobe" --mode kernel --off-cpu \
    -e 'task-clock/period=500us/' -- ./perf_threads 25
export PERF_BUILDID_DIR="$work/buildid"
# Written here and moved, so the command line they keep names no checkout.
perf record -q -o perf-plain.data -e task-clock -c 1000000 -- ./perf_mix 60 >/dev/null
perf record -q -o perf-g.data -g -e task-clock:u -c 1000000 -- ./perf_mix 60 >/dev/null
perf record -q -o perf-group.data -e '{task-clock,page-faults}:S' -c 1000000 \
    -- ./perf_mix 60 >/dev/null
mv perf-plain.data perf-g.data perf-group.data "$in/"
if [ -d "$work/buildid/[vdso]" ]; then cp -r "$work/buildid/[vdso]" "$here/buildid/"; fi

# The kernel functions the perf.data files hit, each with the text symbol after it (which
# ends it), from this machine's table.
names="$(for f in "$in"/perf-*.data; do
    "$strobe" report -q --format csv "$f" | awk -F, '$2 == "[kernel]" { print $1 }'
done | sort -u)"
awk -v names="$names" '
    BEGIN { n = split(names, a, "\n"); for (i = 1; i <= n; i++) want[a[i]] = 1 }
    $2 ~ /^[tTwW]$/ { if (keep_next) { print; keep_next = 0 } if ($3 in want) { print; keep_next = 1 } }
' /proc/kallsyms | sort -u >"$here/kallsyms"
ls -la "$in" "$here/kallsyms"
