"""Helpers shared by the claims tests (allocations, usages, reshaper)."""

from __future__ import annotations

import sqlalchemy as sa

from allotment.db import tables as t
from tests.support.client import PlacementClient


def provider_with(client: PlacementClient, name: str, parent: str | None = None,
                  **inventories: dict | int) -> str:
    """A provider with inventories given as CLASS=total or CLASS={fields}."""
    rp = client.create_provider(name, parent=parent)
    if inventories:
        records = {rc: {"total": v} if isinstance(v, int) else v
                   for rc, v in inventories.items()}
        resp = client.put(f"/resource_providers/{rp['uuid']}/inventories",
                          {"resource_provider_generation": rp["generation"],
                           "inventories": records})
        assert resp.status == 200, resp
    return rp["uuid"]


def generation(client: PlacementClient, rp_uuid: str) -> int:
    return client.get(f"/resource_providers/{rp_uuid}").json()["generation"]


def usages(client: PlacementClient, rp_uuid: str) -> dict[str, int]:
    return client.get(f"/resource_providers/{rp_uuid}/usages").json()["usages"]


def put(client: PlacementClient, consumer: str, allocations: dict, generation: int | None = None,
        version: str = "1.28", project: str = "proj", user: str = "user", **extra):
    """PUT /allocations/{consumer} in the dict format with a consumer generation."""
    body = {"allocations": {rp: {"resources": res} for rp, res in allocations.items()},
            "project_id": project, "user_id": user, **extra}
    if int(version.split(".")[1]) >= 28:
        body["consumer_generation"] = generation
    return client.put(f"/allocations/{consumer}", body, version=version)


def state(database) -> dict[str, list]:
    """Every row the claims side writes, to show a refused request changed nothing."""
    with database.engine.connect() as conn:
        return {
            name: sorted(tuple(str(v) for v in row) for row in conn.execute(sa.select(*cols)))
            for name, cols in {
                "allocations": [t.allocations.c.resource_provider_id,
                                t.allocations.c.consumer_id,
                                t.allocations.c.resource_class_id, t.allocations.c.used],
                "consumers": [t.consumers.c.uuid, t.consumers.c.generation,
                              t.consumers.c.project_id, t.consumers.c.user_id,
                              t.consumers.c.consumer_type_id],
                "providers": [t.resource_providers.c.uuid, t.resource_providers.c.generation],
                "inventories": [t.inventories.c.resource_provider_id,
                                t.inventories.c.resource_class_id, t.inventories.c.total,
                                t.inventories.c.reserved, t.inventories.c.max_unit],
                "projects": [t.projects.c.external_id],
                "users": [t.users.c.external_id],
                "consumer_types": [t.consumer_types.c.name],
            }.items()
        }
