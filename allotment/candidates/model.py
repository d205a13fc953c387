"""The read model: what the candidates engine needs, kept in a worker's memory.

Providers with their tree links, inventories with current usage, traits and
aggregates, the names of classes, traits and aggregates, and indexes over
them (providers per class, per trait, per aggregate, per tree). One
``ReadModel`` per worker process and database, shared by its threads.

Never stale: at the start of every candidates request, inside the request's
own read transaction, ``ReadModel.current`` reads the change log
(``feed``) from where it stopped and re-reads, from the tables, the rows of
every provider (or name) a change names. Changes are re-read, not replayed,
so the order they arrive in does not matter and reading one twice is
harmless. Claims keep checking capacity in their own transaction against the
tables; candidates stay advisory, as upstream's.

A full load happens at the first request, when the change log cannot answer
(``feed.Rebuild``) and, compared with what the model holds, every
``check_interval`` seconds: the request that finds the check due starts it in
a thread of its own after answering, which loads without holding the model
(requests go on meanwhile) and then compares; any difference is logged as
drift (there should be none) and the freshly loaded state replaces the old
one.

Memory is one small object per provider and inventory (see bench/README.md
for the figure at 50,000 providers); nothing grows with requests.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable, Iterator
from collections.abc import Set as AbstractSet
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError

from allotment import memory
from allotment.candidates.feed import Changes, Feed, Kind, Position, Rebuild
from allotment.db import tables as t
from allotment.db.availability import DatabaseUnavailable
from allotment.db.engine import Database
from allotment.db.errors import one_line
from allotment.ledger import capacity
from allotment.ledger.capacity import InventoryWithUsage

LOG = logging.getLogger(__name__)

# Models of at least this many providers are frozen for the garbage collector.
FREEZE_AT = 2000
# Lists of ids longer than this are read in several statements.
IN_CHUNK = 5000
# How often, at most, a worker says what keeping its model current cost it
# (at INFO, and only for an interval that applied changes or loaded).
UPKEEP_REPORT_INTERVAL = 60.0


@dataclass(slots=True)
class Provider:
    id: int
    uuid: str
    name: str | None
    parent: int | None
    root: int
    inventories: dict[int, InventoryWithUsage] = field(default_factory=dict)
    traits: frozenset[int] = frozenset()
    aggregates: frozenset[int] = frozenset()


# resources, traits, and rendered JSON by the shape it was rendered in
SummaryParts = tuple[dict[str, dict[str, int]], list[str], dict[tuple, bytes]]


@dataclass
class State:
    """Everything loaded, with its indexes; changed only through ``apply``."""

    providers: dict[int, Provider] = field(default_factory=dict)
    by_uuid: dict[str, int] = field(default_factory=dict)
    # class id -> providers with an inventory of it
    holders: dict[int, set[int]] = field(default_factory=dict)
    # trait id -> providers with it; aggregate id -> member providers;
    # root -> providers of its tree
    with_trait: dict[int, set[int]] = field(default_factory=dict)
    members: dict[int, set[int]] = field(default_factory=dict)
    trees: dict[int, set[int]] = field(default_factory=dict)
    nested: set[int] = field(default_factory=set)   # providers with a parent
    class_ids: dict[str, int] = field(default_factory=dict)
    class_names: dict[int, str] = field(default_factory=dict)
    trait_ids: dict[str, int] = field(default_factory=dict)
    trait_names: dict[int, str] = field(default_factory=dict)
    aggregate_ids: dict[str, int] = field(default_factory=dict)
    aggregate_uuids: dict[int, str] = field(default_factory=dict)
    # class id -> sorted holders (built when asked, dropped on change)
    _sorted_holders: dict[int, list[int]] = field(default_factory=dict)
    # provider id -> (resources, traits) of its summary, ready to render
    _summaries: dict[int, SummaryParts] = field(default_factory=dict)
    # root -> its providers in id order (built when asked, dropped on a tree change)
    _tree_lists: dict[int, list[int]] | None = None
    # every root in id order (built when asked, dropped on a tree change)
    _sorted_roots: list[int] | None = None

    # --- reading -----------------------------------------------------------

    def sorted_holders(self, class_id: int) -> list[int]:
        found = self._sorted_holders.get(class_id)
        if found is None:
            found = self._sorted_holders[class_id] = sorted(self.holders.get(class_id, ()))
        return found

    def sorted_roots(self) -> list[int]:
        found = self._sorted_roots
        if found is None:
            found = self._sorted_roots = sorted(self.trees)
        return found

    def tree_lists(self) -> dict[int, list[int]]:
        """root -> the providers of its tree in id order, trees in the order of
        their first provider (what explain walks)."""
        found = self._tree_lists
        if found is None:
            lists = [sorted(members) if len(members) > 1 else list(members)
                     for members in self.trees.values()]
            lists.sort()
            found = self._tree_lists = {self.providers[members[0]].root: members
                                        for members in lists}
        return found

    def summary_parts(self, provider: Provider) -> SummaryParts:
        """A provider's summary resources (class id order) and traits (trait id order),
        and the JSON the renderer made of them (dropped with them on any change)."""
        found = self._summaries.get(provider.id)
        if found is None:
            resources = {self.class_names[rc]: {"capacity": inv.capacity, "used": inv.used}
                         for rc, inv in sorted(provider.inventories.items())}
            traits = [self.trait_names[trait] for trait in sorted(provider.traits)]
            found = self._summaries[provider.id] = (resources, traits, {})
        return found

    # --- changing ----------------------------------------------------------

    def _forget(self, provider: Provider) -> None:
        self._set_inventories(provider, {})
        self._set_traits(provider, frozenset())
        self._set_aggregates(provider, frozenset())
        self._drop_uuid(provider)
        self._unlink(provider)
        self._summaries.pop(provider.id, None)
        del self.providers[provider.id]

    def _drop_uuid(self, provider: Provider) -> None:
        """Forget the provider's uuid, unless another provider has it now (one
        deleted and made again under its uuid: both rows are read in one poll, in
        either order)."""
        if self.by_uuid.get(provider.uuid) == provider.id:
            del self.by_uuid[provider.uuid]

    def _unlink(self, provider: Provider) -> None:
        self._tree_lists = self._sorted_roots = None
        tree = self.trees.get(provider.root)
        if tree is not None:
            tree.discard(provider.id)
            if not tree:
                del self.trees[provider.root]
        self.nested.discard(provider.id)

    def _put_provider(self, rp: int, uuid: str, name: str | None, parent: int | None,
                      root: int | None) -> None:
        provider = self.providers.get(rp)
        # A provider row briefly without root (upstream sets it after insert).
        root = rp if root is None else root
        if provider is None:
            provider = self.providers[rp] = Provider(rp, uuid, name, parent, root)
        else:
            self._unlink(provider)
            if provider.uuid != uuid:
                self._drop_uuid(provider)
            provider.uuid, provider.name, provider.parent, provider.root = (
                uuid, name, parent, root)
        self.by_uuid[uuid] = rp
        self._summaries.pop(rp, None)
        self._tree_lists = self._sorted_roots = None
        self.trees.setdefault(root, set()).add(rp)
        if parent is not None:
            self.nested.add(rp)

    def _set_inventories(self, provider: Provider,
                         inventories: dict[int, InventoryWithUsage]) -> None:
        for rc in _move(self.holders, provider.id, provider.inventories.keys(),
                        inventories.keys()):
            self._sorted_holders.pop(rc, None)
        provider.inventories = inventories
        self._summaries.pop(provider.id, None)

    def _set_traits(self, provider: Provider, traits: frozenset[int]) -> None:
        _move(self.with_trait, provider.id, provider.traits, traits)
        provider.traits = traits
        self._summaries.pop(provider.id, None)

    def _set_aggregates(self, provider: Provider, aggregates: frozenset[int]) -> None:
        _move(self.members, provider.id, provider.aggregates, aggregates)
        provider.aggregates = aggregates

    def apply(self, conn: sa.Connection, changes: Changes) -> None:
        """Re-read, in ``conn``, every row the changes name."""
        names = (changes.get(Kind.TRAIT), changes.get(Kind.RESOURCE_CLASS),
                 changes.get(Kind.AGGREGATE))
        if any(names):
            _load_names(conn, self, *names)
            self._summaries.clear()
        touched: set[int] = set()
        for kind in (Kind.INVENTORY, Kind.ALLOCATION, Kind.PROVIDER_TRAIT,
                     Kind.PROVIDER_AGGREGATE):
            touched |= changes.get(kind, set())
        # A row of a provider not known yet: its own row first.
        reload = changes.get(Kind.PROVIDER, set()) | (touched - self.providers.keys())
        if reload:
            _load_providers(conn, self, reload)
        touched &= self.providers.keys()
        inventories = (changes.get(Kind.INVENTORY, set()) | changes.get(Kind.ALLOCATION, set())
                       | (reload - changes.get(Kind.INVENTORY, set()))) & self.providers.keys()
        if inventories:
            _load_inventories(conn, self, inventories)
        traits = (changes.get(Kind.PROVIDER_TRAIT, set()) | reload) & self.providers.keys()
        if traits:
            _load_traits(conn, self, traits)
        aggregates = (changes.get(Kind.PROVIDER_AGGREGATE, set()) | reload) \
            & self.providers.keys()
        if aggregates:
            _load_aggregates(conn, self, aggregates)


def _move(index: dict[int, set[int]], member: int, old: AbstractSet[int],
          new: AbstractSet[int]) -> set[int]:
    """Move ``member`` in ``index`` (key -> members) from the keys ``old`` to ``new``;
    the keys whose members changed."""
    if not old:  # a full load: nothing to take away, no set differences to build
        for key in new:
            index.setdefault(key, set()).add(member)
        return set(new)
    for key in old - new:
        index[key].discard(member)
    for key in new - old:
        index.setdefault(key, set()).add(member)
    return set(old ^ new)


# --- loading from the tables ---------------------------------------------------

def _in_chunks(ids: set[int] | None) -> Iterator[list[int] | None]:
    if ids is None:
        yield None
        return
    ordered = sorted(ids)
    for start in range(0, len(ordered), IN_CHUNK):
        yield ordered[start:start + IN_CHUNK]


def _load_names(conn: sa.Connection, state: State, traits: set[int] | None = None,
                classes: set[int] | None = None, aggregates: set[int] | None = None,
                everything: bool = False) -> None:
    for table, name_col, wanted, by_name, by_id in (
            (t.traits, t.traits.c.name, traits, state.trait_ids, state.trait_names),
            (t.resource_classes, t.resource_classes.c.name, classes, state.class_ids,
             state.class_names),
            (t.placement_aggregates, t.placement_aggregates.c.uuid, aggregates,
             state.aggregate_ids, state.aggregate_uuids)):
        if not everything and not wanted:
            continue
        for chunk in _in_chunks(None if everything else wanted):
            statement = sa.select(table.c.id, name_col)
            if chunk is not None:
                statement = statement.where(table.c.id.in_(chunk))
                for ident in chunk:
                    old = by_id.pop(ident, None)
                    if old is not None:
                        by_name.pop(old, None)
            for ident, name in conn.execute(statement).all():
                by_id[ident] = name
                by_name[name] = ident


def _load_providers(conn: sa.Connection, state: State, ids: set[int] | None) -> None:
    rp = t.resource_providers
    for chunk in _in_chunks(ids):
        statement = sa.select(rp.c.id, rp.c.uuid, rp.c.name, rp.c.parent_provider_id,
                              rp.c.root_provider_id)
        if chunk is not None:
            statement = statement.where(rp.c.id.in_(chunk))
        found = set()
        for ident, uuid, name, parent, root in conn.execute(statement).all():
            state._put_provider(ident, uuid, name, parent, root)
            found.add(ident)
        for gone in (set(chunk) - found if chunk is not None else ()):
            if gone in state.providers:
                state._forget(state.providers[gone])


def _load_inventories(conn: sa.Connection, state: State, ids: set[int] | None) -> None:
    inv = t.inventories.alias("model_inv")
    by_provider: dict[int, dict[int, InventoryWithUsage]] = {rp: {} for rp in ids or ()}
    for chunk in _in_chunks(ids):
        statement = sa.select(inv.c.resource_provider_id, inv.c.resource_class_id, inv.c.total,
                              inv.c.reserved, inv.c.min_unit, inv.c.max_unit, inv.c.step_size,
                              inv.c.allocation_ratio, capacity.usage(inv))
        if chunk is not None:
            statement = statement.where(inv.c.resource_provider_id.in_(chunk))
        for rp, rc, total, reserved, min_unit, max_unit, step, ratio, used in \
                conn.execute(statement).all():
            by_provider.setdefault(rp, {})[rc] = capacity.with_usage(
                total, reserved, min_unit, max_unit, step, ratio, used)
    for rp, inventories in by_provider.items():
        provider = state.providers.get(rp)
        if provider is not None:
            state._set_inventories(provider, inventories)


def _load_links(conn: sa.Connection, table: sa.Table, column: sa.Column,
                ids: set[int] | None) -> dict[int, set[int]]:
    found: dict[int, set[int]] = {rp: set() for rp in ids or ()}
    for chunk in _in_chunks(ids):
        statement = sa.select(table.c.resource_provider_id, column)
        if chunk is not None:
            statement = statement.where(table.c.resource_provider_id.in_(chunk))
        for rp, other in conn.execute(statement).all():
            found.setdefault(rp, set()).add(other)
    return found


def _load_traits(conn: sa.Connection, state: State, ids: set[int] | None) -> None:
    rpt = t.resource_provider_traits
    for rp, traits in _load_links(conn, rpt, rpt.c.trait_id, ids).items():
        if rp in state.providers:
            state._set_traits(state.providers[rp], frozenset(traits))


def _load_aggregates(conn: sa.Connection, state: State, ids: set[int] | None) -> None:
    rpa = t.resource_provider_aggregates
    for rp, aggs in _load_links(conn, rpa, rpa.c.aggregate_id, ids).items():
        if rp in state.providers:
            state._set_aggregates(state.providers[rp], frozenset(aggs))


def load(conn: sa.Connection) -> State:
    """Everything, from the tables."""
    state = State()
    _load_names(conn, state, everything=True)
    _load_providers(conn, state, None)
    _load_inventories(conn, state, None)
    _load_traits(conn, state, None)
    _load_aggregates(conn, state, None)
    return state


def differences(held: State, fresh: State, skip: AbstractSet[int] = frozenset()) -> list[str]:
    """What ``held`` has wrong compared with ``fresh``, but for providers in ``skip``."""
    found = [f"{name} differ" for name in ("class_ids", "trait_ids", "aggregate_ids")
             if getattr(held, name) != getattr(fresh, name)]
    found += [f"provider {rp}: held {held.providers.get(rp)}, database {fresh.providers.get(rp)}"
              for rp in sorted(held.providers.keys() | fresh.providers.keys())
              if rp not in skip and held.providers.get(rp) != fresh.providers.get(rp)]
    return found


# --- the model a worker keeps ---------------------------------------------------

class Hold:
    """A reader's hold on the state; ``release`` (once) lets other threads in."""

    def __init__(self, state: State | None, let_go: Callable[[], None]) -> None:
        self._state = state
        self._let_go: Callable[[], None] | None = let_go

    @property
    def state(self) -> State:
        if self._state is None or self._let_go is None:
            raise RuntimeError("the read model's state is not held")
        return self._state

    @state.setter
    def state(self, state: State) -> None:
        self._state = state

    def release(self) -> None:
        let_go, self._let_go = self._let_go, None
        if let_go is not None:
            let_go()


@dataclass
class Upkeep:
    """What keeping one worker's model current cost since the last report: the
    CPU (``time.thread_time``) of its threads' polls of the change log (the
    changes applied and full loads included) and of the periodic checks (their
    load and comparison)."""

    polls: int = 0
    changes: int = 0
    loads: int = 0
    checks: int = 0
    cpu: float = 0.0


class ReadModelObserver(Protocol):
    """Who hears of the model's loads and changes read (the service's metrics)."""

    def read_model_loaded(self, cause: str) -> None:
        """A full load: 'start' (first request), 'log' (the change log could not
        answer) or 'drift' (a check found a difference)."""

    def read_model_changes(self, count: int) -> None:
        """``count`` change-log references read and applied."""


class ReadModel:
    """One database's read model for the threads of one worker."""

    def __init__(self, db: Database, retention: float = 3600.0,
                 check_interval: float = 600.0, trim_interval: float = 60.0,
                 observer: ReadModelObserver | None = None) -> None:
        self.db = db
        self.observer = observer
        self.feed = Feed(db.engine.dialect.name, retention)
        self.check_interval = check_interval
        self.trim_interval = trim_interval
        self._lock = threading.Lock()
        self._state: State | None = None
        self._position = Position()
        self._checked_at = 0.0
        self._checker: threading.Thread | None = None
        self._trimmed_at = time.monotonic()
        self.rebuilds = 0
        self.drifts = 0
        self._upkeep = Upkeep()
        self._reported_at = time.monotonic()

    @property
    def providers_known(self) -> int:
        """How many providers the model held when last brought up to date (read
        without the lock: a request's estimate of its cost before it takes the
        model; 0 before the first load)."""
        state = self._state
        return len(state.providers) if state is not None else 0

    @contextmanager
    def current(self) -> Iterator[State]:
        """The state as of a read transaction begun now, held while the caller reads it.

        One thread at a time reads or updates the state: the work is pure
        Python, which the interpreter runs one thread at a time anyway.
        """
        with self.held() as hold:
            yield hold.state

    @contextmanager
    def held(self) -> Iterator[Hold]:
        """``current``, as a ``Hold`` whose reader may let go of the state early.

        A long reader (a large candidates search) copies what it needs and
        calls ``Hold.release``, so that the other threads' requests do not
        wait for the rest of its work.
        """
        self._lock.acquire()
        hold = Hold(None, self._let_go)
        try:
            started = time.thread_time()
            with self.db.snapshot() as conn:
                hold.state = self._bring_up_to_date(conn)
            self._upkeep.polls += 1
            self._upkeep.cpu += time.thread_time() - started
            yield hold
        finally:
            hold.release()
        if time.monotonic() - self._trimmed_at >= self.trim_interval:
            self._trimmed_at = time.monotonic()
            self._trim()

    def _trim(self) -> None:
        """Delete the change log's old rows, on the thread of a request whose
        answer is already made.

        So a failure here is logged, never that answer's error: the DELETE is
        a write, and on Galera a node cut off from the cluster fails its commit
        (sometimes with words the classifier does not know), or another
        server's trim wins the rows. The next interval tries again.
        """
        try:
            with self.db.write() as conn:
                trimmed = self.feed.trim(conn)
        except (DBAPIError, DatabaseUnavailable) as exc:
            LOG.warning("Change log not trimmed (tried again in %.0f s): %s",
                        self.trim_interval, one_line(exc))
            return
        LOG.debug("Change log: %d rows older than %.0f s trimmed", trimmed,
                  self.feed.retention)

    def _let_go(self) -> None:
        """End a hold: start a due check, then unlock the state (and say what the
        upkeep cost, when it is time)."""
        upkeep: tuple[Upkeep, float, int] | None = None
        try:
            now = time.monotonic()
            check_due = (now - self._checked_at >= self.check_interval
                         and self._checker is None and self._state is not None)
            if check_due:
                self._checked_at = now
                self._checker = threading.Thread(target=self._check_in_background,
                                                 name="read-model-check", daemon=True)
                self._checker.start()
            if now - self._reported_at >= UPKEEP_REPORT_INTERVAL:
                upkeep = (self._upkeep, now - self._reported_at, self.providers_known)
                self._upkeep, self._reported_at = Upkeep(), now
        finally:
            self._lock.release()
        if upkeep is not None:
            _report_upkeep(*upkeep)

    def _bring_up_to_date(self, conn: sa.Connection) -> State:
        if self._state is None:
            return self._rebuild(conn, "first request", "start")
        try:
            changes, position = self.feed.poll(conn, self._position, self.db.read)
        except Rebuild as why:
            return self._rebuild(conn, str(why), "log")
        if changes:
            count = sum(len(refs) for refs in changes.values())
            self._upkeep.changes += count
            if self.observer is not None:
                self.observer.read_model_changes(count)
            self._state.apply(conn, changes)
        self._position = position
        return self._state

    def _rebuild(self, conn: sa.Connection, why: str, cause: str) -> State:
        started, cpu_started = time.perf_counter(), time.thread_time()
        resident_before = memory.resident_bytes()
        if self.observer is not None:
            self.observer.read_model_loaded(cause)
        self._position = self.feed.start(conn)
        self._state = load(conn)
        self._checked_at = time.monotonic()
        self.rebuilds += 1
        self._upkeep.loads += 1
        if len(self._state.providers) >= FREEZE_AT:
            # Out of the cyclic collector's sight: otherwise every full collection
            # walks the whole model, a pause of tens of milliseconds at 10,000 providers.
            gc.collect()
            gc.freeze()
        # What the load added to the worker's resident memory: the model, plus
        # what the C library kept of the rows read (and, on a reload, the old
        # model until it is dropped). The figure an operator sizes a worker by.
        resident_after = memory.resident_bytes()
        grew = ("" if resident_before is None or resident_after is None else
                f", resident memory {(resident_after - resident_before) / 2**20:+.0f} MiB")
        LOG.info("Read model loaded (%s): %d providers in %.0f ms (%.0f ms of CPU)%s", why,
                 len(self._state.providers), (time.perf_counter() - started) * 1000,
                 (time.thread_time() - cpu_started) * 1000, grew)
        return self._state

    def wait_for_check(self, timeout: float | None = None) -> None:
        """Until a consistency check running in the background has ended."""
        checker = self._checker
        if checker is not None:
            checker.join(timeout)

    def _check_in_background(self) -> None:
        try:
            self.check()
        except Exception:  # a database gone meanwhile, say: the next check tries again
            LOG.warning("Read model check against the database failed", exc_info=True)
        finally:
            self._checker = None

    def check(self) -> bool:
        """Compare what is held with a full load; on any difference log it and
        take the load. True when there was no difference.

        The load (seconds at 50,000 providers) runs without the lock, so
        requests go on meanwhile; only the comparison holds it. Providers
        named by a change committed since the load began may differ for that
        reason alone: they are not compared this time.
        """
        started = time.thread_time()
        with self.db.snapshot() as conn:
            fresh_position = self.feed.start(conn)
            fresh = load(conn)
        with self._lock:
            try:
                return self._compare(fresh, fresh_position)
            finally:
                # The check's whole cost, load and comparison, is upkeep.
                self._upkeep.checks += 1
                self._upkeep.cpu += time.thread_time() - started

    def _compare(self, fresh: State, fresh_position: Position) -> bool:
        """``check``'s comparison, under the lock."""
        try:
            with self.db.snapshot() as conn:
                held = self._bring_up_to_date(conn)
                since_load, _ = self.feed.poll(conn, fresh_position, self.db.read)
        except Rebuild:
            return True  # the next request reloads anyway
        skip = set().union(*since_load.values()) if since_load else set()
        drift = differences(held, fresh, skip)
        self._checked_at = time.monotonic()
        if not drift:
            LOG.debug("Read model checked against the database: no drift")
            return True
        self.drifts += 1
        if self.observer is not None:
            self.observer.read_model_loaded("drift")
        LOG.warning("Read model drifted from the database (%d differences; replaced by a "
                    "full load): %s", len(drift), "; ".join(drift[:5]))
        # The next request brings the load up to date from where it began.
        self._state, self._position = fresh, fresh_position
        return False


def _report_upkeep(upkeep: Upkeep, seconds: float, providers: int) -> None:
    """One line for an interval that applied changes or loaded the model."""
    if not (upkeep.changes or upkeep.loads or upkeep.checks):
        return
    LOG.info("Read model upkeep over %.0f s: %d polls, %d changes applied, %d loads, "
             "%d checks, %.0f ms of CPU (%.2f %% of a core); %d providers held",
             seconds, upkeep.polls, upkeep.changes, upkeep.loads, upkeep.checks,
             upkeep.cpu * 1000, 100 * upkeep.cpu / seconds if seconds > 0 else 0.0,
             providers)


@dataclass(frozen=True)
class RequestState:
    """The state one request answers from (``state_for_request``)."""

    state: State
    # Lets go of the read model before the request is done (``Hold.release``);
    # None for a state loaded for this request alone, which no one waits for.
    release: Callable[[], None] | None = None


@contextmanager
def state_for_request(db: Database, model: ReadModel | None) -> Iterator[RequestState]:
    """The state a request answers from, held until the block ends: the worker's
    read model brought up to date now, or without one (``[allotment]
    candidates_source = database``) a state loaded now, in one snapshot, for
    this request alone. Candidates, explain and headroom all read through here,
    so they see the cloud the same way."""
    if model is None:
        with db.snapshot() as conn:
            state = load(conn)
        yield RequestState(state)
        return
    with model.held() as hold:
        yield RequestState(hold.state, hold.release)
