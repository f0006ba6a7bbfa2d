// A decision's audit: the answer of GraphQL ``audit`` laid out.
import { gql } from "./api.js";
import { eventLink, facts, h, link, pretty, problem, table, urls } from "./dom.js";

const EVENT = "id type source time model { name version signatureDigest registered { signature signatureDigest } }";
// Events of OpenLineage runs name no model: what the page shows of them, and no more (a
// wide training set is thousands of them, and each field asked costs the answer budget).
const PLAIN = "id type source time";
const RUN = "runId job { namespace name } state parentRunId events { id type time stream }";
const DATASET = "namespace name version external rowCount sizeBytes writtenByRunId event { id stream }";
const AUDIT = `query ($id: ID!) {
  audit(decisionId: $id) {
    decision { ${EVENT} }
    sourceEvents { ${EVENT} }
    derivedEvents { ${EVENT} }
    models { name version signatureDigest events { id } }
    trainingRuns { modelName modelVersion run { ${RUN} } }
    datasets { ${DATASET} }
    trainingEvents { ${PLAIN} }
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
    h("h2", {}, `Training runs (${audit.trainingRuns.length})`),
    h("p", { class: "muted" }, "The OpenLineage runs its models' registered versions name as trained by ",
      "(POST /models/{name}/versions, training_run), as their events tell them."),
    audit.trainingRuns.length ? audit.trainingRuns.map(trainingRun) : h("p", {}, "None."),
    h("h2", {}, `Training data (${audit.datasets.length})`),
    h("p", { class: "muted" }, "The dataset versions upstream of those runs: what the runs read, ",
      "and what the runs that wrote it read in turn."),
    datasets(audit.datasets),
    upstream(audit),
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

function events(list, attrs = {}) {
  if (!list.length) return h("p", {}, "None.");
  return table(["id", "type", "source", "event time", "model"], list.map((e) => [
    eventLink(e.id), e.type, e.source, e.time || "",
    e.model ? link(urls.model(e.model.name), `${e.model.name} ${e.model.version ?? ""}`) : "",
  ]), attrs);
}

function model(m, registered) {
  return h("section", { class: "card" },
    h("h3", {}, link(urls.model(m.name), m.name), ` version ${m.version ?? "?"}`),
    h("p", {}, "Signature digest ", h("span", { class: "mono" }, m.signatureDigest || (registered && registered.signatureDigest) || "unknown")),
    h("p", {}, "Produced: ", m.events.map((e, i) => [i ? ", " : "", eventLink(e.id)])),
    registered ? [h("h4", {}, "Signature"), pretty(registered.signature)] : h("p", { class: "muted" }, "Not registered."));
}

function trainingRun(t) {
  const run = t.run;
  const stream = run.events.length ? run.events[0].stream : null;
  return h("section", { class: "card training-run" },
    h("h3", {}, "Run ", stream ? link(urls.stream(stream), run.runId, { class: "mono" }) : h("span", { class: "mono" }, run.runId)),
    h("p", {}, "Trained ", link(urls.model(t.modelName), t.modelName), ` version ${t.modelVersion}.`),
    facts([
      ["Job", run.job ? `${run.job.namespace} / ${run.job.name}` : ""],
      ["State", run.state || (run.events.length ? "" : "no event of this run is stored")],
      ["Parent run", run.parentRunId ? h("span", { class: "mono" }, run.parentRunId) : ""],
    ]),
    run.events.length
      ? table(["id", "type", "event time"], run.events.map((e) => [eventLink(e.id), e.type, e.time || ""]))
      : null);
}

function datasets(list) {
  if (!list.length) return h("p", {}, "None.");
  return table(["dataset", "version", "rows", "bytes", "written by run", "event"], list.map((d) => [
    [link(urls.stream(d.event.stream), `${d.namespace} / ${d.name}`), d.external ? " (external)" : ""],
    // A version without its own (no 'version' facet) is named by its event's id: shown once.
    d.version === d.event.id ? h("span", { class: "muted" }, "none given") : h("span", { class: "mono" }, d.version),
    d.rowCount ?? "",
    d.sizeBytes ?? "",
    d.writtenByRunId ? h("span", { class: "mono" }, d.writtenByRunId) : "",
    eventLink(d.event.id),
  ]), { class: "training-data" });
}

// The rest of what the walk from the training runs reached (the runs that wrote the
// training data, their parents): chainVerified covers these too, so the page lists them.
function upstream(audit) {
  const shown = new Set([
    ...audit.trainingRuns.flatMap((t) => t.run.events.map((e) => e.id)),
    ...audit.datasets.map((d) => d.event.id),
  ]);
  const rest = audit.trainingEvents.filter((e) => !shown.has(e.id));
  if (!rest.length) return [];
  return [
    h("h2", {}, `Further upstream of the training runs (${rest.length})`),
    h("p", { class: "muted" }, "The other events the walk from the training runs reached: the runs that wrote ",
      "the training data, and what they came from."),
    events(rest, { class: "training-upstream" }),
  ];
}
