"""Every projection of the project, by name: what serve runs and the CLI manages."""

from __future__ import annotations

from app.projections.base import Projection
from app.projections.deployments import Deployments
from app.projections.models import ModelRegistry


def all_projections() -> list[Projection]:
    return [ModelRegistry(), Deployments()]
