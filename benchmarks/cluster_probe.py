"""Two (or more) boxes behind the real vllm-router, driven only through `qwen-tui cluster ...`.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/cluster_probe.py OUT_DIR              # STUB boxes (CPU, ~1 min)
    flock /tmp/qwen-tui-vllm.lock env PYTHONPATH=$PWD .venv/bin/python benchmarks/cluster_probe.py OUT --demo
                                                     # two REAL vLLM CPU --demo boxes, one core each (~10 min)
    source /tmp/w/env.sh && python3 benchmarks/cluster_probe.py OUT --real /tmp/w/h200.toml --util 0.4   # GPU box

Each box is a local qwen-tui supervisor with its own QWEN_TUI_HOME and config (ports 8101, 8102, …).
With --demo the boxes serve the real vLLM CPU demo (`qwen-tui --demo`) on 8011, 8012, …, box N's
OpenMP threads bound to core N-1 (VLLM_CPU_OMP_THREADS_BIND); hold /tmp/qwen-tui-vllm.lock.
With --real the boxes serve the real vLLM of BASE_TOML (its model, --load-format dummy on the lent
GPU; both on one card, each with --util of its memory, eager); without either they serve the STUB
OpenAI server of tests/helpers/stub_openai.py (not vLLM). Steps, each timed, all figures in OUT/cluster_probe.json:
  1. cluster serve (boxes, then the router), cluster status: every box healthy in the router;
  2. kill -9 of box2's engine while a bench runs through the router: failed requests (at most those in
     flight on it: the router retries only before the first byte), seconds until
     the router marks it unhealthy and (its supervisor restarts it) healthy again;
  3. cluster restart (rolling) while benches run through the router, one after another until the
     restart is over: failed requests, per-box share;
  4. cluster stop.
Exit 1 when a check failed.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.helpers.cluster import box_cli, cluster_toml, free_port, make_box, make_demo_box  # noqa: E402


def qt(cfg: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    env.pop("QWEN_TUI_CONFIG", None)
    return subprocess.run([sys.executable, "-m", "backend.cli", "--config", str(cfg), *args], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=ROOT)


def bench(cfg: Path, url: str, n: int, c: int, k: int) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    env.pop("QWEN_TUI_CONFIG", None)
    return subprocess.Popen([sys.executable, "-m", "backend.cli", "--config", str(cfg), "bench", "--url", url,
                             "--requests", str(n), "--concurrency", str(c), "--max-tokens", str(k), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)


def real_box(out: Path, name: str, port: int, base: Path, util: float) -> dict:
    import tomlkit

    doc = tomlkit.parse(base.read_text())
    doc["server"]["port"] = port
    doc["server"]["gpu_memory_utilization"] = util
    doc["server"]["enforce_eager"] = True
    doc.setdefault("console", tomlkit.table())["restart"] = "on-failure"
    cfg = out / f"{name}.toml"
    cfg.write_text(tomlkit.dumps(doc))
    home = out / f"{name}-home"
    home.mkdir(parents=True, exist_ok=True)
    return {"name": name, "port": port, "home": home, "config": cfg, "api_url": f"http://127.0.0.1:{port}"}


def status(cfg: Path) -> dict:
    r = qt(cfg, "cluster", "status", "--json", timeout=120)
    try:
        return json.loads(r.stdout)
    except ValueError:
        return {"error": r.stderr[-500:], "boxes": [], "router": {}}


def row(st: dict, name: str) -> dict:
    return next((b for b in st.get("boxes") or [] if b["name"] == name), {})


def engine_pid(box: dict) -> int | None:
    """The engine of a real box (its EngineCore child), or the stub itself."""
    import psutil

    pid = json.loads(box_cli(box, "status", "--json", timeout=60).stdout).get("pid")
    if not pid:
        return None
    for child in psutil.Process(pid).children(recursive=True):
        try:
            if "EngineCore" in " ".join(child.cmdline()) or "EngineCore" in child.name():
                return child.pid
        except psutil.Error:
            continue
    return pid


def wait(pred, timeout: float, step: float = 0.5) -> float | None:
    t0 = time.time()
    while time.time() - t0 < timeout:
        if pred():
            return round(time.time() - t0, 1)
        time.sleep(step)
    return None


def uptime() -> str:
    """The 1, 5 and 15 minute load averages (what `uptime` shows)."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def leftovers(out: Path) -> list[int]:
    """Processes of this run still alive (their QWEN_TUI_HOME is under OUT): killed, and counted."""
    import psutil

    found = []
    for p in psutil.process_iter(["pid"]):
        try:
            if p.pid != os.getpid() and str(out) in p.environ().get("QWEN_TUI_HOME", ""):
                found.append(p.pid)
                p.kill()
        except psutil.Error:
            continue
    return found


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--real", metavar="BASE_TOML", help="serve the real vLLM of this config (GPU box)")
    p.add_argument("--demo", action="store_true", help="serve the real vLLM CPU demo, one core per box")
    p.add_argument("--util", type=float, default=0.4, help="with --real: each box's gpu_memory_utilization")
    p.add_argument("--boxes", type=int, default=2)
    p.add_argument("--requests", type=int, default=0, help="bench requests per phase (default 400 stub, 160 real)")
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=0, help="default 10 stub, 64 real")
    a = p.parse_args()
    out = Path(a.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    os.environ["QWEN_TUI_HOME"] = str(out / "console-home")
    real = bool(a.real or a.demo)
    n = a.requests or (160 if real else 400)
    k = a.max_tokens or (64 if real else 10)
    if a.demo:
        cores = os.cpu_count() or 1
        boxes = [make_demo_box(out, f"box{i + 1}", 8011 + i, core=i % cores) for i in range(a.boxes)]
    elif a.real:
        boxes = [real_box(out, f"box{i + 1}", 8101 + i, Path(a.real), a.util) for i in range(a.boxes)]
    else:
        boxes = [make_box(out, f"box{i + 1}", token_delay=0.02) for i in range(a.boxes)]
        for box in boxes:  # like a real box: its supervisor restarts a killed engine
            box["config"].write_text(box["config"].read_text().replace('restart = "never"', 'restart = "on-failure"'))
    text = cluster_toml(boxes, free_port(), free_port(), extra="ready_timeout_s = 600\ndrain_timeout_s = 120\n")
    text = text.replace("ready_timeout_s = 60\n", "").replace("drain_timeout_s = 20\n", "")
    if a.demo:
        text = "[server]\nmodel = \"qwen-tui-demo\"\n\n" + text.replace('router_policy = "round_robin"',
                                                                      'router_policy = "cache_aware"')
    elif a.real:
        import tomllib

        name = tomllib.loads(Path(a.real).read_text())["server"].get("served_model_name") or "model"
        text = f"[server]\nmodel = \"{name}\"\n\n" + text.replace('router_policy = "round_robin"',
                                                                   'router_policy = "cache_aware"')
    else:
        text = "[server]\nmodel = \"stub-model\"\n\n" + text
    cfg = out / "cluster.toml"
    cfg.write_text(text)
    res: dict = {"mode": "real vLLM CPU --demo, one core per box" if a.demo else "real vLLM" if a.real
                 else "STUB boxes", "boxes": len(boxes), "checks": {},
                 "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpus": os.cpu_count(),
                 "loadavg": {"start": uptime()}}
    checks = res["checks"]
    t0 = time.time()
    try:
        r = qt(cfg, "cluster", "serve", "--json")
        res["serve_s"] = round(time.time() - t0, 1)
        res["serve"] = json.loads(r.stdout) if r.stdout.strip() else {"stderr": r.stderr[-800:]}
        st = status(cfg)
        res["status_after_serve"] = st
        url = st["router"]["url"]
        checks["all_healthy_after_serve"] = st["router"].get("healthy_workers") == len(boxes) and all(
            b["healthy"] and b["router_healthy"] for b in st["boxes"])
        print(f"serve: {res['serve_s']} s; router {st['router'].get('healthy_workers')}/"
              f"{st['router'].get('total_workers')} healthy", flush=True)

        # 2. kill -9 of box2's engine under load
        victim = boxes[-1]
        b = bench(cfg, url, n, a.concurrency, k)
        time.sleep(3)
        pid = engine_pid(victim)
        os.kill(pid, signal.SIGKILL)
        t_kill = time.time()
        res["kill"] = {"box": victim["name"], "pid": pid}
        res["kill"]["unhealthy_after_s"] = wait(lambda: row(status(cfg), victim["name"]).get("router_healthy")
                                                is False, 60)
        o, _ = b.communicate(timeout=900)
        rep = json.loads(o)
        res["kill"]["bench"] = {k2: rep.get(k2) for k2 in ("completed", "failed", "errors", "wall_s", "per_box")}
        back = wait(lambda: row(status(cfg), victim["name"]).get("router_healthy") is True, 420 if real else 90, 1)
        res["kill"]["healthy_again_after_s"] = None if back is None else round(time.time() - t_kill, 1)
        res["loadavg"]["after_kill"] = uptime()
        # a kill -9 cuts the streams in flight on that box (the router retries only before the first byte)
        checks["kill_requests_keep_succeeding"] = (rep.get("completed") or 0) >= n - a.concurrency
        checks["kill_seen_unhealthy"] = res["kill"]["unhealthy_after_s"] is not None
        checks["kill_back_healthy"] = back is not None
        print(f"kill -9 {victim['name']} engine: unhealthy after {res['kill']['unhealthy_after_s']} s, healthy "
              f"again after {res['kill']['healthy_again_after_s']} s; bench {rep.get('completed')}/{n}, "
              f"{rep.get('failed')} failed", flush=True)

        # 3. rolling restart under load: benches back to back until the restart is over
        m = n * 4 if not real else n
        runs: list[dict] = []
        b = bench(cfg, url, m, a.concurrency, k)
        time.sleep(2)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
        env.pop("QWEN_TUI_CONFIG", None)
        restart = subprocess.Popen([sys.executable, "-m", "backend.cli", "--config", str(cfg), "cluster", "restart",
                                    "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                   cwd=ROOT)
        while True:
            o, _ = b.communicate(timeout=900)
            runs.append(json.loads(o))
            if restart.poll() is not None:
                break
            b = bench(cfg, url, m, a.concurrency, k)
        ro, re_ = restart.communicate(timeout=900)
        res["rolling"] = json.loads(ro) if ro.strip() else {"stderr": re_[-800:]}
        res["rolling_s"] = res["rolling"].get("seconds")  # the restart alone; the benches ran on until after it
        r = restart
        rep = {"requests": sum(x.get("requests") or 0 for x in runs),
               "completed": sum(x.get("completed") or 0 for x in runs),
               "failed": sum(x.get("failed") or 0 for x in runs),
               "errors": [e for x in runs for e in (x.get("errors") or [])][:10],
               "wall_s": round(sum(x.get("wall_s") or 0 for x in runs), 1), "benches": len(runs),
               "per_box": [x.get("per_box") for x in runs],
               "output_tokens_per_s": [x.get("output_tokens_per_s") for x in runs],
               "notes": [nt for x in runs for nt in (x.get("notes") or [])]}
        res["rolling_bench"] = rep
        res["loadavg"]["after_rolling"] = uptime()
        checks["rolling_ok"] = r.returncode == 0 and res["rolling"].get("ok") is True
        checks["rolling_no_failed_request"] = rep.get("failed") == 0 and rep.get("completed") == rep.get("requests")
        st = status(cfg)
        res["status_after_rolling"] = st
        checks["all_healthy_after_rolling"] = st["router"].get("healthy_workers") == len(boxes)
        print(f"rolling restart: {res['rolling_s']} s, ok {res['rolling'].get('ok')}; {len(runs)} bench(es) "
              f"back to back over {rep['wall_s']} s: {rep.get('completed')}/{rep.get('requests')}, "
              f"{rep.get('failed')} failed; per box {rep.get('per_box')}", flush=True)
    except Exception as e:  # the stop below always runs; the error is a figure too
        res["error"] = f"{type(e).__name__}: {e}"
        print(res["error"], flush=True)
    finally:
        r = qt(cfg, "cluster", "stop", "--json")
        res["stop"] = json.loads(r.stdout) if r.stdout.strip() else {"stderr": r.stderr[-500:]}
        res["left_after_stop"] = leftovers(out)
        res["loadavg"]["end"] = uptime()
        (out / "cluster_probe.json").write_text(json.dumps(res, indent=1, default=str))
    checks["nothing_left_after_stop"] = not res.get("left_after_stop")
    ok = all(checks.values()) and "error" not in res and len(checks) == 8
    print(json.dumps(checks), "->", "ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
