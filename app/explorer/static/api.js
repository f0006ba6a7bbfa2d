// The public API, with this tab's key. The key is typed once per tab and kept in
// sessionStorage (never in a URL or a cookie); every request sends it as a Bearer token.

const KEY = "causeway.key";
const ADMIN = "causeway.admin";

export function key() {
  return window.sessionStorage.getItem(KEY);
}

export function setKey(value) {
  window.sessionStorage.setItem(KEY, value);
  window.sessionStorage.removeItem(ADMIN);
}

export function forgetKey() {
  window.sessionStorage.removeItem(KEY);
  window.sessionStorage.removeItem(ADMIN);
  // GraphiQL (/graphql) keeps its tabs and query history, headers and all, under
  // "graphiql:" in this tab's sessionStorage; an older page kept them in localStorage.
  for (const storage of [window.sessionStorage, window.localStorage]) {
    for (const name of Object.keys(storage)) {
      if (name.startsWith("graphiql:")) storage.removeItem(name);
    }
  }
}

export class ApiError extends Error {
  constructor(status, detail) {
    super(detail);
    this.status = status;
  }
}

export async function rest(path, { method = "GET", body } = {}) {
  const headers = { Accept: "application/json" };
  if (key()) headers.Authorization = `Bearer ${key()}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  const answer = text ? JSON.parse(text) : null;
  if (!response.ok) {
    const detail = answer && (answer.detail || answer.title);
    throw new ApiError(response.status, detail || `${response.status} ${response.statusText}`);
  }
  return answer;
}

export async function gql(query, variables = {}) {
  const answer = await rest("/graphql", { method: "POST", body: { query, variables } });
  if (answer.errors && answer.errors.length) {
    throw new ApiError(200, answer.errors.map((e) => e.message).join("; "));
  }
  return answer.data;
}

// Whether this key may change things (the admin scope): the one read that needs it,
// GET /routes, answers 200 to an admin key and 403 to any other. Kept for the tab.
export async function isAdmin() {
  const known = window.sessionStorage.getItem(ADMIN);
  if (known !== null) return known === "yes";
  if (!key()) return false;
  let admin = false;
  try {
    await rest("/routes");
    admin = true;
  } catch (error) {
    if (!(error instanceof ApiError) || error.status !== 403) throw error;
  }
  window.sessionStorage.setItem(ADMIN, admin ? "yes" : "no");
  return admin;
}
