// The start page: one box that finds an event id, a correlation id (a workflow run), a
// stream or a model name; and the tenant's recent events.
import { gql, rest } from "./api.js";
import { eventLink, family, h, link, params, problem, table, urls } from "./dom.js";

const FIND = `query ($q: ID!, $s: String!) {
  event(id: $q) { id }
  correlation(id: $s, first: 1) { edges { node { id } } }
  stream(id: $s, first: 1) { edges { node { id } } }
  model(name: $s) { name }
}`;

const PAGE = 500; // events a read of recent() asks for (the server may answer fewer)
const MAX_READS = 40; // reads of recent() at most: windows up to 2**39 pages back
const RECENT = `query ($from: BigInt!, $to: BigInt!) {
  events(filter: { positionFrom: $from, positionTo: $to }, first: 500) {
    edges { node { id type source time recordedTime position correlationId } }
    pageInfo { hasNextPage }
  }
}`;

export async function render(_options, mode) {
  const q = params().get("q") || "";
  const out = [h("h1", {}, "Find"), findForm(q)];
  if (mode === "find" && q) {
    const found = await find(q);
    if (found.length === 1) {
      window.location.replace(found[0][1]);
      return [...out, h("p", {}, "Opening ", link(found[0][1], found[0][0]), "...")];
    }
    out.push(
      found.length
        ? h("ul", { class: "choices", "aria-label": "What matches" },
            found.map(([label, href]) => h("li", {}, link(href, label))))
        : problem(`Nothing is named ${JSON.stringify(q)}: no event, workflow run, stream or model.`),
    );
  }
  out.push(h("h2", {}, "Recent events"), await recent());
  return out;
}

function findForm(q) {
  return h(
    "form",
    { class: "find", action: "/ui/find", method: "get", role: "search" },
    h("label", { for: "q" }, "Event id, correlation id, stream or model name"),
    h("input", { id: "q", name: "q", value: q, required: true, autofocus: true }),
    h("button", { type: "submit" }, "Find"),
  );
}

async function find(q) {
  const data = await gql(FIND, { q, s: q });
  const found = [];
  if (data.event) found.push([`event ${q}`, urls.event(q)]);
  if (data.correlation.edges.length) found.push([`workflow run ${q}`, urls.run(q)]);
  if (data.stream.edges.length) found.push([`stream ${q}`, urls.stream(q)]);
  if (data.model) found.push([`model ${q}`, urls.model(q)]);
  return found;
}

// The last 25 of the tenant's events. The log's head (GET /projections) is every
// tenant's, so the tenant's own may lie far behind it: windows of positions are read
// backwards, each twice as long as the one before while they come back empty, and
// halved (nearer the head) when one holds more than a page of the tenant's events.
async function recent() {
  const status = await rest("/projections");
  const head = Math.max(0, ...status.projections.map((p) => p.head));
  const found = [];
  let to = head;
  let span = PAGE;
  for (let reads = 0; to > 0 && found.length < 25 && reads < MAX_READS; reads++) {
    const from = Math.max(1, to - span + 1);
    const answer = (await gql(RECENT, { from, to })).events;
    const page = answer.edges.map((e) => e.node);
    // More than a page, by what the server says: its page may be smaller than PAGE
    // (CAUSEWAY_GRAPHQL_MAX_PAGE_SIZE), and a page cut short would hide the latest.
    if (answer.pageInfo.hasNextPage && from < to) {
      span = Math.max(1, Math.floor(span / 2)); // more than a page: the latest are nearer
      continue;
    }
    found.unshift(...page);
    to = from - 1;
    span = page.length ? PAGE : span * 2;
  }
  if (!found.length) {
    if (to <= 0) return h("p", {}, "No events yet.");
    return h("p", {}, `None of this tenant's events is among the last ${head - to} positions `,
      "of the log; find one by its id above.");
  }
  const last = found.slice(-25).reverse();
  return table(
    ["position", "id", "type", "source", "event time", "run"],
    last.map((e) => [
      String(e.position),
      eventLink(e.id),
      h("span", { class: "family", "data-family": family(e.type) }, e.type),
      e.source,
      e.time || "",
      e.correlationId ? link(urls.run(e.correlationId), e.correlationId) : "",
    ]),
    { class: "recent" },
  );
}
