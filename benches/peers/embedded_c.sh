# Sourced by the peers scripts that carry a C program below their `exec` line
# (fi_peer.sh, line_floor.sh).
#
#   build_embedded NAME SCRIPT DIR [cc arguments after the source ...]
#
# Copies the lines of SCRIPT from `// ---- NAME.c begin` to `// ---- NAME.c end` into
# DIR/NAME.c and compiles them into DIR/NAME, unless the binary exists and was built from
# the same source.
build_embedded() {
    local name=$1 script=$2 dir=$3
    shift 3
    local bin="$dir/$name" src="$dir/$name.c" tmp
    mkdir -p "$dir"
    tmp="$(mktemp "$dir/$name.c.XXXXXX")"
    sed -n "/^\/\/ ---- $name.c begin/,/^\/\/ ---- $name.c end/p" "$script" >"$tmp"
    if [[ -x "$bin" && -f "$src" ]] && cmp -s "$tmp" "$src"; then
        rm -f "$tmp"
        return 0
    fi
    mv "$tmp" "$src"
    if ! command -v cc >/dev/null; then
        echo "$name: no C compiler (cc)" >&2
        return 1
    fi
    cc -O2 -Wall -Wextra -o "$bin.tmp" "$src" "$@" && mv "$bin.tmp" "$bin"
}

#   embedded_main BIN BUILDER ARGS ...
#
# The scripts' entry: `--build` runs BUILDER and prints BIN; anything else runs BUILDER,
# then BIN with ARGS.
embedded_main() {
    local bin=$1 builder=$2
    shift 2
    if [[ "${1:-}" == "--build" ]]; then
        "$builder" >&2
        echo "$bin"
        exit 0
    fi
    "$builder" >&2
    exec "$bin" "$@"
}
