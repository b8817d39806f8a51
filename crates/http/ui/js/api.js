// Every request the page makes goes through here: to this node's JSON APIs, or to another
// node's per-node endpoints, always with the ACL token (if any) in the X-Consul-Token header.
// The token lives in this tab's sessionStorage only; it is never put in a URL.

const TOKEN_KEY = 'trireme.token';

export function token() {
  return sessionStorage.getItem(TOKEN_KEY) || '';
}

export function setToken(secret) {
  sessionStorage.setItem(TOKEN_KEY, secret);
}

export function clearToken() {
  sessionStorage.removeItem(TOKEN_KEY);
}

/** An answer other than 2xx, with the server's own message. */
export class ApiError extends Error {
  constructor(status, message, code) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/**
 * Sends a request and returns the body as text; throws an ApiError carrying the server's
 * `error` message (or the bare status when the answer says nothing).
 */
export async function call(path, {method = 'GET', body, base = '', timeoutMs = 10000} = {}) {
  const headers = {};
  const secret = token();
  if (secret) headers['X-Consul-Token'] = secret;
  let response;
  try {
    response = await fetch(base + path, {
      method,
      headers,
      body,
      cache: 'no-store',
      credentials: 'omit',
      signal: AbortSignal.timeout(timeoutMs),
    });
  } catch (e) {
    throw new ApiError(0, `${base || 'this node'} did not answer: ${e.message}`, 'unreachable');
  }
  const text = await response.text();
  if (!response.ok) {
    let messageText = text.trim();
    let code = '';
    try {
      const parsed = JSON.parse(text);
      messageText = parsed.error ?? messageText;
      code = parsed.code ?? '';
    } catch {
      // Not JSON: the text itself is the message.
    }
    throw new ApiError(response.status, messageText || `${response.status} ${response.statusText}`, code);
  }
  return text;
}

/** Like `call`, parsing the JSON answer. */
export async function json(path, options) {
  const text = await call(path, options);
  return text ? JSON.parse(text) : null;
}

/** The base URL of a node by its advertised HTTP address; '' for the node serving the page. */
export function baseOf(httpAddr) {
  return httpAddr === location.host ? '' : `${location.protocol}//${httpAddr}`;
}

/** A per-node endpoint of the node at `httpAddr`, asked from the browser directly. */
export function fromNode(httpAddr, path, options = {}) {
  return json(path, {...options, base: baseOf(httpAddr), timeoutMs: options.timeoutMs ?? 3000});
}

/** A key or prefix as a URL path: every segment encoded, the slashes kept. */
export function keyPath(key) {
  return key.split('/').map(encodeURIComponent).join('/');
}

/**
 * Calls `fn` now and then `everyMs` after each call finishes, while the tab is visible; returns
 * a function that stops it. A hidden tab asks nothing, so an open console costs its nodes
 * nothing while nobody looks.
 */
export function every(everyMs, fn) {
  let stopped = false;
  let timer = null;
  const run = async () => {
    timer = null;
    if (stopped) return;
    if (!document.hidden) {
      try {
        await fn();
      } catch (e) {
        console.error(e);
      }
    }
    if (!stopped) timer = setTimeout(run, everyMs);
  };
  const wake = () => {
    if (!document.hidden && timer !== null) {
      clearTimeout(timer);
      run();
    }
  };
  document.addEventListener('visibilitychange', wake);
  run();
  return () => {
    stopped = true;
    if (timer !== null) clearTimeout(timer);
    document.removeEventListener('visibilitychange', wake);
  };
}
