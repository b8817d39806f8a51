// Small helpers to build the page: elements with their text set through textContent (so no
// key name or value from the database is ever parsed as HTML), number formats, the
// confirmation dialog and the live region that announces results.

/** Makes an element: `el('a', {href: '#/x', class: 'nav'}, 'text', child, ...)`. */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === false || value === null || value === undefined) continue;
    if (name.startsWith('on') && typeof value === 'function') {
      node.addEventListener(name.slice(2), value);
    } else if (value === true) {
      node.setAttribute(name, '');
    } else {
      node.setAttribute(name, String(value));
    }
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(node, child);
    else node.append(child instanceof Node ? child : String(child));
  }
}

/** Replaces everything inside `node` with `children`. */
export function fill(node, ...children) {
  node.replaceChildren();
  append(node, children);
  return node;
}

const SVG = 'http://www.w3.org/2000/svg';

/**
 * Makes an SVG element as `el` makes HTML ones: attributes set one by one and text as text,
 * so nothing from a node's answer is ever parsed as markup.
 */
export function svgEl(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === false || value === null || value === undefined) continue;
    node.setAttribute(name, String(value));
  }
  append(node, children);
  return node;
}

/** What a cell shows, to tell whether it changed: its text, or its markup. */
const shownIn = new WeakMap();

/**
 * Brings the rows of `tbody` to `rows` (`{key, cells}`; a cell is text or a node), keeping a
 * row that is there already under its key, and in it every cell whose content has not
 * changed: a table refreshed every few seconds keeps the keyboard focus, a text selection
 * and its scroll position. A kept cell keeps its old nodes, so a button's handler must read
 * what it acts on when it is pressed, not when it was made.
 */
export function syncRows(tbody, rows) {
  const old = new Map([...tbody.children].map((tr) => [tr.dataset.key, tr]));
  let at = 0;
  for (const {key, cells} of rows) {
    let tr = old.get(String(key));
    if (tr) old.delete(String(key));
    else tr = el('tr', {'data-key': key});
    cells.forEach((content, i) => {
      const isNode = content instanceof Node;
      const shown = isNode ? `<${content.outerHTML ?? content.textContent}` : String(content ?? '');
      let td = tr.children[i];
      if (!td) {
        td = el('td');
        tr.append(td);
      }
      if (shownIn.get(td) !== shown) {
        td.replaceChildren(isNode ? content : shown);
        shownIn.set(td, shown);
      }
    });
    while (tr.children.length > cells.length) tr.lastElementChild.remove();
    if (tbody.children[at] !== tr) tbody.insertBefore(tr, tbody.children[at] ?? null);
    at += 1;
  }
  for (const tr of old.values()) tr.remove();
}

/** A table with a caption, column headings and rows of cells (strings or nodes). */
export function table(caption, headings, rows, attrs = {}) {
  return el('table', attrs,
    el('caption', {}, caption),
    el('thead', {}, el('tr', {}, headings.map((h) => el('th', {scope: 'col'}, h)))),
    el('tbody', {}, rows.map((cells) => el('tr', {}, cells.map((c) => el('td', {}, c))))));
}

/** 1536 → "1.5 KiB". */
export function bytes(n) {
  if (n === null || n === undefined) return '-';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = n;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${unit === 0 ? value : value.toFixed(1)} ${units[unit]}`;
}

/** 3725 → "1h 2m". */
export function duration(seconds) {
  if (seconds === null || seconds === undefined) return '-';
  const d = Math.floor(seconds / 86400);
  const h = Math.floor((seconds % 86400) / 3600);
  const m = Math.floor((seconds % 3600) / 60);
  const s = Math.floor(seconds % 60);
  if (d > 0) return `${d}d ${h}h`;
  if (h > 0) return `${h}h ${m}m`;
  if (m > 0) return `${m}m ${s}s`;
  return `${s}s`;
}

/** A number with at most `digits` decimals, or "-". */
export function num(n, digits = 1) {
  if (n === null || n === undefined || Number.isNaN(n)) return '-';
  return Number.isInteger(n) ? String(n) : n.toFixed(digits);
}

/** Tells screen readers (and the tests) what just happened. */
export function announce(message) {
  const status = document.getElementById('status');
  status.textContent = message;
}

/**
 * Asks before an action: shows `text` (what will happen) and resolves to whether the user
 * confirmed. The dialog is modal, keeps the focus, and Escape cancels.
 */
export function confirmAction(title, text, action) {
  const dialog = document.getElementById('confirm');
  fill(dialog.querySelector('#confirm-title'), title);
  fill(dialog.querySelector('#confirm-text'), text);
  const ok = dialog.querySelector('#confirm-ok');
  ok.textContent = action;
  return new Promise((resolve) => {
    dialog.addEventListener('close', () => resolve(dialog.returnValue === 'ok'), {once: true});
    dialog.returnValue = '';
    dialog.showModal();
    dialog.querySelector('#confirm-cancel').focus();
  });
}

/** A message box: `kind` is "error", "ok" or "note". Errors are announced at once. */
export function message(kind, text) {
  return el('p', {class: `message ${kind}`, role: kind === 'error' ? 'alert' : 'status'}, text);
}
