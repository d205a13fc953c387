"""``{allotment-policy-rules}``: every policy rule, from ``allotment.policy``.

For each rule: its name, default check string, the routes it guards, and who
its default lets through, found by asking oslo.policy itself (the enforcer the
service builds, no policy file) on behalf of typical callers, once with the
secure RBAC defaults and once with the legacy ones. A rule's wording on this
page cannot drift from what the service enforces.
"""

from __future__ import annotations

from typing import Any

from generated_markdown import GeneratedMarkdown, cell, code, table
from oslo_policy import opts as policy_opts
from sphinx.application import Sphinx

from allotment import config, policy

OWN, OTHER = "11111111111111111111111111111111", "22222222222222222222222222222222"

# (who, credentials). The target is always a resource of project OWN.
CALLERS: list[tuple[str, dict[str, Any]]] = [
    ("admin", {"roles": ["admin", "member", "reader"], "project_id": OTHER}),
    ("service", {"roles": ["service"], "project_id": OTHER}),
    ("member of any project", {"roles": ["member", "reader"], "project_id": OTHER}),
    ("reader of any project", {"roles": ["reader"], "project_id": OTHER}),
    ("reader of its own project", {"roles": ["reader"], "project_id": OWN}),
]
SYSTEM_ADMIN = {"roles": ["admin", "member", "reader"], "system_scope": "all"}


def _policy(new_defaults: bool) -> policy.Policy:
    conf = config.load(config_files=[], config_dirs=[])
    policy_opts.set_defaults(conf, enforce_new_defaults=new_defaults)
    return policy.Policy(conf)


def _allowed(enforcer: policy.Policy, rule: str, creds: dict[str, Any]) -> bool:
    full = {"user_id": "u", "project_id": None, "system_scope": None, **creds}
    try:
        enforcer.enforcer.authorize(rule, {"project_id": OWN, "user_id": "u"}, full,
                                    do_raise=True)
    except (policy.oslo_policy.PolicyNotAuthorized, policy.oslo_policy.InvalidScope):
        return False
    return True


def who(enforcer: policy.Policy, rule: str) -> str:
    """In plain words, which typical callers ``rule`` lets through."""
    allowed = [name for name, creds in CALLERS if _allowed(enforcer, rule, creds)]
    if "reader of any project" in allowed:
        allowed.remove("reader of its own project")
    if "member of any project" in allowed and "reader of any project" in allowed:
        allowed.remove("member of any project")
        allowed[allowed.index("reader of any project")] = "any project member or reader"
    words = ", ".join(allowed) if allowed else "nobody"
    if _allowed(enforcer, rule, SYSTEM_ADMIN):
        words += "; also system-scoped tokens"
    return words


def allows(new: policy.Policy, legacy: policy.Policy, rule: str) -> str:
    """Who the new defaults let through, and the legacy defaults if they differ."""
    words, legacy_words = who(new, rule), who(legacy, rule)
    return words if legacy_words == words else f"{words} (legacy: {legacy_words})"


class PolicyRules(GeneratedMarkdown):
    """The table of API rules, then the base rules they are built from."""

    def markdown(self) -> str:
        new, legacy = _policy(True), _policy(False)
        defaults = {rule.name: rule for rule in policy.list_rules()}
        api_rows = []
        for rule in policy.API_RULES:
            routes = ", ".join(code(f"{method} {path}") for method, path in rule.operations)
            name = code(rule.name)
            if rule.upstream:
                name += f" (bounded by {code(rule.upstream)})"
            api_rows.append([name, code(rule.check_str), routes,
                             cell(allows(new, legacy, rule.name))])
        base_rows = [[code(name), code(rule.check_str), cell(rule.description),
                      cell(allows(new, legacy, name))]
                     for name, rule in defaults.items()
                     if name in {base.name for base in policy.BASE_RULES}]
        scopes = sorted({scope for rule in defaults.values()
                         for scope in (rule.scope_types or [])})
        return "\n\n".join([
            "## API rules",
            "Who may call each route. *Default allows* asks oslo.policy, with no policy "
            "file, which of these callers the rule lets through for a resource of "
            "project P: an admin and a service user (tokens scoped to another project), "
            "members and readers of another project, and a reader of P itself. "
            "That is with `[oslo_policy] enforce_new_defaults = True` (secure RBAC, "
            "oslo.policy's default); *legacy* says who else passes with `False`, where "
            "oslo.policy also accepts each rule's deprecated default (`role:admin`). "
            f"Rules are scoped to {', '.join(code(s) for s in scopes)}: a system-scoped "
            "token is refused unless the row says otherwise. *Bounded by* names, for "
            "allotment's own rules, the upstream rule guarding the same data, which the "
            "default never allows more than.",
            table(["Rule", "Default check string", "Guards", "Default allows"], api_rows),
            "## Base rules",
            "The rules the API rules' defaults are written in (`rule:...`); overriding "
            "one changes every API rule that uses it.",
            table(["Rule", "Default check string", "Description", "Default allows"],
                  base_rows),
        ])


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("allotment-policy-rules", PolicyRules)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
