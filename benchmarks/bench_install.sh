#!/usr/bin/env bash
# install.sh from a clean clone, with pip and with uv: one run, alternating, each in a fresh clone with
# a fresh venv and an empty download cache of its own (so both fetch every wheel: the same index
# options, from pip's configuration). Prints the wall time of each and the ratio.
#
#   bash benchmarks/bench_install.sh [ROUNDS]   # default 1 (a round is one pip and one uv install)
#
# Needs the network to the package index (and ~8 GB of disk in /tmp). The clone is of this checkout's
# HEAD: commit first.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
rounds="${1:-1}"
work="$(mktemp -d /tmp/qwen-tui-bench-install.XXXXXX)"
trap 'rm -rf "$work"' EXIT
echo "bench_install: $(git -C "$repo" rev-parse --short HEAD), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
declare -A total=([pip]=0 [uv]=0)
for ((r = 1; r <= rounds; r++)); do
  for installer in pip uv; do
    dir="$work/$installer-$r"
    git clone -q "$repo" "$dir"
    mkdir -p "$dir.cache"
    start=$(date +%s.%N)
    if ! QWEN_TUI_INSTALLER=$installer PIP_CACHE_DIR="$dir.cache/pip" UV_CACHE_DIR="$dir.cache/uv" \
        bash "$dir/install.sh" -q >"$dir.log" 2>&1; then
      echo "bench_install: $installer failed:"; grep -v "^WARNING: Location" "$dir.log" | tail -20; exit 1
    fi
    end=$(date +%s.%N)
    s=$(python3 -c "print(f'{$end - $start:.1f}')")
    total[$installer]=$(python3 -c "print(${total[$installer]} + $s)")
    echo "round $r $installer: ${s} s ($(grep '^installed' "$dir.log")) load $(cut -d' ' -f1 /proc/loadavg)"
    rm -rf "$dir" "$dir.cache"
  done
done
python3 -c "p, u = ${total[pip]} / $rounds, ${total[uv]} / $rounds; print(f'pip {p:.1f} s, uv {u:.1f} s: uv takes {u / p:.2f}x the time of pip ({p / u:.1f}x faster)')"
