// Queues and dead letters: depth by priority, in flight, the autoscale advice; the dead
// letters with their failures, and (for an admin key only) requeue and discard, each
// with the reason asked for.
import { rest } from "./api.js";
import { eventLink, facts, h, link, pretty, problem, table, urls } from "./dom.js";

export async function render(options, id) {
  return id ? one(id, options) : list(options);
}

// notice: what a bulk requeue just did, said again on the page it reloads.
async function list({ admin }, notice = null) {
  // A page of dead letters at a time, the oldest first; ?after= is the API's cursor.
  const after = new URLSearchParams(window.location.search).get("after");
  const deadPage = after === null ? "/dead-letters" : `/dead-letters?after=${encodeURIComponent(after)}`;
  const [{ queues }, { dead_letters: dead, next }] = await Promise.all([rest("/queues"), rest(deadPage)]);
  const advice = await Promise.all(queues.map((q) => rest(`/queues/${encodeURIComponent(q.queue)}/autoscale`)));
  return [
    h("h1", {}, "Queues"),
    queues.length
      ? table(["queue", "ready by priority", "delayed", "in flight", "oldest ready", "dead letters", "alerts", "workers advised"],
          queues.map((q, i) => [
            q.queue,
            Object.entries(q.ready_by_priority).map(([p, n]) => `p${p}: ${n}`).join(", ") || "0",
            String(q.delayed), String(q.in_flight),
            q.oldest_ready_age_s === null ? "—" : `${q.oldest_ready_age_s.toFixed(1)} s`,
            String(q.dead_letters), String(q.alerts),
            `${advice[i].recommended_workers}${advice[i].observed_latency_s === null ? "" : ` (latency ${advice[i].observed_latency_s.toFixed(2)} s, target ${advice[i].target_latency_s} s)`}`,
          ]), { id: "queues" })
      : h("p", {}, "No queue has tasks."),
    h("h2", {}, "Dead letters, the oldest first"),
    dead.length
      ? table(["task", "queue", "kind", "attempts", "failure", "trigger"], dead.map((d) => [
          link(urls.deadLetter(d.id), d.id, { class: "mono" }), d.queue, d.kind, String(d.attempts),
          d.error ? `${d.error.class}: ${d.error.message}` : "", eventLink(d.trigger),
        ]), { id: "dead-letters" })
      : h("p", {}, after === null ? "No dead letters." : "No dead letters past the last page."),
    pages(after, next),
    admin && (dead.length || notice) ? requeueMany(queues, notice, (said) => refresh(admin, said)) : null,
  ];
}

// The queues and dead letters again, once a bulk requeue has moved some of them.
async function refresh(admin, notice) {
  const parts = (await list({ admin }, notice)).flat();
  document.getElementById("page").replaceChildren(...parts.filter((p) => p !== null && p !== undefined));
}

const CLASSES = ["data_invalid", "model_version_mismatch", "transient", "unknown"];

// POST /dead-letters/requeue: the oldest dead letters that match, up to a limit, each
// requeued by its own decision with the reason given.
function requeueMany(queues, notice, done) {
  const status = h("p", { role: "status", id: "requeue-many-status", class: notice ? "ok" : null }, notice);
  const field = (id, label, input) => h("p", {}, h("label", { for: id }, label), " ", input);
  const queue = h("select", { id: "requeue-many-queue" }, h("option", { value: "" }, "any"),
    ...queues.filter((q) => q.dead_letters > 0).map((q) => h("option", { value: q.queue }, q.queue)));
  const errorClass = h("select", { id: "requeue-many-class" }, h("option", { value: "" }, "any"),
    ...CLASSES.map((c) => h("option", { value: c }, c)));
  const limit = h("input", { id: "requeue-many-limit", type: "number", min: 1, max: 100, value: 100, required: true });
  const reason = h("input", { id: "requeue-many-reason", name: "reason", required: true, size: 40 });
  const form = h("form", { class: "action", id: "requeue-many-form", onsubmit: async (event) => {
    event.preventDefault();
    const body = { limit: Number(limit.value), reason: reason.value.trim() };
    if (queue.value) body.queue = queue.value;
    if (errorClass.value) body.class = errorClass.value;
    try {
      const answer = await rest("/dead-letters/requeue", { method: "POST", body });
      const stale = answer.requeued.filter((task) => task.state === "superseded").length;
      status.textContent = `Requeued ${answer.requeued.length - stale}.` +
        (stale ? ` Superseded ${stale} by a newer task of its debounce key.` : "") +
        (answer.more ? " More match: submit again for the next ones." : " None left that match.");
      status.className = "ok";
      await done(status.textContent);
    } catch (error) {
      status.textContent = error.message;
      status.className = "error";
    }
  } },
    field("requeue-many-queue", "Queue", queue),
    field("requeue-many-class", "Failure class", errorClass),
    field("requeue-many-limit", "At most", limit),
    field("requeue-many-reason", "Reason", reason),
    h("button", { type: "submit" }, "Requeue the oldest that match"));
  return h("section", { class: "card", "aria-label": "Requeue in bulk (admin)" },
    h("h2", {}, "Requeue in bulk (admin)"), form, status);
}

function pages(after, next) {
  if (after === null && !next) return null;
  return h("nav", { class: "pages", "aria-label": "Pages of dead letters" },
    after === null ? null : link("/ui/queues", "← the first page", { id: "dead-letters-first" }),
    after !== null && next ? " · " : null,
    next ? link(`/ui/queues?after=${encodeURIComponent(next)}`, "the next page →", { id: "dead-letters-next" }) : null);
}

async function one(id, { admin }) {
  let dead;
  try {
    dead = await rest(`/dead-letters/${encodeURIComponent(id)}`);
  } catch (error) {
    return [h("h1", {}, "Dead letter ", id), problem(error.message)];
  }
  return [
    h("h1", {}, "Dead letter ", h("span", { class: "mono" }, dead.id)),
    facts([
      ["queue", dead.queue], ["kind", dead.kind], ["state", dead.state], ["attempts", String(dead.attempts)],
      ["trigger", eventLink(dead.trigger)], ["disposition", dead.disposition],
    ]),
    h("h2", {}, "Failures"),
    table(["attempt", "outcome", "class", "message", "at"], dead.failures.map((f) => [
      String(f.attempt ?? ""), f.outcome, f.class || "", f.message || "", f.at || "",
    ])),
    admin ? actions(dead) : h("p", { class: "muted", id: "read-only" }, "Requeue and discard need a key with the admin scope."),
    h("h2", {}, "Trigger event"),
    pretty(dead.trigger_event),
  ];
}

function actions(dead) {
  const status = h("p", { role: "status", id: "action-status" });
  const form = (action, label, required) => {
    const input = h("input", { id: `${action}-reason`, name: "reason", required, size: 40 });
    return h("form", { class: "action", id: `${action}-form`, onsubmit: async (event) => {
      event.preventDefault();
      const reason = input.value.trim();
      try {
        const body = reason ? { reason } : {};
        const answer = await rest(`/dead-letters/${encodeURIComponent(dead.id)}/${action}`, { method: "POST", body });
        status.textContent = `Done: the task is now ${answer.state}.`;
        status.className = "ok";
      } catch (error) {
        status.textContent = error.message;
        status.className = "error";
      }
    } },
      h("label", { for: `${action}-reason` }, `Reason to ${action}${required ? "" : " (optional)"}`), input,
      h("button", { type: "submit" }, label));
  };
  if (dead.state !== "dead") return h("p", {}, `It is ${dead.state} now.`);
  return h("section", { class: "card", "aria-label": "Admin actions" },
    h("h2", {}, "Act on it (admin)"),
    form("requeue", "Requeue", true),
    form("discard", "Discard", true),
    status);
}
