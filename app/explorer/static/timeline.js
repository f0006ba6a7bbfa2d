// A workflow run (the events of one correlation id) or a stream, on a time line: each
// event's time as its producer stamped it (circle) and as the store recorded it
// (square), joined, so that a producer's clock drift shows as a long or backward line.
import { gql } from "./api.js";
import { colourOf, eventLink, family, h, millis, problem, s, table, urls } from "./dom.js";

const FIELDS = "edges { node { id type source time recordedTime position streamVersion } } pageInfo { hasNextPage }";
const RUN = `query ($id: String!) { page: correlation(id: $id, first: 500) { ${FIELDS} } }`;
const STREAM = `query ($id: String!) { page: stream(id: $id, first: 500) { ${FIELDS} } }`;

export async function render(_options, kind, id) {
  const data = await gql(kind === "run" ? RUN : STREAM, { id });
  const events = data.page.edges.map((e) => e.node);
  const title = kind === "run" ? "Workflow run " : "Stream ";
  if (!events.length) return [h("h1", {}, title, id), problem(`Your tenant has no events in ${kind} ${id}.`)];
  return [
    h("h1", {}, title, h("span", { class: "mono" }, id)),
    h("p", {}, `${events.length} events${data.page.pageInfo.hasNextPage ? ` (the first ${events.length})` : ""}. `,
      "○ event time (the producer's clock) — ■ recorded time (the store's clock)."),
    chart(events),
    table(["position", "id", "type", "event time", "recorded", "recorded − event"], events.map((e) => [
      String(e.position), eventLink(e.id), e.type, e.time || "—", e.recordedTime, drift(e),
    ]), { class: "timeline-table" }),
  ];
}

function drift(e) {
  const ms = millis(e.recordedTime) - millis(e.time);
  if (Number.isNaN(ms)) return "—";
  return `${ms >= 0 ? "+" : ""}${(ms / 1000).toFixed(3)} s`;
}

function chart(events) {
  const times = events.flatMap((e) => [millis(e.time), millis(e.recordedTime)]).filter((t) => !Number.isNaN(t));
  const lo = Math.min(...times);
  const hi = Math.max(...times);
  const width = 900, row = 22, left = 190, right = 20;
  const height = 40 + events.length * row;
  const x = (t) => left + (hi === lo ? 0.5 : (t - lo) / (hi - lo)) * (width - left - right);
  const svg = s("svg", { class: "timeline", width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
    "aria-label": "Event time and recorded time of each event" });
  svg.append(
    s("text", { x: left, y: 14, class: "axis" }, new Date(lo).toISOString()),
    s("text", { x: width - right, y: 14, class: "axis", "text-anchor": "end" }, new Date(hi).toISOString()),
  );
  events.forEach((e, i) => {
    const y = 32 + i * row;
    const a = s("a", { href: urls.event(e.id) });
    a.append(s("text", { x: 4, y: y + 4, class: "label" }, e.id.length > 26 ? `${e.id.slice(0, 25)}…` : e.id));
    const te = millis(e.time);
    const tr = millis(e.recordedTime);
    if (!Number.isNaN(te)) a.append(s("line", { x1: x(te), y1: y, x2: x(tr), y2: y, class: "drift" }));
    if (!Number.isNaN(te)) a.append(s("circle", { cx: x(te), cy: y, r: 5, fill: "#fff", stroke: "#1f4e79", "stroke-width": 2 }));
    a.append(s("rect", { x: x(tr) - 5, y: y - 5, width: 10, height: 10, fill: colourOf(family(e.type)), stroke: "#333" }));
    svg.append(a);
  });
  return h("div", { class: "graph-frame" }, svg);
}

