"""Who may do what: Placement's policy rules on oslo.policy, one enforcer per app.

The rule names, default check strings, scope types and deprecated legacy
rules are upstream Placement's, so an operator's existing ``policy.yaml``
(``[oslo_policy] policy_file`` / ``policy_dirs``) overrides them unchanged and
``[oslo_policy] enforce_new_defaults`` picks between the two default sets:

- ``enforce_new_defaults = True`` (secure RBAC): each rule is its check string
  below; project-scoped ``admin`` or ``service`` for most APIs, ``service``
  only for the reshaper, and readers of their own project for ``GET /usages``.
- ``enforce_new_defaults = False`` (legacy): oslo.policy ORs each base rule
  with its deprecated default ``role:admin``, so an admin may also reshape.

Some rules are allotment's own, for data upstream does not serve. Each
guards data that an upstream rule also guards, and its default never allows
more than that rule (``ApiRule.upstream``; ``mirrored_routes()`` is the table
of route -> upstream rule that the docs and the Keystone tests read):

- the dashboard's JSON API: ``allotment:dashboard:providers`` (provider
  trees, names, cloud-wide totals) defaults to
  ``rule:placement:resource_providers:list``; ``allotment:dashboard:usages``
  (usage per project and per consumer type) to ``rule:placement:usages``,
  checked per project as ``GET /usages`` checks it, so a project reader sees
  its own project only; ``allotment:dashboard:consumers`` (one consumer's
  allocations) to ``rule:placement:allocations:list``. A default that *is*
  the upstream rule follows it: an operator who widens or narrows
  ``placement:resource_providers:list`` changes the dashboard with it, and
  one who wants a read-only operations role writes the dashboard rule alone
  (doc/source/operating/access.md);
- the history of allocations and inventories (who wrote what, with request
  ids, across every project): ``allotment:history:allocations`` and
  ``allotment:history:inventories``; the audit, ``allotment:audit:allocations``
  (what looks wrong in the database, every project's consumers named); and
  ``allotment:metrics`` (``GET /metrics`` on the API's address: every
  provider's name, tree, inventory and usage). These four are admin only in
  both modes: narrower than the upstream rules they are bounded by, which
  also admit the service.

Every API rule is scoped to projects: a system-scoped token
(``OpenStack-System-Scope: all``) is refused whatever its roles. oslo.policy
6 (which upstream requires) always checks scope; an ``[oslo_policy]
enforce_scope`` left in an old config file is ignored, as upstream ignores it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from oslo_config import cfg
from oslo_policy import _checks as oslo_checks
from oslo_policy import policy as oslo_policy

from allotment import errors
from allotment.http.environ import Identity

LOG = logging.getLogger(__name__)

PROJECT_SCOPE = ["project"]

# The rule every base rule replaced in the Wallaby release; with
# enforce_new_defaults = False oslo.policy still ORs it in.
LEGACY_ADMIN = oslo_policy.DeprecatedRule(
    name="rule:admin_api",
    check_str="role:admin",
    deprecated_reason=(
        "Placement API policies gained new default roles with scope types; "
        "the admin-only legacy default is kept only while enforce_new_defaults "
        "is False."),
    deprecated_since="W",
)

ADMIN_OR_SERVICE = "rule:admin_or_service_api"
SERVICE = "rule:service_api"
ADMIN_OR_PROJECT_READER_OR_SERVICE = "rule:admin_or_project_reader_or_service_api"
# Ours, not upstream's: the dashboard's read-only views. Each default is the
# upstream rule guarding the same data, so it never allows more.
DASHBOARD_PROVIDERS = "allotment:dashboard:providers"
DASHBOARD_USAGES = "allotment:dashboard:usages"
DASHBOARD_CONSUMERS = "allotment:dashboard:consumers"
# Ours: the history and the audit show every project's consumers and the
# request ids of their writes, and /metrics every provider's name and usage,
# so they are the admin's alone.
ADMIN = "role:admin"
HISTORY_ALLOCATIONS = "allotment:history:allocations"
HISTORY_INVENTORIES = "allotment:history:inventories"
AUDIT_ALLOCATIONS = "allotment:audit:allocations"
METRICS = "allotment:metrics"

# The target of a usage rule asked about every project at once (the
# dashboard's lists across projects): no project id, so a check on the
# target's project (``project_id:%(project_id)s``, a project reader's) fails
# and only a role that reads any project's usage (admin, service) passes.
EVERY_PROJECT: Mapping[str, str] = {}

BASE_RULES: list[oslo_policy.RuleDefault] = [
    oslo_policy.RuleDefault(
        "admin_api", "role:admin",
        description="Default rule for most placement APIs.",
        scope_types=PROJECT_SCOPE),
    oslo_policy.RuleDefault(
        "service_api", "role:service",
        description="Default rule for service-to-service placement APIs.",
        scope_types=PROJECT_SCOPE, deprecated_rule=LEGACY_ADMIN),
    oslo_policy.RuleDefault(
        "admin_or_service_api", "role:admin or role:service",
        description="Default rule for most placement APIs.",
        scope_types=PROJECT_SCOPE, deprecated_rule=LEGACY_ADMIN),
    # Upstream gives this one no scope types: it is only ever used through
    # admin_or_project_reader_or_service_api, which has them.
    oslo_policy.RuleDefault(
        "project_reader_api", "role:reader and project_id:%(project_id)s",
        description="Default rule for Project level reader APIs.",
        deprecated_rule=LEGACY_ADMIN),
    oslo_policy.RuleDefault(
        "admin_or_project_reader_or_service_api",
        "role:admin or rule:project_reader_api or role:service",
        description="Default rule for project level reader APIs.",
        scope_types=PROJECT_SCOPE, deprecated_rule=LEGACY_ADMIN),
]


@dataclass(frozen=True)
class ApiRule:
    """One API rule: its name, default, what it guards (for generated docs).

    ``upstream`` (allotment's own rules only) names the upstream rule that
    guards the same data: the default ``check_str`` never allows more than it.
    """

    name: str
    check_str: str
    description: str
    operations: tuple[tuple[str, str], ...]
    upstream: str | None = None


RP = "/resource_providers/{uuid}"

API_RULES: list[ApiRule] = [
    ApiRule("placement:resource_providers:list", ADMIN_OR_SERVICE,
            "List resource providers.", (("GET", "/resource_providers"),)),
    ApiRule("placement:resource_providers:create", ADMIN_OR_SERVICE,
            "Create resource provider.", (("POST", "/resource_providers"),)),
    ApiRule("placement:resource_providers:show", ADMIN_OR_SERVICE,
            "Show resource provider.", (("GET", RP),)),
    ApiRule("placement:resource_providers:update", ADMIN_OR_SERVICE,
            "Update resource provider.", (("PUT", RP),)),
    ApiRule("placement:resource_providers:delete", ADMIN_OR_SERVICE,
            "Delete resource provider.", (("DELETE", RP),)),
    ApiRule("placement:resource_classes:list", ADMIN_OR_SERVICE,
            "List resource classes.", (("GET", "/resource_classes"),)),
    ApiRule("placement:resource_classes:create", ADMIN_OR_SERVICE,
            "Create resource class.", (("POST", "/resource_classes"),)),
    ApiRule("placement:resource_classes:show", ADMIN_OR_SERVICE,
            "Show resource class.", (("GET", "/resource_classes/{name}"),)),
    ApiRule("placement:resource_classes:update", ADMIN_OR_SERVICE,
            "Update resource class.", (("PUT", "/resource_classes/{name}"),)),
    ApiRule("placement:resource_classes:delete", ADMIN_OR_SERVICE,
            "Delete resource class.", (("DELETE", "/resource_classes/{name}"),)),
    ApiRule("placement:resource_providers:inventories:list", ADMIN_OR_SERVICE,
            "List resource provider inventories.", (("GET", RP + "/inventories"),)),
    ApiRule("placement:resource_providers:inventories:create", ADMIN_OR_SERVICE,
            "Create one resource provider inventory.", (("POST", RP + "/inventories"),)),
    ApiRule("placement:resource_providers:inventories:show", ADMIN_OR_SERVICE,
            "Show resource provider inventory.",
            (("GET", RP + "/inventories/{resource_class}"),)),
    ApiRule("placement:resource_providers:inventories:update", ADMIN_OR_SERVICE,
            "Update resource provider inventory.",
            (("PUT", RP + "/inventories"), ("PUT", RP + "/inventories/{resource_class}"))),
    ApiRule("placement:resource_providers:inventories:delete", ADMIN_OR_SERVICE,
            "Delete resource provider inventory.",
            (("DELETE", RP + "/inventories"),
             ("DELETE", RP + "/inventories/{resource_class}"))),
    ApiRule("placement:resource_providers:aggregates:list", ADMIN_OR_SERVICE,
            "List resource provider aggregates.", (("GET", RP + "/aggregates"),)),
    ApiRule("placement:resource_providers:aggregates:update", ADMIN_OR_SERVICE,
            "Update resource provider aggregates.", (("PUT", RP + "/aggregates"),)),
    ApiRule("placement:resource_providers:usages", ADMIN_OR_SERVICE,
            "List resource provider usages.", (("GET", RP + "/usages"),)),
    # Admins (of any project) and services see every project's usage; a
    # reader only its own, so the handler passes the queried project as target.
    ApiRule("placement:usages", ADMIN_OR_PROJECT_READER_OR_SERVICE,
            "List total resource usages for a given project.", (("GET", "/usages"),)),
    ApiRule("placement:traits:list", ADMIN_OR_SERVICE,
            "List traits.", (("GET", "/traits"),)),
    ApiRule("placement:traits:show", ADMIN_OR_SERVICE,
            "Show trait.", (("GET", "/traits/{name}"),)),
    ApiRule("placement:traits:update", ADMIN_OR_SERVICE,
            "Update trait.", (("PUT", "/traits/{name}"),)),
    ApiRule("placement:traits:delete", ADMIN_OR_SERVICE,
            "Delete trait.", (("DELETE", "/traits/{name}"),)),
    ApiRule("placement:resource_providers:traits:list", ADMIN_OR_SERVICE,
            "List resource provider traits.", (("GET", RP + "/traits"),)),
    ApiRule("placement:resource_providers:traits:update", ADMIN_OR_SERVICE,
            "Update resource provider traits.", (("PUT", RP + "/traits"),)),
    ApiRule("placement:resource_providers:traits:delete", ADMIN_OR_SERVICE,
            "Delete resource provider traits.", (("DELETE", RP + "/traits"),)),
    ApiRule("placement:allocations:manage", ADMIN_OR_SERVICE,
            "Manage allocations.", (("POST", "/allocations"),)),
    ApiRule("placement:allocations:list", ADMIN_OR_SERVICE,
            "List allocations.", (("GET", "/allocations/{consumer_uuid}"),)),
    ApiRule("placement:allocations:update", ADMIN_OR_SERVICE,
            "Update allocations.", (("PUT", "/allocations/{consumer_uuid}"),)),
    ApiRule("placement:allocations:delete", ADMIN_OR_SERVICE,
            "Delete allocations.", (("DELETE", "/allocations/{consumer_uuid}"),)),
    ApiRule("placement:resource_providers:allocations:list", ADMIN_OR_SERVICE,
            "List resource provider allocations.", (("GET", RP + "/allocations"),)),
    ApiRule("placement:allocation_candidates:list", ADMIN_OR_SERVICE,
            "List allocation candidates.", (("GET", "/allocation_candidates"),)),
    ApiRule("placement:reshaper:reshape", SERVICE,
            "Reshape Inventory and Allocations.", (("POST", "/reshaper"),)),
    # The dashboard's data (allotment's own, off unless [allotment] dashboard).
    ApiRule(DASHBOARD_PROVIDERS, "rule:placement:resource_providers:list",
            "Dashboard: provider trees with inventories, usage, traits and aggregates; "
            "providers' names by uuid; cloud-wide totals, the fullest and emptiest "
            "providers. Default: whoever may list resource providers.",
            (("GET", "/dashboard/api/providers"),
             ("GET", "/dashboard/api/providers/{uuid}/children"),
             ("GET", "/dashboard/api/provider_names"),
             ("GET", "/dashboard/api/summary")),
            upstream="placement:resource_providers:list"),
    ApiRule(DASHBOARD_USAGES, "rule:placement:usages",
            "Dashboard: usage per project (checked per project, as GET /usages is: "
            "a caller allowed only its own project's usage is shown that project "
            "alone) and the whole cloud's usage per consumer type (every project's: "
            "checked with no project). Default: whoever may read that usage.",
            (("GET", "/dashboard/api/projects"), ("GET", "/dashboard/api/consumer_types")),
            upstream="placement:usages"),
    ApiRule(DASHBOARD_CONSUMERS, "rule:placement:allocations:list",
            "Dashboard: one consumer's allocations, project and user. Default: "
            "whoever may list a consumer's allocations.",
            (("GET", "/dashboard/api/consumers/{consumer_uuid}"),),
            upstream="placement:allocations:list"),
    # The history (allotment's own).
    ApiRule(HISTORY_ALLOCATIONS, ADMIN,
            "History: every change to consumers' allocations, with who made it.",
            (("GET", "/history/allocations"),), upstream="placement:allocations:list"),
    ApiRule(HISTORY_INVENTORIES, ADMIN,
            "History: every change to providers' inventories, with who made it.",
            (("GET", "/history/inventories"),),
            upstream="placement:resource_providers:inventories:list"),
    # The audit (allotment's own): read-only, cloud-wide.
    ApiRule(AUDIT_ALLOCATIONS, ADMIN,
            "Audit: what looks wrong in allocations and inventories now (over capacity, "
            "empty or incomplete consumers, old migrations, allocations without inventory), "
            "with the history that explains each finding.",
            (("GET", "/audit/allocations"),), upstream="placement:allocations:list"),
    # Prometheus metrics on the API's address (allotment's own, off unless
    # [allotment] metrics; a metrics_listen listener serves them without a token).
    ApiRule(METRICS, ADMIN,
            "Metrics: GET /metrics on the API's address, with every provider's name, "
            "tree, inventories and usage.",
            (("GET", "/metrics"),), upstream="placement:resource_providers:list"),
]


def list_rules() -> list[oslo_policy.RuleDefault]:
    """Every rule, for the enforcer and oslo.policy's sample/doc generators."""
    return BASE_RULES + [
        oslo_policy.DocumentedRuleDefault(
            name=rule.name, check_str=rule.check_str, description=rule.description,
            operations=[{"method": m, "path": p} for m, p in rule.operations],
            scope_types=PROJECT_SCOPE)
        for rule in API_RULES
    ]


def mirrored_routes() -> dict[tuple[str, str], str]:
    """(method, URI template) of each of allotment's own routes -> the upstream rule
    guarding the same data, which the route's rule never allows more than."""
    return {operation: rule.upstream for rule in API_RULES if rule.upstream is not None
            for operation in rule.operations}


# How often, at most, the policy file and directories are looked at again
# for changes. oslo.policy looks on every check: a search of the config
# directories (about ten ``stat`` calls when there is no file) and the file's
# modification time, a third of the CPU of a small read. Once a second
# still picks up an operator's edit well before anyone could retry.
POLICY_RECHECK_SECONDS = 1.0


# Checks whose answer depends on nothing but the rules, the credentials and
# the target (exact types: an extension's subclass may look elsewhere).
# ``http:`` checks ask another server, so rules using one are never cached.
# (From oslo.policy's _checks: its policy module re-exports only some.)
_PURE_CHECKS = (oslo_checks.TrueCheck, oslo_checks.FalseCheck, oslo_checks.NotCheck,
                oslo_checks.AndCheck, oslo_checks.OrCheck, oslo_checks.RuleCheck,
                oslo_checks.RoleCheck, oslo_checks.GenericCheck)


def _is_pure(check: oslo_checks.BaseCheck) -> bool:
    if type(check) not in _PURE_CHECKS:
        return False
    if isinstance(check, oslo_checks.NotCheck):
        return _is_pure(check.rule)
    if isinstance(check, (oslo_checks.AndCheck, oslo_checks.OrCheck)):
        return all(_is_pure(inner) for inner in check.rules)
    return True


class _RecheckingEnforcer(oslo_policy.Enforcer):
    """oslo.policy's enforcer, looking for policy file changes at most once per
    ``POLICY_RECHECK_SECONDS`` instead of on every check.

    ``clock`` is what the interval is counted on (default ``time.monotonic``).
    ``epoch`` grows each time it looks, and ``pure`` says whether every rule
    then loaded answers from the rules, credentials and target alone.
    """

    _checked_at: float | None = None
    epoch = 0
    pure = False

    def __init__(self, conf: cfg.ConfigOpts,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        super().__init__(conf)

    def load_rules(self, force_reload: bool = False) -> None:
        now = self.clock()
        if (not force_reload and self._checked_at is not None
                and now - self._checked_at < POLICY_RECHECK_SECONDS):
            return
        super().load_rules(force_reload)
        # Only once the rules are read: a broken file raises above, and is
        # read again (and raises again) on the next check.
        self.pure = all(_is_pure(check) for check in self.rules.values())
        self.epoch += 1
        self._checked_at = now

    def clear(self) -> None:
        super().clear()
        self._checked_at = None  # cleared rules are read again on the next check
        self.epoch += 1


# What a check answered: allowed, refused for the token's scope, or refused.
_ALLOWED, _BAD_SCOPE, _REFUSED = "allowed", "scope", "refused"
# Distinct callers times rules stay few (services and admins); a bound keeps
# a stream of one-off tokens from growing the cache without end.
_MAX_REMEMBERED = 4096


class Policy:
    """The application's enforcer (never a global): defaults plus the operator's file.

    ``clock`` is what the file's recheck interval (``POLICY_RECHECK_SECONDS``)
    is counted on (default ``time.monotonic``).
    """

    def __init__(self, conf: cfg.ConfigOpts,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.enforcer = _RecheckingEnforcer(conf, clock)
        # The answers given since the rules were last looked at, by rule,
        # credentials and target: oslo.policy inspects every check's signature
        # on every call, a fifth of the CPU of a small read (issue 40).
        self._answers: dict[tuple, str] = {}
        self._answers_epoch = -1
        # Every default changed at once in the RBAC refresh; one warning per
        # rule would only flood the log.
        self.enforcer.suppress_default_change_warnings = True
        self.enforcer.register_defaults(list_rules())
        # Read the operator's policy file now, so that a broken one stops the
        # service at start; it is read again when it changes on disk (looked
        # at once per POLICY_RECHECK_SECONDS at most).
        self.enforcer.load_rules()

    def authorize(self, identity: Identity | None, rule: str,
                  target: Mapping | None = None) -> None:
        """Raise Forbidden unless ``identity`` may apply ``rule`` to ``target``.

        Without a target the caller's own project and user are the target, as
        upstream does for rules that do not look at one.
        """
        creds = identity.policy_creds() if identity is not None else {}
        if target is None:
            target = {"project_id": creds.get("project_id"),
                      "user_id": creds.get("user_id")}
        answer = self._answer(rule, creds, target)
        if answer == _BAD_SCOPE:
            LOG.debug("Policy %s refused: token scope not allowed; credentials %s",
                      rule, creds)
            # Upstream words a token of the wrong scope (system-scoped) this
            # way: the detail is the bare rule name.
            raise errors.Forbidden(rule)
        if answer == _REFUSED:
            LOG.debug("Policy %s refused for credentials %s, target %s", rule, creds, target)
            raise errors.Forbidden(f"Policy does not allow {rule} to be performed.")

    def _answer(self, rule: str, creds: dict, target: Mapping) -> str:
        """oslo.policy's answer, remembered until the rules are next looked at
        when every rule is pure (no ``http:`` or extension checks)."""
        self.enforcer.load_rules()  # at most once per POLICY_RECHECK_SECONDS
        if self._answers_epoch != self.enforcer.epoch:
            self._answers = {}
            self._answers_epoch = self.enforcer.epoch
        key = None
        if self.enforcer.pure:
            try:
                key = (rule, *((name, tuple(value) if isinstance(value, list) else value)
                               for name, value in creds.items()),
                       None, *sorted(target.items()))
                answer = self._answers.get(key)
            except TypeError:  # a value that cannot be a key: ask every time
                key = answer = None
            if answer is not None:
                return answer
        # An unregistered rule name is a programming error: let it raise.
        try:
            self.enforcer.authorize(rule, dict(target), creds, do_raise=True)
            answer = _ALLOWED
        except oslo_policy.InvalidScope:
            answer = _BAD_SCOPE
        except oslo_policy.PolicyNotAuthorized:
            answer = _REFUSED
        if key is not None:
            if len(self._answers) >= _MAX_REMEMBERED:
                self._answers = {}
            self._answers[key] = answer
        return answer

    def allows(self, identity: Identity | None, rule: str,
               target: Mapping | None = None) -> bool:
        """Whether ``authorize`` would let ``identity`` apply ``rule`` to ``target``."""
        try:
            self.authorize(identity, rule, target)
        except errors.Forbidden:
            return False
        return True


def get_enforcer() -> oslo_policy.Enforcer:
    """The enforcer for oslo.policy's command-line tools (``oslo.policy.enforcer``).

    It reads placement.conf where the service does (OS_PLACEMENT_CONFIG_DIR,
    /etc/placement), so ``oslopolicy-policy-upgrade`` and friends see the
    operator's policy file.
    """
    from allotment import config

    return Policy(config.load()).enforcer
