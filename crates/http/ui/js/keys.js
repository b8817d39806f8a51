// Keys: the keyspace by prefix as Consul's UI shows it (one level at a time, from
// /v1/ui/keys: names only, a page at a time), a key's value as text, JSON, hex or base64 with
// its flags, indexes and lock, creating, editing with check-and-set (?cas=ModifyIndex) and
// deleting after a confirmation; Redis collections with their type and first members; and
// documents (/v0) with search.
//
// A value is bytes. It is edited as text only when it is UTF-8 that the text box keeps as it
// is (no carriage returns, which a text box turns into line feeds); otherwise as base64. A
// save that leaves the value as shown sends the very bytes read, so changing only the flags
// never rewrites a value.

import {call, json, keyPath} from './api.js';
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

/** Entries a page of the list asks for. */
const PAGE = 200;

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
  const list = el('ul', {class: 'keys', id: 'keys', 'aria-label': `Keys under ${prefix || 'the top'}`});
  const more = el('button', {type: 'button', id: 'more-keys'}, 'More keys');
  let shown = 0;
  const page = async (from) => {
    const query = new URLSearchParams({prefix, limit: String(PAGE)});
    if (from) query.set('from', from);
    let answer;
    try {
      answer = await json(`/v1/ui/keys?${query}`);
    } catch (e) {
      return fill(box, message('error', e.message));
    }
    shown += answer.entries.length;
    if (shown === 0) return fill(box, message('note', `No keys under "${prefix}".`));
    list.append(...answer.entries.map(({key, folder}) => {
      const href = folder ? `#/keys/${keyPath(key)}` : `#/key/${keyPath(key)}`;
      const name = key.slice(prefix.length) || key;
      return el('li', {class: folder ? 'folder' : 'key'}, el('a', {href}, name));
    }));
    const count = el('p', {class: 'note', id: 'keys-count'},
      `${shown} ${shown === 1 ? 'entry' : 'entries'}${answer.next ? ', more after these' : ''}.`);
    more.onclick = () => {
      more.disabled = true;
      page(answer.next).finally(() => {
        more.disabled = false;
      });
    };
    fill(box, list, count, answer.next ? more : '');
  };
  page(null);
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

/** The value's bytes as text, or null when they are not UTF-8 (a BOM is kept as text). */
function utf8(bytes) {
  try {
    return new TextDecoder('utf-8', {fatal: true, ignoreBOM: true}).decode(bytes);
  } catch {
    return null;
  }
}

function toBase64(bytes) {
  let raw = '';
  for (let at = 0; at < bytes.length; at += 0x8000) {
    raw += String.fromCharCode(...bytes.subarray(at, at + 0x8000));
  }
  return btoa(raw);
}

/** Flags as typed: a decimal u64 (as text, since a JS number is exact only to 2^53). */
const U64_MAX = 18446744073709551615n;
function parseFlags(text) {
  const t = text.trim();
  if (t === '') return '0';
  if (!/^[0-9]{1,20}$/.test(t) || BigInt(t) > U64_MAX) return null;
  return BigInt(t).toString();
}

/** The entry's Flags as the server wrote them: JSON.parse would round a u64 past 2^53. */
function flagsOf(text) {
  return /"Flags":([0-9]+)/.exec(text)?.[1] ?? '0';
}

function flagsInput(id, value) {
  return el('input', {id, type: 'text', inputmode: 'numeric', autocomplete: 'off', value,
    pattern: '[0-9]{1,20}', 'aria-describedby': `${id}-note`});
}

function flagsNote(id) {
  return el('span', {class: 'note', id: `${id}-note`}, ' a whole number from 0 to 18446744073709551615');
}

function keyView(container, key) {
  const box = el('div', {id: 'key-view'}, 'Loading…');
  const result = el('div', {id: 'key-result'});
  container.append(el('h1', {}, 'Key'), breadcrumb(parentOf(key)), result, box);
  const load = async () => {
    let entry;
    let flags;
    try {
      const text = await call(`/v1/kv/${keyPath(key)}`);
      entry = JSON.parse(text)[0];
      flags = flagsOf(text);
    } catch (e) {
      return fill(box, message('error', e.status === 404 ? `There is no key "${key}".` : e.message));
    }
    const bytes = decodeValue(entry.Value);
    const facts = el('dl', {class: 'facts', id: 'key-facts'},
      el('dt', {}, 'Key'), el('dd', {id: 'key-name'}, entry.Key),
      el('dt', {}, 'Flags'), el('dd', {id: 'key-flags'}, flags),
      el('dt', {}, 'Size'), el('dd', {}, `${bytes.length} byte(s)`),
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
    fill(box, facts, valueViews(bytes), editor(key, entry, flags, bytes, result, load), del);
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
  const text = utf8(bytes);
  const out = el('pre', {id: 'value-shown', tabindex: '0', 'aria-label': 'Value'});
  const show = (how) => {
    if (how === 'hex') return fill(out, hexDump(bytes) || '(empty)');
    if (how === 'base64') return fill(out, toBase64(bytes) || '(empty)');
    if (text === null) return fill(out, 'Not UTF-8 text: see it as hex or base64.');
    if (how === 'json') {
      try {
        return fill(out, JSON.stringify(JSON.parse(text), null, 2));
      } catch (e) {
        return fill(out, `Not JSON: ${e.message}`);
      }
    }
    return fill(out, text || '(empty)');
  };
  const first = text === null ? 'hex' : 'text';
  const choice = el('fieldset', {class: 'controls'}, el('legend', {}, 'Show the value as'),
    ['text', 'json', 'hex', 'base64'].map((how) => el('label', {},
      el('input', {type: 'radio', name: 'value-as', value: how, id: `value-as-${how}`, checked: how === first,
        onchange: () => show(how)}),
      ` ${how === 'json' ? 'JSON' : how}`)));
  show(first);
  return el('section', {}, choice, out);
}

function editor(key, entry, flags, bytes, result, reload) {
  const text = utf8(bytes);
  // A text box turns "\r\n" and "\r" into "\n": such text is edited as base64 too.
  const asText = text !== null && !text.includes('\r');
  const shown = asText ? text : toBase64(bytes);
  const form = el('form', {id: 'edit-form', novalidate: true},
    el('h2', {}, 'Edit'),
    el('label', {for: 'edit-value'}, asText ? 'New value' : 'New value, in base64'),
    asText ? '' : el('p', {class: 'note', id: 'edit-as-base64'},
      text === null ? 'The value is not UTF-8 text, so it is edited as base64: what is saved is these bytes decoded.'
        : 'The value has carriage returns, which a text box would not keep, so it is edited as base64.'),
    el('textarea', {id: 'edit-value', rows: 6, spellcheck: 'false'}),
    el('label', {for: 'edit-flags'}, 'Flags'),
    flagsInput('edit-flags', flags), flagsNote('edit-flags'),
    el('button', {type: 'submit', id: 'save-key'}, 'Save'),
    el('p', {class: 'note'}, `Saved only if the key is still at ModifyIndex ${entry.ModifyIndex} (check-and-set). ` +
      'A value left as shown is saved byte for byte as it was read.'));
  const area = form.querySelector('textarea');
  area.value = shown;
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const newFlags = parseFlags(form.querySelector('#edit-flags').value);
    if (newFlags === null) {
      return fill(result, message('error', 'Not saved: flags must be a whole number from 0 to 18446744073709551615.'));
    }
    let body;
    if (area.value === shown) {
      body = bytes;
    } else if (asText) {
      body = new TextEncoder().encode(area.value);
    } else {
      try {
        body = decodeValue(area.value.replace(/\s+/g, ''));
      } catch {
        return fill(result, message('error', 'Not saved: the value is not valid base64.'));
      }
    }
    try {
      const done = JSON.parse(await call(`/v1/kv/${keyPath(key)}?cas=${entry.ModifyIndex}&flags=${newFlags}`,
        {method: 'PUT', body}));
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
  const form = el('form', {id: 'new-key-form', novalidate: true},
    el('label', {for: 'new-key-name'}, 'Key'),
    el('input', {id: 'new-key-name', type: 'text', required: true, value: prefix, autocomplete: 'off'}),
    el('label', {for: 'new-key-value'}, 'Value'),
    el('textarea', {id: 'new-key-value', rows: 6}),
    el('label', {for: 'new-key-flags'}, 'Flags'),
    flagsInput('new-key-flags', '0'), flagsNote('new-key-flags'),
    el('button', {type: 'submit', id: 'new-key-submit'}, 'Create'),
    el('p', {class: 'note'}, 'Created only if no key has that name yet (?cas=0).'));
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const key = form.querySelector('#new-key-name').value;
    const value = form.querySelector('#new-key-value').value;
    const flags = parseFlags(form.querySelector('#new-key-flags').value);
    if (flags === null) {
      return fill(result, message('error', 'Not created: flags must be a whole number from 0 to 18446744073709551615.'));
    }
    try {
      const done = JSON.parse(await call(`/v1/kv/${keyPath(key)}?cas=0&flags=${flags}`,
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
