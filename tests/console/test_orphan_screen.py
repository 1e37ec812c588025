"""Pilot tests of the orphan dialog: real processes titled like vLLM stand for what a crash left;
the dialog kills only the highlighted pid, starts anyway on f, or cancels."""

from __future__ import annotations

from textual.widgets import DataTable

from backend.server import orphans
from backend.server.client import Poll
from tests.helpers.console import NoNvml, app_with, wait_until
from tests.helpers.procs import VLLM_LIKE, alive
from tui.screens.main import MainScreen
from tui.screens.orphans import OrphanScreen

STOPPED = Poll(state={"state": "stopped"})


def _scan_of(tree, *roles):
    found = orphans.scan({}, monitor=NoNvml())
    pids = {tree.pids[r] for r in roles}
    return orphans.OrphanScan([p for p in found.processes if p.pid in pids], None, "test")


def _beside_orphans(spawn, qhome, *roles):
    """(tree, app, client): a vLLM-like process tree, and a stopped console whose start finds the
    tree's processes of these roles left over."""
    tree = spawn(VLLM_LIKE, args=VLLM_LIKE["args"])
    app, client = app_with([STOPPED], qhome)
    client.orphan_scan = _scan_of(tree, *roles)
    return tree, app, client


async def _open(pilot, app):
    await pilot.press("s")
    assert await wait_until(pilot, lambda: isinstance(app.screen, OrphanScreen))
    return app.screen


async def _highlight(pilot, screen, pid):
    table = screen.query_one(DataTable)
    table.move_cursor(row=table.get_row_index(str(pid)))
    await pilot.pause()
    assert screen.highlighted_pid() == pid


async def test_k_kills_only_the_highlighted_pid_then_start_when_none_is_left(spawn, qhome):
    tree, app, client = _beside_orphans(spawn, qhome, "tp0", "tp1")
    p = tree.pids
    async with app.run_test(size=(150, 45)) as pilot:
        screen = await _open(pilot, app)
        table = screen.query_one(DataTable)
        assert table.row_count == 2 and client.actions == []  # nothing starts while they are listed
        assert table.get_row(str(p["tp1"]))[1] == "worker"
        await _highlight(pilot, screen, p["tp1"])
        await pilot.press("k")
        assert await wait_until(pilot, lambda: table.row_count == 1)
        assert not alive(p["tp1"]) and alive(p["tp0"]) and alive(p["engine"]) and alive(p["api"])
        assert "stopped in" in str(screen.query_one("#report").render())
        await pilot.press("k")  # the last one: the dialog closes and the start goes ahead
        assert await wait_until(pilot, lambda: isinstance(app.screen, MainScreen))
        assert await wait_until(pilot, lambda: client.actions[-1:] == ["start"])
    assert client.actions == [f"kill {p['tp1']}", f"kill {p['tp0']}", "start"]
    assert alive(p["engine"]) and alive(p["api"])


async def test_f_starts_beside_them_and_esc_cancels(spawn, qhome):
    tree, app, client = _beside_orphans(spawn, qhome, "engine")
    async with app.run_test(size=(150, 45)) as pilot:
        await _open(pilot, app)
        await pilot.press("escape")
        assert await wait_until(pilot, lambda: isinstance(app.screen, MainScreen))
        assert await wait_until(pilot, lambda: not app.screen.busy)
        assert client.actions == []
        await _open(pilot, app)
        await pilot.press("f")
        assert await wait_until(pilot, lambda: client.actions == ["start --allow-orphans"])
    assert all(alive(pid) for pid in tree.pids.values())


async def test_a_pid_that_is_gone_is_reported_not_retried(spawn, qhome):
    tree, app, client = _beside_orphans(spawn, qhome, "tp0", "tp1")
    p = tree.pids
    async with app.run_test(size=(150, 45)) as pilot:
        screen = await _open(pilot, app)
        import os
        import signal

        os.kill(p["tp0"], signal.SIGKILL)  # exits between the scan and the key press
        await pilot.pause(0.3)
        await _highlight(pilot, screen, p["tp0"])
        await pilot.press("k")
        assert await wait_until(pilot, lambda: "another program" in str(screen.query_one("#report").render()))
        assert isinstance(app.screen, OrphanScreen) and alive(p["tp1"])


async def test_a_plan_that_will_fail_is_shown_before_a_start(qhome):
    """40 heads cannot be split over 3 GPUs: the ledger says so before anything launches."""
    from tui.screens.preflight import PreflightScreen

    app, client = app_with([STOPPED], qhome, "server.tensor_parallel_size=3", "planner.gpu_count=4")
    async with app.run_test(size=(150, 45)) as pilot:
        assert await wait_until(pilot, lambda: app.screen.plan is not None)
        await pilot.press("s")
        assert await wait_until(pilot, lambda: isinstance(app.screen, PreflightScreen))
        assert "tp-not-divisible" in str(app.screen.query_one("#problems").render())
        await pilot.press("escape")
        assert await wait_until(pilot, lambda: isinstance(app.screen, MainScreen))
        await pilot.pause(0.2)
        assert client.actions == [] and not app.screen.busy
        await pilot.press("s")
        assert await wait_until(pilot, lambda: isinstance(app.screen, PreflightScreen))
        await pilot.press("f")
        assert await wait_until(pilot, lambda: client.actions == ["start"])


def _teammate(spawn, tmp_path):
    """(tree, proc, home, found): a live supervisor under another state dir (port 8011) that runs a
    vLLM-like tree, and a scan of this machine."""
    from tests.helpers.fake_supervisor import start_fake_supervisor

    tree = spawn(VLLM_LIKE, args=VLLM_LIKE["args"])
    home = tmp_path / "other-home"
    proc, write = start_fake_supervisor(tmp_path, home=home)
    write(path=home / "state" / "server.json", port=8011, pid=tree.pids["api"], pgid=tree.pgid)
    return tree, proc, home, orphans.scan({}, monitor=NoNvml())


async def test_a_teammates_server_alone_asks_nothing_and_start_goes_on(spawn, qhome, tmp_path):
    """Issue 26: a server another live supervisor runs is not an orphan: no dialog, the start goes
    on, and the console says whose server it starts beside."""
    tree, proc, home, found = _teammate(spawn, tmp_path)
    try:
        app, client = app_with([STOPPED], qhome)
        client.orphan_scan = orphans.OrphanScan([p for p in found.processes if p.pid in tree.pids.values()],
                                                None, "test", found.supervisors, found.servers)
        said = []
        async with app.run_test(size=(150, 45)) as pilot:
            app.notify = lambda text, **kw: said.append(text)
            await pilot.press("s")
            assert await wait_until(pilot, lambda: client.actions == ["start"])
            assert not isinstance(app.screen, OrphanScreen)
            assert any("starting beside" in t and "server on port 8011" in t for t in said), said
    finally:
        proc.kill()
        proc.wait()


async def test_beside_an_orphan_a_teammates_server_is_one_row_by_user_and_port(spawn, qhome, tmp_path):
    """Issue 20/26: with an orphan, the dialog opens; a teammate's server is one row by user and
    port, its pids never killed (its supervisor would restart them); k, then k again, stops that
    supervisor (this user's)."""
    tree, proc, home, found = _teammate(spawn, tmp_path)
    stray = spawn(VLLM_LIKE, args=VLLM_LIKE["args"])
    try:
        found = orphans.scan({}, monitor=NoNvml())
        mine = set(tree.pids.values()) | {stray.pids["tp0"]}
        app, client = app_with([STOPPED], qhome)
        # only this test's own: a real supervisor elsewhere on the box (a demo a developer runs) is not counted
        client.orphan_scan = orphans.OrphanScan([p for p in found.processes if p.pid in mine], None, "test",
                                                [s for s in found.supervisors if s.pid == proc.pid],
                                                [t for t in found.servers if t.sup.pid == proc.pid])
        stopped = []
        client.stop_supervisor = lambda info: stopped.append(info.pid) or "stopped"
        async with app.run_test(size=(150, 45)) as pilot:
            screen = await _open(pilot, app)
            question = str(screen.query_one("#question").render())
            assert question.startswith("1 orphan: vLLM processes no live qwen-tui supervisor runs")
            assert "not orphans: 1 teammate server" in question
            table = screen.query_one(DataTable)
            row = table.get_row(str(proc.pid))
            assert row[1].endswith("'s server") and "port 8011" in row[4] and str(home / "state") in row[4]
            assert table.get_row(str(stray.pids["tp0"]))[1] == "worker"
            assert str(tree.pids["engine"]) not in [str(k.value) for k in table.rows]  # its pids: not rows
            await _highlight(pilot, screen, proc.pid)
            await pilot.press("k")
            await pilot.pause(0.2)
            assert "k again" in str(screen.query_one("#report").render())
            assert client.actions == [] and alive(tree.pids["engine"])
            await pilot.press("k")
            assert await wait_until(pilot, lambda: stopped == [proc.pid])
        assert all(alive(pid) for pid in tree.pids.values())  # nothing of it killed by pid
    finally:
        proc.kill()
        proc.wait()


async def test_r_asks_about_orphans_before_the_old_server_stops_and_cancel_keeps_it(spawn, qhome):
    """Issue 26: `r` never leaves the box empty because of a question: the orphan dialog comes
    while the old server runs; esc cancels the restart and nothing was stopped."""
    tree = spawn(VLLM_LIKE, args=VLLM_LIKE["args"])
    app, client = app_with([Poll(state={"state": "ready"})], qhome, "console.confirm=never")
    client.orphan_scan = _scan_of(tree, "tp0")
    said = []
    async with app.run_test(size=(150, 45)) as pilot:
        assert await wait_until(pilot, lambda: app.screen.state.get("state") == "ready")
        app.notify = lambda text, **kw: said.append(text)
        await pilot.press("r")
        assert await wait_until(pilot, lambda: isinstance(app.screen, OrphanScreen))
        assert client.actions == []  # the question came first: the old server still runs
        await pilot.press("escape")
        assert await wait_until(pilot, lambda: any("not restarted (the old server keeps running)" in t
                                                   for t in said)), said
        assert client.actions == []
