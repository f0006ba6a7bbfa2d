// Registered models: each version's signature side by side, and what changed between
// two versions (columns added, removed or changed, in inputs, outputs and params).
import { rest } from "./api.js";
import { h, link, params, pretty, problem, table, urls } from "./dom.js";

export async function render(_options, name) {
  if (!name) {
    const { models } = await rest("/models");
    return [
      h("h1", {}, "Models"),
      models.length
        ? table(["model", "versions", "aliases"], models.map((m) => [
            link(urls.model(m.name), m.name),
            m.versions.map((v) => v.version).join(", "),
            Object.entries(m.aliases).map(([a, v]) => `${a} → ${v}`).join(", "),
          ]))
        : h("p", {}, "No model is registered."),
    ];
  }
  let model;
  try {
    model = await rest(`/models/${encodeURIComponent(name)}`);
  } catch (error) {
    return [h("h1", {}, "Model ", name), problem(error.message)];
  }
  const versions = model.versions;
  const q = params();
  const a = versions.find((v) => v.version === q.get("a")) || versions[versions.length - 2] || versions[0];
  const b = versions.find((v) => v.version === q.get("b")) || versions[versions.length - 1];
  return [
    h("h1", {}, "Model ", h("span", { class: "mono" }, model.name)),
    h("p", {}, "Aliases: ", Object.entries(model.aliases).map(([k, v]) => `${k} → ${v}`).join(", ") || "none"),
    h("h2", {}, "Versions"),
    h("div", { class: "side-by-side" }, versions.map((v) => h("section", { class: "card" },
      h("h3", {}, `version ${v.version}`),
      h("p", { class: "mono wrap" }, v.signature_digest),
      h("p", { class: "muted" }, `registered ${v.registered_at}${v.enforce_outputs ? " · outputs enforced" : ""}`),
      pretty(v.signature)))),
    versions.length > 1 ? [compareForm(versions, a, b), h("h2", {}, `What changed from ${a.version} to ${b.version}`), diff(a, b)] : [],
  ].flat();
}

function compareForm(versions, a, b) {
  const pick = (id, label, chosen) => [
    h("label", { for: id }, label),
    h("select", { id, name: id }, versions.map((v) => h("option", { value: v.version, selected: v === chosen }, v.version))),
  ];
  return h("form", { class: "depth", method: "get" }, pick("a", "Compare", a), pick("b", "with", b), h("button", { type: "submit" }, "Compare"));
}

function columns(signature, part) {
  return new Map((signature[part] || []).map((c, i) => [c.name ?? `#${i}`, c]));
}

function diff(a, b) {
  const rows = [];
  for (const part of ["inputs", "outputs", "params"]) {
    const before = columns(a.signature, part);
    const after = columns(b.signature, part);
    for (const [col, spec] of after) {
      if (!before.has(col)) rows.push([part, col, "added", "", JSON.stringify(spec)]);
      else if (JSON.stringify(before.get(col)) !== JSON.stringify(spec)) {
        rows.push([part, col, "changed", JSON.stringify(before.get(col)), JSON.stringify(spec)]);
      }
    }
    for (const [col, spec] of before) if (!after.has(col)) rows.push([part, col, "removed", JSON.stringify(spec), ""]);
  }
  if (!rows.length) return h("p", { id: "model-diff" }, "The two signatures are the same.");
  return table(["part", "column", "change", `in ${a.version}`, `in ${b.version}`],
    rows.map((r) => r.map((c, i) => (i >= 3 ? h("code", {}, c) : c))), { id: "model-diff" });
}
