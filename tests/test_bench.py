"""The benchmark runs end to end at tiny sizes (no timing is asserted: only that it works)."""

from __future__ import annotations

from conftest import ENV_NAMES


def test_bench_smoke(postgres_url, tmp_path, monkeypatch):
    from bench.__main__ import main

    for name in ENV_NAMES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DATABASE_URL", postgres_url)
    out = tmp_path / "RESULTS.md"
    argv = ["--only", "resume,start,sweep,retention", "--runs", "2", "--rounds", "1"]
    argv += ["--retention-runs", "2", "--retention-cycles", "1"]
    argv += ["--sweep-sizes", "4,8", "--sweep-answered", "2", "--profile", "never"]
    assert main([*argv, "--out", str(out)]) == 0
    text = out.read_text()
    assert "## Machine" in text and "cpu model" in text
    figures = ("resume throughput, postgres", "start throughput, sqlite", "one sweep")
    for figure in (*figures, "bytes per finished run"):
        assert figure in text


def test_lgserver_client_code_runs_against_lg(postgres_url, tmp_path, monkeypatch):
    """Section 15's client code on this product's ``/lg`` alone (``langgraph dev`` is not
    needed: its dependency group stays out of the default install)."""
    import json

    from bench.__main__ import main
    from bench.lgserver import CONFIG

    for name in ENV_NAMES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DATABASE_URL", postgres_url)
    out = tmp_path / "RESULTS.md"
    argv = ["--only", "lgserver", "--lg-servers", "product", "--backends", "postgres,sqlite"]
    argv += ["--lg-runs", "2", "--lg-concurrency", "2", "--profile", "never"]
    assert main([*argv, "--out", str(out)]) == 0
    text = out.read_text()
    for backend in ("postgres", "sqlite"):
        assert f"/lg decision to done p99, {backend}, c=2" in text
    assert "| runs/s | 2 |" in text
    # langgraph dev loads the same graph the product runs
    [(graph_id, spec)] = json.loads(CONFIG.read_text())["graphs"].items()
    assert spec == graph_id.replace(":approval", ":graph") == "bench.lg_graph:graph"
