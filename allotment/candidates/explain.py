"""Why no valid host: the trees an allocation-candidates query leaves out, and why.

Behind GET /explain/allocation_candidates. ``answer_and_explain`` answers the
query as GET /allocation_candidates does, with the engine keeping a trace of
what it decided (``trace.Trace``), on the very state that answered (the
worker's read model, held for the whole request, or the state loaded for
it). The explanation words that trace: it decides nothing again, so it
cannot disagree with the answer.

What counts:

* A tree is **qualified** when one of its providers is in the answer (gives
  resources or is named in a mapping), or when only sharing providers from
  elsewhere serve it and their offer is in the answer (the engine lists
  such an offer once, not once per tree). Every other tree is **excluded**.
* An excluded tree gets every reason that applies, not just the first: a
  host may lack a trait *and* room. For each slot of the engine's plan (a
  granular group; a class of the unsuffixed group) that has no option in the
  tree, each provider that could have served it (the tree's own, and the
  sharing providers that reach it) is asked why not by the very rules the
  engine applied to it (``rules.GroupRules``; capacity and the unit rules
  through ``ledger.capacity``); a class no such provider holds is
  ``no_inventory``. The root's request-wide rules (``root_required``) are
  asked of every excluded tree, and the unsuffixed group's required traits of
  the tree's providers together. A tree with an option for every slot that
  the walk found no candidate in gets the walk's own reason
  (``search.Shortfall``: several groups wanting more of a class than the
  tree has, ``group_policy=isolate``, ``same_subtree``, the traits together,
  or no ``combination`` at all, e.g. before 1.29's one provider per tree); one
  the walk never reached was cut by ``limit``/``max_allocation_candidates``.

The per-group ``steps`` count providers left after each of those rules over
the whole cloud, like upstream's debug lines, and each is logged at DEBUG.
Request-wide reasons carry the group ``"*"``; reasons between groups name
the groups involved, comma-separated.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from allotment.candidates import engine, rules
from allotment.candidates.budget import Budget
from allotment.candidates.engine import Result, SearchObserver
from allotment.candidates.model import Provider, ReadModel, State, state_for_request
from allotment.candidates.plan import Plan
from allotment.candidates.reasons import WHOLE_REQUEST, Reason, Words
from allotment.candidates.request import CandidateRequest, RequestGroup, Settings
from allotment.candidates.resolved import GroupIds, unknown_classes, unknown_traits
from allotment.candidates.search import Shortfall
from allotment.candidates.sources import ModelSource
from allotment.candidates.trace import Trace
from allotment.db.engine import Database

LOG = logging.getLogger(__name__)


@dataclass
class _Context:
    """The request, the engine's trace of it and the state it answered from."""

    request: CandidateRequest
    trace: Trace
    state: State
    words: Words
    trees: dict[int, list[int]]
    # suffix -> the reason every tree gets for a group that can match nothing
    impossible: dict[str, Reason]
    root_rule: rules.RootTraits | None
    _fits: dict[tuple[int, int], rules.Fits] = field(default_factory=dict)

    def fits(self, rc: int, amount: int) -> rules.Fits:
        found = self._fits.get((rc, amount))
        if found is None:
            found = self._fits[(rc, amount)] = rules.Fits(rc, amount)
        return found

    @property
    def groups(self) -> list[GroupIds]:
        return self.trace.groups


# --- one excluded tree ---------------------------------------------------------------

def _nobody(ctx: _Context, root: int, foreign: list[int], has: str, lacks: str) -> str:
    """"cn-17 lacks X" for a lone provider, else "no provider of cn-17 (...) has X"."""
    name = ctx.words.name(root)
    if len(ctx.trees[root]) == 1 and not foreign:
        return f"{name} {lacks}"
    sharing = " (nor a sharing provider serving it)" if foreign else ""
    return f"no provider of {name}{sharing} {has}"


def _slot_reasons(ctx: _Context, index: int, lacking: list[tuple[tuple[int, int], ...]],
                  root: int) -> list[Reason]:
    """Why no provider serves the ``lacking`` slots of group ``index`` in ``root``'s
    tree (each slot: its amounts): each provider that could, asked why not by the
    rules the engine applied to it."""
    group, group_rules, words = ctx.groups[index], ctx.trace.group_rules[index], ctx.words
    providers = ctx.state.providers
    foreign = ctx.trace.reach.get(root, []) if group_rules.shares is not None else []
    pool = ctx.trees[root] + foreign if foreign else ctx.trees[root]
    found: list[Reason] = []
    refused: dict[int, list[Reason]] = {}  # the group's rules, once per provider
    has_rules = bool(group_rules.anywhere or group_rules.at_home or foreign)
    for amounts in lacking:
        classes = [rc for rc, _ in amounts]
        if len(pool) == 1:  # most trees: one host
            held = providers[pool[0]].inventories
            missing = [rc for rc in classes if rc not in held]
        else:
            missing = [rc for rc in classes
                       if not any(rc in providers[rp].inventories for rp in pool)]
        if missing:
            found += [Reason(group.suffix, "no_inventory", _nobody(
                ctx, root, foreign, f"has {words.class_names[rc]} inventory",
                f"has no {words.class_names[rc]} inventory"),
                resource_class=words.class_names[rc]) for rc in missing]
            continue
        holding = pool if len(pool) == 1 else [
            rp for rp in pool if all(rc in providers[rp].inventories for rc in classes)]
        if not holding:
            names = ", ".join(words.class_names[rc] for rc in classes)
            found.append(Reason(group.suffix, "combination", f"no single provider of "
                                f"{words.name(root)} has inventory of all of {names}"))
            continue
        for rp in holding:
            provider = providers[rp]
            if has_rules and rp not in refused:
                refused[rp] = [
                    words.refusal(group.suffix, refusal, rp)
                    for refusal in group_rules.why_not(provider, home=provider.root == root)
                    if refusal.filter not in ("root_required", "root_forbidden")]
                found += refused[rp]
            for rc, amount in amounts:
                fits = ctx.fits(rc, amount)
                if not fits.passes(provider):
                    found += [words.refusal(group.suffix, refusal, rp, rc)
                              for refusal in fits.why_not(provider)]
    return found


def _tree_traits(ctx: _Context, group: GroupIds, root: int) -> list[Reason]:
    """The unsuffixed group's required traits, which its providers in a tree
    may have together."""
    foreign = ctx.trace.reach.get(root, []) if group.tree_root is None else []
    providers = ctx.state.providers
    classes = {rc for rc, _ in group.resources}
    have: frozenset[int] = frozenset().union(*(
        providers[rp].traits for rp in ctx.trees[root] + foreign
        if not classes.isdisjoint(providers[rp].inventories)))
    unmet = rules.RequiredTraits(group.required).unmet(have)
    if not unmet:
        return []
    wanted = ctx.words.traits_any_of(unmet[0].sets)
    lone = ctx.words.uuid(root) if len(ctx.trees[root]) == 1 and not foreign else None
    return [Reason("", "required_trait", _nobody(
        ctx, root, foreign, f"with a requested class has trait {wanted}",
        f"lacks required trait {wanted}"), lone)]


def _shortfall(ctx: _Context, root: int, short: Shortfall) -> Reason:
    """The walk's reason for a tree with options for every slot but no candidate."""
    name, group = ctx.words.name(root), ",".join(short.suffixes)
    quoted = ", ".join(f"'{suffix}'" for suffix in short.suffixes)
    if short.filter == "combination" and short.class_id is not None:
        rc = ctx.words.class_names[short.class_id]
        numbers = (("requested", short.requested), ("free", short.available))
        if short.fitting:
            text = (f"groups {quoted} each take {rc} from one provider; {name} and its "
                    f"sharing providers have room for {short.fitting} such parts")
        else:
            text = (f"groups {quoted} together request {short.requested} {rc}; {name} and "
                    f"its sharing providers can give {short.available}")
        return Reason(group, "combination", text, resource_class=rc, numbers=numbers)
    if short.filter == "group_policy_isolate":
        return Reason(group, short.filter, f"groups {group} need distinct providers "
                      f"(group_policy=isolate); {name} can give at most {short.fitting} of "
                      "them one each")
    if short.filter == "same_subtree":
        return Reason(group, short.filter, f"no provider of {name} has groups "
                      f"{', '.join(short.suffixes)} within its subtree")
    if short.filter == "required_trait":
        unsuffixed = next(g for g in ctx.groups if not g.same_provider)
        return Reason("", short.filter, f"no choice of providers in {name} has trait "
                      f"{ctx.words.traits_any_of(unsuffixed.required)} together")
    return Reason(WHOLE_REQUEST, "combination", f"each group has providers in {name}, but "
                  "no combination of them serves all groups together", ctx.words.uuid(root))


def _excluded(ctx: _Context, root: int) -> list[Reason]:
    """Every reason that keeps ``root``'s tree out (empty: none the trace shows)."""
    reasons: list[Reason] = []
    if ctx.root_rule is not None:
        reasons += [ctx.words.refusal(WHOLE_REQUEST, refusal, root)
                    for refusal in ctx.root_rule.why_not(ctx.state.providers[root])]
    laid_out = ctx.trace.plan
    for index, group in enumerate(ctx.groups):
        if group.suffix in ctx.impossible:
            reasons.append(ctx.impossible[group.suffix])
            continue
        if laid_out is None:
            continue  # another group can match nothing: nothing was laid out
        lacking = [slot.amounts for slot, options in zip(laid_out.slots, laid_out.options,
                                                         strict=True)
                   if slot.suffix == group.suffix and not options.get(root)]
        if lacking:
            reasons += _slot_reasons(ctx, index, lacking, root)
        if not group.same_provider and group.required:
            reasons += _tree_traits(ctx, group, root)
    if not reasons and root in ctx.trace.shortfalls:
        reasons.append(_shortfall(ctx, root, ctx.trace.shortfalls[root]))
    return list(dict.fromkeys(reasons)) if len(reasons) > 1 else reasons


def _impossible(request_group: RequestGroup, group: GroupIds, unknown: list[str],
                aggregates: Iterable[str]) -> Reason:
    """The reason every tree gets for a group that can match nothing anywhere."""
    suffix = group.suffix
    if unknown:
        # Only asked when the engine answered without refusing it: upstream
        # found nothing before it read this group (``resolved.refuse_unknown``).
        return Reason(suffix, "unknown_name", f"no such resource class or trait: "
                      f"{', '.join(unknown)} (the request is not refused: as upstream, an "
                      "earlier filter or group found nothing first)")
    if not group.possible and request_group.in_tree and group.tree_root is None:
        return Reason(suffix, "unknown_in_tree", f"in_tree provider {request_group.in_tree} "
                      "does not exist")
    if not group.possible:
        known = set(aggregates)
        unknown = sorted(u for s in request_group.member_of for u in s
                         if all(a not in known for a in s))
        return Reason(suffix, "unknown_aggregate", "member_of names only aggregates that do "
                      f"not exist: {', '.join(unknown)}")
    return Reason(suffix, "combination", "the group has no resources, required traits or "
                  "member_of to select a provider by")


# --- steps: providers left after each rule, per group ------------------------------

_STEP_WORDS = {"in_tree": "in_tree", "member_of": "member_of",
               "forbidden_aggregate": "forbidden aggregates", "required_trait": "required traits",
               "forbidden_trait": "forbidden traits", "root_required": "root_required",
               "root_forbidden": "forbidden root traits"}


class _Steps:
    """Providers left after each rule, group by group (like upstream's debug lines)."""

    def __init__(self, ctx: _Context) -> None:
        self.ctx = ctx
        self.rows: list[dict[str, Any]] = []
        # The engine's source, whose answers the search has already asked for.
        self.source = ctx.trace.source or ModelSource(ctx.state)

    def step(self, suffix: str, name: str, providers: Iterable[int], detail: str) -> set[int]:
        kept = set(providers)
        text = detail.format(n=len(kept))
        self.rows.append({"group": suffix, "filter": name, "providers": len(kept),
                          "detail": text})
        LOG.debug("explain: group '%s' %s: %s", suffix, name, text)
        return kept

    def group(self, index: int) -> None:
        ctx, group = self.ctx, self.ctx.groups[index]
        providers, suffix = ctx.state.providers, group.suffix
        group_rules = ctx.trace.group_rules[index]
        with_room = []
        for rc, amount in group.resources:
            rc_name = ctx.words.class_names[rc]
            holders = ctx.state.sorted_holders(rc)
            self.step(suffix, f"inventory:{rc_name}", holders,
                      f"found {{n}} providers with {rc_name} inventory")
            with_room.append(self.step(
                suffix, f"resources:{rc_name}", self.source.with_room(rc, amount),
                f"found {{n}} providers with available {amount} {rc_name}"))
        if not with_room:
            pool = self.step(suffix, "providers", providers, "{n} providers in all")
        elif group.same_provider:
            pool = set.intersection(*with_room)
            if len(with_room) > 1:
                pool = self.step(suffix, "resources", pool,
                                 "{n} providers have room for all of the group's resources")
        else:
            pool = set.union(*with_room)
        for rule in group_rules.anywhere:
            pool = self._after(suffix, rule, pool)
        if not group.same_provider and group.required:
            pool = self.step(suffix, "required_trait", self._meeting(group, pool),
                             "after filtering by required traits: {n}")
        for rule in group_rules.at_home:
            # At home, or through the aggregates where its own root decides nothing.
            pool = self._after(suffix, rule, pool, group_rules.serves_others)

    def _after(self, suffix: str, rule: rules.Rule, pool: set[int],
               or_else: Callable[[Provider], bool] | None = None) -> set[int]:
        providers = self.ctx.state.providers
        return self.step(suffix, rule.filter, (
            rp for rp in pool if rule.passes(providers[rp])
            or (or_else is not None and or_else(providers[rp]))),
            f"after filtering by {_STEP_WORDS[rule.filter]}: {{n}}")

    def _meeting(self, group: GroupIds, pool: set[int]) -> Iterable[int]:
        """The unsuffixed group's traits may come from several providers of a tree."""
        required, providers = rules.RequiredTraits(group.required), self.ctx.state.providers
        tree_traits: dict[int, frozenset[int]] = {}
        for rp in pool:
            root = providers[rp].root
            tree_traits[root] = tree_traits.get(root, frozenset()) | providers[rp].traits
        return (rp for rp in pool if required.met_by(tree_traits[providers[rp].root]))


# --- the explanation ----------------------------------------------------------

@dataclass
class Explanation:
    total: int
    qualified: int
    steps: list[dict[str, Any]]
    # (group, filter, class) -> trees, most first
    counts: list[tuple[tuple[str, str, str | None], int, str]]
    # (root uuid, root name, reasons), at most the sample limit
    excluded: list[tuple[str, str, list[Reason]]]

    def as_dict(self) -> dict[str, Any]:
        return {
            "trees": {"total": self.total, "qualified": self.qualified,
                      "excluded": self.total - self.qualified},
            "steps": self.steps,
            "reasons": [{"group": group, "filter": name, "resource_class": rc,
                         "trees": trees, "detail": detail}
                        for (group, name, rc), trees, detail in self.counts],
            "excluded": [{"root_provider_uuid": uuid, "root_provider_name": name,
                          "reasons": [r.as_dict() for r in reasons]}
                         for uuid, name, reasons in self.excluded],
        }


def answer_and_explain(db: Database, model: ReadModel | None, request: CandidateRequest,
                       settings: Settings, sample_limit: int = 10,
                       budget: Budget | None = None,
                       observer: SearchObserver | None = None) -> tuple[Result, Explanation]:
    """The answer to ``request``, as GET /allocation_candidates gives it, and why the
    other trees are not in it: the engine's trace of that answer, in words."""
    # Held throughout, not let go early: the wording reads the same state.
    with state_for_request(db, model) as held:
        trace = Trace()
        result = engine.find(ModelSource(held.state), request, settings, budget=budget,
                             observer=observer, trace=trace)
        return result, explain(held.state, request, result, trace, settings, sample_limit)


def explain(state: State, request: CandidateRequest, result: Result, trace: Trace,
            settings: Settings, sample_limit: int = 10) -> Explanation:
    """Why the trees of ``state`` are (not) in ``result``, the answer to ``request``
    that ``engine.find`` gave with ``trace``."""
    names = trace.names
    assert names is not None, "explain needs the trace of a search"
    words = Words(state, {rc: name for name, rc in names.classes.items()},
                  {trait: name for name, trait in names.traits.items()},
                  {agg: uuid for uuid, agg in names.aggregates.items()})
    impossible = {group.suffix: _impossible(spec, group, [*unknown_classes(spec, names),
                                                          *unknown_traits(spec, names)],
                                            names.aggregates)
                  for group, spec in zip(trace.groups, request.groups, strict=True)
                  if not group.possible or not group.selects}
    roots = (frozenset(names.traits[n] for n in request.root_required),
             frozenset(names.traits[n] for n in request.root_forbidden))
    ctx = _Context(request, trace, state, words, state.tree_lists(), impossible,
                   rules.RootTraits(*roots, state) if any(roots) else None)
    steps = _Steps(ctx)
    for index, group in enumerate(trace.groups):
        if group.suffix in impossible:
            reason = impossible[group.suffix]
            steps.step(group.suffix, reason.filter, (), "{n} providers: " + reason.detail)
        elif trace.group_rules:
            steps.group(index)

    providers = state.providers
    named = {rp for c in result.candidates for rp in c.allocations}
    named |= {rp for c in result.candidates for rps in c.mappings.values() for rp in rps}
    answered = {providers[rp].root for rp in named if rp in providers}
    sharing = state.with_trait.get(names.sharing_trait, set()) \
        if names.sharing_trait is not None else set()
    # Offers made only by sharing providers: the engine lists each once.
    sharing_only = [set(c.allocations) for c in result.candidates
                    if set(c.allocations) <= sharing]
    found = len(result.candidates)
    cut = [f"limit={request.limit}" for _ in [0]
           if request.limit is not None and found >= request.limit]
    cut += [f"max_allocation_candidates={settings.max_candidates}" for _ in [0]
            if 0 <= settings.max_candidates <= found]

    counts: dict[tuple[str, str, str | None], int] = {}
    sample: list[tuple[str, str, list[Reason]]] = []
    qualified = 0
    laid_out = trace.plan
    viable = set(laid_out.order) if laid_out is not None else set()
    for root in ctx.trees:
        if root in answered or (sharing_only and laid_out is not None and root in viable
                                and _offered(laid_out, root, sharing_only)):
            qualified += 1
            continue
        # A tree with an option for every slot has no reason but the walk's.
        reasons = [] if root in viable and root not in trace.shortfalls \
            else _excluded(ctx, root)
        if not reasons:
            reasons = [_unexplained(words, root, cut if root in viable
                                    and root not in trace.shortfalls else [])]
        for key in {reason.key() for reason in reasons}:
            counts[key] = counts.get(key, 0) + 1
        if len(sample) < sample_limit:
            sample.append((words.uuid(root), words.name(root), reasons))
    amounts = {(g.suffix, words.class_names[c]): a for g in trace.groups for c, a in g.resources}
    ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0][0], item[0][1],
                                                       item[0][2] or ""))
    explanation = Explanation(
        total=len(ctx.trees), qualified=qualified, steps=steps.rows,
        counts=[(key, trees, words.summary(key[1:], trees, amounts.get((key[0], key[2] or ""), "")))
                for key, trees in ordered],
        excluded=sample)
    LOG.debug("explain: %d trees, %d qualified, %d excluded", explanation.total, qualified,
              explanation.total - qualified)
    return explanation


def _unexplained(words: Words, root: int, cut: list[str]) -> Reason:
    """A tree out of the answer that no rule in the trace explains: the answer
    was cut before it (``cut``: by what), or no combination serves."""
    if cut:
        return Reason(WHOLE_REQUEST, "limit", lambda: f"{words.name(root)} qualifies, but "
                      f"the answer stops at {cut[0]} candidates", words.uuid(root),
                      decided_by="limit")
    return Reason(WHOLE_REQUEST, "combination", lambda: f"each group has providers in "
                  f"{words.name(root)}, but no combination of them serves all groups "
                  "together", words.uuid(root), decided_by="combination")


def _offered(laid_out: Plan, root: int, sharing_only: list[set[int]]) -> bool:
    """Only sharing providers from elsewhere serve the tree, and their offer is in
    the answer (the engine lists it once, for the first tree it serves)."""
    tree_slots, local = laid_out.tree(root)
    if local:
        return False
    options = {rp for slot in tree_slots for rp in slot.options}
    return any(offer <= options for offer in sharing_only)
