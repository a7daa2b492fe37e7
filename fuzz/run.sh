#!/usr/bin/env bash
# Builds every fuzz target once, then runs each for a bounded time, a few at a time, and
# prints one line per target: executions, coverage (cov/ft from libFuzzer's last status
# line), and whether it crashed. Exits non-zero if any target crashed, timed out or ran out
# of memory; the input is then in artifacts/<target>/ and the log's tail is printed.
#
#   fuzz/run.sh [--seconds N] [--jobs N] [--scratch] [target ...]   (default: all, 10 s, 2 jobs)
#
# New inputs are kept in target/corpus/<target>/ so that a long campaign resumes where the last
# one stopped; --scratch starts from the seeds alone, in target/scratch-corpus/ emptied each
# time (make fuzz-smoke: a check that does not depend on what this machine fuzzed before).
#
# Environment: FUZZ_SANITIZER (none | address, default none), FUZZ_TIMEOUT (seconds one input
# may take before it counts as a hang, default 10), FUZZ_ARGS (more libFuzzer flags).
# See README.md for why RUSTC_BOOTSTRAP is set.

set -euo pipefail
cd "$(dirname "$0")"

seconds=10
jobs=2
scratch=0
targets=()
while (($#)); do
    case "$1" in
        --seconds) seconds="$2"; shift 2 ;;
        --jobs) jobs="$2"; shift 2 ;;
        --scratch) scratch=1; shift ;;
        -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
        *) targets+=("$1"); shift ;;
    esac
done

# Sanitizer builds pass a nightly-only rustc flag (-Zsanitizer); this lets the one stable
# toolchain accept it. Set always: Cargo fingerprints it, so toggling it rebuilds everything.
# Nothing outside this folder is built this way.
export RUSTC_BOOTSTRAP=1
sanitizer="${FUZZ_SANITIZER:-none}"
# Release with debug assertions and overflow checks: an overflow is a finding, not a wrap.
build_flags=(--sanitizer "$sanitizer" --debug-assertions)

if ((${#targets[@]} == 0)); then
    mapfile -t targets < <(cargo fuzz list)
fi

started=$SECONDS
cargo fuzz build "${build_flags[@]}"
build_seconds=$((SECONDS - started))

triple="$(rustc -vV | sed -n 's/^host: //p')"
bin_dir="target/$triple/release"
logs="target/logs"
mkdir -p "$logs"

dict_for() {
    case "$1" in
        metrics_text|poller) echo "-dict=dicts/prometheus.dict" ;;
        request|model_rewrite|prefix_hash|config|pod_table|route|discovery_parse|discovery_lister|usage_scan) echo "-dict=dicts/json.dict" ;;
        *) echo "" ;;
    esac
}

run_one() {
    local target="$1"
    # New inputs go to the first corpus folder (under target/, not committed); the seeds in
    # corpus/<target>/ are only read.
    local work="target/corpus/$target"
    if ((scratch)); then
        work="target/scratch-corpus/$target"
        rm -rf "$work"
    fi
    mkdir -p "$work" "artifacts/$target" "corpus/$target"
    # shellcheck disable=SC2046,SC2086
    "$bin_dir/$target" -max_total_time="$seconds" -timeout="${FUZZ_TIMEOUT:-10}" -print_final_stats=1 \
        -artifact_prefix="artifacts/$target/" $(dict_for "$target") ${FUZZ_ARGS:-} \
        "$work" "corpus/$target" >"$logs/$target.log" 2>&1 && status=0 || status=$?
    echo "$status" >"$logs/$target.status"
}

for target in "${targets[@]}"; do
    rm -f "$logs/$target.status"
    while (($(jobs -rp | wc -l) >= jobs)); do
        wait -n || true
    done
    run_one "$target" &
done
wait

failed=()
printf '%-18s %7s %12s %7s %8s %s\n' target seconds executions cov ft result
for target in "${targets[@]}"; do
    log="$logs/$target.log"
    if [[ "$(cat "$logs/$target.status" 2>/dev/null)" == 0 ]]; then result=ok; else result=FAILED; failed+=("$target"); fi
    runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
    took="$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -1)"
    status_line="$(grep -E '^#[0-9]+' "$log" | tail -1 || true)"
    # Fork mode (FUZZ_ARGS=-fork=N) prints no final stats: read its last status line instead.
    [[ -n "$runs" ]] || runs="$(sed -n 's/^#\([0-9]*\).*/\1/p' <<<"$status_line")"
    [[ -n "$took" ]] || took="$(sed -n 's/.* time: \([0-9]*\)s.*/\1/p' <<<"$status_line")"
    cov="$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$status_line")"
    ft="$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$status_line")"
    printf '%-18s %7s %12s %7s %8s %s\n' "$target" "${took:--}" "${runs:--}" "${cov:--}" "${ft:--}" "$result"
done
echo "build: ${build_seconds}s, total: $((SECONDS - started))s"

for target in "${failed[@]}"; do
    echo
    echo "=== $target failed; end of fuzz/$logs/$target.log ==="
    tail -n 40 "$logs/$target.log"
done
((${#failed[@]} == 0))
