// An event's lineage graph: ancestors up to ``up`` steps, descendants down to ``down``.
import { gql } from "./api.js";
import { colourOf, family, h, link, params, problem, urls } from "./dom.js";
import { draw } from "./graph.js";

const FIELDS = (more) => `nodes { depth event { id type model { name version } ${more} } }
  edges { cause { id } effect { id } } truncated`;
// Each walk gives the links among its own events: a link from an ancestor straight to a
// descendant (C names A besides B, in A -> B -> C) is in neither, so the descendants'
// causes are asked for too.
const LINEAGE = `query ($id: ID!, $up: Int!, $down: Int!) {
  root: event(id: $id) { id type model { name version } }
  up: lineage(id: $id, direction: UPSTREAM, maxDepth: $up, limit: 2000) { ${FIELDS("")} }
  down: lineage(id: $id, direction: DOWNSTREAM, maxDepth: $down, limit: 2000) { ${FIELDS("causes { id }")} }
}`;

function depth(name) {
  const value = Number.parseInt(params().get(name) || "3", 10);
  return Number.isNaN(value) ? 3 : Math.min(10, Math.max(1, value));
}

export async function render(_options, id) {
  const up = depth("up");
  const down = depth("down");
  const data = await gql(LINEAGE, { id, up, down });
  if (!data.root) return [h("h1", {}, "No such event"), problem(`Your tenant has no event ${id}.`)];
  const nodes = new Map([[id, data.root]]);
  const ancestors = new Set();
  for (const n of data.up.nodes) {
    if (n.event.id !== id) ancestors.add(n.event.id);
    nodes.set(n.event.id, n.event);
  }
  for (const n of data.down.nodes) nodes.set(n.event.id, n.event);
  const seen = new Set();
  const edges = [];
  const across = data.down.nodes.flatMap((n) => (n.event.causes || [])
    .filter((c) => ancestors.has(c.id))
    .map((c) => ({ cause: { id: c.id }, effect: { id: n.event.id } })));
  for (const e of [...data.up.edges, ...data.down.edges, ...across]) {
    const key = `${e.cause.id}\n${e.effect.id}`;
    if (seen.has(key)) continue;
    seen.add(key);
    edges.push({ cause: e.cause.id, effect: e.effect.id });
  }
  const list = [...nodes.values()];
  started = performance.now();
  const { svg } = draw(list, edges, id, ancestors);
  const truncated = data.up.truncated || data.down.truncated;
  return [
    h("h1", {}, "Lineage of ", link(urls.event(id), id, { class: "mono" })),
    depthForm(id, up, down),
    h("p", { id: "graph-summary", "data-nodes": list.length, "data-edges": edges.length },
      `${list.length} events, ${edges.length} links (cause above, effect below, arrows point to the effect). `,
      h("span", { id: "graph-time" }), "Click an event to open its graph; ",
      link(urls.event(id), "this event's page"), ", ", link(urls.audit(id), "its audit"), "."),
    truncated
      ? h("p", { class: "warning", role: "status", id: "truncated" },
          "Truncated: the graph goes on beyond what is drawn (the depth asked for, or the server's node limit, ",
          "stopped it). Raise the depth above (10 each way at most), or click an event at the edge to see its own graph.")
      : null,
    legend(list),
    h("div", { class: "graph-frame", tabindex: "0", "aria-label": "Graph (scrolls)" }, svg),
  ];
}

// The time from the layout's start to the first frame painted with the graph in the
// page: the browser has placed every element by then (the test asks for under 1 s).
let started = 0;

export async function shown() {
  const svg = document.querySelector("svg.lineage");
  if (!svg) return;
  svg.getBBox(); // forces style and layout now
  await new Promise((resolve) => requestAnimationFrame(() => resolve()));
  const ms = performance.now() - started;
  document.getElementById("graph-summary").dataset.renderMs = ms.toFixed(1);
  document.getElementById("graph-time").textContent = `Laid out and drawn in ${ms.toFixed(0)} ms. `;
}

function depthForm(id, up, down) {
  const select = (name, label, value) => [
    h("label", { for: name }, label),
    h("select", { id: name, name }, Array.from({ length: 10 }, (_, i) =>
      h("option", { value: i + 1, selected: i + 1 === value }, String(i + 1)))),
  ];
  // A GET form replaces the whole query: an id that goes in ?id= ("." and "..", whose
  // path segment is "_") goes along, or the graph shown next is the event "_"'s.
  const named = new URL(urls.lineage(id), location.origin).searchParams.get("id");
  return h("form", { class: "depth", method: "get" },
    named === null ? null : h("input", { type: "hidden", name: "id", value: named }),
    select("up", "Causes, steps up", up), select("down", "Effects, steps down", down),
    h("button", { type: "submit" }, "Show"));
}

function legend(nodes) {
  const families = [...new Set(nodes.map((n) => family(n.type)))].sort();
  return h("ul", { class: "legend", "aria-label": "Colours by type family" },
    families.map((f) => h("li", {}, h("span", { class: "swatch", style: `background:${colourOf(f)}` }), f)),
    h("li", {}, h("span", { class: "badge-sample" }, "model@version"), " a model's output"),
    h("li", {}, h("span", { class: "root-sample" }, "bold frame"), " this event"));
}
