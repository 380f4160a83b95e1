#!/usr/bin/env bash
# Counts the locked instructions (x86 `lock` prefix, `xchg` with memory, `mfence`) that the
# fast path executes per message: callgrind records every executed instruction address of
# `examples/fastpath` (tinject + trecv + CQ read), and any locked instruction run at least
# once per message is listed. The default stack (ThreadDomain, Manual) should list none.
# Usage: benches/lock_audit.sh [domain|safe]
set -euo pipefail
cd "$(dirname "$0")/.."
threading=${1:-domain}
n=100000
cargo build --release --example fastpath >/dev/null
out=$(mktemp)
valgrind --tool=callgrind --dump-instr=yes --callgrind-out-file="$out" \
    "${CARGO_TARGET_DIR:-target}"/release/examples/fastpath "$n" slice "$threading" >/dev/null 2>&1
python3 "$(dirname "$0")/locked_instructions.py" "$out" "$n"
rm -f "$out"
