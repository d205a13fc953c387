"""Building provider trees over HTTP for the allocation-candidates tests."""

from __future__ import annotations

import uuid as uuidlib
from dataclasses import dataclass, field
from urllib.parse import urlencode

from tests.support.client import PlacementClient

SHARES = "MISC_SHARES_VIA_AGGREGATE"


@dataclass
class Provider:
    name: str
    uuid: str
    parent: str | None
    root: str
    inventory: dict[str, dict] = field(default_factory=dict)
    traits: set[str] = field(default_factory=set)
    aggregates: set[str] = field(default_factory=set)


class Cloud:
    """Providers, inventories, traits, aggregates and usage, made through the API."""

    def __init__(self, client: PlacementClient) -> None:
        self.client = client
        self.providers: dict[str, Provider] = {}  # by name
        self.aggregates: dict[str, str] = {}  # name -> uuid
        self.usage: dict[tuple[str, str], int] = {}  # (provider uuid, class) -> used
        self._known_names: set[str] = set()

    def provider(self, name: str, parent: str | None = None, traits=(), aggregates=(),
                 **inventory) -> str:
        """A provider; inventory as ``VCPU=8`` or ``VGPU={"total": 4, "max_unit": 2}``."""
        parent_uuid = self.providers[parent].uuid if parent else None
        body = self.client.create_provider(name, parent=parent_uuid)
        root = self.providers[parent].root if parent else body["uuid"]
        self.providers[name] = Provider(name, body["uuid"], parent_uuid, root)
        if inventory:
            self.set_inventory(name, **inventory)
        if traits:
            self.set_traits(name, *traits)
        if aggregates:
            self.set_aggregates(name, *aggregates)
        return body["uuid"]

    def uuid(self, name: str) -> str:
        return self.providers[name].uuid

    def name_of(self, uuid: str) -> str:
        return next(p.name for p in self.providers.values() if p.uuid == uuid)

    def _generation(self, provider_uuid: str) -> int:
        return self.client.get(f"/resource_providers/{provider_uuid}").json()["generation"]

    def ensure_class(self, rc: str) -> None:
        if rc.startswith("CUSTOM_") and rc not in self._known_names:
            resp = self.client.put(f"/resource_classes/{rc}", version="1.7")
            assert resp.status in (201, 204), resp
            self._known_names.add(rc)

    def ensure_trait(self, trait: str) -> None:
        if trait.startswith("CUSTOM_") and trait not in self._known_names:
            resp = self.client.put(f"/traits/{trait}", version="1.6")
            assert resp.status in (201, 204), resp
            self._known_names.add(trait)

    def set_inventory(self, name: str, **inventory) -> None:
        provider = self.providers[name]
        records = {}
        for rc, value in inventory.items():
            self.ensure_class(rc)
            record = {"total": value} if isinstance(value, int) else dict(value)
            records[rc] = record
        provider.inventory = records
        body = {"resource_provider_generation": self._generation(provider.uuid),
                "inventories": records}
        resp = self.client.put(f"/resource_providers/{provider.uuid}/inventories", body)
        assert resp.status == 200, resp

    def set_traits(self, name: str, *traits: str) -> None:
        provider = self.providers[name]
        for trait in traits:
            self.ensure_trait(trait)
        provider.traits = set(traits)
        body = {"resource_provider_generation": self._generation(provider.uuid),
                "traits": sorted(traits)}
        resp = self.client.put(f"/resource_providers/{provider.uuid}/traits", body,
                               version="1.6")
        assert resp.status == 200, resp

    def aggregate(self, name: str) -> str:
        return self.aggregates.setdefault(name, str(uuidlib.uuid4()))

    def set_aggregates(self, name: str, *aggregates: str) -> None:
        provider = self.providers[name]
        provider.aggregates = set(aggregates)
        body = {"resource_provider_generation": self._generation(provider.uuid),
                "aggregates": sorted(self.aggregate(a) for a in aggregates)}
        resp = self.client.put(f"/resource_providers/{provider.uuid}/aggregates", body,
                               version="1.19")
        assert resp.status == 200, resp

    def consume(self, allocations: dict[str, dict[str, int]],
                consumer: str | None = None) -> str:
        """Allocate ``{provider name: {class: amount}}`` to a new consumer."""
        consumer = consumer or str(uuidlib.uuid4())
        body = {
            "allocations": {self.uuid(name): {"resources": resources}
                            for name, resources in allocations.items()},
            "project_id": str(uuidlib.uuid4()), "user_id": str(uuidlib.uuid4()),
            "consumer_generation": None,
        }
        resp = self.client.put(f"/allocations/{consumer}", body, version="1.28")
        assert resp.status == 204, resp
        for name, resources in allocations.items():
            for rc, amount in resources.items():
                key = (self.uuid(name), rc)
                self.usage[key] = self.usage.get(key, 0) + amount
        return consumer

    def candidates(self, version: str = "1.39", **params):
        """GET /allocation_candidates; ``params`` values may be lists (repeated keys)."""
        pairs = [(key, item) for key, value in params.items()
                 for item in (value if isinstance(value, list) else [value])]
        path = "/allocation_candidates"
        if pairs:
            path += "?" + urlencode(pairs, safe=":,!")
        return self.client.get(path, version=version)

    def named(self, body: dict) -> list[dict]:
        """The allocation requests of a 1.12+ answer, with provider names."""
        return [{self.name_of(u): alloc["resources"] for u, alloc in req["allocations"].items()}
                for req in body["allocation_requests"]]


def as_set(named: list[dict]) -> set[frozenset]:
    """Allocation requests as comparable values."""
    return {frozenset((name, frozenset(resources.items()))
                      for name, resources in request.items()) for request in named}
