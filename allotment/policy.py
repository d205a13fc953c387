"""Policy: oslo.policy rules with upstream Placement's names and defaults."""

from __future__ import annotations

from oslo_config import cfg
from oslo_policy import policy as oslo_policy

from allotment import errors

ADMIN_OR_SERVICE = "rule:admin_or_service_api"

BASE_RULES = [
    oslo_policy.RuleDefault("admin_api", "role:admin"),
    oslo_policy.RuleDefault("service_api", "role:service"),
    oslo_policy.RuleDefault("admin_or_service_api", "role:admin or role:service"),
    oslo_policy.RuleDefault("project_reader_api", "role:reader and project_id:%(project_id)s"),
    oslo_policy.RuleDefault("admin_or_project_reader_or_service_api",
                            "role:admin or rule:project_reader_api or role:service"),
]

API_RULES = {
    name: ADMIN_OR_SERVICE
    for name in [
        "placement:resource_providers:list",
        "placement:resource_providers:create",
        "placement:resource_providers:show",
        "placement:resource_providers:update",
        "placement:resource_providers:delete",
        "placement:resource_classes:list",
        "placement:resource_classes:create",
        "placement:resource_classes:show",
        "placement:resource_classes:update",
        "placement:resource_classes:delete",
        "placement:resource_providers:inventories:list",
        "placement:resource_providers:inventories:create",
        "placement:resource_providers:inventories:show",
        "placement:resource_providers:inventories:update",
        "placement:resource_providers:inventories:delete",
        "placement:resource_providers:aggregates:list",
        "placement:resource_providers:aggregates:update",
        "placement:resource_providers:usages",
        "placement:traits:list",
        "placement:traits:show",
        "placement:traits:update",
        "placement:traits:delete",
        "placement:resource_providers:traits:list",
        "placement:resource_providers:traits:update",
        "placement:resource_providers:traits:delete",
        "placement:allocations:manage",
        "placement:allocations:list",
        "placement:allocations:update",
        "placement:allocations:delete",
        "placement:resource_providers:allocations:list",
        "placement:allocation_candidates:list",
    ]
}
API_RULES["placement:usages"] = "rule:admin_or_project_reader_or_service_api"
API_RULES["placement:reshaper:reshape"] = "rule:service_api"


class Policy:
    """One enforcer per application (never a global)."""

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        self.enforcer = oslo_policy.Enforcer(conf)
        self.enforcer.register_defaults(BASE_RULES)
        self.enforcer.register_defaults(
            [oslo_policy.RuleDefault(name, check) for name, check in API_RULES.items()])

    def authorize(self, identity, rule: str, target: dict | None = None) -> None:
        creds = identity.policy_creds() if identity is not None else {}
        target = target if target is not None else {
            "project_id": creds.get("project_id"), "user_id": creds.get("user_id")}
        try:
            allowed = self.enforcer.authorize(rule, target, creds, do_raise=False)
        except oslo_policy.InvalidScope:
            allowed = False
        if not allowed:
            raise errors.Forbidden(f"Policy does not allow {rule} to be performed.")
