#!/usr/bin/env bash
# Runs every fuzz target for SECONDS each (default 60), one after another, and
# fails (after running them all) if any found a crash, a hang (an input taking
# over 10 s) or an out-of-memory.
#
#   fuzz/run.sh [SECONDS [TARGET...]]
#
# (all targets unless some are named; `cargo fuzz list` lists them).
# Needs only a stable toolchain: cargo fuzz's nightly flags are let through with
# RUSTC_BOOTSTRAP=1. FUZZ_SANITIZER=none skips AddressSanitizer (the default is
# address). New inputs go to fuzz/target/corpus/<target>; the committed seeds in
# fuzz/corpus/<target> are only read. A crash leaves its input in
# fuzz/artifacts/<target>/; replay it with
#   RUSTC_BOOTSTRAP=1 cargo fuzz run <target> fuzz/artifacts/<target>/<file>
set -euo pipefail

each=${1:-60}
shift $(($# > 0 ? 1 : 0))
sanitizer=${FUZZ_SANITIZER:-address}
cd "$(dirname "$0")/.."
export RUSTC_BOOTSTRAP=1

if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi

start=$(date +%s)
cargo fuzz build --sanitizer "$sanitizer"
echo "fuzz: built in $(($(date +%s) - start)) s"

logs=fuzz/target/logs
mkdir -p "$logs"
failed=()
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(cargo fuzz list)
fi
for target in "${targets[@]}"; do
    work=fuzz/target/corpus/$target
    mkdir -p "$work" "fuzz/corpus/$target"
    log=$logs/$target.log
    status=0
    cargo fuzz run --sanitizer "$sanitizer" "$target" "$work" "fuzz/corpus/$target" -- \
        -max_total_time="$each" -timeout=10 -print_final_stats=1 >"$log" 2>&1 || status=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    if [ "$status" -eq 0 ]; then
        echo "fuzz: $target ok, ${execs:-?} executions in $each s"
    else
        echo "fuzz: $target FAILED (exit $status) after ${execs:-?} executions; log $log:"
        tail -n 60 "$log"
        failed+=("$target")
    fi
done

echo "fuzz: total $(($(date +%s) - start)) s"
if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz: crashes in ${failed[*]}"
    exit 1
fi
