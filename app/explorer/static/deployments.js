// Deployments: every service's state, and one service's history as a time line
// (rollout, traffic, promote, rollback, with who and why) and its state at ``?at=``.
import { rest } from "./api.js";
import { eventLink, facts, h, link, params, problem, table, urls } from "./dom.js";

export async function render(_options, service) {
  if (!service) {
    const { deployments } = await rest("/deployments");
    return [
      h("h1", {}, "Deployments"),
      deployments.length
        ? table(["service", "model", "status", "stable", "candidate", "traffic"], deployments.map((d) => [
            link(urls.deployment(d.service), d.service), d.model ? link(urls.model(d.model), d.model) : "",
            d.status, d.stable_version || "", d.candidate_version ? `${d.candidate_version} (${d.candidate_percent}%)` : "",
            traffic(d.traffic),
          ]))
        : h("p", {}, "No service has a deployment."),
    ];
  }
  const path = `/deployments/${encodeURIComponent(service)}`;
  let now;
  try {
    now = await rest(path);
  } catch (error) {
    return [h("h1", {}, "Deployment of ", service), problem(error.message)];
  }
  const at = params().get("at");
  let then = null;
  if (at) {
    try {
      then = await rest(`${path}?at=${encodeURIComponent(at)}`);
    } catch (error) {
      then = { error: error.message };
    }
  }
  return [
    h("h1", {}, "Deployment of ", h("span", { class: "mono" }, service)),
    h("h2", {}, "Now"), state(now),
    h("h2", {}, "At a chosen time"),
    h("form", { class: "depth", method: "get" },
      h("label", { for: "at" }, "Time (RFC 3339)"),
      h("input", { id: "at", name: "at", value: at || new Date().toISOString(), size: 32 }),
      h("button", { type: "submit" }, "Show state")),
    then ? (then.error ? problem(then.error) : h("div", { id: "state-at" }, h("p", {}, `As of ${then.at} (since ${then.since}):`), state(then))) : null,
    h("h2", {}, "History"),
    h("ol", { class: "history" }, now.history.map((c) => h("li", {},
      h("time", { datetime: c.at }, c.at), " ",
      h("strong", {}, c.action), ` · stable ${c.stable_version || "—"}`,
      c.candidate_version ? ` · candidate ${c.candidate_version} at ${c.candidate_percent}%` : "",
      c.actor ? ` · by ${c.actor}` : "", c.reason ? ` · “${c.reason}”` : "", " · ",
      link(`${urls.deployment(service)}?at=${encodeURIComponent(c.at)}`, "state then"), " · ", eventLink(c.event_id)))),
  ];
}

function traffic(split) {
  return Object.entries(split || {}).map(([v, p]) => `${v}: ${p}%`).join(", ");
}

function state(d) {
  return facts([
    ["model", d.model && link(urls.model(d.model), d.model)],
    ["status", d.status],
    ["stable version", d.stable_version],
    ["candidate", d.candidate_version && `${d.candidate_version} at ${d.candidate_percent}%`],
    ["traffic", traffic(d.traffic)],
  ]);
}
