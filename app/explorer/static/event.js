// One event: its attributes, data, hash and position, its model, causes and effects.
import { gql } from "./api.js";
import { eventLink, facts, h, link, pretty, problem, urls } from "./dom.js";

const EVENT = `query ($id: ID!) {
  event(id: $id) {
    id source type subject time recordedTime stream streamVersion position
    dataContentType dataSchema data dataBase64 correlationId hash extensions
    model { name version signatureDigest registered { version signatureDigest } }
    causes { id type }
    effects(first: 100) { edges { node { id type } } pageInfo { hasNextPage } }
  }
}`;

export async function render(_options, id) {
  const { event } = await gql(EVENT, { id });
  if (!event) return [h("h1", {}, "No such event"), problem(`Your tenant has no event ${id}.`)];
  const model = event.model;
  const effects = event.effects.edges.map((e) => e.node);
  return [
    h("h1", {}, "Event ", h("span", { class: "mono" }, event.id)),
    h("p", { class: "actions" },
      link(urls.lineage(event.id), "Lineage graph"), " · ",
      link(urls.audit(event.id), "Audit"),
      event.correlationId ? [" · ", link(urls.run(event.correlationId), "Workflow run")] : null,
      " · ", link(urls.stream(event.stream), "Stream")),
    facts([
      ["type", event.type],
      ["source", event.source],
      ["subject", event.subject],
      ["event time", event.time],
      ["recorded", event.recordedTime],
      ["stream", link(urls.stream(event.stream), `${event.stream} (version ${event.streamVersion})`)],
      ["position", String(event.position)],
      ["correlation", event.correlationId && link(urls.run(event.correlationId), event.correlationId)],
      ["hash", h("span", { class: "mono wrap" }, event.hash)],
      ["data content type", event.dataContentType],
      ["data schema", event.dataSchema],
      ["model", model && modelFacts(model)],
    ]),
    h("h2", {}, "Data"),
    data(event),
    Object.keys(event.extensions).length ? [h("h2", {}, "Other attributes"), pretty(event.extensions)] : [],
    h("h2", {}, `Causes (${event.causes.length})`),
    list(event.causes, "It names no cause: a source event."),
    h("h2", {}, `Effects (${effects.length}${event.effects.pageInfo.hasNextPage ? "+" : ""})`),
    list(effects, "Nothing was derived from it yet."),
  ].flat();
}

function modelFacts(model) {
  const digest = model.signatureDigest || (model.registered && model.registered.signatureDigest);
  return h("span", {},
    link(urls.model(model.name), `${model.name} version ${model.version ?? "?"}`),
    digest ? [" · signature ", h("span", { class: "mono" }, digest)] : null);
}

function data(event) {
  if (event.dataBase64 !== null && event.dataBase64 !== undefined) {
    const bytes = Math.floor((event.dataBase64.length * 3) / 4) - (event.dataBase64.match(/=*$/)[0].length);
    // Only the media type's essence, and only a well-formed one: the producer's
    // parameters (name="a,b.bin") would end the data URL's header early, and the download
    // would hold the rest of them in front of the bytes.
    const essence = (event.dataContentType || "").split(";")[0].trim().toLowerCase();
    const type = /^[a-z0-9!#$&^_.+-]+\/[a-z0-9!#$&^_.+-]+$/.test(essence) ? essence : "application/octet-stream";
    return h("p", {}, `Binary data, ${bytes} bytes. `,
      h("a", { href: `data:${type};base64,${event.dataBase64}`, download: `${event.id}.bin` }, "Download"));
  }
  if (event.data === null || event.data === undefined) return h("p", {}, "No data.");
  return pretty(event.data);
}

function list(events, empty) {
  if (!events.length) return h("p", {}, empty);
  return h("ul", {}, events.map((e) => h("li", {}, eventLink(e.id), " ", h("span", { class: "muted" }, e.type))));
}
