"""`qwen-tui pull` resume figures at huggingface_hub's real chunk size, against tests/helpers/hub_mirror.py.

Builds a Qwen2-shaped model of about SIZE MB (random bytes as weights, the demo's tokenizer), split
into 4 shards, serves it from the fake hub mirror on 127.0.0.1 (throttled to RATE MB/s so that a kill
lands mid-file), runs `qwen-tui pull` as a process, kill -9s it at half, runs it again, and prints:
bytes on disk at the kill, bytes the second run fetched, bytes fetched twice (received by the killed
run, not yet on disk: about one 1 MiB read per file in flight), and
that the result is verified. Nothing leaves the machine.

    python benchmarks/bench_pull_resume.py [--size 400] [--rate 40]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def big_model(dest: Path, size_mb: int) -> Path:
    from backend import demo
    from tests.helpers.hub_mirror import shard_folder

    src = demo.generate(Path(tempfile.mkdtemp()) / "m")
    cfg = json.loads((src / "config.json").read_text())
    layers = max(2, size_mb * 10**6 // 17_301_504)  # bytes of one 1024-wide layer in BF16
    cfg.update(hidden_size=1024, intermediate_size=2048, num_attention_heads=8, num_key_value_heads=2,
               num_hidden_layers=int(layers))
    (src / "config.json").write_text(json.dumps(cfg, indent=2))
    specs = demo._tensors(cfg, cfg["vocab_size"])
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for name, shape, _ in specs:
        n = 2
        for d in shape:
            n *= d
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + n]}
        off += n
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(src / "model.safetensors", "wb") as f:
        f.write(len(raw).to_bytes(8, "little") + raw)
        left = off
        while left:
            n = min(left, 1 << 24)
            f.write(os.urandom(n))
            left -= n
    return shard_folder(src, dest, 4)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--size", type=int, default=400, help="model size in MB (default 400)")
    p.add_argument("--rate", type=float, default=40, help="mirror MB/s for the first run (default 40)")
    args = p.parse_args()
    from tests.helpers.hub_mirror import HubMirror

    tmp = Path(tempfile.mkdtemp())
    folder = big_model(tmp / "repo", args.size)
    total = sum(f.stat().st_size for f in folder.iterdir())
    mirror = HubMirror()
    mirror.add("Qwen/Qwen2.5-Bench", folder)
    mirror.start()
    mirror.rate_bps = args.rate * 1e6
    env = dict(os.environ, HF_ENDPOINT=mirror.url, QWEN_TUI_HOME=str(tmp / "home"), PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "backend.cli", "pull", "--json", "--local-dir", str(tmp / "out"), "Qwen/Qwen2.5-Bench"]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def on_disk() -> int:
        return sum(f.stat().st_size for f in (tmp / "out").rglob("*") if f.is_file() and
                   (f.suffix == ".part" or f.parent == tmp / "out"))

    while mirror.bytes_sent < total / 2 and proc.poll() is None:
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    mirror.wait_idle()
    t_kill = time.monotonic() - t0
    have, sent1 = on_disk(), mirror.bytes_sent
    mirror.rate_bps = 0
    t1 = time.monotonic()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    t_second = time.monotonic() - t1
    result = json.loads(r.stdout)
    sent2 = mirror.bytes_sent - sent1
    mirror.stop()
    print(f"model {total / 1e6:.1f} MB in 4 shards; first run kill -9 after {t_kill:.1f} s "
          f"({sent1 / 1e6:.1f} MB sent, {have / 1e6:.1f} MB on disk)")
    print(f"second run: {sent2 / 1e6:.1f} MB fetched (missing: {(total - have) / 1e6:.1f} MB) in {t_second:.1f} s, "
          f"exit {r.returncode}, verified {result['verified']}, resumed {result['bytes_resumed'] / 1e6:.1f} MB")
    print(f"fetched twice: {(sent1 + sent2 - total) / 1e6:.2f} MB (what the killed run had received but not written)")
    return 0 if result["verified"] and sent2 == total - have else 1


if __name__ == "__main__":
    sys.exit(main())
