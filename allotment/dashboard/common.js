// allotment's capacity dashboard, what every view shares: building the DOM (with
// createElement and textContent only, never innerHTML, so that no name from the database
// can inject markup), the token and requests, sign-in, the pages and their addresses,
// usage bars and provider links. The views: dashboard.js (the entry point: providers,
// usage, what fits) and history.js (a consumer, a provider's recent changes, the audit).

const ROOT = document.body.dataset.root || "";
const AUTH = document.body.dataset.auth || "keystone";
const VERSION = "placement 1.39";
const TOKEN_KEY = "allotment.dashboard.token";

export const $ = (selector) => document.querySelector(selector);

// el("td", {class: "num"}, "42", childNode, ...): an element with attributes and children.
export function el(tag, attrs, ...children) {
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

export const fmt = (n) => Number(n).toLocaleString("en-US");
export const pct = (used, capacity) => (capacity > 0 ? (100 * used) / capacity : (used > 0 ? 100 : 0));
export const pctText = (ratio) => `${(100 * ratio).toFixed(1)} %`;

// --- the token and requests ----------------------------------------------------

const token = {
  get: () => sessionStorage.getItem(TOKEN_KEY),
  set: (value) => sessionStorage.setItem(TOKEN_KEY, value),
  clear: () => sessionStorage.removeItem(TOKEN_KEY),
};

export class ApiError extends Error {
  constructor(status, detail) {
    super(`${status}: ${detail}`);
    this.status = status;
    this.detail = detail;
  }
}

// A 503 with Retry-After (the worker's own_routes_slots or large-search slots
// are taken, often by this page's own requests in parallel) is tried again
// after the wait the server asks for, a few times, before it is shown.
const BUSY_TRIES = 5;

const sleep = (seconds) => new Promise((resolve) => setTimeout(resolve, seconds * 1000));

async function fetchApi(path) {
  for (let attempt = 1; ; attempt++) {
    const response = await fetch(ROOT + path, {
      headers: {
        "X-Auth-Token": token.get() || "",
        "Accept": "application/json",
        "OpenStack-API-Version": VERSION,
      },
      credentials: "omit",
    });
    const wait = Number(response.headers.get("Retry-After"));
    if (response.status !== 503 || !(wait > 0) || attempt >= BUSY_TRIES) return response;
    await sleep(Math.min(wait, 5));
  }
}

export async function api(path) {
  const response = await fetchApi(path);
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

export function showError(error) {
  const box = $("#error");
  if (error instanceof ApiError && error.status === 401) return;  // the sign-in form says it
  if (error instanceof ApiError && error.status === 403) { showForbidden(error); return; }
  box.textContent = error instanceof ApiError ? error.message
    : `Error: ${error.message || error}`;
  box.hidden = false;
}

// A view the token's roles may not read (403): the page is hidden, whatever it held,
// and "Not allowed" says which policy rule refused it.
export function showForbidden(error) {
  for (const page of document.querySelectorAll(".page")) page.hidden = true;
  $("#forbidden-detail").textContent = `Not allowed (403): ${error.detail}`;
  $("#forbidden").hidden = false;
}

export const isForbidden = (error) => error instanceof ApiError && error.status === 403;

export function clearError() {
  $("#error").hidden = true;
  $("#forbidden").hidden = true;
}

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
  // A fresh page for each identity: nothing another token was shown stays behind.
  location.reload();
});

$("#sign-out").addEventListener("click", () => { token.clear(); location.reload(); });

// --- pages ------------------------------------------------------------------------

export const pages = {};

// "#page?key=value": a page and what it shows (a consumer's uuid, a provider to open),
// so that a link to a consumer or a provider is an address.
export function route() {
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
export function go(hash) {
  if (location.hash === hash) route(); else location.hash = hash;
}

export const consumerHash = (uuid) => `#consumer?uuid=${encodeURIComponent(uuid)}`;
export const providerHash = (uuid) => `#providers?uuid=${encodeURIComponent(uuid)}`;

// One bar: used of capacity, with reserved and the allocation ratio beside it.
export function usageBar(rc, inv) {
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

export function chips(kind, names) {
  if (!names.length) return null;
  return el("div", {class: `chips ${kind}`},
    el("span", {class: "label"}, kind), names.map((n) => el("span", {class: "chip"}, n)));
}

export const num = (value) => el("td", {class: "num"}, fmt(value));

// A provider, linking to its tree (opened down to it) on the Providers page.
export function providerLink(entry) {
  const label = entry.root_provider_uuid && entry.root_provider_uuid !== entry.uuid
    ? `${entry.name} (in ${entry.root_provider_name})` : entry.name;
  return el("a", {href: providerHash(entry.uuid), "data-uuid": entry.uuid,
                  onclick: (event) => { event.preventDefault(); showProvider(entry.uuid); }},
            label);
}

export const showProvider = (uuid) => go(providerHash(uuid));
