"""Allocation bodies of every version as the ledger's claims.

PUT /allocations/{consumer_uuid} takes one consumer's entry, POST /allocations
and POST /reshaper a consumer uuid -> entry mapping; each entry becomes one
``allocations.Claim``, whatever the version's format.
"""

from __future__ import annotations

from oslo_config import cfg

from allotment.http.microversion import Version
from allotment.ledger import allocations


def claim_from_body(consumer_uuid: str, data: dict, version: Version,
                    conf: cfg.ConfigOpts) -> allocations.Claim:
    """One consumer's entry of a PUT or POST body, in any version's format."""
    entries = data["allocations"]
    if isinstance(entries, list):
        # Before 1.12: a list of {resource_provider: {uuid}, resources}.
        by_provider = {item["resource_provider"]["uuid"]: item["resources"]
                       for item in entries}
    else:
        by_provider = {rp_uuid: entry["resources"] for rp_uuid, entry in entries.items()}
    project_id: str
    user_id: str
    if data.get("project_id") is None:
        # Before 1.8 the owner is not given: record the configured placeholders.
        project_id = conf.placement.incomplete_consumer_project_id
        user_id = conf.placement.incomplete_consumer_user_id
    else:
        # The schemas that accept a project_id require the user_id with it.
        project_id, user_id = data["project_id"], data["user_id"]
    return allocations.Claim(
        consumer_uuid=consumer_uuid,
        allocations=by_provider,
        project_id=project_id,
        user_id=user_id,
        generation=data.get("consumer_generation"),
        check_generation=version.has("consumer_generation"),
        consumer_type=data.get("consumer_type") if version.has("consumer_types") else None,
    )
