// allotment's capacity dashboard, the entry point: the provider trees, the usage
// totals and rankings, and the what-fits box (with its headroom); history.js adds a consumer's allocations
// and timeline, a provider's recent changes and the audit. Read-only views over
// /dashboard/api/..., the Placement API, /history/... and /audit/allocations.
import {
  $, ApiError, api, chips, clearError, el, fmt, isForbidden, num, pages, pct, pctText,
  providerLink, route, showError, usageBar,
} from "./common.js";
import {recentChanges} from "./history.js";

const TREE_PAGE = 50;
const PROJECT_PAGE = 50;
const QUALIFIED_SHOWN = 50;
const HEADROOM_ROOTS = 5;

// --- providers: trees a page at a time, children drawn when first expanded ---------

const trees = {offset: 0, q: "", focus: null};

// A provider with its bars, traits and aggregates; its children are drawn when it is
// first expanded, and those the answer did not hold are asked for a page at a time.
function providerNode(node) {
  const count = node.child_count;
  const children = el("div", {class: "children", hidden: true});
  let drawn = false;
  let loaded = node.children.length;
  const toggle = count > 0
    ? el("button", {class: "toggle", type: "button", "aria-expanded": "false",
                    "aria-label": `Expand ${node.name}`}, "▸")
    : el("span", {class: "toggle leaf"}, "·");
  const changesButton = el("button", {class: "changes-toggle", type: "button",
                                      "aria-expanded": "false"}, "Recent changes");
  const changes = el("div", {class: "changes", hidden: true});
  const box = el("div", {class: "node", "data-uuid": node.uuid, "data-name": node.name},
    el("div", {class: "row"}, toggle,
       el("span", {class: "name"}, node.name),
       el("span", {class: "uuid"}, node.uuid),
       count > 0 ? el("span", {class: "kids"}, `${fmt(count)} child${count > 1 ? "ren" : ""}`)
                 : null,
       changesButton),
    el("div", {class: "details"},
       Object.entries(node.inventories).map(([rc, inv]) => usageBar(rc, inv)),
       chips("traits", node.traits), chips("aggregates", node.aggregates)),
    changes,
    children);

  // The provider's latest inventory and allocation changes, asked for when first shown.
  box.showChanges = (open) => {
    if (open && !changes.hasChildNodes()) changes.append(...recentChanges(node.uuid));
    changes.hidden = !open;
    changesButton.setAttribute("aria-expanded", String(open));
  };
  changesButton.addEventListener("click", () => box.showChanges(changes.hidden));

  function moreButton() {
    const button = el("button", {class: "more", type: "button"},
                      `${fmt(count - loaded)} more children…`);
    button.addEventListener("click", () => {
      button.disabled = true;
      api(`/dashboard/api/providers/${encodeURIComponent(node.uuid)}/children?limit=${
        TREE_PAGE}&offset=${loaded}`).then((data) => {
        loaded += data.children.length;
        button.replaceWith(...data.children.map(providerNode),
                           ...(loaded < data.total && data.children.length ? [moreButton()] : []));
      }).catch((error) => { button.disabled = false; showError(error); });
    });
    return button;
  }

  box.setExpanded = (open) => {
    if (count === 0) return;
    if (open && !drawn) {
      children.append(...node.children.map(providerNode));
      if (loaded < count) {
        const button = moreButton();
        children.append(button);
        if (loaded === 0) button.click();
      }
      drawn = true;
    }
    children.hidden = !open;
    toggle.setAttribute("aria-expanded", String(open));
    toggle.textContent = open ? "▾" : "▸";
  };
  if (count > 0) toggle.addEventListener("click", () => box.setExpanded(children.hidden));
  return box;
}

async function loadTrees() {
  const params = new URLSearchParams({limit: TREE_PAGE, offset: trees.offset});
  if (trees.q) params.set("q", trees.q);
  const data = await api(`/dashboard/api/providers?${params}`);
  const list = $("#trees");
  list.replaceChildren(...data.trees.map(providerNode));
  if (!data.trees.length) list.append(el("p", {class: "empty"}, "No provider trees."));
  const last = Math.min(data.offset + data.trees.length, data.total);
  $("#trees-info").textContent = data.total
    ? `trees ${fmt(data.offset + 1)}–${fmt(last)} of ${fmt(data.total)}` : "0 trees";
  $("#trees-prev").disabled = data.offset === 0;
  $("#trees-next").disabled = last >= data.total;
  performance.mark("allotment:trees-drawn");
  if (trees.focus) focusProvider(trees.focus, data.trees);
}

// "#providers?uuid=X" (a link from a timeline or a finding): the tree that holds X,
// opened down to it, with its recent changes.
pages.providers = async (params) => {
  const uuid = params && params.get("uuid");
  trees.focus = uuid || null;
  if (uuid) {
    trees.q = uuid;
    trees.offset = 0;
    $("#provider-q").value = uuid;
  }
  await loadTrees();
};

// Searching or paging leaves the linked provider: so does the address.
function browseTrees() {
  trees.focus = null;
  if (location.hash !== "#providers") history.replaceState(null, "", "#providers");
  loadTrees().catch(showError);
}

$("#provider-search").addEventListener("submit", (event) => {
  event.preventDefault();
  trees.q = $("#provider-q").value.trim();
  trees.offset = 0;
  browseTrees();
});
$("#trees-prev").addEventListener("click", () => {
  trees.offset = Math.max(0, trees.offset - TREE_PAGE);
  browseTrees();
});
$("#trees-next").addEventListener("click", () => {
  trees.offset += TREE_PAGE;
  browseTrees();
});

function focusProvider(uuid, roots) {
  // The way down from a root of this page to the provider, through the children the
  // answer holds (a child beyond a wide tree's first page is not opened to).
  const path = [];
  const find = (node) => {
    path.push(node.uuid);
    if (node.uuid === uuid || node.children.some(find)) return true;
    path.pop();
    return false;
  };
  if (!roots.some(find)) return;
  let box = null;
  for (const step of path) {
    const scope = box ? box.querySelector(":scope > .children") : $("#trees");
    box = scope && [...scope.children].find((child) => child.dataset.uuid === step);
    if (!box) return;
    if (step !== uuid) box.setExpanded(true);
  }
  box.classList.add("focus");
  box.showChanges(true);
  box.scrollIntoView({block: "nearest"});
}

function setAll(open) {
  // Breadth first, so that expanding draws the next level before it is visited.
  const queue = [...document.querySelectorAll("#trees > .node")];
  while (queue.length) {
    const node = queue.shift();
    node.setExpanded(open);
    if (open) queue.push(...node.querySelectorAll(":scope > .children > .node"));
  }
}
$("#expand-all").addEventListener("click", () => setAll(true));
$("#collapse-all").addEventListener("click", () => setAll(false));

// --- usage -----------------------------------------------------------------------------

function table(id, head, rows) {
  $(id).replaceChildren(
    el("thead", {}, el("tr", {}, head.map((h) => el("th", {}, h)))),
    el("tbody", {}, rows.length ? rows
      : el("tr", {}, el("td", {colspan: head.length, class: "empty"}, "Nothing yet."))));
}

function rankingRows(entries) {
  return entries.map((e) => el("tr", {"data-uuid": e.uuid},
    el("td", {}, providerLink(e)), el("td", {}, e.resource_class),
    el("td", {class: "num"}, `${fmt(e.used)} / ${fmt(e.capacity)}`),
    el("td", {class: "num"}, pctText(e.fullness))));
}

const usage = {projectsOffset: 0, classesSeen: false};

async function loadSummary() {
  const rc = $("#rank-class").value;
  const data = await api(`/dashboard/api/summary?limit=10${
    rc ? `&resource_class=${encodeURIComponent(rc)}` : ""}`);
  $("#counts").replaceChildren(
    ...[["providers", data.providers], ["trees", data.trees], ["consumers", data.consumers]]
      .map(([label, n]) => el("div", {class: "count", "data-count": label},
                              el("strong", {}, fmt(n)), ` ${label}`)));
  table("#totals", ["Resource class", "Used", "Capacity", "", "Total", "Reserved", "Providers"],
    Object.entries(data.totals).map(([name, t]) => {
      const share = pct(t.used, t.capacity);
      const fill = el("div", {class: `fill ${share >= 90 ? "full" : share >= 70 ? "warm" : ""}`});
      fill.style.width = `${Math.min(100, share)}%`;
      return el("tr", {"data-rc": name}, el("td", {}, name), num(t.used), num(t.capacity),
        el("td", {class: "barcell"}, el("div", {class: "bar", title: `${share.toFixed(1)} %`},
                                        fill)),
        num(t.total), num(t.reserved), num(t.providers));
    }));
  if (!usage.classesSeen) {
    $("#rank-class").append(...Object.keys(data.totals).map((n) => el("option", {value: n}, n)));
    usage.classesSeen = true;
  }
  const head = ["Provider", "Class", "Used / capacity", "Full"];
  table("#fullest", head, rankingRows(data.fullest));
  table("#emptiest", head, rankingRows(data.emptiest));
}

const amounts = (usages) => Object.entries(usages)
  .map(([rc, n]) => el("span", {class: "amount", "data-rc": rc, "data-used": n},
                       `${rc} ${fmt(n)}`));

async function loadTypes() {
  const data = await api("/dashboard/api/consumer_types");
  table("#types", ["Consumer type", "Consumers", "Usage"],
    Object.entries(data.consumer_types).map(([type, u]) => {
      const {consumer_count: count, ...rest} = u;
      return el("tr", {"data-type": type}, el("td", {}, type), num(count),
                el("td", {}, amounts(rest)));
    }));
}

async function loadProjects() {
  const data = await api(
    `/dashboard/api/projects?limit=${PROJECT_PAGE}&offset=${usage.projectsOffset}`);
  table("#projects", ["Project", "Consumers", "Usage"], data.projects.map((p) =>
    el("tr", {"data-project": p.project_id}, el("td", {class: "mono"}, p.project_id),
       num(p.consumer_count), el("td", {}, amounts(p.usages)))));
  const last = Math.min(data.offset + data.projects.length, data.total);
  $("#projects-info").textContent = data.total
    ? `projects ${fmt(data.offset + 1)}–${fmt(last)} of ${fmt(data.total)}` : "0 projects";
  $("#projects-prev").disabled = data.offset === 0;
  $("#projects-next").disabled = last >= data.total;
}

// One part of the usage page: loaded, or, when the token's roles may not read it (403),
// emptied and "Not allowed" in its place while the parts it may read stand (a project
// reader sees its own project's usage alone). Returns the refusal, if any.
async function usagePart(load, id) {
  const box = $(id);
  const denied = box.querySelector(".denied");
  const body = box.querySelector(".part-body");
  try {
    await load();
    denied.hidden = true;
    body.hidden = false;
    return null;
  } catch (error) {
    if (!isForbidden(error)) throw error;
    for (const held of body.querySelectorAll("table, .counts")) held.replaceChildren();
    body.hidden = true;
    denied.textContent = `Not allowed (403): ${error.detail}`;
    denied.hidden = false;
    return error;
  }
}

// Every part refused: the page's "Not allowed".
pages.usage = async () => {
  const refused = (await Promise.all([usagePart(loadSummary, "#usage-summary"),
                                      usagePart(loadTypes, "#usage-types"),
                                      usagePart(loadProjects, "#usage-projects")]))
    .filter(Boolean);
  if (refused.length === 3) throw refused[0];
};

$("#rank-class").addEventListener("change", () => loadSummary().catch(showError));
$("#projects-prev").addEventListener("click", () => {
  usage.projectsOffset = Math.max(0, usage.projectsOffset - PROJECT_PAGE);
  loadProjects().catch(showError);
});
$("#projects-next").addEventListener("click", () => {
  usage.projectsOffset += PROJECT_PAGE;
  loadProjects().catch(showError);
});

// --- what fits --------------------------------------------------------------------------

pages.fits = async () => {};

function fitsQuery() {
  const params = new URLSearchParams();
  params.set("resources", $("#fit-resources").value.replace(/\s+/g, ""));
  const required = $("#fit-required").value.replace(/\s+/g, "");
  if (required) params.set("required", required);
  const memberOf = $("#fit-member-of").value.replace(/\s+/g, "");
  if (memberOf) params.set("member_of", memberOf);
  let text = params.toString();
  const more = $("#fit-more").value.trim().replace(/^[?&]+/, "");
  if (more) text += `&${more}`;
  return text;
}

// The roots that appear in the allocation requests, in the order of the answer.
function qualifiedRoots(body) {
  const summaries = body.provider_summaries || {};
  const roots = new Set();
  for (const request of body.allocation_requests || []) {
    for (const rp of Object.keys(request.allocations || {})) {
      roots.add((summaries[rp] && summaries[rp].root_provider_uuid) || rp);
    }
  }
  return [...roots];
}

const groupLabel = (group) => (group === "" || group === undefined || group === null
  ? "(unsuffixed)" : String(group));

function reasonText(reason) {
  const rc = reason.resource_class ? ` (${reason.resource_class})` : "";
  return `${groupLabel(reason.group)} · ${reason.filter}${rc}`;
}

async function qualifiedList(roots, requested) {
  const shown = roots.slice(0, QUALIFIED_SHOWN);
  let named = [];
  if (shown.length) {
    try {
      const data = await api(`/dashboard/api/providers?limit=${QUALIFIED_SHOWN}&roots=${
        shown.join(",")}`);
      named = data.trees;
    } catch (_e) {
      named = [];  // not allowed to read providers: show the uuids alone
    }
  }
  const byUuid = new Map(named.map((tree) => [tree.uuid, tree]));
  return el("ul", {id: "fit-qualified", class: "hosts"}, shown.map((uuid) => {
    const tree = byUuid.get(uuid);
    const bars = [];
    const walk = (node) => {
      for (const [rc, inv] of Object.entries(node.inventories)) {
        if (requested.has(rc)) bars.push(usageBar(node === tree ? rc : `${node.name}: ${rc}`, inv));
      }
      node.children.forEach(walk);
    };
    if (tree) walk(tree);
    return el("li", {class: "host qualified", "data-uuid": uuid},
      el("span", {class: "name"}, tree ? tree.name : uuid), el("span", {class: "uuid"}, uuid),
      el("div", {class: "details"}, bars));
  }), roots.length > shown.length
    ? el("li", {class: "hint"}, `… and ${fmt(roots.length - shown.length)} more`) : null);
}

function explanationView(explanation) {
  const counts = explanation.trees || {};
  const parts = [
    el("p", {id: "fit-summary", class: "summary", "data-total": counts.total,
             "data-qualified": counts.qualified, "data-excluded": counts.excluded},
       `${fmt(counts.qualified || 0)} of ${fmt(counts.total || 0)} trees qualify; `
       + `${fmt(counts.excluded || 0)} are excluded.`),
  ];
  const reasons = explanation.reasons || [];
  if (reasons.length) {
    parts.push(el("h3", {}, "Why the other trees are excluded"),
      el("table", {id: "fit-reasons"},
        el("thead", {}, el("tr", {}, ["Group", "Filter", "Class", "Trees", "Detail"]
          .map((h) => el("th", {}, h)))),
        el("tbody", {}, reasons.map((r) => el("tr", {"data-filter": r.filter},
          el("td", {}, groupLabel(r.group)), el("td", {}, r.filter),
          el("td", {}, r.resource_class || ""), num(r.trees), el("td", {}, r.detail))))));
  }
  const excluded = explanation.excluded || [];
  if (excluded.length) {
    parts.push(el("h3", {}, "Excluded hosts"),
      el("ul", {id: "fit-excluded", class: "hosts"}, excluded.map((host) =>
        el("li", {class: "host excluded", "data-uuid": host.root_provider_uuid},
           el("span", {class: "name"}, host.root_provider_name || host.root_provider_uuid),
           el("span", {class: "uuid"}, host.root_provider_uuid),
           el("ul", {class: "reasons"}, (host.reasons || []).map((r) =>
             el("li", {"data-filter": r.filter}, el("strong", {}, reasonText(r)), ": ",
                r.detail)))))));
  }
  const steps = explanation.steps || [];
  if (steps.length) {
    const shown = (value) => (value === null || value === undefined ? ""
      : typeof value === "object" ? JSON.stringify(value) : String(value));
    const keys = [...new Set(steps.flatMap((step) => Object.keys(step)))];
    parts.push(el("details", {class: "steps"}, el("summary", {}, "Search steps"),
      el("table", {id: "fit-steps"},
        el("thead", {}, el("tr", {}, keys.map((k) => el("th", {}, k)))),
        el("tbody", {}, steps.map((step) => el("tr", {},
          keys.map((k) => el("td", {}, k === "group" ? groupLabel(step[k]) : shown(step[k])))))))));
  }
  return parts;
}

// GET /headroom for the same query: how many more fit, and the roots with the most room.
// Asked beside the explanation; its refusal (no /headroom on this server, 403, a count
// over the time limit) is shown in its place, not instead of the rest.
async function headroomFor(query) {
  try {
    return await api(`/headroom?${query}&limit=${HEADROOM_ROOTS}`);
  } catch (error) {
    return {refused: error instanceof ApiError && error.status === 404
      ? "This server has no /headroom: how many more fit cannot be shown."
      : `How many more fit cannot be shown: ${error.message}`};
  }
}

function headroomView(room) {
  if (room.refused) return el("p", {class: "hint", id: "fit-no-headroom"}, room.refused);
  const kind = room.optimal ? "exact" : "greedy";
  const aggregates = Object.entries(room.aggregates || {});
  return el("div", {id: "fit-headroom", class: "headroom", "data-total": room.total,
                    "data-optimal": String(room.optimal)},
    el("p", {class: "summary",
             title: room.optimal ? "The most that can fit."
               : "A greedy packing's count: at least this many fit, a cleverer placement "
                 + "might fit more."},
       `${fmt(room.total)} more fit (${kind})`),
    room.roots.length ? el("div", {class: "hint"}, "Most room:") : null,
    room.roots.length
      ? el("ol", {id: "fit-headroom-roots", class: "headroom-roots"}, room.roots.map((root) =>
        el("li", {"data-uuid": root.uuid, "data-count": root.count},
           providerLink({uuid: root.uuid, name: root.name || root.uuid}), ": ",
           `${fmt(root.count)} more`)))
      : null,
    aggregates.length ? el("div", {class: "hint"}, "Per aggregate of member_of:") : null,
    aggregates.length
      ? el("ul", {id: "fit-headroom-aggregates", class: "headroom-roots"},
        aggregates.map(([uuid, count]) => el("li", {"data-uuid": uuid, "data-count": count},
          el("span", {class: "uuid"}, uuid), `: ${fmt(count)} more`)))
      : null);
}

$("#fits-form").addEventListener("submit", (event) => {
  event.preventDefault();
  clearError();
  const out = $("#fits-result");
  out.replaceChildren(el("p", {class: "hint"}, "Asking…"));
  const query = fitsQuery();
  const limit = Math.max(1, parseInt($("#fit-limit").value, 10) || 1);
  const requested = new Set(
    [...new URLSearchParams(query).entries()]
      .filter(([k]) => k.startsWith("resources"))
      .flatMap(([, v]) => v.split(",").map((part) => part.split(":")[0])));
  (async () => {
    const room = headroomFor(query);
    let body;
    let explained = true;
    try {
      body = await api(`/explain/allocation_candidates?${query}&explain_limit=${limit}`);
    } catch (error) {
      if (!(error instanceof ApiError) || error.status !== 404) throw error;
      // No explain endpoint on this server: the qualifying hosts alone.
      explained = false;
      body = await api(`/allocation_candidates?${query}`);
    }
    const roots = qualifiedRoots(body);
    const qualified = el("div", {}, el("h3", {}, `Qualifying hosts (${fmt(roots.length)})`),
                         await qualifiedList(roots, requested));
    const headroom = headroomView(await room);
    if (explained && body.explanation) {
      const [summary, ...why] = explanationView(body.explanation);
      out.replaceChildren(summary, headroom, el("div", {class: "columns"}, qualified,
                                                el("div", {}, why)));
    } else {
      out.replaceChildren(
        el("p", {id: "fit-summary", class: "summary", "data-qualified": roots.length},
           `${fmt(roots.length)} trees qualify.`),
        headroom,
        el("p", {class: "hint", id: "fit-no-explain"},
           "This server has no /explain/allocation_candidates: why the others do not "
           + "qualify cannot be shown."),
        qualified);
    }
  })().catch((error) => { out.replaceChildren(); showError(error); });
});

route();
