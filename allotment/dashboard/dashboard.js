// allotment's capacity dashboard: read-only views over /dashboard/api/..., the
// Placement API, /history/... and /audit/allocations. No framework: the DOM is built with createElement and
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
  const HISTORY_PAGE = 20;  // history entries per request (the timeline, recent changes)
  const NAMES_PER_REQUEST = 500;  // /dashboard/api/provider_names' most

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

  // "#page?key=value": a page and what it shows (a consumer's uuid, a provider to open),
  // so that a link to a consumer or a provider is an address.
  function route() {
    clearError();
    if (!token.get()) { showLogin(); return; }
    $("#login").hidden = true;
    $("#nav").hidden = false;
    $("#sign-out").hidden = false;
    const [name, query] = (location.hash || "#providers").slice(1).split("?");
    const page = pages[name] ? name : "providers";
    for (const section of document.querySelectorAll(".page")) {
      section.hidden = section.id !== `page-${page}`;
    }
    for (const link of document.querySelectorAll("#nav a")) {
      link.classList.toggle("active", link.dataset.page === page);
    }
    pages[page](new URLSearchParams(query || "")).catch(showError);
  }

  window.addEventListener("hashchange", route);

  // Go to an address; if the tab is there already, show it again.
  function go(hash) {
    if (location.hash === hash) route(); else location.hash = hash;
  }

  const consumerHash = (uuid) => `#consumer?uuid=${encodeURIComponent(uuid)}`;
  const providerHash = (uuid) => `#providers?uuid=${encodeURIComponent(uuid)}`;

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

  const showProvider = (uuid) => go(providerHash(uuid));

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
    return el("a", {href: providerHash(entry.uuid), "data-uuid": entry.uuid,
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

  // --- history: the timeline, recent changes, the audit's evidence --------------------
  // Entries of /history/allocations and /history/inventories, newest first. They carry
  // provider uuids only: the names come from /dashboard/api/provider_names.

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
        if (error instanceof ApiError && error.status === 401) throw error;
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
  function recentChanges(uuid) {
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
         evidence.map(([key, value]) => [el("dt", {}, key.replace(/_/g, " ")),
           el("dd", {class: "evidence", "data-key": key}, evidenceValue(key, value, names))])),
      changes ? el("details", {class: "finding-history", open: open},
        el("summary", {}, `History (${fmt(changes)} change${changes === 1 ? "" : "s"})`),
        inventories.length ? historyTable(null, INVENTORY_HEAD({provider: true}),
          historyRows(inventories, names, inventoryRow, {provider: true})) : null,
        allocations.length ? historyTable(null, ALLOCATION_HEAD({consumer: true, provider: true}),
          historyRows(allocations, names, allocationRow, {consumer: true, provider: true}))
          : null) : null);
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
      : [el("p", {class: "empty", id: "audit-clean"}, "No findings: every check passed.")]));
  };

  $("#audit-form").addEventListener("submit", (event) => {
    event.preventDefault();
    pages.audit().catch(showError);
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
