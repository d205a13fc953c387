// allotment's capacity dashboard: read-only views over /dashboard/api/... and the
// Placement API. No framework: the DOM is built with createElement and
// textContent only (never innerHTML), so no name from the database can inject markup.
(() => {
  "use strict";

  const ROOT = document.body.dataset.root || "";
  const AUTH = document.body.dataset.auth || "keystone";
  const VERSION = "placement 1.39";
  const TOKEN_KEY = "allotment.dashboard.token";
  const TREE_PAGE = 50;
  const PROJECT_PAGE = 50;
  const QUALIFIED_SHOWN = 50;

  const $ = (selector) => document.querySelector(selector);

  // el("td", {class: "num"}, "42", childNode, ...): an element with attributes and children.
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name === "class") node.className = value;
      else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
      else node.setAttribute(name, value === true ? "" : String(value));
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  const fmt = (n) => Number(n).toLocaleString("en-US");
  const pct = (used, capacity) => (capacity > 0 ? (100 * used) / capacity : (used > 0 ? 100 : 0));
  const pctText = (ratio) => `${(100 * ratio).toFixed(1)} %`;

  // --- the token and requests ----------------------------------------------------

  const token = {
    get: () => sessionStorage.getItem(TOKEN_KEY),
    set: (value) => sessionStorage.setItem(TOKEN_KEY, value),
    clear: () => sessionStorage.removeItem(TOKEN_KEY),
  };

  class ApiError extends Error {
    constructor(status, detail) {
      super(`${status}: ${detail}`);
      this.status = status;
      this.detail = detail;
    }
  }

  async function api(path) {
    const response = await fetch(ROOT + path, {
      headers: {
        "X-Auth-Token": token.get() || "",
        "Accept": "application/json",
        "OpenStack-API-Version": VERSION,
      },
      credentials: "omit",
    });
    const text = await response.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch (_e) { data = null; }
    if (!response.ok) {
      const first = data && data.errors && data.errors[0];
      const detail = (first ? first.detail : text || response.statusText)
        .replace(/\s+/g, " ").trim();
      if (response.status === 401) {
        token.clear();
        showLogin("The server refused the token (401). Sign in again.");
      }
      throw new ApiError(response.status, detail);
    }
    return data;
  }

  function showError(error) {
    const box = $("#error");
    if (error instanceof ApiError && error.status === 401) return;  // the sign-in form says it
    box.textContent = error instanceof ApiError
      ? (error.status === 403 ? `Not allowed (403): ${error.detail}` : error.message)
      : `Error: ${error.message || error}`;
    box.hidden = false;
  }

  function clearError() { $("#error").hidden = true; }

  // --- sign-in ----------------------------------------------------------------------

  function showLogin(message) {
    for (const page of document.querySelectorAll(".page")) page.hidden = true;
    $("#nav").hidden = true;
    $("#sign-out").hidden = true;
    $("#login").hidden = false;
    $("#login-hint").textContent = message || (AUTH === "noauth2"
      ? "This server uses noauth2: the token names the user (\u201cadmin\u201d is an admin)."
      : "Paste a Keystone token, e.g. from \u201copenstack token issue -f value -c id\u201d.");
    $("#token").focus();
  }

  $("#login-form").addEventListener("submit", (event) => {
    event.preventDefault();
    token.set($("#token").value.trim());
    $("#token").value = "";
    route();
  });

  $("#sign-out").addEventListener("click", () => { token.clear(); showLogin(); });

  // --- pages ------------------------------------------------------------------------

  const pages = {};

  function route() {
    clearError();
    if (!token.get()) { showLogin(); return; }
    $("#login").hidden = true;
    $("#nav").hidden = false;
    $("#sign-out").hidden = false;
    const name = (location.hash || "#providers").slice(1).split("?")[0];
    const page = pages[name] ? name : "providers";
    for (const section of document.querySelectorAll(".page")) {
      section.hidden = section.id !== `page-${page}`;
    }
    for (const link of document.querySelectorAll("#nav a")) {
      link.classList.toggle("active", link.dataset.page === page);
    }
    pages[page]().catch(showError);
  }

  window.addEventListener("hashchange", route);

  // One bar: used of capacity, with reserved and the allocation ratio beside it.
  function usageBar(rc, inv) {
    const share = pct(inv.used, inv.capacity);
    const fill = el("div", {class: `fill ${share >= 90 ? "full" : share >= 70 ? "warm" : ""}`});
    fill.style.width = `${Math.min(100, share)}%`;
    return el("div", {class: "inv", "data-rc": rc, "data-used": inv.used,
                      "data-capacity": inv.capacity, "data-total": inv.total,
                      "data-reserved": inv.reserved, "data-ratio": inv.allocation_ratio},
      el("span", {class: "rc"}, rc),
      el("div", {class: "bar", title: `${share.toFixed(1)} % used`}, fill),
      el("span", {class: "nums"}, `${fmt(inv.used)} / ${fmt(inv.capacity)}`),
      el("span", {class: "meta"},
         `total ${fmt(inv.total)} · reserved ${fmt(inv.reserved)} · ratio ${inv.allocation_ratio}`));
  }

  function chips(kind, names) {
    if (!names.length) return null;
    return el("div", {class: `chips ${kind}`},
      el("span", {class: "label"}, kind), names.map((n) => el("span", {class: "chip"}, n)));
  }

  // --- providers: trees a page at a time, children drawn when first expanded ---------

  const trees = {offset: 0, q: ""};

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
    const box = el("div", {class: "node", "data-uuid": node.uuid, "data-name": node.name},
      el("div", {class: "row"}, toggle,
         el("span", {class: "name"}, node.name),
         el("span", {class: "uuid"}, node.uuid),
         count > 0 ? el("span", {class: "kids"}, `${fmt(count)} child${count > 1 ? "ren" : ""}`)
                   : null),
      el("div", {class: "details"},
         Object.entries(node.inventories).map(([rc, inv]) => usageBar(rc, inv)),
         chips("traits", node.traits), chips("aggregates", node.aggregates)),
      children);

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

  pages.providers = async () => {
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
  };

  $("#provider-search").addEventListener("submit", (event) => {
    event.preventDefault();
    trees.q = $("#provider-q").value.trim();
    trees.offset = 0;
    pages.providers().catch(showError);
  });
  $("#trees-prev").addEventListener("click", () => {
    trees.offset = Math.max(0, trees.offset - TREE_PAGE);
    pages.providers().catch(showError);
  });
  $("#trees-next").addEventListener("click", () => {
    trees.offset += TREE_PAGE;
    pages.providers().catch(showError);
  });

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

  function showProvider(uuid) {
    trees.q = uuid;
    trees.offset = 0;
    $("#provider-q").value = uuid;
    if (location.hash === "#providers") route(); else location.hash = "#providers";
  }

  // --- usage -----------------------------------------------------------------------------

  function table(id, head, rows) {
    $(id).replaceChildren(
      el("thead", {}, el("tr", {}, head.map((h) => el("th", {}, h)))),
      el("tbody", {}, rows.length ? rows
        : el("tr", {}, el("td", {colspan: head.length, class: "empty"}, "Nothing yet."))));
  }

  const num = (value) => el("td", {class: "num"}, fmt(value));

  function providerLink(entry) {
    const label = entry.root_provider_uuid && entry.root_provider_uuid !== entry.uuid
      ? `${entry.name} (in ${entry.root_provider_name})` : entry.name;
    return el("a", {href: "#providers", "data-uuid": entry.uuid,
                    onclick: (event) => { event.preventDefault(); showProvider(entry.uuid); }},
              label);
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

  pages.usage = () => Promise.all([loadSummary(), loadTypes(), loadProjects()]);

  $("#rank-class").addEventListener("change", () => loadSummary().catch(showError));
  $("#projects-prev").addEventListener("click", () => {
    usage.projectsOffset = Math.max(0, usage.projectsOffset - PROJECT_PAGE);
    loadProjects().catch(showError);
  });
  $("#projects-next").addEventListener("click", () => {
    usage.projectsOffset += PROJECT_PAGE;
    loadProjects().catch(showError);
  });

  // --- one consumer --------------------------------------------------------------------

  pages.consumer = async () => {};

  $("#consumer-form").addEventListener("submit", (event) => {
    event.preventDefault();
    clearError();
    const uuid = $("#consumer-uuid").value.trim();
    const out = $("#consumer-result");
    out.replaceChildren(el("p", {class: "hint"}, "Loading…"));
    api(`/dashboard/api/consumers/${encodeURIComponent(uuid)}`).then((data) => {
      const held = Object.entries(data.allocations);
      if (!held.length) {
        out.replaceChildren(el("p", {class: "empty"}, `Consumer ${uuid} holds nothing.`));
        return;
      }
      const rows = [];
      for (const [rp, entry] of held) {
        for (const [rc, n] of Object.entries(entry.resources)) {
          rows.push(el("tr", {"data-provider": rp, "data-rc": rc, "data-used": n},
            el("td", {}, providerLink({uuid: rp, ...entry})), el("td", {}, rc), num(n)));
        }
      }
      out.replaceChildren(
        el("dl", {class: "facts"},
           el("dt", {}, "project"), el("dd", {class: "mono"}, data.project_id),
           el("dt", {}, "user"), el("dd", {class: "mono"}, data.user_id),
           el("dt", {}, "type"), el("dd", {}, data.consumer_type),
           el("dt", {}, "generation"), el("dd", {}, data.consumer_generation)),
        el("table", {id: "consumer-allocations"},
           el("thead", {}, el("tr", {}, ["Provider", "Class", "Amount"]
             .map((h) => el("th", {}, h)))),
           el("tbody", {}, rows)));
    }).catch((error) => { out.replaceChildren(); showError(error); });
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

  $("#fits-form").addEventListener("submit", (event) => {
    event.preventDefault();
    clearError();
    const out = $("#fits-result");
    out.replaceChildren(el("p", {class: "hint"}, "Asking…"));
    const query = fitsQuery();
    const limit = Math.max(0, parseInt($("#fit-limit").value, 10) || 0);
    const requested = new Set(
      [...new URLSearchParams(query).entries()]
        .filter(([k]) => k.startsWith("resources"))
        .flatMap(([, v]) => v.split(",").map((part) => part.split(":")[0])));
    (async () => {
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
      if (explained && body.explanation) {
        const [summary, ...why] = explanationView(body.explanation);
        out.replaceChildren(summary, el("div", {class: "columns"}, qualified,
                                        el("div", {}, why)));
      } else {
        out.replaceChildren(
          el("p", {id: "fit-summary", class: "summary", "data-qualified": roots.length},
             `${fmt(roots.length)} trees qualify.`),
          el("p", {class: "hint", id: "fit-no-explain"},
             "This server has no /explain/allocation_candidates: why the others do not "
             + "qualify cannot be shown."),
          qualified);
      }
    })().catch((error) => { out.replaceChildren(); showError(error); });
  });

  route();
})();
