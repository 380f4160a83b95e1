#!/usr/bin/env bash
# Runs benches/static_vs_dynamic.rs (static and dynamic variants of each configuration in
# the same invocation) and prints a Markdown table of criterion's medians: ns per
# message (inject_cq_read) or per round trip (pingpong), static vs dynamic, and the
# ratio dynamic / static.
#
#   static_vs_dynamic_table.sh                 # --warm-up-time 1 --measurement-time 2
#   static_vs_dynamic_table.sh -- <criterion options>
#   static_vs_dynamic_table.sh --table-only    # print the table of the last run
#
# The medians are the "median" point estimates of
# target/criterion/<group>/<variant>/new/estimates.json.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ${1:-} != --table-only ]]; then
    [[ ${1:-} == -- ]] && shift
    if [[ $# -eq 0 ]]; then set -- --warm-up-time 1 --measurement-time 2; fi
    cargo bench --bench static_vs_dynamic -- "$@" >&2
fi
dir=target/criterion
median() {
    local f="$dir/$1/new/estimates.json"
    [[ -f $f ]] || { echo "missing $f (run the bench first)" >&2; exit 1; }
    sed -n 's/.*"median":{"confidence_interval":{[^}]*},"point_estimate":\([^,]*\),.*/\1/p' "$f"
}
row() { # group, configuration, what one iteration is
    local s d
    s=$(median "$1/static_$2"); d=$(median "$1/dynamic_$2")
    awk -v g="$1" -v c="$2" -v w="$3" -v s="$s" -v d="$d" \
        'BEGIN { printf "| %s | %s | %s | %.1f | %.1f | %.2f |\n", g, c, w, s, d, d / s }'
}
echo "| loop | threading_format | per | static ns | dynamic ns | dynamic / static |"
echo "|---|---|---|---:|---:|---:|"
for cfg in Domain_tagged Safe_tagged Domain_context Domain_msg Domain_data; do
    row inject_cq_read "$cfg" message
done
for cfg in Domain Safe; do
    row pingpong "$cfg" "round trip"
done
