// A decision's audit: the answer of GraphQL ``audit`` laid out.
import { gql } from "./api.js";
import { eventLink, h, link, pretty, problem, table, urls } from "./dom.js";

const EVENT = "id type source time model { name version signatureDigest registered { signature signatureDigest } }";
const AUDIT = `query ($id: ID!) {
  audit(decisionId: $id) {
    decision { ${EVENT} }
    sourceEvents { ${EVENT} }
    derivedEvents { ${EVENT} }
    models { name version signatureDigest events { id } }
    chainVerified
    truncated
  }
}`;

export async function render(_options, id) {
  let audit;
  try {
    ({ audit } = await gql(AUDIT, { id }));
  } catch (error) {
    return [h("h1", {}, "Audit of ", id), problem(error.message)];
  }
  const signatures = new Map();
  for (const e of [audit.decision, ...audit.derivedEvents, ...audit.sourceEvents]) {
    if (e.model && e.model.registered) signatures.set(`${e.model.name}\n${e.model.version}`, e.model.registered);
  }
  return [
    h("h1", {}, "Audit of ", link(urls.event(id), id, { class: "mono" })),
    badge(audit.chainVerified),
    audit.truncated
      ? h("p", { class: "warning", role: "status" }, "Truncated: the audit's walk stopped before the lineage ended ",
          "(at its depth of 50 steps, or at the server's node limit); what is listed is what it reached. The ",
          link(urls.lineage(id, 10, 1), "lineage graph"), " draws the nearest steps.")
      : null,
    h("p", {}, link(urls.lineage(id), "See it as a graph"), "."),
    h("h2", {}, `Source events (${audit.sourceEvents.length})`),
    h("p", { class: "muted" }, "Events in its lineage that name no cause: what came from outside."),
    events(audit.sourceEvents),
    h("h2", {}, `Derived events (${audit.derivedEvents.length})`),
    h("p", { class: "muted" }, "Events between the sources and the decision."),
    events(audit.derivedEvents),
    h("h2", {}, `Models (${audit.models.length})`),
    audit.models.map((m) => model(m, signatures.get(`${m.name}\n${m.version}`))),
  ].flat();
}

function badge(verified) {
  return h("div", { class: verified ? "badge-ok" : "badge-bad", id: "chain-badge", role: "status", "data-verified": String(verified) },
    h("strong", {}, verified ? "✔ Chain verified" : "✘ Chain NOT verified"),
    h("p", {}, verified
      ? "Every event in this audit matches its SHA-256 hash, and the hash chain after each one names that hash "
        + "(the next event in the log links to it, or the log head holds it): these rows are as they were appended."
      : "At least one event in this audit does not match its hash, or the chain after it does not name it: "
        + "a row was changed after it was appended, or its causes differ from the hashed ones. Do not rely on this "
        + "answer; run `causeway verify` and see docs/hash-chain.md."));
}

function events(list) {
  if (!list.length) return h("p", {}, "None.");
  return table(["id", "type", "source", "event time", "model"], list.map((e) => [
    eventLink(e.id), e.type, e.source, e.time || "",
    e.model ? link(urls.model(e.model.name), `${e.model.name} ${e.model.version ?? ""}`) : "",
  ]));
}

function model(m, registered) {
  return h("section", { class: "card" },
    h("h3", {}, link(urls.model(m.name), m.name), ` version ${m.version ?? "?"}`),
    h("p", {}, "Signature digest ", h("span", { class: "mono" }, m.signatureDigest || (registered && registered.signatureDigest) || "unknown")),
    h("p", {}, "Produced: ", m.events.map((e, i) => [i ? ", " : "", eventLink(e.id)])),
    registered ? [h("h4", {}, "Signature"), pretty(registered.signature)] : h("p", { class: "muted" }, "Not registered."));
}
