// The lineage graph as a layered DAG, laid out here (no library): causes above, effects
// below, the event itself on layer 0.
//
// 1. Layers: an ancestor sits as many layers up as its longest path down to the event,
//    a descendant as many down as its longest path from it, so every edge points down.
// 2. Order in a layer: a few sweeps of the barycentre heuristic (each node moves to the
//    mean place of its neighbours in the layers already ordered), down then up.
// 3. Places: layers are centred rows; edges are curves with an arrowhead at the effect.
import { colourOf, family, s, urls } from "./dom.js";

const W = 168;
const H = 44;
const GAP_X = 18;
const GAP_Y = 64;
const MARGIN = 24;

export function layout(nodes, edges, rootId, ancestors) {
  const causes = new Map(nodes.map((n) => [n.id, []]));
  const effects = new Map(nodes.map((n) => [n.id, []]));
  for (const e of edges) {
    if (!causes.has(e.effect) || !causes.has(e.cause)) continue;
    causes.get(e.effect).push(e.cause);
    effects.get(e.cause).push(e.effect);
  }
  const layer = new Map([[rootId, 0]]);
  const upOf = (id) => longest(id, layer, (n) => effects.get(n).filter((x) => x === rootId || ancestors.has(x)), -1);
  const downOf = (id) => longest(id, layer, (n) => causes.get(n).filter((x) => x === rootId || !ancestors.has(x)), 1);
  for (const n of nodes) if (n.id !== rootId) (ancestors.has(n.id) ? upOf : downOf)(n.id);

  const rows = new Map();
  for (const n of nodes) {
    const l = layer.get(n.id);
    if (!rows.has(l)) rows.set(l, []);
    rows.get(l).push(n.id);
  }
  const order = [...rows.keys()].sort((a, b) => a - b);
  const place = new Map();
  const setPlaces = (l) => rows.get(l).forEach((id, i) => place.set(id, i - (rows.get(l).length - 1) / 2));
  order.forEach(setPlaces);
  const neighbours = (id) => causes.get(id).concat(effects.get(id));
  for (let sweep = 0; sweep < 4; sweep++) {
    const seq = sweep % 2 === 0 ? order : [...order].reverse();
    for (const l of seq) {
      const mean = new Map(rows.get(l).map((id) => {
        const near = neighbours(id).map((x) => place.get(x));
        return [id, near.length ? near.reduce((a, b) => a + b, 0) / near.length : place.get(id)];
      }));
      rows.get(l).sort((a, b) => mean.get(a) - mean.get(b));
      setPlaces(l);
    }
  }
  const widest = Math.max(...[...rows.values()].map((r) => r.length));
  const top = order[0];
  const positions = new Map();
  for (const [id, p] of place) {
    positions.set(id, {
      x: MARGIN + ((widest - 1) / 2 + p) * (W + GAP_X),
      y: MARGIN + (layer.get(id) - top) * (H + GAP_Y),
    });
  }
  return {
    positions,
    width: 2 * MARGIN + widest * W + (widest - 1) * GAP_X,
    height: 2 * MARGIN + order.length * H + (order.length - 1) * GAP_Y,
    layers: order.length,
  };
}

// The longest path from ``id`` to the root through ``next``, memoised in ``layer``
// (sign -1 for ancestors: negative layers). Iterative: a long chain needs no deep stack.
function longest(id, layer, next, sign) {
  const stack = [id];
  while (stack.length) {
    const top = stack[stack.length - 1];
    if (layer.has(top)) { stack.pop(); continue; }
    const pending = next(top).filter((x) => !layer.has(x));
    if (pending.length) { stack.push(...pending); continue; }
    const steps = next(top).map((x) => Math.abs(layer.get(x)) + 1);
    layer.set(top, sign * Math.max(1, ...steps));
    stack.pop();
  }
  return layer.get(id);
}

export function draw(nodes, edges, rootId, ancestors) {
  const at = layout(nodes, edges, rootId, ancestors);
  const svg = s("svg", {
    class: "lineage", width: at.width, height: at.height, viewBox: `0 0 ${at.width} ${at.height}`,
    role: "img", "aria-label": `Lineage graph: ${nodes.length} events, ${edges.length} links`,
  });
  svg.append(s("defs", {}, s("marker", {
    id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 7, markerHeight: 7,
    orient: "auto-start-reverse",
  }, s("path", { d: "M0,0 L10,5 L0,10 z", fill: "#444" }))));
  const links = s("g", { class: "edges" });
  for (const e of edges) {
    const a = at.positions.get(e.cause);
    const b = at.positions.get(e.effect);
    if (!a || !b) continue;
    const x1 = a.x + W / 2, y1 = a.y + H, x2 = b.x + W / 2, y2 = b.y;
    const bend = Math.max(24, (y2 - y1) / 2);
    links.append(s("path", {
      class: "edge", d: `M${x1},${y1} C${x1},${y1 + bend} ${x2},${y2 - bend} ${x2},${y2}`,
      "marker-end": "url(#arrow)", "data-cause": e.cause, "data-effect": e.effect,
    }));
  }
  svg.append(links);
  const boxes = s("g", { class: "nodes" });
  for (const n of nodes) {
    const p = at.positions.get(n.id);
    const root = n.id === rootId;
    const a = s("a", { href: urls.lineage(n.id), class: root ? "node root" : "node", "data-id": n.id });
    a.append(
      s("title", {}, `${n.id}\n${n.type}${n.model ? `\nmodel ${n.model.name} ${n.model.version ?? ""}` : ""}`),
      s("rect", { x: p.x, y: p.y, width: W, height: H, rx: 6, fill: colourOf(family(n.type)) }),
      s("text", { x: p.x + 8, y: p.y + 18, class: "id" }, clip(n.id, 22)),
      s("text", { x: p.x + 8, y: p.y + 35, class: "type" }, clip(family(n.type), 14)),
    );
    if (n.model) {
      const label = clip(`${n.model.name}@${n.model.version ?? "?"}`, 14);
      a.append(
        s("rect", { x: p.x + W - 96, y: p.y + 25, width: 90, height: 15, rx: 7, class: "badge" }),
        s("text", { x: p.x + W - 51, y: p.y + 36, class: "badge-text", "text-anchor": "middle" }, label),
      );
    }
    boxes.append(a);
  }
  svg.append(boxes);
  svg.dataset.nodes = String(nodes.length);
  svg.dataset.edges = String(links.childElementCount);
  return { svg, layers: at.layers };
}

function clip(text, n) {
  return text.length > n ? `${text.slice(0, n - 1)}…` : text;
}
