// allotment's capacity dashboard, what changed: a consumer's allocations and timeline,
// a provider's recent changes, and the audit's findings. Entries of /history/allocations
// and /history/inventories, newest first; findings of /audit/allocations. Both are
// admin-only by default while the dashboard's own rules allow readers: a refusal is
// shown in place and the rest of the page stands.
import {
  $, ApiError, api, consumerHash, el, fmt, go, num, pages, providerHash, providerLink,
  showError,
} from "./common.js";

const HISTORY_PAGE = 20;  // history entries per request (the timeline, recent changes)
const NAMES_PER_REQUEST = 500;  // /dashboard/api/provider_names' most

// --- history entries as table rows ---------------------------------------------------
// They carry provider uuids only: the names come from /dashboard/api/provider_names.

// uuid -> {name, root_provider_uuid, root_provider_name} for the providers that exist;
// `known` is false when the names could not be read (then uuids are shown).
async function providerNames(uuids) {
  const wanted = [...new Set(uuids.filter(Boolean))];
  const names = new Map();
  names.known = true;
  try {
    for (let i = 0; i < wanted.length; i += NAMES_PER_REQUEST) {
      const batch = wanted.slice(i, i + NAMES_PER_REQUEST);
      const data = await api(`/dashboard/api/provider_names?uuids=${batch.join(",")}`);
      for (const [uuid, entry] of Object.entries(data.providers)) names.set(uuid, entry);
    }
  } catch (error) {
    if (!(error instanceof ApiError) || error.status === 401) throw error;
    names.known = false;
  }
  return names;
}

// A provider by uuid: its name (and tree) when known, linking to it on the Providers page.
function providerRef(uuid, names) {
  if (!uuid) return el("span", {class: "empty"}, "—");
  const entry = names.get(uuid);
  if (entry) return providerLink({uuid, ...entry});
  return el("span", {},
    el("a", {href: providerHash(uuid), class: "mono", "data-uuid": uuid}, uuid),
    names.known ? el("span", {class: "hint"}, " (no longer exists)") : null);
}

const consumerLink = (uuid) => (uuid
  ? el("a", {href: consumerHash(uuid), class: "mono consumer-link", "data-consumer": uuid},
       uuid)
  : el("span", {class: "empty"}, "—"));

// "2026-12-03 18:47:35 UTC", the exact time in the title.
const when = (at) => el("time", {datetime: at, title: at},
                        String(at).replace("T", " ").replace(/(\.\d+)?Z$/, " UTC"));

const writerBadge = (writer) => el("span", {
  class: `badge writer-${writer === "outside" ? "outside" : "allotment"}`,
  title: writer === "outside"
    ? "written by something other than allotment (upstream Placement, SQL)"
    : "written by allotment"}, writer);

function requestIds(entry) {
  if (!entry.request_id && !entry.global_request_id) {
    return el("td", {class: "ids empty"}, "—");
  }
  return el("td", {class: "ids mono"}, entry.request_id || "",
            entry.global_request_id
              ? el("div", {class: "hint", title: "the caller's global request id"},
                   `global ${entry.global_request_id}`)
              : null);
}

function changeCell(before, after) {
  const delta = after - before;
  return el("td", {class: "num change"}, `${fmt(before)} \u2192 ${fmt(after)}`,
            delta ? el("span", {class: `delta ${delta > 0 ? "up" : "down"}`},
                       ` ${delta > 0 ? "+" : "\u2212"}${fmt(Math.abs(delta))}`) : null);
}

// One number of an inventory change: "a → b" when it changed, else the number.
function pairCell(before, after, show) {
  const now = after === null || after === undefined ? before : after;
  if (before === null || before === undefined || after === null || after === undefined
      || before === after) {
    return el("td", {class: "num"}, now === null || now === undefined ? "—" : show(now));
  }
  return el("td", {class: "num changed"}, `${show(before)} \u2192 ${show(after)}`);
}

function totalCell(entry) {
  if (entry.total_before === null) {
    return el("td", {class: "num changed"}, el("span", {class: "tag"}, "created"), " ",
              fmt(entry.total_after));
  }
  if (entry.total_after === null) {
    return el("td", {class: "num changed"}, el("span", {class: "tag"}, "deleted"),
              ` was ${fmt(entry.total_before)}`);
  }
  return pairCell(entry.total_before, entry.total_after, fmt);
}

// The columns of an allocation entry; `show` says which of consumer and provider.
const ALLOCATION_HEAD = (show) => ["When", show.consumer ? "Consumer" : null,
  show.provider ? "Provider" : null, "Class", "Held", "Writer", "Request"].filter(Boolean);

function allocationRow(entry, names, show) {
  return el("tr", {"data-id": entry.id, "data-consumer": entry.consumer_uuid,
                   "data-provider": entry.resource_provider_uuid,
                   "data-rc": entry.resource_class, "data-before": entry.used_before,
                   "data-after": entry.used_after, "data-writer": entry.writer},
    el("td", {class: "when"}, when(entry.at)),
    show.consumer ? el("td", {}, consumerLink(entry.consumer_uuid),
                       entry.project_id ? el("div", {class: "hint"},
                                             `project ${entry.project_id}`) : null) : null,
    show.provider ? el("td", {}, providerRef(entry.resource_provider_uuid, names)) : null,
    el("td", {class: "rc"}, entry.resource_class || "—"),
    changeCell(entry.used_before, entry.used_after),
    el("td", {}, writerBadge(entry.writer)), requestIds(entry));
}

const INVENTORY_HEAD = (show) => ["When", show.provider ? "Provider" : null, "Class",
  "Total", "Reserved", "Ratio", "Writer", "Request"].filter(Boolean);

function inventoryRow(entry, names, show) {
  return el("tr", {"data-id": entry.id, "data-provider": entry.resource_provider_uuid,
                   "data-rc": entry.resource_class, "data-writer": entry.writer,
                   "data-total-before": entry.total_before,
                   "data-total-after": entry.total_after},
    el("td", {class: "when"}, when(entry.at)),
    show.provider ? el("td", {}, providerRef(entry.resource_provider_uuid, names)) : null,
    el("td", {class: "rc"}, entry.resource_class || "—"),
    totalCell(entry),
    pairCell(entry.reserved_before, entry.reserved_after, fmt),
    pairCell(entry.allocation_ratio_before, entry.allocation_ratio_after, String),
    el("td", {}, writerBadge(entry.writer)), requestIds(entry));
}

// Rows of entries, newest first; the rows of one change after its first are marked,
// so that a change shows as one block: one request of allotment's (its request id),
// or entries of another writer recorded at the same moment.
function historyRows(entries, names, rowOf, show, previous) {
  let last = previous || null;
  return entries.map((entry) => {
    const row = rowOf(entry, names, show);
    const same = last !== null && last.writer === entry.writer && (entry.request_id
      ? last.request_id === entry.request_id : !last.request_id && last.at === entry.at);
    row.classList.add(same ? "same-change" : "new-change");
    last = entry;
    return row;
  });
}

function historyTable(id, head, rows) {
  return el("table", {id, class: "history"},
    el("thead", {}, el("tr", {}, head.map((h) => el("th", {}, h)))), el("tbody", {}, rows));
}

// Why a history request was not answered, in place of its table (the rest of the page
// goes on): a 403 says which rule refused it.
function historyRefusal(error, what) {
  if (error instanceof ApiError && error.status === 403) {
    return el("p", {class: "denied"}, `Not allowed to read ${what} (403): ${error.detail} `
      + "The history is admin-only by default.");
  }
  return el("p", {class: "denied"}, `Could not read ${what}: ${error.message || error}`);
}

// A paged list of history entries: the newest `HISTORY_PAGE`, then "Older" for the next
// page (next_marker) while there are more.
function historyList({id, path, params, rowOf, head, show, what, empty}) {
  const box = el("div", {class: "history-list", id});
  let marker = null;
  let last = null;
  let count = 0;
  let tbody = null;
  const older = el("button", {class: "older", type: "button"}, "Older changes\u2026");
  const info = el("span", {class: "info"});

  async function load() {
    const query = new URLSearchParams({...params, limit: HISTORY_PAGE});
    if (marker !== null) query.set("marker", marker);
    older.disabled = true;
    let data;
    let names;
    try {
      data = await api(`${path}?${query}`);
      names = await providerNames(show.provider
        ? data.entries.map((entry) => entry.resource_provider_uuid) : []);
    } catch (error) {
      // The first page: the refusal in place of the table. A later one: the entries
      // shown stay, and the button can try again.
      if (tbody || (error instanceof ApiError && error.status === 401)) {
        older.disabled = false;
        throw error;
      }
      box.replaceChildren(historyRefusal(error, what));
      return;
    }
    if (!tbody) {
      if (!data.entries.length) {
        box.replaceChildren(el("p", {class: "empty"}, empty));
        return;
      }
      tbody = el("tbody");
      box.replaceChildren(
        el("table", {class: "history"},
           el("thead", {}, el("tr", {}, head(show).map((h) => el("th", {}, h)))), tbody),
        el("div", {class: "toolbar history-pager"}, older, info));
    }
    tbody.append(...historyRows(data.entries, names, rowOf, show, last));
    last = data.entries[data.entries.length - 1] || last;
    count += data.entries.length;
    marker = data.next_marker;
    older.hidden = marker === null;
    older.disabled = false;
    info.textContent = `${fmt(count)} change${count === 1 ? "" : "s"}${
      marker === null ? "" : ", older ones remain"}`;
  }

  older.addEventListener("click", () => load().catch(showError));
  box.append(el("p", {class: "hint"}, "Loading\u2026"));
  return {box, load};
}

// A provider's "Recent changes" panel: its latest inventory and allocation changes.
export function recentChanges(uuid) {
  const inventories = historyList({
    id: null, path: "/history/inventories", params: {resource_provider_uuid: uuid},
    rowOf: inventoryRow, head: INVENTORY_HEAD, show: {},
    what: "the inventory history", empty: "No inventory changes recorded."});
  const allocations = historyList({
    id: null, path: "/history/allocations", params: {resource_provider_uuid: uuid},
    rowOf: allocationRow, head: ALLOCATION_HEAD, show: {consumer: true},
    what: "the allocation history", empty: "No allocation changes recorded."});
  inventories.box.classList.add("recent-inventories");
  allocations.box.classList.add("recent-allocations");
  inventories.load().catch(showError);
  allocations.load().catch(showError);
  return [el("h4", {}, "Inventory changes"), inventories.box,
          el("h4", {}, "Allocation changes"), allocations.box];
}

// --- one consumer: what it holds, and its timeline ------------------------------------

pages.consumer = async (params) => {
  const uuid = params && params.get("uuid");
  if (!uuid) return;
  $("#consumer-uuid").value = uuid;
  await showConsumer(uuid);
};

$("#consumer-form").addEventListener("submit", (event) => {
  event.preventDefault();
  go(consumerHash($("#consumer-uuid").value.trim()));
});

function holdings(uuid, data) {
  const held = Object.entries(data.allocations);
  if (!held.length) {
    return [el("p", {class: "empty", id: "consumer-holds-nothing"},
               `Consumer ${uuid} holds nothing.`)];
  }
  const rows = [];
  for (const [rp, entry] of held) {
    for (const [rc, n] of Object.entries(entry.resources)) {
      rows.push(el("tr", {"data-provider": rp, "data-rc": rc, "data-used": n},
        el("td", {}, providerLink({uuid: rp, ...entry})), el("td", {}, rc), num(n)));
    }
  }
  return [
    el("dl", {class: "facts"},
       el("dt", {}, "project"), el("dd", {class: "mono"}, data.project_id),
       el("dt", {}, "user"), el("dd", {class: "mono"}, data.user_id),
       el("dt", {}, "type"), el("dd", {}, data.consumer_type),
       el("dt", {}, "generation"), el("dd", {}, data.consumer_generation)),
    el("table", {id: "consumer-allocations"},
       el("thead", {}, el("tr", {}, ["Provider", "Class", "Amount"]
         .map((h) => el("th", {}, h)))),
       el("tbody", {}, rows))];
}

async function showConsumer(uuid) {
  const out = $("#consumer-result");
  out.replaceChildren(el("p", {class: "hint"}, "Loading\u2026"));
  let data;
  try {
    data = await api(`/dashboard/api/consumers/${encodeURIComponent(uuid)}`);
  } catch (error) {
    out.replaceChildren();
    throw error;
  }
  const timeline = historyList({
    id: "consumer-timeline", path: "/history/allocations", params: {consumer_uuid: uuid},
    rowOf: allocationRow, head: ALLOCATION_HEAD, show: {provider: true},
    what: "the consumer's timeline", empty: "No changes recorded for this consumer."});
  out.replaceChildren(...holdings(uuid, data),
    el("h2", {}, "Timeline ", el("span", {class: "hint"},
       "every change to what it holds, newest first")),
    timeline.box);
  await timeline.load();
}

// --- the audit: findings with their evidence and history --------------------------------

const KINDS = {
  over_capacity: "Over capacity",
  allocation_without_inventory: "Allocations without an inventory",
  empty_consumer: "Consumers that hold nothing",
  incomplete_consumer: "Incomplete consumers",
  old_migration: "Old migrations",
};
const kindLabel = (kind) => KINDS[kind] || kind;
const AUDIT_OPEN_HISTORY = 20;  // up to this many findings: their history is open

// A number of seconds as an operator reads it: "2 d 3 h", "5 h 12 min", "40 s".
function seconds(n) {
  const days = Math.floor(n / 86400);
  const hours = Math.floor((n % 86400) / 3600);
  const minutes = Math.floor((n % 3600) / 60);
  if (days) return hours ? `${fmt(days)} d ${hours} h` : `${fmt(days)} d`;
  if (hours) return minutes ? `${hours} h ${minutes} min` : `${hours} h`;
  return minutes ? `${minutes} min` : `${n} s`;
}

// Evidence keys whose values are provider or consumer uuids (one or a list).
const PROVIDER_KEY = /(^|_)(providers?|provider_uuids?|roots?)$/;
const CONSUMER_KEY = /(^|_)(consumers?|consumer_uuids?)$/;
const ISO_TIME = /^\d{4}-\d\d-\d\dT[\d:.]+Z$/;

// One evidence value: uuids of providers and consumers link to them, times and
// durations read as such, a list item by item, an object key by key.
function evidenceValue(key, value, names) {
  if (value === null || value === undefined) return el("span", {class: "empty"}, "—");
  if (Array.isArray(value)) {
    if (!value.length) return el("span", {class: "empty"}, "none");
    return el("span", {}, value.flatMap((item, i) =>
      [i ? ", " : null, evidenceValue(key, item, names)]));
  }
  if (typeof value === "object") {
    return el("span", {class: "evidence-object"}, Object.entries(value).flatMap(
      ([k, v], i) => [i ? " \u00b7 " : null, el("span", {class: "hint"}, `${k} `),
                      evidenceValue(k, v, names)]));
  }
  if (typeof value === "string" && PROVIDER_KEY.test(key)) return providerRef(value, names);
  if (typeof value === "string" && CONSUMER_KEY.test(key)) return consumerLink(value);
  if (typeof value === "string" && ISO_TIME.test(value)) return when(value);
  if (typeof value === "number" && /_seconds$/.test(key)) {
    return el("span", {class: "mono", title: `${value} s`}, seconds(value));
  }
  if (typeof value === "number") return el("span", {class: "mono"}, fmt(value));
  return el("span", {class: "mono"}, String(value));
}

// Every provider uuid in a finding's evidence (for their names).
function evidenceUuids(evidence) {
  const found = [];
  const walk = (key, value) => {
    if (Array.isArray(value)) value.forEach((item) => walk(key, item));
    else if (value && typeof value === "object") {
      for (const [k, v] of Object.entries(value)) walk(k, v);
    } else if (typeof value === "string" && PROVIDER_KEY.test(key)) found.push(value);
  };
  walk("", evidence || {});
  return found;
}

function findingView(finding, names, open) {
  // What the finding's own fields say already is not repeated.
  const evidence = Object.entries(finding.evidence || {}).filter(([key, value]) =>
    !(key === "consumer_uuid" && value === finding.consumer_uuid)
    && !(key === "resource_provider_uuid" && value === finding.resource_provider_uuid)
    && !(key === "resource_class" && value === finding.resource_class));
  const past = finding.history || {};
  const allocations = past.allocations || [];
  const inventories = past.inventories || [];
  const changes = allocations.length + inventories.length;
  return el("article", {class: "finding", "data-kind": finding.kind,
                        "data-consumer": finding.consumer_uuid,
                        "data-provider": finding.resource_provider_uuid,
                        "data-rc": finding.resource_class},
    el("p", {class: "finding-summary"}, finding.summary),
    el("dl", {class: "facts"},
       finding.consumer_uuid ? [el("dt", {}, "consumer"),
         el("dd", {}, consumerLink(finding.consumer_uuid), " ",
            el("span", {class: "hint"}, "(its timeline)"))] : null,
       finding.resource_provider_uuid ? [el("dt", {}, "provider"),
         el("dd", {class: "finding-provider"},
            providerRef(finding.resource_provider_uuid, names))] : null,
       finding.resource_class ? [el("dt", {}, "class"),
         el("dd", {}, el("span", {class: "chip"}, finding.resource_class))] : null,
       evidence.flatMap(([key, value]) => [el("dt", {}, key.replace(/_/g, " ")),
         el("dd", {class: "evidence", "data-key": key}, evidenceValue(key, value, names))])),
    changes ? el("details", {class: "finding-history", open: open},
      el("summary", {}, `History (${fmt(changes)} change${changes === 1 ? "" : "s"})`),
      inventories.length ? [el("h4", {}, "Inventory changes"),
        historyTable(null, INVENTORY_HEAD({provider: true}),
                     historyRows(inventories, names, inventoryRow, {provider: true}))] : null,
      allocations.length ? [el("h4", {}, "Allocation changes"),
        historyTable(null, ALLOCATION_HEAD({consumer: true, provider: true}),
                     historyRows(allocations, names, allocationRow,
                                 {consumer: true, provider: true}))] : null) : null);
}

const audit = {kindsSeen: false};

pages.audit = async () => {
  const out = $("#audit-result");
  out.replaceChildren(el("p", {class: "hint"}, "Auditing\u2026"));
  $("#audit-info").textContent = "";
  const params = new URLSearchParams();
  const kind = $("#audit-kind").value;
  if (kind) params.set("kind", kind);
  const limit = parseInt($("#audit-limit").value, 10);
  if (limit > 0) params.set("limit", Math.min(limit, 1000));
  let data;
  try {
    data = await api(`/audit/allocations?${params}`);
  } catch (error) {
    if (!(error instanceof ApiError) || error.status === 401) throw error;
    out.replaceChildren(el("p", {class: "denied", id: "audit-refused"},
      error.status === 403
        ? `Not allowed to run the audit (403): ${error.detail} The audit is admin-only `
          + "by default (rule allotment:audit:allocations)."
        : error.status === 404 ? "This server has no /audit/allocations."
          : `The audit failed: ${error.message}`));
    return;
  }
  const counts = data.counts || {};
  if (!audit.kindsSeen) {
    $("#audit-kind").append(...Object.keys(counts).map((k) =>
      el("option", {value: k}, kindLabel(k))));
    audit.kindsSeen = true;
  }
  const settings = data.settings || {};
  $("#audit-info").textContent = `run at ${String(data.generated_at).replace("T", " ")
    .replace(/(\.\d+)?Z$/, " UTC")}` + (settings.migration_age === undefined ? ""
    : ` \u00b7 a migration is old after ${seconds(settings.migration_age)}`)
    + (settings.incomplete_consumer_project_id === undefined ? ""
      : ` \u00b7 placeholder owners: project ${settings.incomplete_consumer_project_id},`
        + ` user ${settings.incomplete_consumer_user_id}`);
  const findings = data.findings || [];
  const names = await providerNames(findings.flatMap((f) => [
    f.resource_provider_uuid, ...evidenceUuids(f.evidence),
    ...((f.history || {}).allocations || []).map((e) => e.resource_provider_uuid),
    ...((f.history || {}).inventories || []).map((e) => e.resource_provider_uuid)]));
  const byKind = new Map(Object.keys(counts).map((k) => [k, []]));
  for (const finding of findings) {
    if (!byKind.has(finding.kind)) byKind.set(finding.kind, []);
    byKind.get(finding.kind).push(finding);
  }
  const groups = new Map();
  for (const [kindName, found] of byKind) {
    if (!found.length) continue;
    const total = counts[kindName] === undefined ? found.length : counts[kindName];
    groups.set(kindName, el("section", {class: "audit-kind", "data-kind": kindName},
      el("h2", {}, `${kindLabel(kindName)} (${fmt(total)})`),
      found.length < total
        ? el("p", {class: "hint"}, `The first ${fmt(found.length)} of ${fmt(total)}.`) : null,
      found.map((f) => findingView(f, names, findings.length <= AUDIT_OPEN_HISTORY))));
  }
  const cards = el("div", {class: "counts", id: "audit-counts"},
    [...byKind.keys()].map((kindName) => {
      const n = counts[kindName] === undefined ? byKind.get(kindName).length
        : counts[kindName];
      const group = groups.get(kindName);
      return el("button", {type: "button", class: `count${n ? " found" : ""}`,
                           "data-kind": kindName, "data-count": n, disabled: !group,
                           onclick: () => group && group.scrollIntoView()},
                el("strong", {}, fmt(n)), ` ${kindLabel(kindName)}`);
    }));
  out.replaceChildren(cards, ...(groups.size ? groups.values()
    : [el("p", {class: "empty", id: "audit-clean"}, kind
      ? `No findings of this kind (${kindLabel(kind)}).`
      : "No findings: every check passed.")]));
};

$("#audit-form").addEventListener("submit", (event) => {
  event.preventDefault();
  pages.audit().catch(showError);
});
