"""Failure signatures about the install, the host and the model files (diagnose.py has memory and KV cache,
and the table that maps line substrings to these handlers)."""

from __future__ import annotations

import difflib
import re

from backend.logparse.events import Failure
from backend.logparse.handler import ParseState


def _frames(p: ParseState) -> str:
    return "\n".join(p.frames)


# --- environment ---------------------------------------------------------------------------------

_LIB = re.compile(r"(lib[\w+-]+(?:\.[\w+-]+)*?\.so(?:\.\d+)*)[^:]*: cannot open shared object file")
_LIB_PKG = {"libcudart": "nvidia-cuda-runtime-cu{v}", "libcublas": "nvidia-cublas-cu{v}",
            "libcublasLt": "nvidia-cublas-cu{v}", "libcudnn": "nvidia-cudnn-cu{v}",
            "libnccl": "nvidia-nccl-cu{v}", "libcusparse": "nvidia-cusparse-cu{v}",
            "libcufft": "nvidia-cufft-cu{v}", "libcurand": "nvidia-curand-cu{v}",
            "libnvrtc": "nvidia-cuda-nvrtc-cu{v}", "libcusolver": "nvidia-cusolver-cu{v}",
            "libnvJitLink": "nvidia-nvjitlink-cu{v}"}


def lib_fix(lib: str) -> str:
    stem, _, ver = lib.partition(".so")
    major = ver.lstrip(".").split(".")[0] if ver else ""
    if stem == "libcuda":
        return (f"{lib} (the NVIDIA driver) cannot be loaded: install the NVIDIA driver, or run the container "
                f"with the NVIDIA runtime (--gpus all)")
    if stem.startswith("libtorch"):
        return f"{lib} is missing: the installed torch is a CPU build; reinstall the CUDA build vLLM was built for"
    pkg = _LIB_PKG.get(stem)
    if pkg and major.isdigit() and int(major) >= 13:  # CUDA 13 wheels drop the -cuNN suffix
        pkg = "'" + pkg.replace("-cu{v}", "") + f"=={major}.*'"
    hint = f" (e.g. pip install {pkg.format(v=major)})" if pkg and major else ""
    cuda = f"CUDA {major} " if major else "CUDA "
    return (f"{lib} cannot be loaded: install the {cuda}runtime libraries your vllm/torch build needs{hint}, "
            f"or put their directory on LD_LIBRARY_PATH in [server.env]")


def _lib(p: ParseState, msg: str) -> Failure | None:
    m = _LIB.search(msg)
    if not m:
        return None
    return Failure("missing_cuda_library", msg.strip(), lib_fix(m.group(1)))


NCCL_FIX = ('set NCCL_P2P_DISABLE = "1" in [server.env] so the GPUs exchange data through host memory instead '
            'of peer-to-peer, and add "--disable-custom-all-reduce" to server.extra_args; in Docker also run '
            'with --ipc=host')


def _nccl(p: ParseState, msg: str) -> Failure | None:
    return Failure("nccl_p2p", msg.strip(), NCCL_FIX)


_SHM_SIZE = re.compile(r"\(size (\d+)\)")
_SHM_CONTEXT = ("shm", "NCCL", "nccl", "shared memory", "shared_memory", "posix_fallocate", "MessageQueue")


def _shm(p: ParseState, msg: str) -> Failure | None:
    if "No space left on device" in msg and not any(w in msg for w in _SHM_CONTEXT):
        recent = _frames(p) + "\n" + "\n".join(p.recent)
        if not any(w in recent for w in _SHM_CONTEXT):
            return None  # a full disk, not /dev/shm
    m = _SHM_SIZE.search(msg)
    size = f" (a {int(m.group(1)) / (1 << 20):.1f} MiB segment did not fit)" if m else ""
    return Failure("shm_too_small", msg.strip(),
                   f"/dev/shm is too small for NCCL/shared-memory buffers{size}: run the container with "
                   f'--ipc=host or --shm-size=16g (or larger), or set NCCL_SHM_DISABLE = "1" in [server.env] '
                   f"(slower)")


_MODULE = re.compile(r"No module named '([\w.]+)'")
# import name -> the package that provides it, where the two differ
_PIP_NAMES = {"cv2": "opencv-python-headless", "yaml": "pyyaml", "PIL": "pillow", "sklearn": "scikit-learn",
              "google.protobuf": "protobuf", "attr": "attrs", "dateutil": "python-dateutil", "zmq": "pyzmq",
              "flash_attn": "flash-attn", "bs4": "beautifulsoup4", "Crypto": "pycryptodome",
              "sentencepiece": "sentencepiece", "msgspec": "msgspec", "triton": "triton"}


def _module(p: ParseState, msg: str) -> Failure | None:
    m = _MODULE.search(msg)
    if not m:
        return None
    name = m.group(1)
    top = name.split(".")[0]
    py = p.info.get("server_python")
    python = py or "<the server's python>"
    which = f" ({py})" if py else " (console.vllm_python, or the one running qwen-tui when that is empty)"
    if top == "vllm" and name != "vllm":
        fix = (f"vLLM's {name} is missing: the vllm install is broken or started from the vLLM source tree; "
               f"reinstall vllm into the server's interpreter{which} (`{python} -m pip install --force-reinstall "
               f"vllm`) and do not start it from inside the source directory")
    elif top in ("vllm", "torch"):
        fix = (f"the interpreter that runs the server{which} has no {top}: set console.vllm_python to the "
               f"python of the environment where vLLM is installed, or `{python} -m pip install vllm`")
    else:
        pkg = _PIP_NAMES.get(name) or _PIP_NAMES.get(top) or top.replace("_", "-")
        fix = (f"the server's Python has no module {top!r}: install it into the interpreter that runs vLLM"
               f"{which}: `{python} -m pip install {pkg}`")
    return Failure("missing_python_module", msg.strip(), fix)


def _positional_model(p: ParseState, msg: str) -> Failure | None:
    return Failure("bad_argument", msg.strip(),
                   "`vllm serve` takes the model as its first argument, not as --model: remove --model from "
                   "server.extra_args (qwen-tui passes server.model in the right place)")


# --- model files ---------------------------------------------------------------------------------

def _weights(p: ParseState, msg: str) -> Failure | None:
    model = p.info.get("model")
    where = f" of {model}" if model else ""
    return Failure("weights_incomplete", msg.strip(),
                   f"a weight file{where} is truncated or missing: download the model again (e.g. "
                   f"`huggingface-cli download <repo> --local-dir <dir>`), compare the shard sizes with the "
                   f"repo, check the disk is not full, and point server.model at the complete directory")


_QUOTED = re.compile(r"'([^'\s]+)'")
_NOT_FOLDER = re.compile(r"(\S+) is not a local folder")


def _model(p: ParseState, msg: str) -> Failure | None:
    if "does not exist" in msg and "The model `" in msg:
        return None  # an HTTP 404 for a request, not a startup failure
    m = _NOT_FOLDER.search(msg)
    if m:
        path = m.group(1).strip("'\"")
    else:
        quoted = [q for q in _QUOTED.findall(msg)
                  if q not in ("repo_name", "namespace/repo_name", "repo_type") and "://" not in q]
        path = quoted[-1] if quoted else p.info.get("model")
    what = f"server.model = {path!r}" if path else "server.model"
    return Failure("model_not_found", msg.strip(),
                   f"{what} is neither an existing local directory nor a valid Hugging Face repo id: fix the "
                   f'path (the directory must contain config.json) or use a repo id such as "Qwen/Qwen2.5-7B-Instruct"')


_BIND = re.compile(r"bind on address \('([^']*)', (\d+)\)")
_INTERNAL_PORT_WORDS = ("get_open_port", "TCPStore", "_create_c10d_store", "rendezvous", "zmq", "get_ip_port",
                        "init_process_group", "server socket has failed to listen")


def _port(p: ParseState, msg: str) -> Failure | None:
    low = msg.lower()
    if "address already in use" not in low and "eaddrinuse" not in low:
        return None
    m = _BIND.search(msg)
    internal = m is None and any(w in _frames(p) + msg for w in _INTERNAL_PORT_WORDS)
    if internal:
        fix = ("a port vLLM picked for its own processes (torch/ZMQ rendezvous) is taken: stop leftover vLLM "
               'processes, or set VLLM_PORT = "<a free port>" in [server.env]')
    else:
        port = m.group(2) if m else p.info.get("port")
        what = f"port {port} is already in use" if port else "the HTTP port is already in use"
        fix = f"{what}: set server.port to a free port, or stop the process that holds it (often an older vLLM)"
    return Failure("port_in_use", msg.strip(), fix)


# argparse's "prog: error: msg"; prog is the script or `vllm serve` (not any "x: error:" text)
_ARGPARSE = re.compile(r"\s*([\w.-]+\.py|vllm(?: [\w-]+)?|[\w./-]*api_server[\w.-]*|python\S* -m \S+): error: (.*)")
_KNOWN_FLAGS = (
    "--model", "--served-model-name", "--tensor-parallel-size", "--pipeline-parallel-size", "--dtype",
    "--gpu-memory-utilization", "--max-model-len", "--max-num-seqs", "--max-num-batched-tokens", "--host",
    "--port", "--enforce-eager", "--enable-prefix-caching", "--enable-chunked-prefill", "--kv-cache-dtype",
    "--block-size", "--swap-space", "--cpu-offload-gb", "--quantization", "--api-key", "--trust-remote-code",
    "--download-dir", "--seed", "--disable-log-requests", "--enable-log-requests", "--disable-log-stats",
    "--disable-uvicorn-access-log", "--generation-config", "--max-logprobs", "--kv-cache-memory-bytes",
    "--disable-custom-all-reduce", "--distributed-executor-backend", "--tokenizer", "--revision",
    "--enable-auto-tool-choice", "--tool-call-parser", "--chat-template", "--uvicorn-log-level",
)


def _argparse(p: ParseState, msg: str) -> Failure | None:
    m = _ARGPARSE.match(msg)
    if not m:
        return None
    text = m.group(2).strip()
    flags = re.findall(r"--[\w-]+", text)
    if text.startswith("unrecognized arguments") and flags:
        bad = flags[0]
        near = difflib.get_close_matches(bad, _KNOWN_FLAGS, n=1, cutoff=0.75)
        if near:
            key = near[0][2:].replace("-", "_")
            fix = (f"vllm serve does not know {bad}: did you mean {near[0]} (server.{key})? Fix it in "
                   f"server.extra_args, or use the server.{key} key instead")
        else:
            fix = f"vllm serve does not know {bad} (in this version): remove it from server.extra_args"
    elif flags:
        key = flags[0][2:].replace("-", "_")
        fix = f"vllm serve rejected {flags[0]} ({text}): fix server.{key} or server.extra_args"
    else:
        fix = f"vllm serve rejected its arguments ({text}): check the [server] keys and server.extra_args"
    return Failure("bad_argument", msg.strip(), fix)


_BF16 = re.compile(r"Your (.+?) GPU has compute.capability (\d+(?:\.\d+)?)")


def _bf16(p: ParseState, msg: str) -> Failure | None:
    m = _BF16.search(msg)
    gpu = f"the {m.group(1)} GPU has compute capability {m.group(2)}" if m else "this GPU is older than Ampere"
    return Failure("bf16_unsupported", msg.strip(),
                   f'{gpu} and bfloat16 needs 8.0: set server.dtype = "half" (float16)')


_TP = re.compile(r"attention heads \((\d+)\) must be divisible by tensor parallel size \((\d+)\)")


def _tp(p: ParseState, msg: str) -> Failure | None:
    m = _TP.search(msg)
    if not m:
        return Failure("tp_indivisible", msg.strip(),
                       "set server.tensor_parallel_size to a number that divides the model's attention heads")
    heads, tp = int(m.group(1)), int(m.group(2))
    divisors = [d for d in range(1, heads + 1) if heads % d == 0 and d <= max(tp, 8)]
    # prefer a power of two: the MLP/vocab dimensions must divide by it as well
    best = max((d for d in divisors if d < tp and d & (d - 1) == 0), default=1)
    return Failure("tp_indivisible", msg.strip(),
                   f"{heads} attention heads cannot be split over {tp} GPUs: set server.tensor_parallel_size = "
                   f"{best} (sizes that divide {heads}: {', '.join(map(str, divisors))})")
