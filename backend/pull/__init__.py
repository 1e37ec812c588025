"""`qwen-tui pull`: get a model repo into a local folder, with progress, resume and a verified result.

- `run.Pull(PullOptions(...)).run()`: list the files, check the free space (refuse with numbers),
  download (per-file and overall progress, resumable, cancellable), verify; returns the result dict.
- `hf.HfSource`: the Hugging Face hub or an `HF_ENDPOINT` mirror, through `huggingface_hub`.
- `ms.ModelScopeSource`: ModelScope, through the optional `modelscope` client.
- `verify.verify()`: shards, sizes, safetensors headers, config and tokenizer, parameter count.
- `state`: the running pull's state file in the XDG state dir, which a console follows.
- `cli`: the headless command and the detached run.
"""

from backend.pull.progress import Cancelled, Listing, PullError, RemoteFile, Tracker
from backend.pull.run import Pull, PullOptions, default_local_dir

__all__ = ["Cancelled", "Listing", "Pull", "PullError", "PullOptions", "RemoteFile", "Tracker",
           "default_local_dir"]
