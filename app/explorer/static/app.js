// The explorer's entry: the key form, then the page the path names. Every page is a
// plain URL (shareable, without the key); links load the next page.
import { forgetKey, isAdmin, key, setKey } from "./api.js";
import { h, problem } from "./dom.js";

const PAGES = [
  [/^\/ui\/?$/, "home", () => []],
  [/^\/ui\/find$/, "home", () => ["find"]],
  [/^\/ui\/events\/([^/]+)$/, "event", (m) => [m[1]]],
  [/^\/ui\/events\/([^/]+)\/lineage$/, "lineage", (m) => [m[1]]],
  [/^\/ui\/events\/([^/]+)\/audit$/, "audit", (m) => [m[1]]],
  [/^\/ui\/runs\/([^/]+)$/, "timeline", (m) => ["run", m[1]]],
  [/^\/ui\/streams\/([^/]+)$/, "timeline", (m) => ["stream", m[1]]],
  [/^\/ui\/models$/, "models", () => []],
  [/^\/ui\/models\/([^/]+)$/, "models", (m) => [m[1]]],
  [/^\/ui\/deployments$/, "deployments", () => []],
  [/^\/ui\/deployments\/([^/]+)$/, "deployments", (m) => [m[1]]],
  [/^\/ui\/queues$/, "queues", () => []],
  [/^\/ui\/dead-letters\/([^/]+)$/, "queues", (m) => [m[1]]],
];

function keyForm() {
  const form = document.getElementById("key-form");
  const input = document.getElementById("key-input");
  const state = document.getElementById("key-state");
  state.textContent = key() ? "key set for this tab" : "no key";
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    if (!input.value.trim()) return;
    setKey(input.value.trim());
    input.value = "";
    window.location.reload();
  });
  document.getElementById("key-forget").addEventListener("click", () => {
    forgetKey();
    window.location.reload();
  });
}

async function main() {
  keyForm();
  const root = document.getElementById("page");
  const path = window.location.pathname;
  const found = PAGES.map(([re, name, args]) => [path.match(re), name, args]).find(([m]) => m);
  if (!found) {
    root.replaceChildren(h("h1", {}, "Not a page"), problem(`Nothing lives at ${path}.`));
    document.body.dataset.ready = "true";
    return;
  }
  if (!key()) {
    root.replaceChildren(
      h("h1", {}, "Causeway explorer"),
      h("p", {}, "Type an API key (read scope or more) in the box above. It is kept in this ",
        "browser tab only (sessionStorage) and sent as a Bearer token to this server."),
    );
    document.getElementById("key-input").focus();
    document.body.dataset.ready = "true";
    return;
  }
  const [match, name, args] = found;
  try {
    // Inside the try: a bad escape typed into the address ("50%off") is a URIError.
    const values = args(match).map((v) => decodeURIComponent(v));
    const named = new URLSearchParams(window.location.search).get("id");
    if (named !== null && values.at(-1) === "_") values[values.length - 1] = named; // dom.js urls
    const module = await import(`./${name}.js`);
    const admin = name === "queues" ? await isAdmin() : false;
    const parts = (await module.render({ admin }, ...values)).flat();
    root.replaceChildren(...parts.filter((p) => p !== null && p !== undefined && p !== false));
    if (module.shown) await module.shown();
  } catch (error) {
    const said = error instanceof URIError
      ? `The address is not well-formed: a "%" not followed by two hexadecimal digits. A "%" in a name is written "%25".`
      : error.message;
    root.replaceChildren(h("h1", {}, "Could not show this page"), problem(said));
  }
  document.body.dataset.ready = "true";
}

main();
