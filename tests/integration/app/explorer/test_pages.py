"""What the server sends for the explorer and the self-hosted docs pages, without a
browser: one shell for every page, only its own files, no address of another site."""

from __future__ import annotations

import re

import httpx2
import pytest
from fastapi import FastAPI


@pytest.fixture
async def anonymous(app: FastAPI) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://causeway")


class TestShell:
    async def test_every_page_is_the_same_shell_with_a_same_origin_policy(
        self, anonymous: httpx2.AsyncClient
    ) -> None:
        first = await anonymous.get("/ui/events/dx-1/lineage", params={"up": 3})
        second = await anonymous.get("/ui/queues")
        assert first.status_code == second.status_code == 200
        assert first.text == second.text
        assert "default-src 'self'" in first.headers["content-security-policy"]
        assert (await anonymous.get("/ui")).headers["location"] == "/ui/"

    async def test_only_the_explorers_own_files_are_served(
        self, anonymous: httpx2.AsyncClient
    ) -> None:
        script = await anonymous.get("/ui/static/graph.js")
        assert script.status_code == 200
        assert script.headers["content-type"].startswith("text/javascript")
        for name in ("router.py", "nothing.js"):
            answer = await anonymous.get(f"/ui/static/{name}")
            assert answer.status_code == 404, name
            assert answer.headers["content-type"] == "application/problem+json"
        # An encoded slash is a path beyond static/: the page shell, not the module's file.
        escape = await anonymous.get("/ui/static/..%2Frouter.py")
        assert "APIRouter" not in escape.text


class TestDocsPages:
    @pytest.mark.parametrize("path", ["/docs", "/redoc", "/graphql", "/ui/"])
    async def test_no_page_names_another_site(
        self, anonymous: httpx2.AsyncClient, path: str
    ) -> None:
        page = await anonymous.get(path, headers={"Accept": "text/html"})
        assert page.status_code == 200
        assert re.findall(r"""(?:src|href)=["']?(https?:)?//""", page.text) == []

    async def test_an_asset_not_on_the_list_is_not_found(
        self, anonymous: httpx2.AsyncClient
    ) -> None:
        assert (await anonymous.get("/assets/swagger-ui.css")).status_code == 200
        answer = await anonymous.get("/assets/package.json")
        assert answer.status_code == 404
