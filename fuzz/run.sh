#!/usr/bin/env bash
# Runs fuzz targets for a given time each; fails on any crash, hang or OOM.
#
#   fuzz/run.sh [--seconds N] [--runs N] [--timeout S] [--rss-mb M] [--sanitizer S] [TARGET...]
#
# Default: every target, 60 s each, a 10 s per-input timeout (a hang) and a
# 2048 MB RSS limit (an out-of-memory). --runs N stops a target at N
# executions if that comes before --seconds (the campaign of
# docs/fuzzing.md: --runs 10000000 with a generous --seconds). Seed corpora
# are generated from the recorded fixtures by fuzz/seed.py into fuzz/corpus/
# (git-ignored) on every run (seeds are named by their hash: a seed already
# there is rewritten, nothing the fuzzer found is removed); what the fuzzer
# finds grows them. Crashing inputs land in
# fuzz/artifacts/TARGET/. --sanitizer none builds without ASan (cargo fuzz
# -s none: 2-5x the executions a second; the product code forbids unsafe,
# so what is lost is ASan's view of the dependencies' unsafe code).
# Needs `cargo +nightly` and cargo-fuzz.
set -euo pipefail
cd "$(dirname "$0")"

seconds=60
runs=-1
timeout=10
rss_mb=2048
sanitizer=address
targets=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --seconds) seconds="$2"; shift 2 ;;
        --runs) runs="$2"; shift 2 ;;
        --timeout) timeout="$2"; shift 2 ;;
        --rss-mb) rss_mb="$2"; shift 2 ;;
        --sanitizer) sanitizer="$2"; shift 2 ;;
        -h|--help) sed -n '2,17p' "$(basename "$0")"; exit 0 ;;
        -*) echo "unknown option $1" >&2; exit 2 ;;
        *) targets+=("$1"); shift ;;
    esac
done
if [[ ${#targets[@]} -eq 0 ]]; then
    mapfile -t targets < <(cargo +nightly fuzz list)
fi

python3 seed.py corpus >/dev/null

start=$(date +%s)
if ! cargo +nightly fuzz build -s "$sanitizer" >build.log 2>&1; then
    tail -30 build.log >&2
    echo "fuzz build failed (fuzz/build.log)" >&2
    exit 1
fi
echo "fuzz build: $(( $(date +%s) - start )) s"

failed=()
for target in "${targets[@]}"; do
    mkdir -p "corpus/$target" "artifacts/$target"
    log="artifacts/$target/last-run.log"
    t0=$(date +%s)
    set +e
    cargo +nightly fuzz run -s "$sanitizer" "$target" "corpus/$target" -- \
        -max_total_time="$seconds" -runs="$runs" -timeout="$timeout" -rss_limit_mb="$rss_mb" \
        -print_final_stats=1 >"$log" 2>&1
    rc=$?
    set -e
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
    if [[ $rc -ne 0 ]]; then
        failed+=("$target")
        reason=$(grep -m1 -oE 'ERROR: libFuzzer: [a-z-]+|panicked at [^,]*|out-of-memory|timeout' "$log" || echo "exit $rc")
        echo "FAIL $target: $reason (log: fuzz/$log)"
    else
        final=$(grep -E '^#[0-9]+[[:space:]]+(DONE|pulse|NEW|REDUCE)' "$log" | tail -1 | grep -oE 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+/[0-9a-zA-Z]+' || true)
        echo "ok   $target: ${execs:-?} executions in $(( $(date +%s) - t0 )) s, ${final:-cov ?}, $(find "corpus/$target" -type f | wc -l) files in corpus/$target"
    fi
done
if [[ ${#failed[@]} -gt 0 ]]; then
    echo "fuzz: ${#failed[@]} target(s) failed: ${failed[*]}" >&2
    exit 1
fi
