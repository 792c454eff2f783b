"""Bundles to apps: the loader, the environment factory and the command's checks."""

import asyncio

import httpx
import pytest

from riftco.serve.cli import main
from riftco.serve.loading import default_model_id, from_environment


@pytest.fixture(scope="module")
def bundle(tmp_path_factory, tiny_model):
    from riftco.interchange import save_bundle

    path = tmp_path_factory.mktemp("bundle") / "my-model.rift"
    save_bundle(path, *tiny_model)
    return path


def test_default_model_id(bundle):
    assert default_model_id(bundle) == "my-model"


@pytest.mark.anyio
async def test_from_environment(bundle, monkeypatch, anyio_backend):
    monkeypatch.delenv("RIFTCO_SERVE_MODEL", raising=False)
    with pytest.raises(RuntimeError, match="RIFTCO_SERVE_MODEL"):
        from_environment()
    monkeypatch.setenv("RIFTCO_SERVE_MODEL", str(bundle))
    monkeypatch.setenv("RIFTCO_API_KEY", "k")
    monkeypatch.setenv("RIFTCO_SERVE_ALLOWED_HOSTS", "llm.internal, other")
    app = from_environment()
    state = app.state.riftco
    assert state.config.allowed_hosts == ("llm.internal", "other")
    async with app.router.lifespan_context(app):
        await asyncio.to_thread(state.loaded.wait)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://llm.internal") as c:
            models = await c.get("/v1/models", headers={"authorization": "Bearer k"})
    assert [m["id"] for m in models.json()["data"]] == ["my-model"]


def test_command_refuses_bad_arguments(tmp_path, capsys):
    assert main([str(tmp_path / "missing.rift")]) == 2
    assert "no such bundle" in capsys.readouterr().err
    (tmp_path / "x.rift").write_bytes(b"")
    assert main([str(tmp_path / "x.rift"), "--max-running", "0"]) == 2
    assert "--max-running" in capsys.readouterr().err
