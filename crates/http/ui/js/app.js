// The console's entry point: finds out whether ACLs are on and what the token may do, shows
// the login or the sections, and routes between the views by the address's #fragment.

import {ApiError, clearToken, json, onTokenGone, setToken} from './api.js';
import {fill, message} from './dom.js';
import * as overview from './overview.js';
import * as shards from './shards.js';
import * as keys from './keys.js';
import * as figures from './figures.js';

const views = [
  {prefix: '#/overview', view: overview, needs: 'operator_read'},
  {prefix: '#/shards', view: shards, needs: 'operator_read'},
  {prefix: '#/keys/', view: keys, mode: 'list'},
  {prefix: '#/key/', view: keys, mode: 'key'},
  {prefix: '#/new-key/', view: keys, mode: 'new'},
  {prefix: '#/documents', view: keys, mode: 'documents'},
  {prefix: '#/figures', view: figures, needs: 'operator_read'},
];

/** What the token may do, from /v1/ui/access. */
let access = null;
/** Stops the current view's polling. */
let stopView = () => {};

/** Retries of /v1/ui/access that did not reach the node: none while it answers. */
let retry = null;

async function start() {
  document.getElementById('login-form').addEventListener('submit', login);
  document.getElementById('logout').addEventListener('click', () => {
    clearToken();
    location.hash = '';
    location.reload();
  });
  window.addEventListener('hashchange', route);
  // The token was deleted while the page was open (any request says so): back to the
  // login, saying why, and nothing more of the cluster shown.
  onTokenGone((e) => {
    stopView();
    stopView = () => {};
    access = null;
    document.getElementById('view').replaceChildren();
    showLogin(`${e.message}: the token this page used no longer exists. Log in again.`);
  });
  await enter();
}

/** Asks what the current token may do, then shows the login or the console. */
async function enter(loginError, fromLogin = false) {
  clearTimeout(retry);
  try {
    access = await json('/v1/ui/access');
  } catch (e) {
    // Refused (a stored secret that matches no token, or a malformed one): the login, with
    // the server's message (for a deleted token, onTokenGone has shown it already).
    const reached = e instanceof ApiError && e.status >= 400 && e.status < 500;
    if (reached) {
      clearToken();
      if (document.getElementById('login').hidden) showLogin(e.message);
      return;
    }
    // The node did not answer, or failed: say so and ask again. Not the login: on a
    // cluster without ACLs there is nothing to log in to.
    showUnreachable(e.message);
    retry = setTimeout(() => enter(loginError, fromLogin), 2000);
    return;
  }
  document.getElementById('unreachable').hidden = true;
  if (access.acl && access.anonymous) return showLogin(loginError);
  document.getElementById('login').hidden = true;
  document.getElementById('nav').hidden = false;
  document.getElementById('session').hidden = !access.acl;
  fill(document.getElementById('whoami'), access.acl ? `token ${access.accessor_id}` : '');
  for (const link of document.querySelectorAll('#nav a[data-needs]')) {
    link.hidden = !access[link.dataset.needs];
  }
  document.getElementById('view').hidden = false;
  // Just logged in, on a section this token may not read: start where it may.
  const wanted = views.find((v) => location.hash.startsWith(v.prefix));
  const unreadable = fromLogin && wanted && wanted.needs && !access[wanted.needs];
  if (!location.hash || location.hash === '#' || unreadable) {
    location.hash = access.operator_read ? '#/overview' : '#/keys/';
  } else {
    route();
  }
}

function showUnreachable(error) {
  const box = document.getElementById('unreachable');
  fill(box, message('error', `${error}. Asking again every 2 s.`));
  box.hidden = false;
}

function showLogin(error) {
  document.getElementById('unreachable').hidden = true;
  document.getElementById('nav').hidden = true;
  document.getElementById('view').hidden = true;
  document.getElementById('session').hidden = true;
  document.getElementById('login').hidden = false;
  fill(document.getElementById('login-error'), error ? message('error', error) : '');
  document.getElementById('login-token').focus();
}

/** Checks the secret with the server (it is the judge, not the page) before keeping it. */
async function login(event) {
  event.preventDefault();
  const input = document.getElementById('login-token');
  const secret = input.value.trim();
  input.value = '';
  setToken(secret);
  try {
    await json('/v1/acl/token/self', {checkingToken: true});
  } catch (e) {
    clearToken();
    return showLogin(e.message);
  }
  await enter(undefined, true);
}

function route() {
  if (!access || (access.acl && access.anonymous)) return;
  stopView();
  stopView = () => {};
  const hash = location.hash || '#/overview';
  const entry = views.find((v) => hash.startsWith(v.prefix)) ?? views[0];
  for (const link of document.querySelectorAll('#nav a')) {
    const current = hash.startsWith(link.getAttribute('href').replace(/\/$/, ''));
    if (current) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
  }
  const container = document.getElementById('view');
  container.replaceChildren();
  const rest = decodeURIComponent(hash.slice(entry.prefix.length));
  const stop = entry.view.render(container, {access, mode: entry.mode, rest});
  if (typeof stop === 'function') stopView = stop;
  const heading = container.querySelector('h1');
  if (heading) {
    heading.setAttribute('tabindex', '-1');
    heading.focus({preventScroll: true});
  }
}

start();
