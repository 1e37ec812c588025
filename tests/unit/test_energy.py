"""Energy per token (backend/energy.py) in `bench` and `bench --sweep`: a FAKE server (the sweep tests'
FakeScheduler, NOT vLLM) and a FAKE NVML power reading; without NVML every figure is unknown, never 0."""

from __future__ import annotations

import csv
import io
from types import SimpleNamespace

import httpx
import pytest

from backend import energy
from backend.bench import sweep
from tests.helpers.console import NoNvml
from tests.helpers.sweep import FakeScheduler


class FakePower:
    """A GpuMonitor stand-in: two cards drawing `watts` each, a 350 W limit each. NOT NVML."""

    reason = None

    def __init__(self, watts: float = 150.0) -> None:
        self.watts, self.reads = watts, 0
        self.gpus = (SimpleNamespace(index=0, power_limit_w=350.0), SimpleNamespace(index=1, power_limit_w=350.0))

    def available(self) -> bool:
        return True

    def sample(self):
        self.reads += 1
        return [SimpleNamespace(power_w=self.watts), SimpleNamespace(power_w=self.watts)]


def test_trapezoids_over_the_readings():
    p = energy.PowerSampler(FakePower())
    p.points = [(0.0, 100.0), (1.0, 300.0), (3.0, 300.0)]
    f = p.figures(output_tokens=900, output_tokens_per_s=300.0)
    assert f["energy_j"] == 200 + 600 and f["power_w_mean"] == pytest.approx(800 / 3, abs=0.1)
    assert f["joules_per_output_token"] == pytest.approx(800 / 900, abs=1e-4)
    assert f["output_tokens_per_s_per_w"] == pytest.approx(300 / (800 / 3), abs=1e-4)
    assert f["power_limit_w"] == 700 and f["power_samples"] == 3 and f["energy_note"] is None


@pytest.mark.parametrize("gpus", [None, NoNvml()], ids=["none", "no-driver"])
def test_without_nvml_every_figure_is_unknown_and_says_why(gpus):
    f = energy.PowerSampler(gpus).figures(100, 10.0)
    assert all(f[k] is None for k in ("energy_j", "joules_per_output_token", "output_tokens_per_s_per_w"))
    assert "no NVML" in f["energy_note"]
    assert energy.line(f).strip().startswith("energy        unknown (no NVML")


def test_the_cap_command_is_printed_for_the_user_never_run():
    cmd = energy.cap_command([0, 1], 700.0)
    assert cmd.startswith("sudo nvidia-smi -i 0,1 -pl 280 ") and "-pl 350` puts the limit back" in cmd
    assert energy.cap_command([0], None) is None


async def test_a_sweep_has_joules_per_token_and_tok_per_watt_per_level(qhome, repo_config):
    from backend.settings import load

    power = FakePower(150.0)
    res = await sweep.run_sweep(load(config=str(repo_config)), sweep.SweepConfig([1, 4], input_tokens=20,
                                output_tokens=60, requests_per_level=4),
                                transport=httpx.MockTransport(FakeScheduler(seqs=4, delay=0.01)), sample_s=0.01,
                                gpus=power)
    for r in res["levels"]:
        assert r["power_w_mean"] == 300.0 and r["power_samples"] >= 2
        tokens = r["output_tokens_per_s"] * r["wall_s"]
        assert r["joules_per_output_token"] == pytest.approx(r["energy_j"] / tokens, rel=0.02)
        assert r["output_tokens_per_s_per_w"] == pytest.approx(r["output_tokens_per_s"] / 300.0, rel=0.01)
        assert r["energy_j"] == pytest.approx(300.0 * r["wall_s"], rel=0.3)  # the readings span the level
    assert res["power_cap_command"].startswith("sudo nvidia-smi -i 0,1 -pl 280")
    text = "\n".join(sweep.table_lines(res))
    assert "J/token" in text and "tok/s/W" in text and "power cap, to compare: sudo nvidia-smi" in text
    rows = list(csv.DictReader(io.StringIO(sweep.csv_text(res))))
    assert float(rows[0]["joules_per_output_token"]) == res["levels"][0]["joules_per_output_token"]


async def test_a_sweep_without_nvml_says_unknown_in_the_table_json_and_csv(qhome, repo_config):
    from backend.settings import load

    res = await sweep.run_sweep(load(config=str(repo_config)), sweep.SweepConfig([2], input_tokens=20,
                                output_tokens=20, requests_per_level=2),
                                transport=httpx.MockTransport(FakeScheduler()), sample_s=0.01, gpus=None)
    r = res["levels"][0]
    assert r["completed"] == 2 and r["joules_per_output_token"] is None and "no NVML" in r["energy_note"]
    assert res["power_cap_command"] is None
    assert any(x.startswith("energy: unknown (no NVML") for x in sweep.table_lines(res))
    row = next(csv.DictReader(io.StringIO(sweep.csv_text(res))))
    assert row["joules_per_output_token"] == "unknown" and row["output_tokens_per_s_per_w"] == "unknown"
