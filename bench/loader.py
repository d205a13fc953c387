"""Loading provider trees into a server through the Placement HTTP API, concurrently.

One thread loads one whole tree (parents before children); many threads load many
trees at once. Every write carries the provider generation returned by the previous
one. A server error or a dropped connection is retried after re-reading the
provider (upstream on SQLite can answer 500 "database is locked" under concurrent
writes), so loading is reliable on both servers without being serialised.
"""

from __future__ import annotations

import random
import threading
import time
import uuid as uuidlib
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from http_client import PlacementClient, Reply

NAMESPACE = uuidlib.UUID("6b0f1c9e-4d0a-4c57-9a55-2f3b8f0c7a11")
ATTEMPTS = 12


def stable_uuid(name: str) -> str:
    """The same uuid for the same name on every server and every run."""
    return str(uuidlib.uuid5(NAMESPACE, name))


@dataclass
class Provider:
    """A provider to create, with its inventory, traits, aggregates and children."""

    name: str
    inventories: dict[str, dict] = field(default_factory=dict)
    traits: list[str] = field(default_factory=list)
    aggregates: list[str] = field(default_factory=list)
    children: list[Provider] = field(default_factory=list)

    @property
    def uuid(self) -> str:
        return stable_uuid(self.name)

    def walk(self) -> Iterator[Provider]:
        yield self
        for child in self.children:
            yield from child.walk()


class LoadError(RuntimeError):
    pass


def count_providers(roots: Iterable[Provider]) -> int:
    return sum(1 for root in roots for _ in root.walk())


class Loader:
    """Writes trees, allocations and cleans up, counting the requests it sends."""

    def __init__(self, client: PlacementClient, concurrency: int) -> None:
        self.client = client
        self.concurrency = concurrency
        self.requests = 0
        self._lock = threading.Lock()

    def _send(self, method: str, path: str, body: object = None) -> Reply:
        with self._lock:
            self.requests += 1
        return self.client.request(method, path, body)

    def _retrying(self, what: str, call) -> Reply:
        """Run ``call`` until it answers below 500, a few times at most."""
        last = ""
        for attempt in range(ATTEMPTS):
            try:
                reply = call()
            except OSError as exc:
                last = repr(exc)
            else:
                if reply.status < 500:
                    return reply
                last = reply.describe()
            # Jitter, so that writers that collided do not collide again in step.
            time.sleep(random.uniform(0.02, min(1.0, 0.05 * 2 ** attempt)))
        raise LoadError(f"{what}: {last}")

    def _generation(self, provider: Provider) -> int:
        reply = self._retrying(f"GET provider {provider.name}", lambda: self._send(
            "GET", f"/resource_providers/{provider.uuid}"))
        if reply.status != 200:
            raise LoadError(f"GET provider {provider.name}: {reply.describe()}")
        return reply.json()["generation"]

    def _create(self, provider: Provider, parent: str | None) -> int:
        body = {"name": provider.name, "uuid": provider.uuid}
        if parent:
            body["parent_provider_uuid"] = parent
        reply = self._retrying(f"create {provider.name}",
                               lambda: self._send("POST", "/resource_providers", body))
        if reply.status == 200:
            return reply.json()["generation"]
        if reply.status == 409:  # an earlier attempt got through before failing
            return self._generation(provider)
        raise LoadError(f"create {provider.name}: {reply.describe()}")

    def _put(self, provider: Provider, what: str, key: str, value: object,
             generation: int) -> int:
        path = f"/resource_providers/{provider.uuid}/{what}"
        for _ in range(ATTEMPTS):
            body = {key: value, "resource_provider_generation": generation}
            reply = self._retrying(f"PUT {what} of {provider.name}",
                                   lambda body=body: self._send("PUT", path, body))
            if reply.status == 200:
                return reply.json()["resource_provider_generation"]
            if reply.status != 409:
                break
            generation = self._generation(provider)
        raise LoadError(f"PUT {what} of {provider.name}: {reply.describe()}")

    def _load_tree(self, root: Provider) -> None:
        pending: list[tuple[Provider, str | None]] = [(root, None)]
        while pending:
            provider, parent = pending.pop(0)
            generation = self._create(provider, parent)
            if provider.inventories:
                generation = self._put(provider, "inventories", "inventories",
                                       provider.inventories, generation)
            if provider.traits:
                generation = self._put(provider, "traits", "traits", provider.traits,
                                       generation)
            if provider.aggregates:
                generation = self._put(provider, "aggregates", "aggregates",
                                       provider.aggregates, generation)
            pending.extend((child, provider.uuid) for child in provider.children)

    def create_traits(self, traits: Iterable[str]) -> None:
        for trait in sorted({t for t in traits if t.startswith("CUSTOM_")}):
            reply = self._retrying(f"create trait {trait}",
                                   lambda trait=trait: self._send("PUT", f"/traits/{trait}"))
            if reply.status not in (201, 204):
                raise LoadError(f"create trait {trait}: {reply.describe()}")

    def load(self, roots: list[Provider], progress: str = "") -> float:
        """Create all trees; return the wall time it took."""
        self.create_traits(t for root in roots for p in root.walk() for t in p.traits)
        start = time.perf_counter()
        done = 0
        step = max(1, len(roots) // 5)
        with ThreadPoolExecutor(self.concurrency) as pool:
            for _ in pool.map(self._load_tree, roots):
                done += 1
                if progress and len(roots) >= 100 and done % step == 0 and done < len(roots):
                    print(f"    {progress}: {done}/{len(roots)} trees loaded", flush=True)
        return time.perf_counter() - start

    def allocate(self, consumer: str, allocations: dict) -> Reply:
        """Write one consumer's allocations (PUT /allocations, microversion 1.38+)."""
        body = {
            "allocations": allocations,
            "project_id": stable_uuid("bench-project"),
            "user_id": stable_uuid("bench-user"),
            "consumer_generation": None,
            "consumer_type": "INSTANCE",
        }
        return self._send("PUT", f"/allocations/{consumer}", body)

    def allocate_retrying(self, consumer: str, allocations: dict) -> None:
        reply = self._retrying(f"allocate {consumer}",
                               lambda: self.allocate(consumer, allocations))
        if reply.status != 204:
            raise LoadError(f"allocate {consumer}: {reply.describe()}")

    def cleanup(self, roots: list[Provider], consumers: Iterable[str]) -> None:
        """Remove what a scenario wrote (only needed against a long-lived --url server)."""
        consumers = list(consumers)
        with ThreadPoolExecutor(self.concurrency) as pool:
            list(pool.map(lambda c: self._send("DELETE", f"/allocations/{c}"), consumers))

            def drop_tree(root: Provider) -> None:
                # Children first: a provider with children cannot be deleted.
                for provider in reversed(list(root.walk())):
                    self._send("DELETE", f"/resource_providers/{provider.uuid}")

            list(pool.map(drop_tree, roots))
        traits = {t for root in roots for p in root.walk() for t in p.traits}
        for trait in sorted(t for t in traits if t.startswith("CUSTOM_")):
            self._send("DELETE", f"/traits/{trait}")
