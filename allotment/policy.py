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

Some rules are allotment's own. For the dashboard's read-only data:
``allotment:dashboard:providers`` and ``allotment:dashboard:usages``, admin
or reader (of any project) in both modes. For the history of allocations and
inventories (who wrote what, with request ids, across every project):
``allotment:history:allocations`` and ``allotment:history:inventories``; and
``allotment:audit:allocations`` (GET /audit/allocations: what looks wrong in
the database, with the history behind it, every project's consumers named).
Those three are admin only in both modes.

Every API rule is scoped to projects: a system-scoped token
(``OpenStack-System-Scope: all``) is refused whatever its roles. oslo.policy
6 (which upstream requires) always checks scope; an ``[oslo_policy]
enforce_scope`` left in an old config file is ignored, as upstream ignores it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from oslo_config import cfg
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
# Ours, not upstream's: the dashboard's read-only, cloud-wide views. A reader
# (of any project) may look; nothing it guards writes.
ADMIN_OR_READER = "role:admin or role:reader"
# Their names: the dashboard's handlers check them and its OpenAPI entries name them.
DASHBOARD_PROVIDERS = "allotment:dashboard:providers"
DASHBOARD_USAGES = "allotment:dashboard:usages"
# Ours: the history and the audit show every project's consumers and the
# request ids of their writes, so they are the admin's alone.
ADMIN = "role:admin"
HISTORY_ALLOCATIONS = "allotment:history:allocations"
HISTORY_INVENTORIES = "allotment:history:inventories"
AUDIT_ALLOCATIONS = "allotment:audit:allocations"

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
    """One API rule: its name, default, what it guards (for generated docs)."""

    name: str
    check_str: str
    description: str
    operations: tuple[tuple[str, str], ...]


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
    ApiRule(DASHBOARD_PROVIDERS, ADMIN_OR_READER,
            "Dashboard: provider trees with inventories, usage, traits and aggregates; "
            "providers' names by uuid.",
            (("GET", "/dashboard/api/providers"),
             ("GET", "/dashboard/api/providers/{uuid}/children"),
             ("GET", "/dashboard/api/provider_names"))),
    ApiRule(DASHBOARD_USAGES, ADMIN_OR_READER,
            "Dashboard: cloud-wide totals, fullest and emptiest providers, usage per "
            "project and consumer type, a consumer's allocations.",
            (("GET", "/dashboard/api/summary"), ("GET", "/dashboard/api/projects"),
             ("GET", "/dashboard/api/consumer_types"),
             ("GET", "/dashboard/api/consumers/{consumer_uuid}"))),
    # The history (allotment's own).
    ApiRule(HISTORY_ALLOCATIONS, ADMIN,
            "History: every change to consumers' allocations, with who made it.",
            (("GET", "/history/allocations"),)),
    ApiRule(HISTORY_INVENTORIES, ADMIN,
            "History: every change to providers' inventories, with who made it.",
            (("GET", "/history/inventories"),)),
    # The audit (allotment's own): read-only, cloud-wide.
    ApiRule(AUDIT_ALLOCATIONS, ADMIN,
            "Audit: what looks wrong in allocations and inventories now (over capacity, "
            "empty or incomplete consumers, old migrations, allocations without inventory), "
            "with the history that explains each finding.",
            (("GET", "/audit/allocations"),)),
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


class Policy:
    """The application's enforcer (never a global): defaults plus the operator's file."""

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        self.enforcer = oslo_policy.Enforcer(conf)
        # Every default changed at once in the RBAC refresh; one warning per
        # rule would only flood the log.
        self.enforcer.suppress_default_change_warnings = True
        self.enforcer.register_defaults(list_rules())
        # Read the operator's policy file now, so that a broken one stops the
        # service at start; oslo.policy re-reads it when it changes on disk.
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
        # An unregistered rule name is a programming error: let it raise.
        try:
            self.enforcer.authorize(rule, dict(target), creds, do_raise=True)
        except oslo_policy.InvalidScope:
            LOG.debug("Policy %s refused: token scope not allowed; credentials %s",
                      rule, creds)
            # Upstream words a token of the wrong scope (system-scoped) this
            # way: the detail is the bare rule name.
            raise errors.Forbidden(rule) from None
        except oslo_policy.PolicyNotAuthorized:
            LOG.debug("Policy %s refused for credentials %s, target %s", rule, creds, target)
            raise errors.Forbidden(f"Policy does not allow {rule} to be performed.") from None


def get_enforcer() -> oslo_policy.Enforcer:
    """The enforcer for oslo.policy's command-line tools (``oslo.policy.enforcer``).

    It reads placement.conf where the service does (OS_PLACEMENT_CONFIG_DIR,
    /etc/placement), so ``oslopolicy-policy-upgrade`` and friends see the
    operator's policy file.
    """
    from allotment import config

    return Policy(config.load()).enforcer
