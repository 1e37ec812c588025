"""Several boxes behind one router (`qwen-tui cluster`, `qwen-tui router`).

Each box keeps its own qwen-tui supervisor; this package talks to a box only through that box's own
`qwen-tui ... --json` commands, run through its transport (a local process or an ssh argv prefix),
and reads its load from the box's own /metrics. The router is the real `vllm-router` (the `router`
extra), supervised like the vLLM server. Design: ../shared/notes/beyond-one-box.md, section A.

config.py   [cluster] and [[cluster.box]] from the config file (absent: no cluster, nothing changes)
transport.py  the argv that runs a box's qwen-tui command, and its JSON answer
router.py   the vllm-router command line, its HTTP admin API, and its supervisor
ops.py      status rows, drain / undrain, serve / stop / restart (rolling), the per-box share
"""
