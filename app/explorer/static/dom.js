// Small helpers to build the pages' elements (no framework): h() makes an element,
// text is always set as text (never parsed as HTML), links are real links.

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else el.setAttribute(name, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

const SVG_NS = "http://www.w3.org/2000/svg";

export function s(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value !== null && value !== undefined) el.setAttribute(name, String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

const enc = encodeURIComponent;

// A name as a path segment. "." and ".." (escaped or not) are steps of the path to a
// browser, which would leave the page: such a name goes as "_", with itself in ?id=
// (app.js puts it back). Any other name is its own segment.
const DOTS = new Set([".", ".."]);
const seg = (name) => (DOTS.has(name) ? "_" : enc(name));
const query = (name, ...more) => {
  const parts = [DOTS.has(name) ? `id=${enc(name)}` : "", ...more].filter(Boolean);
  return parts.length ? `?${parts.join("&")}` : "";
};

export const urls = {
  event: (id) => `/ui/events/${seg(id)}${query(id)}`,
  lineage: (id, up = 3, down = 3) =>
    `/ui/events/${seg(id)}/lineage${query(id, `up=${up}`, `down=${down}`)}`,
  audit: (id) => `/ui/events/${seg(id)}/audit${query(id)}`,
  run: (id) => `/ui/runs/${seg(id)}${query(id)}`,
  stream: (id) => `/ui/streams/${seg(id)}${query(id)}`,
  model: (name) => `/ui/models/${seg(name)}${query(name)}`,
  deployment: (service) => `/ui/deployments/${seg(service)}${query(service)}`,
  deadLetter: (id) => `/ui/dead-letters/${seg(id)}${query(id)}`,
};

export function link(href, text, attrs = {}) {
  return h("a", { href, ...attrs }, text);
}

export function eventLink(id) {
  return link(urls.event(id), id, { class: "mono" });
}

export function pretty(value) {
  return h("pre", { class: "json" }, JSON.stringify(value, null, 2));
}

export function table(headers, rows, attrs = {}) {
  return h(
    "table",
    attrs,
    h("thead", {}, h("tr", {}, headers.map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, rows.map((cells) => h("tr", {}, cells.map((c) => h("td", {}, c))))),
  );
}

export function facts(pairs) {
  const dl = h("dl", { class: "facts" });
  for (const [term, value] of pairs) {
    if (value === null || value === undefined || value === "") continue;
    dl.append(h("dt", {}, term), h("dd", {}, value));
  }
  return dl;
}

export function problem(message) {
  return h("p", { class: "error", role: "alert" }, message);
}

// Event times keep the producer's text (nanoseconds, offsets); Date takes milliseconds,
// and no leap second: second 60 is read as the last millisecond of its minute, as the
// store takes it (its last microsecond).
export function millis(text) {
  if (!text) return NaN;
  const leap = text.replace(/:60(\.\d+)?(?=[Zz+-])/, ":59.999");
  return Date.parse(leap.replace(/(\.\d{3})\d+/, "$1"));
}

// A type's family: its last name once a version suffix (v1, v2...) is dropped, so that
// org.hospital.imaging.inferred and ...inferred.v2 share a colour; causeway.* is one family.
export function family(type) {
  if (type.startsWith("causeway.")) return "causeway";
  const parts = type.split(".").filter((p) => !/^v\d+$/.test(p));
  return parts[parts.length - 1] || type;
}

// Light fills that keep dark text above WCAG AA contrast (4.5:1 with #1a1a1a).
const PALETTE = [
  "#cfe3ff", "#ffd9c2", "#d4f0d0", "#f3d1f2", "#fff1a8",
  "#d2f1f4", "#e8dcff", "#ffd6dc", "#e3ecc8", "#e6e6e6",
];

export function colourOf(name) {
  let hash = 0;
  for (const ch of name) hash = (hash * 31 + ch.codePointAt(0)) >>> 0;
  return PALETTE[hash % PALETTE.length];
}

export function params() {
  return new URLSearchParams(window.location.search);
}
