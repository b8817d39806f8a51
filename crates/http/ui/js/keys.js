// Keys: the keyspace by prefix as Consul's UI shows it (one level at a time with
// ?keys&separator=/), a key's value as text, JSON or hex with its flags, indexes and lock,
// creating, editing with check-and-set (?cas=ModifyIndex) and deleting after a confirmation;
// Redis collections with their type and first members; and documents (/v0) with search.

import {ApiError, call, json, keyPath} from './api.js';
import {confirmAction, el, fill, message, table} from './dom.js';

export function render(container, {mode, rest}) {
  if (mode === 'key') return keyView(container, rest);
  if (mode === 'new') return newKey(container, rest);
  if (mode === 'documents') return documents(container);
  return listView(container, rest);
}

/** Links to each level of `prefix`: top / app/ / app/config/. */
function breadcrumb(prefix) {
  const parts = prefix.split('/').filter((p, i, all) => p !== '' || i < all.length - 1);
  const links = [el('a', {href: '#/keys/'}, 'top')];
  let at = '';
  for (const part of parts) {
    at += `${part}/`;
    links.push(' / ', el('a', {href: `#/keys/${keyPath(at)}`}, part));
  }
  return el('nav', {class: 'crumbs', 'aria-label': 'Prefix'}, links);
}

function listView(container, prefix) {
  const box = el('div', {id: 'key-list'}, 'Loading…');
  const go = el('form', {class: 'controls', id: 'prefix-form'},
    el('label', {for: 'prefix-input'}, 'Go to prefix'),
    el('input', {id: 'prefix-input', type: 'text', value: prefix, autocomplete: 'off'}),
    el('button', {type: 'submit'}, 'Go'),
    el('a', {href: `#/new-key/${keyPath(prefix)}`, class: 'button', id: 'create-key'}, 'Create a key'));
  go.addEventListener('submit', (e) => {
    e.preventDefault();
    location.hash = `#/keys/${keyPath(go.querySelector('input').value)}`;
  });
  container.append(el('h1', {}, 'Keys'), breadcrumb(prefix), go, box);
  (async () => {
    let keys;
    try {
      keys = JSON.parse(await call(`/v1/kv/${keyPath(prefix)}?keys&separator=/`));
    } catch (e) {
      if (e instanceof ApiError && e.status === 404) keys = [];
      else return fill(box, message('error', e.message));
    }
    if (keys.length === 0) return fill(box, message('note', `No keys under "${prefix}".`));
    const items = keys.map((key) => {
      const folder = key.endsWith('/');
      const href = folder ? `#/keys/${keyPath(key)}` : `#/key/${keyPath(key)}`;
      const shown = key.slice(prefix.length) || key;
      return el('li', {class: folder ? 'folder' : 'key'}, el('a', {href}, shown));
    });
    fill(box, el('ul', {class: 'keys', 'aria-label': `Keys under ${prefix || 'the top'}`}, items));
  })();
}

function decodeValue(base64) {
  if (base64 === null) return new Uint8Array();
  const raw = atob(base64);
  return Uint8Array.from(raw, (c) => c.charCodeAt(0));
}

function hexDump(bytes) {
  const lines = [];
  for (let at = 0; at < bytes.length; at += 16) {
    const row = bytes.slice(at, at + 16);
    const hex = Array.from(row, (b) => b.toString(16).padStart(2, '0')).join(' ');
    const ascii = Array.from(row, (b) => (b >= 32 && b < 127 ? String.fromCharCode(b) : '.')).join('');
    lines.push(`${at.toString(16).padStart(8, '0')}  ${hex.padEnd(47)}  ${ascii}`);
  }
  return lines.join('\n');
}

function parentOf(key) {
  const cut = key.replace(/\/$/, '').lastIndexOf('/');
  return cut < 0 ? '' : key.slice(0, cut + 1);
}

function keyView(container, key) {
  const box = el('div', {id: 'key-view'}, 'Loading…');
  const result = el('div', {id: 'key-result'});
  container.append(el('h1', {}, 'Key'), breadcrumb(parentOf(key)), result, box);
  const load = async () => {
    let entry;
    try {
      entry = (await json(`/v1/kv/${keyPath(key)}`))[0];
    } catch (e) {
      return fill(box, message('error', e.status === 404 ? `There is no key "${key}".` : e.message));
    }
    const bytes = decodeValue(entry.Value);
    const facts = el('dl', {class: 'facts', id: 'key-facts'},
      el('dt', {}, 'Key'), el('dd', {id: 'key-name'}, entry.Key),
      el('dt', {}, 'Flags'), el('dd', {}, String(entry.Flags)),
      el('dt', {}, 'CreateIndex'), el('dd', {}, String(entry.CreateIndex)),
      el('dt', {}, 'ModifyIndex'), el('dd', {id: 'key-modify-index'}, String(entry.ModifyIndex)),
      el('dt', {}, 'LockIndex'), el('dd', {}, String(entry.LockIndex)),
      el('dt', {}, 'Lock held by session'), el('dd', {}, entry.Session ?? 'none'));
    const del = el('button', {type: 'button', class: 'danger', id: 'delete-key'}, 'Delete…');
    del.addEventListener('click', async () => {
      const ok = await confirmAction(`Delete "${entry.Key}"?`,
        `The key is deleted for every client of the cluster, if it is still at ModifyIndex ${entry.ModifyIndex} ` +
        '(a check-and-set: a change made meanwhile keeps it). This cannot be undone.', 'Delete');
      if (!ok) return;
      try {
        const done = JSON.parse(await call(`/v1/kv/${keyPath(key)}?cas=${entry.ModifyIndex}`, {method: 'DELETE'}));
        if (done) location.hash = `#/keys/${keyPath(parentOf(key))}`;
        else fill(result, message('error', 'Not deleted: the key changed since it was shown. Reload to see it.'));
      } catch (e) {
        fill(result, message('error', e.message));
      }
    });
    if (entry.Value === null) {
      // Empty, or a Redis collection (whose record holds no value): ask its type.
      let details;
      try {
        details = await json(`/v1/ui/kv/${keyPath(key)}`);
      } catch (e) {
        return fill(box, facts, message('error', e.message), del);
      }
      if (details.kind !== 'string') return fill(box, facts, collection(details), del);
    }
    fill(box, facts, valueViews(bytes), editor(key, entry, bytes, result, load), del);
  };
  load();
}

function collection(details) {
  const head = {
    hash: ['Field', 'Value'], set: ['Member'], list: ['Index', 'Element'], zset: ['Member', 'Score'],
  }[details.kind];
  const rows = details.members.map((m, i) => {
    if (details.kind === 'hash') return [m.name, m.value];
    if (details.kind === 'list') return [String(i), m.name];
    if (details.kind === 'zset') return [m.name, String(m.score)];
    return [m.name];
  });
  const shown = details.members.length < details.size
    ? `the first ${details.members.length} of ${details.size}` : `all ${details.size}`;
  return el('section', {id: 'collection'},
    el('p', {}, 'Type: ', el('strong', {id: 'key-type'}, details.kind),
      ` (a Redis ${details.kind}; change it over the Redis protocol). Showing ${shown}.`),
    table(`Members of ${details.key}`, head, rows, {id: 'members'}));
}

function valueViews(bytes) {
  const text = new TextDecoder('utf-8', {fatal: false}).decode(bytes);
  const out = el('pre', {id: 'value-shown', tabindex: '0', 'aria-label': 'Value'});
  const show = (how) => {
    if (how === 'hex') return fill(out, hexDump(bytes) || '(empty)');
    if (how === 'json') {
      try {
        return fill(out, JSON.stringify(JSON.parse(text), null, 2));
      } catch (e) {
        return fill(out, `Not JSON: ${e.message}`);
      }
    }
    return fill(out, text || '(empty)');
  };
  const choice = el('fieldset', {class: 'controls'}, el('legend', {}, 'Show the value as'),
    ['text', 'json', 'hex'].map((how) => el('label', {},
      el('input', {type: 'radio', name: 'value-as', value: how, id: `value-as-${how}`, checked: how === 'text',
        onchange: () => show(how)}),
      ` ${how === 'json' ? 'JSON' : how}`)));
  show('text');
  return el('section', {}, choice, out);
}

function editor(key, entry, bytes, result, reload) {
  const text = new TextDecoder().decode(bytes);
  const form = el('form', {id: 'edit-form'},
    el('h2', {}, 'Edit'),
    el('label', {for: 'edit-value'}, 'New value'),
    el('textarea', {id: 'edit-value', rows: 6}),
    el('label', {for: 'edit-flags'}, 'Flags'),
    el('input', {id: 'edit-flags', type: 'number', min: 0, value: entry.Flags}),
    el('button', {type: 'submit', id: 'save-key'}, 'Save'),
    el('p', {class: 'note'}, `Saved only if the key is still at ModifyIndex ${entry.ModifyIndex} (check-and-set).`));
  form.querySelector('textarea').value = text;
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const value = form.querySelector('textarea').value;
    const flags = form.querySelector('#edit-flags').value || '0';
    try {
      const done = JSON.parse(await call(`/v1/kv/${keyPath(key)}?cas=${entry.ModifyIndex}&flags=${encodeURIComponent(flags)}`,
        {method: 'PUT', body: value}));
      if (done) {
        await reload();
        fill(result, message('ok', 'Saved.'));
      } else {
        let now = '';
        try {
          now = ` (it is now at ModifyIndex ${(await json(`/v1/kv/${keyPath(key)}`))[0].ModifyIndex})`;
        } catch {
          now = ' (it is gone now)';
        }
        fill(result, message('error', `Not saved: the key changed since it was shown${now}. Reload to see its value, then edit again.`));
      }
    } catch (err) {
      fill(result, message('error', err.message));
    }
  });
  return form;
}

function newKey(container, prefix) {
  const result = el('div', {id: 'key-result'});
  const form = el('form', {id: 'new-key-form'},
    el('label', {for: 'new-key-name'}, 'Key'),
    el('input', {id: 'new-key-name', type: 'text', required: true, value: prefix, autocomplete: 'off'}),
    el('label', {for: 'new-key-value'}, 'Value'),
    el('textarea', {id: 'new-key-value', rows: 6}),
    el('label', {for: 'new-key-flags'}, 'Flags'),
    el('input', {id: 'new-key-flags', type: 'number', min: 0, value: 0}),
    el('button', {type: 'submit', id: 'new-key-submit'}, 'Create'),
    el('p', {class: 'note'}, 'Created only if no key has that name yet (?cas=0).'));
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const key = form.querySelector('#new-key-name').value;
    const value = form.querySelector('#new-key-value').value;
    const flags = form.querySelector('#new-key-flags').value || '0';
    try {
      const done = JSON.parse(await call(`/v1/kv/${keyPath(key)}?cas=0&flags=${encodeURIComponent(flags)}`,
        {method: 'PUT', body: value}));
      if (done) location.hash = `#/key/${keyPath(key)}`;
      else fill(result, message('error', `Not created: a key named "${key}" exists already.`));
    } catch (err) {
      fill(result, message('error', err.message));
    }
  });
  container.append(el('h1', {}, 'Create a key'), breadcrumb(prefix), result, form);
}

/** The collection and query in the address: #/documents/users?q=name:alice */
function documentsTarget() {
  const rest = location.hash.slice('#/documents'.length).replace(/^\//, '');
  const [collection, query] = rest.split('?', 2);
  const q = new URLSearchParams(query ?? '').get('q') ?? '';
  return {collection: decodeURIComponent(collection ?? ''), q};
}

function documents(container) {
  const {collection, q} = documentsTarget();
  const box = el('div', {id: 'doc-results'});
  const form = el('form', {class: 'controls', id: 'doc-form', role: 'search'},
    el('label', {for: 'doc-collection'}, 'Collection'),
    el('input', {id: 'doc-collection', type: 'text', required: true, value: collection, autocomplete: 'off'}),
    el('label', {for: 'doc-query'}, 'Search (Lucene syntax, empty lists the collection)'),
    el('input', {id: 'doc-query', type: 'search', value: q, autocomplete: 'off',
      placeholder: 'name:alice AND age:>30'}),
    el('button', {type: 'submit', id: 'doc-search'}, 'Search'));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const c = encodeURIComponent(form.querySelector('#doc-collection').value);
    const query = form.querySelector('#doc-query').value;
    const target = `#/documents/${c}${query ? `?q=${encodeURIComponent(query)}` : ''}`;
    if (location.hash === target) documentsSearch(box, documentsTarget());
    else location.hash = target;
  });
  container.append(el('h1', {}, 'Documents'), form, box);
  if (collection) documentsSearch(box, {collection, q});
}

async function documentsSearch(box, {collection, q}) {
  fill(box, 'Searching…');
  const path = `/v0/${encodeURIComponent(collection)}?limit=20${q ? `&query=${encodeURIComponent(q)}` : ''}`;
  let page;
  try {
    page = await json(path);
  } catch (e) {
    return fill(box, message('error', e.message));
  }
  const total = page.total_count ?? page.count;
  const rows = page.results.map((r) => [
    el('a', {href: `#/key/${keyPath(`${r.path.collection}/${r.path.key}`)}`}, r.path.key),
    r.path.ref,
    r.score === undefined ? '-' : r.score.toFixed(2),
    el('code', {}, JSON.stringify(r.value).slice(0, 300)),
  ]);
  fill(box, el('p', {id: 'doc-count'}, q
    ? `${total} match(es) for ${q}; showing ${page.count}.`
    : `${page.count} document(s)${page.next ? ' (first page)' : ''}.`),
  table(`Documents in ${collection}`, ['Key', 'Ref', 'Score', 'Document'], rows, {id: 'doc-table'}));
}
