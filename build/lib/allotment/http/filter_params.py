"""Parsing of the filter parameters shared by provider listing and candidates.

``resources``, ``required`` and ``member_of`` (with their version rules)
become plain values: dicts of amounts, lists of any-of sets, forbidden sets.
Messages match upstream's, as clients and operators know them.
"""

from __future__ import annotations

from allotment import errors
from allotment.http.microversion import Version
from allotment.http.request import Query, is_uuid_like
from allotment.ledger import capacity
from allotment.ledger.filters import AggregateFilter, TraitFilter

_RESOURCES_FORM = ("Badly formed resources parameter. Expected resources query string "
                   "parameter in form: ?resources=VCPU:2,MEMORY_MB:1024. Got: {}.")


def parse_resources(value: str) -> dict[str, int]:
    if value.strip() == "":
        raise errors.BadRequest(_RESOURCES_FORM.format("empty string"))
    result: dict[str, int] = {}
    for item in value.split(","):
        try:
            name, amount_text = item.split(":")
        except ValueError:
            raise errors.BadRequest(_RESOURCES_FORM.format(item)) from None
        try:
            # A long run of digits is more than any capacity (int() refuses
            # thousands of digits): kept as the amount that fits nowhere.
            amount = (capacity.MAX_CAPACITY + 1 if len(amount_text) > 20
                      and amount_text.isascii() and amount_text.isdigit()
                      else int(amount_text))
        except ValueError:
            raise errors.BadRequest(
                f"Requested resource {name} expected positive integer amount. "
                f"Got: {amount_text}.") from None
        if amount < 1:
            raise errors.BadRequest(
                f"Requested resource {name} requires amount >= 1. Got: {amount}.")
        result[name] = amount
    return result


def parse_trait_value(value: str, allow_forbidden: bool, allow_any: bool
                      ) -> tuple[list[set[str]], set[str]]:
    if value.startswith("in:"):
        if not allow_any:
            raise errors.BadRequest(
                "Invalid query string parameters: The format "
                "'in:HW_CPU_X86_VMX,CUSTOM_MAGIC' only supported since microversion "
                f"1.39. Got: {value}")
        any_traits = {part.strip() for part in value[3:].split(",")}
        if not all(any_traits):
            raise errors.BadRequest(
                "Invalid query string parameters: Expected 'required' parameter value "
                "of the form: in:HW_CPU_X86_VMX,CUSTOM_MAGIC. Got an empty trait in: "
                f"{value}")
        if any(trait.startswith("!") for trait in any_traits):
            raise errors.BadRequest(
                "Invalid query string parameters: The format "
                "'in:HW_CPU_X86_VMX,CUSTOM_MAGIC' does not support forbidden traits. "
                f"Got: {value}")
        return [any_traits], set()
    parts = [part.strip() for part in value.split(",")]
    # Like upstream, any run of leading '!' marks one forbidden trait.
    forbidden = {part.lstrip("!") for part in parts if part.startswith("!")}
    if not all(parts) or not all(forbidden):
        form = "HW_CPU_X86_VMX,!CUSTOM_MAGIC" if allow_forbidden else \
            "HW_CPU_X86_VMX,CUSTOM_MAGIC"
        raise errors.BadRequest(
            "Invalid query string parameters: Expected 'required' parameter value of "
            f"the form: {form}. Got an empty trait in: {value}")
    if forbidden and not allow_forbidden:
        raise errors.BadRequest(
            "Invalid query string parameters: Expected 'required' parameter value of "
            f"the form: HW_CPU_X86_VMX,CUSTOM_MAGIC. Got: {value}")
    required = [{part} for part in parts if not part.startswith("!")]
    return required, forbidden


def parse_required(query: Query, version: Version, key: str = "required") -> TraitFilter:
    values = query.getall(key)
    allow_any = version.has("any_traits")
    if not allow_any:
        # Before 1.39 only the last of repeated parameters counts.
        values = values[-1:]
    result = TraitFilter()
    for value in values:
        required, forbidden = parse_trait_value(
            value, version.has("forbidden_traits"), allow_any)
        result.required += required
        result.forbidden |= forbidden
    return result


def parse_member_of_value(value: str) -> tuple[set[str], set[str]]:
    if "," in value and not (value.startswith("in:") or value.startswith("!in:")):
        raise errors.BadRequest(
            "Multiple values for 'member_of' must be prefixed with the 'in:' or '!in:' "
            f"keyword using the valid microversion. Got: {value}")
    required: set[str] = set()
    forbidden: set[str] = set()
    if value.startswith("!in:"):
        forbidden = set(value[4:].split(","))
    elif value.startswith("!"):
        forbidden = {value[1:]}
    elif value.startswith("in:"):
        required = set(value[3:].split(","))
    else:
        required = {value}
    for uuid in required | forbidden:
        if not is_uuid_like(uuid):
            raise errors.BadRequest(
                "Invalid query string parameters: Expected 'member_of' parameter to "
                f"contain valid UUID(s). Got: {uuid}")
    return required, forbidden


def parse_member_of(query: Query, version: Version, suffix: str = "") -> AggregateFilter:
    key = "member_of" + suffix
    values = query.getall(key)
    if not version.has("multiple_member_of") and len(values) > 1:
        raise errors.BadRequest(f"Multiple member_of{suffix} parameters are not supported")
    result = AggregateFilter()
    for value in values:
        required, forbidden = parse_member_of_value(value)
        if required:
            result.required.append(required)
        if forbidden:
            if not version.has("forbidden_aggregates"):
                raise errors.BadRequest(
                    f"Forbidden member_of{suffix} parameters are not supported in the "
                    "specified microversion")
            result.forbidden |= forbidden
    return result


def parse_in_tree(value: str) -> str:
    stripped = value.strip()
    if not is_uuid_like(stripped):
        raise errors.BadRequest(
            "Invalid query string parameters: Expected 'in_tree' parameter to be a "
            f"format of uuid. Got: {value}")
    return stripped
