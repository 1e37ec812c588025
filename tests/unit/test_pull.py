"""qwen-tui pull against tests/helpers/hub_mirror.py (a fake HF_ENDPOINT mirror) with the real huggingface_hub
client: full download and verification, resume after a dropped connection, a cancel and a kill -9
(bytes re-fetched measured at the mirror), disk full, a truncated shard, a 404 repo, the CLI."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from backend.pull import Pull, PullOptions
from backend.pull.hf import part_path
from backend.pull.progress import RemoteFile, Tracker, overall_line
from backend.pull.run import free_bytes
from backend.pull.verify import verify
from tests.helpers.hub_mirror import HubMirror, make_sharded_model

REPO = "Qwen/Qwen2.5-Demo-Sharded"
from tests.helpers import ROOT  # noqa: E402

SHARD2 = "model-00002-of-00003.safetensors"
SMALL_CHUNK = 64 * 1024  # huggingface_hub's DOWNLOAD_CHUNK_SIZE is 10 MB: bigger than these shards


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory):
    return make_sharded_model(tmp_path_factory.mktemp("repo") / "repo", 3)


@pytest.fixture
def mirror(model_folder):
    m = HubMirror()
    m.add(REPO, model_folder)
    m.start()
    yield m
    m.stop()


@pytest.fixture
def small_chunks(monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", SMALL_CHUNK)


def total_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file())


def pull(mirror, dest, revision=None, cancel=None, free=free_bytes, on_event=None):
    opts = PullOptions(REPO, endpoint=mirror.url, local_dir=dest, revision=revision)
    return Pull(opts, cancel=cancel, free=free, on_event=on_event).run()


def on_disk(dest: Path, mirror_folder: Path) -> int:
    """Bytes of the repo's files in dest: complete files and .part files."""
    n = 0
    for p in mirror_folder.iterdir():
        if (dest / p.name).is_file():
            n += (dest / p.name).stat().st_size
        elif part_path(dest, p.name).is_file():
            n += part_path(dest, p.name).stat().st_size
    return n


# -- the whole thing --------------------------------------------------------------------------------
def test_full_download_is_verified_with_the_parameter_count(mirror, model_folder, tmp_path, qhome):
    events = []
    r = pull(mirror, tmp_path / "out", on_event=lambda p, d: events.append(p))
    total = total_bytes(model_folder)
    assert r["verified"], r["problems"]
    assert r["problems"] == [] and r["shards"] == 3
    assert r["bytes"] == total and r["bytes_fetched"] == total and r["bytes_resumed"] == 0
    assert mirror.bytes_sent == total  # nothing fetched twice
    assert r["params"] == r["params_expected"] == 1_329_408 and r["params_source"] == "config.json"
    assert r["commit"] == "0123456789abcdef0123456789abcdef01234567"
    assert {"listing", "preflight", "downloading", "verifying", "done"} <= set(events)
    for p in model_folder.iterdir():
        assert (tmp_path / "out" / p.name).read_bytes() == p.read_bytes()
    # a second pull fetches nothing and is verified again
    again = pull(mirror, tmp_path / "out")
    assert again["verified"] and again["bytes_fetched"] == 0 and again["bytes_resumed"] == total
    assert mirror.bytes_sent == total
    assert all(f["status"] == "present" for f in again["files"])


def test_the_hub_api_calls_are_those_a_mirror_serves(mirror, tmp_path, qhome):
    pull(mirror, tmp_path / "out")
    kinds = {(m, p.split("/resolve/")[0] if "/resolve/" in p else p) for m, p, _ in mirror.log}
    assert ("GET", f"/api/models/{REPO}") in kinds
    assert ("HEAD", f"/{REPO}") in kinds and ("GET", f"/{REPO}") in kinds


def test_revision_is_resolved_and_an_unknown_one_is_named(mirror, model_folder, tmp_path, qhome):
    commit = "0123456789abcdef0123456789abcdef01234567"
    r = pull(mirror, tmp_path / "a", revision=commit)
    assert r["verified"] and r["revision"] == commit
    assert any(f"/revision/{commit}" in p for _, p, _ in mirror.log)
    bad = pull(mirror, tmp_path / "b", revision="v9")
    assert not bad["verified"] and bad["error_kind"] == "revision-not-found"
    assert "revision 'v9'" in bad["problems"][0]


def test_404_repo(mirror, tmp_path, qhome):
    opts = PullOptions("Qwen/No-Such-Model", endpoint=mirror.url, local_dir=tmp_path / "x")
    r = Pull(opts).run()
    assert not r["verified"] and r["error_kind"] == "repo-not-found"
    assert "Qwen/No-Such-Model not found" in r["problems"][0] and mirror.url in r["problems"][0]
    assert not (tmp_path / "x").exists()  # nothing created for a repo that is not there


def test_unreachable_endpoint_is_one_sentence(tmp_path, qhome):
    opts = PullOptions(REPO, endpoint="http://127.0.0.1:9", local_dir=tmp_path / "x")
    r = Pull(opts).run()
    assert not r["verified"] and r["error_kind"] == "unreachable"
    assert r["problems"][0].startswith("cannot reach http://127.0.0.1:9")


# -- interruptions ------------------------------------------------------------------------------------
def test_dropped_connection_mid_file_resumes_with_a_range(mirror, model_folder, tmp_path, qhome, small_chunks):
    mirror.cuts[SHARD2] = [300_000, 700_000]
    r = pull(mirror, tmp_path / "out")
    total = total_bytes(model_folder)
    assert r["verified"], r["problems"]
    ranges = [rng for m, p, rng in mirror.log if m == "GET" and p.endswith(SHARD2) and rng]
    assert len(ranges) == 2 and all(rng.startswith("bytes=") for rng in ranges)
    refetched = mirror.bytes_sent - total
    assert 0 <= refetched <= 2 * SMALL_CHUNK  # at most the chunk in flight at each drop
    assert r["bytes_fetched"] == total


def test_cancel_then_a_second_pull_continues(mirror, model_folder, tmp_path, qhome, small_chunks):
    mirror.rate_bps = 400_000
    cancel = threading.Event()
    seen = []

    def on_event(phase, data):
        if phase == "downloading":
            seen.append(data["done_bytes"])
            if data["done_bytes"] > 600_000:
                cancel.set()

    first = pull(mirror, tmp_path / "out", cancel=cancel, on_event=on_event)
    assert first.get("cancelled") and not first["verified"]
    assert "run pull again" in first["problems"][0]
    have = on_disk(tmp_path / "out", model_folder)
    total = total_bytes(model_folder)
    assert 0 < have < total
    mirror.wait_idle()
    sent_before = mirror.bytes_sent
    mirror.rate_bps = 0
    second = pull(mirror, tmp_path / "out")
    assert second["verified"], second["problems"]
    assert mirror.bytes_sent - sent_before == total - have  # exactly the bytes that were missing
    assert second["bytes_resumed"] == have and second["bytes_fetched"] == total - have
    assert not any(p.name.endswith(".part") for p in (tmp_path / "out").rglob("*"))


def _pull_process(mirror, dest, home, *extra):
    code = ("import sys, huggingface_hub.constants as c; c.DOWNLOAD_CHUNK_SIZE = %d; "
            "from backend.cli import main; sys.exit(main(sys.argv[1:]))" % SMALL_CHUNK)
    env = dict(os.environ, HF_ENDPOINT=mirror.url, QWEN_TUI_HOME=str(home), PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-c", code, "pull", "--local-dir", str(dest), *extra, REPO],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_kill_9_then_a_second_pull_fetches_only_what_is_missing(mirror, model_folder, tmp_path, qhome):
    mirror.rate_bps = 300_000
    dest = tmp_path / "out"
    proc = _pull_process(mirror, dest, qhome)
    deadline = time.time() + 60
    while on_disk(dest, model_folder) < 500_000 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    proc.kill()  # SIGKILL: no handler, no cleanup
    proc.wait(10)
    assert proc.returncode == -signal.SIGKILL
    mirror.wait_idle()
    have, sent_first = on_disk(dest, model_folder), mirror.bytes_sent
    total = total_bytes(model_folder)
    assert 0 < have < total
    mirror.rate_bps = 0
    again = _pull_process(mirror, dest, qhome, "--json")
    out, err = again.communicate(timeout=60)
    assert again.returncode == 0, err[-2000:]
    r = json.loads(out)
    assert r["verified"] and r["bytes_resumed"] == have
    sent_second = mirror.bytes_sent - sent_first
    assert sent_second == total - have  # the second run re-fetches nothing that was on disk
    lost = sent_first + sent_second - total  # received by the killed run but not yet written
    assert 0 <= lost <= 4 * SMALL_CHUNK
    print(f"kill -9 at {have} of {total} bytes on disk; second run fetched {sent_second}; "
          f"fetched twice: {lost} bytes")


def test_server_that_ignores_ranges_still_ends_verified(mirror, model_folder, tmp_path, qhome, small_chunks):
    mirror.cuts[SHARD2] = [300_000]
    mirror.ignore_range = True
    r = pull(mirror, tmp_path / "out")
    assert r["verified"], r["problems"]
    assert (tmp_path / "out" / SHARD2).read_bytes() == (model_folder / SHARD2).read_bytes()


# -- disk full ---------------------------------------------------------------------------------------
def test_preflight_refuses_with_the_numbers(mirror, model_folder, tmp_path, qhome):
    r = pull(mirror, tmp_path / "out", free=lambda p: (tmp_path, 1_000_000))
    msg = r["problems"][0]
    assert not r["verified"] and r["error_kind"] == "disk-full"
    assert "needs 2.7 MB more" in msg and "1.0 MB is free" in msg and str(tmp_path) in msg
    assert mirror.bytes_sent == 0


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 1 MiB tmpfs (needs root and a kernel that lets us mount; skipped otherwise)."""
    where = tmp_path / "tmpfs"
    where.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)],
                                           capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    yield where
    subprocess.run(["umount", "-l", str(where)], capture_output=True)


def test_a_real_small_filesystem_is_refused_before_any_byte(mirror, small_tmpfs, qhome):
    r = pull(mirror, small_tmpfs / "out")
    assert r["error_kind"] == "disk-full" and "1.0 MB is free" in r["problems"][0]
    assert mirror.bytes_sent == 0


def test_disk_full_mid_download_then_resume_after_space_is_freed(mirror, model_folder, small_tmpfs, qhome):
    # the pre-flight is told there is room (as when another writer fills the disk meanwhile)
    r = pull(mirror, small_tmpfs / "out", free=lambda p: (p, 10**9))
    assert not r["verified"] and r["error_kind"] == "disk-full", r["problems"]
    assert "disk full" in r["problems"][0] and "run pull again" in r["problems"][0]
    subprocess.run(["mount", "-o", "remount,size=8m", str(small_tmpfs)], check=True)
    again = pull(mirror, small_tmpfs / "out")
    assert again["verified"], again["problems"]


def test_a_full_disk_that_strikes_the_manifest_is_still_disk_full(mirror, tmp_path, qhome, monkeypatch):
    """ENOSPC where no shard is being written (the manifest after a file) is reported as a full disk too;
    it used to come out as "OSError: [Errno 28] ..." with error_kind "error"."""
    import errno

    from backend.pull import run

    def full(self, f):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(run.Pull, "_record", full)
    r = pull(mirror, tmp_path / "out")
    assert not r["verified"] and r["error_kind"] == "disk-full", r["problems"]
    assert "disk full" in r["problems"][0] and "run pull again" in r["problems"][0]


# -- verification ------------------------------------------------------------------------------------
def test_truncated_shard_on_the_mirror_is_caught_by_verification(model_folder, tmp_path, qhome):
    broken = tmp_path / "broken"
    shutil.copytree(model_folder, broken)
    data = (broken / SHARD2).read_bytes()
    (broken / SHARD2).write_bytes(data[: len(data) // 2])  # the mirror's own copy is cut short
    m = HubMirror()
    m.add(REPO, broken)
    m.start()
    try:
        r = pull(m, tmp_path / "out")
    finally:
        m.stop()
    assert not r["verified"]
    assert any(SHARD2 in p and "truncated" in p for p in r["problems"]), r["problems"]


def test_verify_names_a_shard_cut_after_download_and_a_missing_tokenizer(mirror, model_folder, tmp_path, qhome):
    r = pull(mirror, tmp_path / "out")
    from backend.pull.hf import HfSource

    listing = HfSource(mirror.url).list_files(REPO, None)
    out = tmp_path / "out"
    with open(out / SHARD2, "r+b") as f:
        f.truncate(1000)
    (out / "tokenizer.json").unlink()
    v = verify(out, listing, REPO)
    assert not v.verified
    text = "\n".join(v.problems)
    assert f"{SHARD2}: 1000 bytes, the source says" in text
    assert "tokenizer.json: missing" in text and "no tokenizer" in text
    assert "truncated" in text
    assert r["verified"]


def test_verify_compares_parameters_with_the_ledger_table(tmp_path):
    from backend.ledger.shapes import lookup, param_count
    from backend.pull.verify import _expected_params

    n, where, quant = _expected_params(tmp_path, "Qwen/Qwen2.5-14B-Instruct")
    assert n == param_count(lookup("Qwen2.5-14B-Instruct")) == 14_770_033_664
    assert where.startswith("ledger table") and not quant


# -- progress ----------------------------------------------------------------------------------------
def test_tracker_rate_and_eta_count_network_bytes_only():
    now = [0.0]
    t = Tracker([RemoteFile("a", 1000), RemoteFile("b", 3000)], clock=lambda: now[0])
    t.begin("a", 400)  # 400 bytes already on disk from an earlier run
    assert t.rate() is None
    for _ in range(6):
        now[0] += 0.5
        t.add("a", 100)
    snap = t.snapshot()
    assert snap["done_bytes"] == 1000 and snap["fetched_bytes"] == 600 and snap["resumed_bytes"] == 400
    assert snap["rate_bps"] == pytest.approx(200.0)
    assert snap["eta_s"] == pytest.approx(3000 / 200.0)
    assert "[0/2 files] 1.0 kB of 4.0 kB (25.0%), 200 B/s, ETA 15s" == overall_line(snap)


# -- the command line --------------------------------------------------------------------------------
def _cli(mirror, home, *args, timeout=60):
    env = dict(os.environ, HF_ENDPOINT=mirror.url, QWEN_TUI_HOME=str(home), PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "backend.cli", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_cli_pull_set_model_json(mirror, tmp_path, qhome):
    cfg = tmp_path / "config.toml"
    cfg.write_text('# mine\n[server]\n# which model\nmodel = "Qwen/Qwen2.5-14B-Instruct"  # was a repo id\n')
    dest = tmp_path / "models" / "demo"
    r = _cli(mirror, qhome, "--config", str(cfg), "pull", "--json", "--set-model", "--local-dir", str(dest), REPO)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    assert {"repo_id", "source", "revision", "local_dir", "files", "bytes", "seconds", "verified",
            "problems"} <= set(out)
    assert out["verified"] and out["source"] == "hf" and out["local_dir"] == str(dest.resolve())
    text = cfg.read_text()
    assert f'model = "{dest.resolve()}"  # was a repo id' in text and "# which model" in text
    assert "get  model-00001-of-00003.safetensors" in r.stderr and "ETA" in r.stderr  # progress on stderr
    status = _cli(mirror, qhome, "pull", "--status", "--json")
    data = json.loads(status.stdout)
    assert not data["running"] and data["state"]["phase"] == "done" and data["state"]["result"]["verified"]


def test_cli_exit_codes(mirror, tmp_path, qhome):
    assert _cli(mirror, qhome, "pull", "not-a-repo-id").returncode == 2
    missing = _cli(mirror, qhome, "pull", "--json", "Qwen/Missing", "--local-dir", str(tmp_path / "m"))
    assert missing.returncode == 1 and not json.loads(missing.stdout)["verified"]
    assert "Traceback" not in missing.stderr
    assert _cli(mirror, qhome, "pull").returncode == 2


def test_token_is_never_printed(mirror, tmp_path, qhome, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_secretsecretsecret123")
    r = _cli(mirror, qhome, "pull", "--json", "--local-dir", str(tmp_path / "o"), REPO)
    assert r.returncode == 0, r.stderr[-1000:]
    assert "hf_secret" not in r.stdout + r.stderr
    assert json.loads(r.stdout)["token"] == "HF_TOKEN"
    assert "hf_secret" not in (qhome / "state" / "pull.json").read_text()


def test_detached_pull_shows_in_status_and_can_be_cancelled(mirror, tmp_path, qhome):
    mirror.rate_bps = 50_000  # about 55 s for the whole repo: the cancel must come while it runs, on a busy machine too
    r = _cli(mirror, qhome, "pull", "--detach", "--json", "--local-dir", str(tmp_path / "d"), REPO)
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    deadline = time.time() + 20
    data = {}
    while time.time() < deadline:
        s = _cli(mirror, qhome, "pull", "--status", "--json")
        data = json.loads(s.stdout) if s.stdout else {}
        if data.get("running") and (data["state"].get("progress") or {}).get("done_bytes"):
            break
        time.sleep(0.2)
    assert data.get("running") and data["state"]["pid"] == info["pid"] and data["state"]["detached"]
    busy = _cli(mirror, qhome, "pull", "--local-dir", str(tmp_path / "d2"), REPO)
    assert busy.returncode == 1 and "a pull is running" in busy.stderr
    c = _cli(mirror, qhome, "pull", "--cancel")
    assert c.returncode == 0 and "cancelled" in c.stdout
    deadline = time.time() + 15  # the pull notices the cancel between two reads of the throttled mirror
    while True:
        final = json.loads(_cli(mirror, qhome, "pull", "--status", "--json").stdout)
        if not final["running"] or time.time() > deadline:
            break
        time.sleep(0.3)
    assert not final["running"] and final["state"]["phase"] == "cancelled"
    assert Path(info["log_path"]).is_file()


# -- the doctor ----------------------------------------------------------------------------------------
def _doctor_model(qhome, model="Qwen/Qwen2.5-14B-Instruct"):
    from backend import doctor
    from backend.settings import load

    s = load(overrides=[f"server.model={model}"])
    env = doctor.Env(environ={"HOME": str(qhome), "HF_HOME": str(qhome / "hf")}, home=qhome,
                     server_status=lambda: {"state": "stopped"}, processes=lambda s, m: [])
    ctx = doctor.Context(s, env)
    return doctor.check_model(ctx)


def test_doctor_offers_pull_for_a_repo_id_not_downloaded(qhome):
    c = _doctor_model(qhome)
    assert c.status == "warn" and "not downloaded" in c.message and "~29.5 GB" in c.message
    assert "qwen-tui pull --set-model Qwen/Qwen2.5-14B-Instruct" in c.fix


def test_doctor_sees_a_pulled_folder_and_a_running_pull(mirror, model_folder, qhome):
    from backend.pull.run import default_local_dir

    dest = default_local_dir(REPO)
    r = pull(mirror, dest)
    assert r["verified"]
    c = _doctor_model(qhome, REPO)
    assert c.status == "warn" and f"was pulled into {dest}" in c.message and str(dest) in c.fix
    (dest / SHARD2).unlink()
    c = _doctor_model(qhome, REPO)
    assert "is not finished" in c.message and f"qwen-tui pull --set-model {REPO}" in c.fix


def test_a_start_is_told_when_the_repo_id_is_not_downloaded(mirror, qhome, monkeypatch, tmp_path):
    from backend.pull.run import default_local_dir, not_downloaded
    from backend.settings import load

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert "is not downloaded" in not_downloaded(load(overrides=[f"server.model={REPO}"]))
    assert not_downloaded(load(demo=True)) is None  # a folder
    assert pull(mirror, default_local_dir(REPO))["verified"]
    assert "was pulled into" in not_downloaded(load(overrides=[f"server.model={REPO}"]))
