"""A nova cloud as Placement sees it: compute hosts, their periodic calls, boots, moves and
deletes, for the cloud day (bench/cloud_day.py).

- ``Cloud``: N hosts as nova's libvirt driver reports them (VCPU 64 at 4.0, MEMORY_MB
  262,144 with 512 reserved, DISK_GB 4,096, nova's capability traits and OWNER_NOVA,
  four aggregates), pre-filled to half their memory with four flavors; with
  ``sriov`` a tenth of them carry an SR-IOV agent with two physical functions
  (neutron's bandwidth inventories) and each rack aggregate a sharing DISK_GB pool.
- ``load_cloud``: created through the API, as nova would: bench/loader.py's trees,
  then each host's instances in one ``POST /allocations``.
- ``build_schedule``: every host's periodic calls at nova's default intervals, each
  host at its own phase so the calls spread evenly; boots, moves and deletes evenly
  spaced at rates that grow with N.
- ``Nova``: the requests of a boot, a move and a delete, as nova's scheduler,
  conductor and compute make them, answers read as nova reads them.
"""

from __future__ import annotations

import contextlib
import itertools
import random
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from http_client import PlacementClient, Prepared, Reply
from loader import Loader, LoadError, Provider, stable_uuid
from open_loop import Event, Failed, KindTally

# --- the cloud --------------------------------------------------------------------------

# What nova's libvirt driver reports for a host of this kind: its capabilities (33)
# and the owner trait; COMPUTE_STATUS_DISABLED appears only on disabled services.
HOST_TRAITS = [*sorted([
    "COMPUTE_NET_ATTACH_INTERFACE", "COMPUTE_NET_ATTACH_INTERFACE_WITH_TAG",
    "COMPUTE_VOLUME_ATTACH_WITH_TAG", "COMPUTE_VOLUME_EXTEND", "COMPUTE_VOLUME_MULTI_ATTACH",
    "COMPUTE_TRUSTED_CERTS", "COMPUTE_IMAGE_TYPE_AKI", "COMPUTE_IMAGE_TYPE_AMI",
    "COMPUTE_IMAGE_TYPE_ARI", "COMPUTE_IMAGE_TYPE_ISO", "COMPUTE_IMAGE_TYPE_QCOW2",
    "COMPUTE_IMAGE_TYPE_RAW", "COMPUTE_DEVICE_TAGGING", "COMPUTE_NODE", "COMPUTE_RESCUE_BFV",
    "COMPUTE_SOCKET_PCI_NUMA_AFFINITY", "COMPUTE_ADDRESS_SPACE_EMULATED",
    "COMPUTE_ADDRESS_SPACE_PASSTHROUGH", "COMPUTE_GRAPHICS_MODEL_VGA",
    "COMPUTE_GRAPHICS_MODEL_VIRTIO", "COMPUTE_NET_VIF_MODEL_VIRTIO",
    "COMPUTE_NET_VIF_MODEL_E1000", "COMPUTE_STORAGE_BUS_VIRTIO", "COMPUTE_STORAGE_BUS_SCSI",
    "COMPUTE_STORAGE_BUS_SATA", "COMPUTE_STORAGE_BUS_IDE", "COMPUTE_STORAGE_BUS_USB",
    "COMPUTE_SECURITY_UEFI_SECURE_BOOT", "COMPUTE_VIOMMU_MODEL_AUTO", "HW_CPU_X86_AVX",
    "HW_CPU_X86_AVX2", "HW_CPU_X86_SSE42", "HW_CPU_X86_AESNI",
]), "OWNER_NOVA"]
HOST_INVENTORY = {
    "VCPU": {"total": 64, "allocation_ratio": 4.0, "max_unit": 64},
    "MEMORY_MB": {"total": 262144, "reserved": 512, "max_unit": 262144},
    "DISK_GB": {"total": 4096, "max_unit": 4096},
}
HALF_MEMORY = (262144 - 512) // 2


@dataclass(frozen=True)
class Flavor:
    name: str
    vcpus: int
    memory_mb: int
    disk_gb: int

    @property
    def resources(self) -> dict[str, int]:
        return {"VCPU": self.vcpus, "MEMORY_MB": self.memory_mb, "DISK_GB": self.disk_gb}

    @property
    def query(self) -> str:
        return (f"resources=VCPU:{self.vcpus},MEMORY_MB:{self.memory_mb},"
                f"DISK_GB:{self.disk_gb}")


# Four flavors used alike: 5,632 MB on average, so half a host's memory holds 23.
FLAVORS = (Flavor("m1.small", 1, 2048, 20), Flavor("m1.medium", 2, 4096, 40),
           Flavor("m1.large", 4, 8192, 80), Flavor("r1.medium", 2, 8192, 40))
PROJECT = stable_uuid("cloudday-project")
USER = stable_uuid("cloudday-user")

# nova's defaults: [DEFAULT] update_resources_interval is 60 s (the periodic task's
# spacing), [compute] resource_provider_association_refresh 300 s.
ALLOCATIONS_INTERVAL = 60.0
REFRESH_INTERVAL = 300.0
BOOTS_PER_HOST_SECOND = 2 / 10_000
PERIODIC_KINDS = ("allocations", "aggregates", "traits", "sharing")
ACTION_KINDS = ("boot", "move", "delete")
CANDIDATES_VERSION = "1.36"
CONSUMER_VERSION = "1.28"  # nova's report client for GET/PUT/POST of a consumer's


@dataclass(frozen=True)
class Host:
    index: int
    name: str
    uuid: str
    aggregates: tuple[str, ...]


class Cloud:
    """N compute hosts in four aggregates each, and (``sriov``) a tenth of them with an
    SR-IOV agent and two physical functions below, a sharing storage pool per rack."""

    def __init__(self, hosts: int, sriov: bool = False) -> None:
        self.size = hosts
        self.sriov = sriov
        self.prefix = "cloudday-sriov" if sriov else "cloudday"
        self.hosts = [self._host(i) for i in range(hosts)]

    def aggregate(self, kind: str, number: int) -> str:
        return stable_uuid(f"{self.prefix}-aggregate-{kind}-{number}")

    def _host(self, i: int) -> Host:
        # An availability zone of three, a cell per 1,000 hosts, a rack per 40 hosts
        # and a hardware class of eight: four aggregates, each of a different size.
        aggregates = (self.aggregate("az", i % 3), self.aggregate("cell", i // 1000),
                      self.aggregate("rack", i // 40), self.aggregate("class", i % 8))
        name = f"{self.prefix}-host-{i}"
        return Host(i, name, stable_uuid(name), aggregates)

    @property
    def racks(self) -> int:
        return (self.size + 39) // 40

    def trees(self) -> list[Provider]:
        roots = []
        for host in self.hosts:
            root = Provider(name=host.name, inventories=HOST_INVENTORY,
                            traits=list(HOST_TRAITS), aggregates=list(host.aggregates))
            if self.sriov and host.index % 10 == 0:
                agent = Provider(name=f"{host.name}:NIC Switch agent")
                agent.children = [Provider(
                    name=f"{host.name}:NIC Switch agent:ens{pf}",
                    inventories={rc: {"total": 10_000_000} for rc in
                                 ("NET_BW_EGR_KILOBIT_PER_SEC", "NET_BW_IGR_KILOBIT_PER_SEC")},
                    traits=[f"CUSTOM_PHYSNET_PHYSNET{pf}", "CUSTOM_VNIC_TYPE_DIRECT"])
                    for pf in range(2)]
                root.children = [agent]
            roots.append(root)
        if self.sriov:
            roots += [Provider(name=f"{self.prefix}-pool-rack-{rack}",
                               inventories={"DISK_GB": {"total": 1_000_000}},
                               traits=["MISC_SHARES_VIA_AGGREGATE"],
                               aggregates=[self.aggregate("rack", rack)])
                      for rack in range(self.racks)]
        return roots

    def prefill(self, host: Host) -> list[tuple[str, Flavor]]:
        """The instances a host holds at the start: half its memory, four flavors alike."""
        held: list[tuple[str, Flavor]] = []
        used = 0
        for j in range(64):
            flavor = FLAVORS[(host.index + j) % len(FLAVORS)]
            if used + flavor.memory_mb > HALF_MEMORY:
                break
            used += flavor.memory_mb
            held.append((stable_uuid(f"{host.name}-instance-{j}"), flavor))
        return held


def load_cloud(url: str, cloud: Cloud, concurrency: int = 8, timeout: float = 60.0) -> tuple[
        float, int]:
    """Create the cloud through the API: the trees (bench/loader.py, as nova's calls make
    them), then each host's instances in one ``POST /allocations`` (1.28). Returns the
    seconds it took and the requests sent."""
    client = PlacementClient(url, timeout=timeout)
    loader = Loader(client, concurrency)
    started = time.perf_counter()
    loader.load(cloud.trees(), progress=f"{cloud.size} hosts" if cloud.size >= 1000 else "")
    writer = PlacementClient(url, microversion=CONSUMER_VERSION, timeout=timeout)

    def fill(host: Host) -> None:
        body = {uuid: {"allocations": {host.uuid: {"resources": flavor.resources}},
                       "project_id": PROJECT, "user_id": USER, "consumer_generation": None}
                for uuid, flavor in cloud.prefill(host)}
        last = ""
        for _ in range(5):
            try:
                reply = writer.post("/allocations", body)
            except OSError as exc:
                last = repr(exc)
                continue
            if reply.status == 204:
                return
            last = reply.describe()
            if reply.status < 500:
                break
        raise LoadError(f"pre-filling {host.name}: {last}")

    try:
        with ThreadPoolExecutor(concurrency) as pool:
            list(pool.map(fill, cloud.hosts))
    finally:
        writer.close()
        client.close()
    return time.perf_counter() - started, loader.requests + len(cloud.hosts)


@dataclass(frozen=True)
class Rates:
    """How often each thing happens, in calls per second of the whole cloud."""

    scale: float = 1.0  # 2.0: twice nova's rates (the traffic of twice the hosts)
    actions: float = 1.0  # boots, moves and deletes only, on top of ``scale``

    def periodic_interval(self, kind: str) -> float:
        base = ALLOCATIONS_INTERVAL if kind == "allocations" else REFRESH_INTERVAL
        return base / self.scale

    def action_rate(self, kind: str, hosts: int) -> float:
        boots = BOOTS_PER_HOST_SECOND * hosts * self.scale * self.actions
        return boots / 10 if kind == "move" else boots

    def periodic_per_second(self, hosts: int) -> float:
        return sum(hosts / self.periodic_interval(kind) for kind in PERIODIC_KINDS)


def periodic_requests(client: PlacementClient, host: Host) -> dict[str, Prepared]:
    """A host's four periodic calls, built once, at the versions nova sends them."""
    base = f"/resource_providers/{host.uuid}"
    members = ",".join(host.aggregates)
    return {
        # _remove_deleted_instances_allocations asks with no microversion.
        "allocations": client.prepare("GET", base + "/allocations", microversion=None),
        "aggregates": client.prepare("GET", base + "/aggregates", microversion="1.19"),
        "traits": client.prepare("GET", base + "/traits", microversion="1.6"),
        "sharing": client.prepare(
            "GET", f"/resource_providers?member_of=in:{members}"
                   "&required=MISC_SHARES_VIA_AGGREGATE", microversion="1.18"),
    }


def build_schedule(client: PlacementClient, cloud: Cloud, rates: Rates,
                   seconds: float) -> list[Event]:
    """Every event of a run of ``seconds``, in time order: each host's periodic calls at
    a phase of their own (spread evenly over the interval), actions evenly spaced."""
    events: list[Event] = []
    n = cloud.size
    for host in cloud.hosts:
        requests = periodic_requests(client, host)
        for kind in PERIODIC_KINDS:
            interval = rates.periodic_interval(kind)
            # The refresh's three calls go out together (nova makes them in a row),
            # at a phase unrelated to the allocations' (a golden-ratio stride).
            fraction = (host.index + 0.5) / n if kind == "allocations" \
                else (host.index * 0.6180339887 + 0.25) % 1.0
            at = fraction * interval
            while at < seconds:
                events.append(Event(at, kind, requests[kind]))
                at += interval
    for kind in ACTION_KINDS:
        rate = rates.action_rate(kind, n)
        if rate <= 0:
            continue
        count = 0
        at = 0.5 / rate
        while at < seconds:
            events.append(Event(at, kind, payload=FLAVORS[count % len(FLAVORS)]))
            count += 1
            at += 1 / rate
    events.sort()
    return events


class Instances:
    """The instances the cloud holds: which host and flavor, for moves and deletes.
    An instance being moved or deleted is out of the pool until its action ends."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, tuple[str, Flavor]] = {}
        self._order: list[str] = []

    def add(self, uuid: str, host: str, flavor: Flavor) -> None:
        with self._lock:
            self._held[uuid] = (host, flavor)
            self._order.append(uuid)

    def take(self, rng: random.Random) -> tuple[str, str, Flavor] | None:
        with self._lock:
            while self._order:
                index = rng.randrange(len(self._order))
                self._order[index], self._order[-1] = self._order[-1], self._order[index]
                uuid = self._order.pop()
                if uuid in self._held:
                    host, flavor = self._held.pop(uuid)
                    return uuid, host, flavor
            return None

    def __len__(self) -> int:
        return len(self._held)

    def held(self) -> dict[str, tuple[str, Flavor]]:
        with self._lock:
            return dict(self._held)


def _error_code(reply: Reply) -> str:
    with contextlib.suppress(ValueError, KeyError, IndexError, TypeError):
        return reply.json()["errors"][0].get("code") or ""
    return ""


class Nova:
    """The scheduler's, conductor's and compute's requests for boots, moves and deletes,
    made as nova makes them, on one sender's connection."""

    RETRY_ATTEMPTS = 4  # nova's report client's @retries

    def __init__(self, client: PlacementClient, instances: Instances, rng: random.Random,
                 names: Iterator[str], timeout: float) -> None:
        self.client = client
        self.instances = instances
        self.rng = rng
        self.names = names
        self.timeout = timeout
        self.boot_paths = {
            flavor: client.prepare(
                "GET", f"/allocation_candidates?{flavor.query}&limit=1000"
                       "&root_required=OWNER_NOVA,!COMPUTE_STATUS_DISABLED",
                microversion=CANDIDATES_VERSION) for flavor in FLAVORS}

    def _send(self, tally: KindTally, method: str, path: str, body: object = None,
              version: str = CONSUMER_VERSION) -> Reply:
        tally.requests += 1
        return self.client.send(self.client.prepare(method, path, body, microversion=version),
                                self.timeout)

    def _pause(self, attempt: int) -> None:
        # nova sleeps random.uniform(0, attempt * 2) before each try after the first.
        if attempt:
            time.sleep(self.rng.uniform(0, attempt * 2))

    def _spread_order(self, answer: dict, exclude: str | None) -> list[tuple[str, dict]]:
        """Candidates, one per host, most free memory first (nova's RAM weigher with
        its default positive multiplier); ties in random order."""
        summaries = answer.get("provider_summaries", {})
        best: dict[str, dict] = {}
        for request in answer.get("allocation_requests", []):
            hosts = [rp for rp, held in request["allocations"].items()
                     if "MEMORY_MB" in held["resources"]]
            if not hosts or hosts[0] == exclude or hosts[0] in best:
                continue
            best[hosts[0]] = request

        def free_memory(uuid: str) -> float:
            memory = summaries.get(uuid, {}).get("resources", {}).get("MEMORY_MB", {})
            return memory.get("capacity", 0) - memory.get("used", 0)

        keyed = [(-free_memory(uuid), self.rng.random(), uuid) for uuid in best]
        return [(uuid, best[uuid]) for _, _, uuid in sorted(keyed)]

    def _claim(self, tally: KindTally, consumer: str, request: dict,
               generation: int | None) -> bool:
        """nova's claim_resources: the candidate's body as it came, plus the consumer's
        project, user and generation; a concurrent update is tried again."""
        body = dict(request, project_id=PROJECT, user_id=USER, consumer_generation=generation)
        for attempt in range(self.RETRY_ATTEMPTS):
            self._pause(attempt)
            reply = self._send(tally, "PUT", f"/allocations/{consumer}", body,
                               CANDIDATES_VERSION)
            if reply.status == 204:
                return True
            if reply.status != 409:
                raise Failed(f"PUT {reply.status}")
            tally.conflicts += 1
            if _error_code(reply) != "placement.concurrent_update":
                return False  # no room any more: the next host
        return False

    def _schedule(self, tally: KindTally, consumer: str, flavor: Flavor,
                  exclude: str | None = None) -> str:
        tally.requests += 1
        reply = self.client.send(self.boot_paths[flavor], self.timeout)
        if reply.status != 200:
            raise Failed(f"GET candidates {reply.status}")
        for host, request in self._spread_order(reply.json(), exclude):
            if self._claim(tally, consumer, request, None):
                return host
        raise Failed("no valid host")

    def boot(self, tally: KindTally, flavor: Flavor) -> None:
        consumer = next(self.names)
        host = self._schedule(tally, consumer, flavor)
        self.instances.add(consumer, host, flavor)

    def _consumer(self, tally: KindTally, consumer: str) -> dict:
        reply = self._send(tally, "GET", f"/allocations/{consumer}")
        if reply.status != 200:
            raise Failed(f"GET allocations {reply.status}")
        return reply.json()

    def _remove(self, tally: KindTally, consumer: str) -> None:
        """nova's delete_allocation_for_instance: read the consumer's generation, then
        PUT no allocations with it; a concurrent update is tried again."""
        for attempt in range(self.RETRY_ATTEMPTS):
            self._pause(attempt)
            held = self._consumer(tally, consumer)
            if not held.get("allocations"):
                # The generator's view and the server's differ: worth an error.
                raise Failed(f"{consumer} holds nothing to remove")
            reply = self._send(tally, "PUT", f"/allocations/{consumer}", {
                "allocations": {}, "project_id": PROJECT, "user_id": USER,
                "consumer_generation": held.get("consumer_generation")})
            if reply.status == 204:
                return
            if reply.status != 409:
                raise Failed(f"PUT empty {reply.status}")
            tally.conflicts += 1
        raise Failed("delete: out of retries")

    def delete(self, tally: KindTally) -> None:
        taken = self.instances.take(self.rng)
        if taken is None:
            raise Failed("no instance to delete")
        self._remove(tally, taken[0])

    def _swap(self, tally: KindTally, source: str, target: str) -> None:
        """nova's move_allocations: read both consumers, then one POST gives the
        source's allocations to the target and leaves the source none."""
        held = self._consumer(tally, source)
        before = self._consumer(tally, target)
        reply = self._send(tally, "POST", "/allocations", {
            target: {"allocations": {rp: {"resources": alloc["resources"]}
                                     for rp, alloc in held["allocations"].items()},
                     "project_id": PROJECT, "user_id": USER,
                     "consumer_generation": before.get("consumer_generation")},
            source: {"allocations": {}, "project_id": PROJECT, "user_id": USER,
                     "consumer_generation": held.get("consumer_generation")}})
        if reply.status != 204:
            raise Failed(f"POST move {reply.status}")

    def move(self, tally: KindTally) -> None:
        """A cold migration, confirmed: the instance's allocations move to a migration
        consumer, the scheduler claims a new host for the instance (as a new consumer,
        as nova does), the confirm removes the migration's allocations. A move that
        finds no host is reverted (the allocations move back) and counted an error."""
        taken = self.instances.take(self.rng)
        if taken is None:
            raise Failed("no instance to move")
        instance, source, flavor = taken
        migration = next(self.names)
        try:
            self._swap(tally, instance, migration)
        except Failed:
            self.instances.add(instance, source, flavor)
            raise
        try:
            target = self._schedule(tally, instance, flavor, exclude=source)
        except Failed:
            self._swap(tally, migration, instance)
            self.instances.add(instance, source, flavor)
            raise
        self._remove(tally, migration)
        self.instances.add(instance, target, flavor)

    def act(self, event: Event, tally: KindTally) -> None:
        """Run one action of the schedule (open_loop's actor)."""
        if event.kind == "boot":
            assert isinstance(event.payload, Flavor)
            self.boot(tally, event.payload)
        elif event.kind == "move":
            self.move(tally)
        elif event.kind == "delete":
            self.delete(tally)
        else:
            raise Failed(f"unknown action {event.kind}")


def nova_actors(instances: Instances, timeout: float, seed: str = "cloudday"):
    """open_loop's ``make_actor``: a Nova per sender, each with its own random picks
    and its own fresh consumer uuids."""
    def make(index: int, client: PlacementClient):
        names = (stable_uuid(f"{seed}-{index}-consumer-{k}") for k in itertools.count())
        return Nova(client, instances, random.Random(f"{seed}-{index}"), names, timeout).act
    return make
