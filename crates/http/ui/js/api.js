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

/** Called when a request is refused because the stored token no longer exists. */
let tokenGone = () => {};

/**
 * Sets what happens when any request answers 403 `acl_not_found` while a token is stored
 * (the token was deleted, or the cluster forgot it): the token is cleared first.
 */
export function onTokenGone(handler) {
  tokenGone = handler;
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
 * `error` message (or the bare status when the answer says nothing). `body` may be text or
 * bytes (a Uint8Array is sent as it is). `checkingToken` marks the login's own check of a
 * secret: its refusal is the login's to show.
 */
export async function call(path, {method = 'GET', body, base = '', timeoutMs = 10000, checkingToken = false} = {}) {
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
    const error = new ApiError(response.status, messageText || `${response.status} ${response.statusText}`, code);
    if (response.status === 403 && code === 'acl_not_found' && secret && !checkingToken) {
      clearToken();
      tokenGone(error);
    }
    throw error;
  }
  return text;
}

/** Like `call`, parsing the JSON answer. */
export async function json(path, options) {
  const text = await call(path, options);
  return text ? JSON.parse(text) : null;
}

/**
 * The base URL of a node of `/v1/cluster/status` (`{name, http}`): '' (this page's own
 * origin) for the node that serves the page, whose name the status gives as `servedBy`, so
 * that a page opened through an address the cluster does not advertise (a tunnel, a load
 * balancer) still reads that node; the node's advertised address for the others.
 */
export function baseOf(node, servedBy) {
  if (node.name === servedBy || node.http === location.host) return '';
  return `${location.protocol}//${node.http}`;
}

/** A per-node endpoint of `node`, asked from the browser directly (see `baseOf`). */
export function fromNode(node, servedBy, path, options = {}) {
  return json(path, {...options, base: baseOf(node, servedBy), timeoutMs: options.timeoutMs ?? 3000});
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
