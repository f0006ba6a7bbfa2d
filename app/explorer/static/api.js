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

// How long a request may go without its answer: past the server's own limits (a
// statement's 30 s), so only a request held by something between (a proxy, a network
// that dropped it) meets it; fetch() has no limit of its own and would wait for ever.
const TIMEOUT_MS = 60_000;

export async function rest(path, { method = "GET", body } = {}) {
  const headers = { Accept: "application/json" };
  if (key()) headers.Authorization = `Bearer ${key()}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), TIMEOUT_MS);
  let response;
  let text;
  try {
    response = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: abort.signal,
    });
    text = await response.text();
  } catch (error) {
    if (abort.signal.aborted) {
      throw new ApiError(0, `The server did not answer ${method} ${path} within ${TIMEOUT_MS / 1000} s. Try again later.`);
    }
    throw new ApiError(0, `Could not reach the server (${error.message}).`);
  } finally {
    clearTimeout(timer);
  }
  // Only JSON is read as JSON: an answer of something in between (a proxy's HTML error
  // page) is named by its status, not by the parser's complaint about its first "<".
  const type = response.headers.get("content-type") || "";
  let answer = null;
  if (text && /\bjson\b/i.test(type)) {
    try {
      answer = JSON.parse(text);
    } catch {
      answer = null;
    }
  }
  const status = `${response.status} ${response.statusText}`.trim();
  if (!response.ok) {
    const detail = answer && (answer.detail || answer.title);
    throw new ApiError(response.status, detail || `The server answered ${status} (${type || "no content type"}).`);
  }
  if (text && answer === null) {
    throw new ApiError(response.status, `The server answered ${status} with ${type || "no content type"}, not JSON.`);
  }
  return answer;
}

export async function gql(query, variables = {}) {
  const answer = await rest("/graphql", { method: "POST", body: { query, variables } });
  if (!answer) throw new ApiError(200, "The server answered the query with nothing.");
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
