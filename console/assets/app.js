// acemq console: plain JavaScript, no build step. Every string from a
// message is put in the page with textContent (through el), never as HTML.
'use strict';

const csrf = document.querySelector('meta[name="acemq-csrf"]').content;
const canWrite = document.querySelector('meta[name="acemq-write"]').content === 'yes';
const $ = (id) => document.getElementById(id);

// el builds an element; string children become text nodes.
function el(tag, props, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (k === 'className') e.className = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(typeof c === 'string' || typeof c === 'number' ? document.createTextNode(String(c)) : c);
  }
  return e;
}

function clear(node, ...children) { node.replaceChildren(...children.filter((c) => c)); }

async function api(path, body) {
  const opts = body === undefined ? {} : {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', 'X-Acemq-Csrf': csrf },
    body: JSON.stringify(body),
  };
  const res = await fetch(path, opts);
  if (!res.ok) {
    let msg = res.status + ' ' + res.statusText;
    try { msg = (await res.json()).error || msg; } catch (_) { /* not JSON */ }
    throw new Error(msg);
  }
  return res;
}

function when(t) { return t ? new Date(t).toISOString().replace('.000Z', 'Z') : ''; }

function setStatus(text, bad) {
  const s = $('status');
  s.textContent = text;
  s.className = bad ? 'err' : '';
}

// Overview, refreshed every 5 seconds.
async function loadOverview() {
  try {
    const o = await (await api('api/overview')).json();
    $('refreshed').textContent = 'as of ' + when(o.time);
    $('connection').hidden = !o.connection;
    $('connection').textContent = o.connection ? 'broker: ' + o.connection : '';
    const parts = [];
    if (o.families.length === 0) parts.push(el('p', {}, 'No queues: name them (acemq console QUEUE..., or console.Queues) or run consumers on this Conn.'));
    for (const f of o.families) parts.push(family(f));
    parts.push(el('p', {}, o.note));
    clear($('overview'), ...parts);
    clear($('delayed'), ...delayedView(o.delayed));
  } catch (e) {
    setStatus('overview: ' + e.message, true);
  }
}

function family(f) {
  const rows = [el('tr', {}, el('th', {}, 'queue'), el('th', {}, 'role'), el('th', {}, 'ready'),
    el('th', {}, 'unacked'), el('th', {}, 'consumers'), el('th', {}, 'active'), el('th', {}, ''))];
  for (const m of f.members) {
    const dead = m.role === 'dead letters' || m.role === 'parked';
    const open = dead && !m.absent
      ? el('button', { className: 'open-dead', 'data-queue': m.name, onclick: () => loadDead(m.name) }, 'open')
      : null;
    rows.push(el('tr', { className: m.absent ? 'absent' : (dead && m.ready > 0 ? 'alert' : '') },
      el('td', {}, m.name), el('td', {}, m.role),
      el('td', { className: 'n' }, m.absent ? 'absent' : m.ready),
      el('td', { className: 'n' }, m.unacked < 0 ? '' : m.unacked),
      el('td', { className: 'n' }, m.absent ? '' : m.consumers),
      el('td', {}, m.active || ''), el('td', {}, open)));
  }
  const head = [el('h3', {}, f.queue + (f.ordered ? ' (ordered, ' + f.instances + ' instances)' : ''))];
  if (f.error) head.push(el('p', { className: 'err' }, f.error));
  if (f.ordered) {
    head.push(el('button', { className: 'open-keys', 'data-queue': f.queue, onclick: () => loadKeys(f.queue) },
      'blocked keys (' + (f.blocked || 0) + ')'));
  }
  return el('div', { className: 'family', 'data-queue': f.queue }, ...head, el('table', {}, ...rows));
}

// delayedView shows what waits in the delay topology (acemq.After, At).
function delayedView(d) {
  if (d.error) return [el('p', { className: 'err' }, d.error)];
  if (d.absent) return [el('p', { id: 'delayed-absent' }, 'No delay topology: no delayed message was ever sent on this vhost.')];
  const out = [];
  if (d.unroutable > 0) {
    const one = d.unroutable === 1;
    out.push(el('p', { id: 'delayed-unroutable', className: 'warn' }, d.unroutable + ' delayed message' + (one ? '' : 's')
      + ' found no queue at the due time and ' + (one ? 'waits' : 'wait') + ' in ' + d.unroutableQueue
      + ' (acemq peek ' + d.unroutableQueue + ').'));
  }
  out.push(el('p', { id: 'delayed-summary' }, el('span', { id: 'delayed-waiting' }, d.waiting), ' waiting'
    + (d.soonestWithin ? ', the soonest due within ' + d.soonestWithin + ' (by ' + when(d.soonestBy) + ' at the latest)' : '') + '.'));
  const rows = [el('tr', {}, el('th', {}, 'queue'), el('th', {}, 'role'), el('th', {}, 'ready'), el('th', {}, 'consumers'))];
  for (const l of d.levels) {
    rows.push(el('tr', { className: 'delay-level' }, el('td', {}, l.queue), el('td', {}, 'waits ' + l.waits),
      el('td', { className: 'n' }, l.messages), el('td', {}, '')));
  }
  rows.push(el('tr', {}, el('td', {}, d.dueQueue), el('td', {}, 'due, not yet forwarded'),
    el('td', { className: 'n' }, d.due), el('td', { className: 'n' }, d.forwarders)));
  rows.push(el('tr', { id: 'delay-unroutable', className: d.unroutable > 0 ? 'alert' : '' }, el('td', {}, d.unroutableQueue),
    el('td', {}, 'unroutable at the due time'), el('td', { className: 'n' }, d.unroutable), el('td', {}, '')));
  out.push(el('table', {}, ...rows));
  return out;
}

// Dead letters, grouped by type and reason.
let deadQueue = '';

async function loadDead(queue) {
  deadQueue = queue;
  $('dead-section').hidden = false;
  $('dead-queue').textContent = queue;
  clear($('groups'), el('p', {}, 'reading ' + queue + ' (nothing is acked) ...'));
  try {
    const g = await (await api('api/deadletters?queue=' + encodeURIComponent(queue))).json();
    $('dead-took').textContent = g.read + ' read in ' + g.took + (g.capped ? ' (capped: more wait behind)' : '');
    $('dead-changed').hidden = !g.changed;
    $('dead-changed').textContent = g.changed
      ? 'The broker\'s count changed during the read: ' + g.before + ' before, ' + g.after + ' after, ' + g.read + ' read.' : '';
    const actions = [];
    if (canWrite) {
      actions.push(el('button', { id: 'replay-selected', onclick: replaySelected }, 'replay selected'));
      actions.push(el('label', {}, ' rate/s ', el('input', { id: 'rate', type: 'number', min: '0', value: '0', size: '5' })));
    }
    clear($('dead-actions'), ...actions);
    clear($('groups'), ...g.groups.map(groupView));
  } catch (e) {
    clear($('groups'), el('p', { className: 'err' }, e.message));
  }
}

function groupView(g) {
  const list = el('ul', {});
  for (const m of g.messages) {
    list.append(el('li', {},
      canWrite ? el('input', { type: 'checkbox', className: 'pick', value: m.id }) : null,
      el('a', { href: '#', className: 'message-link', 'data-id': m.id,
        onclick: (ev) => { ev.preventDefault(); openMessage(deadQueue, m.id); } }, m.id),
      ' attempt ' + m.attempt + (m.key ? ', key ' + m.key : '')));
  }
  const more = g.count > g.messages.length ? el('p', {}, (g.count - g.messages.length) + ' more not listed') : null;
  const replay = canWrite
    ? el('button', { className: 'replay-group', onclick: () => runReplay({ queue: deadQueue, group: true, type: g.type, reason: g.reason }) },
      'replay all ' + g.count)
    : null;
  return el('div', { className: 'group', 'data-type': g.type, 'data-count': g.count },
    el('h3', {}, g.type || '(no type)', ' \u2014 ', el('span', { className: 'count' }, g.count), ' messages'),
    el('p', {}, 'reason: ', el('q', {}, g.reason || '(none)')),
    el('p', {}, 'first seen ' + when(g.firstSeen) + ', last seen ' + when(g.lastSeen)),
    replay, list, more);
}

function replaySelected() {
  const ids = [...document.querySelectorAll('input.pick:checked')].map((c) => c.value);
  if (ids.length === 0) { setStatus('select messages first', true); return; }
  runReplay({ queue: deadQueue, ids });
}

// runReplay streams the replay's progress lines.
async function runReplay(req) {
  req.rate = Number(($('rate') || {}).value || 0);
  const out = $('progress');
  out.textContent = 'replaying ...';
  try {
    const res = await api('api/replay', req);
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    let buf = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let i;
      while ((i = buf.indexOf('\n')) >= 0) {
        const p = JSON.parse(buf.slice(0, i));
        buf = buf.slice(i + 1);
        out.textContent = (p.done ? 'replay done: ' : 'replaying: ') + p.moved + ' moved, ' + p.skipped + ' left, ' + p.failed + ' failed'
          + (p.error ? ' \u2014 ' + p.error : '');
        out.className = p.error ? 'err' : 'done';
      }
    }
  } catch (e) {
    out.textContent = 'replay: ' + e.message;
    out.className = 'err';
  }
  loadDead(deadQueue);
  loadOverview();
}

// One message whole.
async function openMessage(queue, id) {
  $('message-section').hidden = false;
  $('message-result').textContent = '';
  try {
    const m = await (await api('api/message?queue=' + encodeURIComponent(queue) + '&id=' + encodeURIComponent(id))).json();
    $('message-id').textContent = m.id;
    const fields = [['type', m.type + ' (version ' + m.version + ')'], ['attempt', m.attempt], ['first seen', when(m.firstSeen)],
      ['origin', m.origin], ['error', m.error], ['trace ID', m.traceId], ['correlation', m.correlationId],
      ['causation', m.causationId], ['reply to', m.replyTo], ['key', m.key],
      ['content', (m.contentType || 'no content type') + ', ' + m.size + ' bytes'], ['unreadable', m.unreadable],
      ['sealed', m.sealed ? 'key ' + m.sealed + (m.opened ? ', opened with the console\'s keyset' : ', not opened') : undefined]];
    clear($('envelope'), ...fields.filter((f) => f[1] !== '' && f[1] !== undefined)
      .map(([k, v]) => el('tr', {}, el('th', {}, k), el('td', {}, v))));
    clear($('headers'), ...Object.keys(m.headers).sort().map((k) => el('tr', {}, el('th', {}, k), el('td', {}, m.headers[k]))));
    $('blob').textContent = m.blob ? 'large payload: object ' + m.blob.id + ', ' + m.blob.size + ' bytes, expires ' + (m.blob.expires ? when(m.blob.expires) : 'never') : '';
    $('body').textContent = m.body;
    $('editor').hidden = !canWrite || (m.sealed !== undefined && m.sealed !== '');
    $('check').textContent = 'The edited body is ' + m.check + '.';
    $('edit-body').value = m.body;
    $('edit-replay').onclick = () => editReplay(queue, m.id);
    $('discard').onclick = () => discard(queue, m.id);
  } catch (e) {
    clear($('envelope'), el('tr', {}, el('td', { className: 'err' }, e.message)));
  }
}

async function editReplay(queue, id) {
  const r = $('message-result');
  try {
    const res = await (await api('api/edit', { queue, id, body: $('edit-body').value })).json();
    r.textContent = 'replayed ' + res.replayed + ' to ' + res.to + ' (changed: ' + (res.changed.join(', ') || 'nothing') + ')';
    r.className = 'done';
    loadDead(queue);
  } catch (e) {
    r.textContent = e.message;
    r.className = 'err';
  }
}

async function discard(queue, id) {
  const r = $('message-result');
  try {
    await api('api/discard', { queue, id, reason: $('discard-reason').value });
    r.textContent = 'discarded ' + id;
    r.className = 'done';
    loadDead(queue);
  } catch (e) {
    r.textContent = e.message;
    r.className = 'err';
  }
}

// Blocked keys of an ordered queue.
async function loadKeys(queue) {
  $('keys-section').hidden = false;
  $('keys-queue').textContent = queue;
  try {
    const keys = await (await api('api/keys?queue=' + encodeURIComponent(queue))).json();
    const rows = [el('tr', {}, el('th', {}, 'key'), el('th', {}, 'held'), el('th', {}, 'since'), el('th', {}, 'message'), el('th', {}, 'reason'), el('th', {}, ''))];
    for (const k of keys) {
      const act = canWrite ? el('span', {},
        el('button', { className: 'release-rerun', 'data-key': k.Key, onclick: () => release(queue, k.Key, 'rerun') }, 're-run'),
        el('button', { className: 'release-skip', 'data-key': k.Key, onclick: () => release(queue, k.Key, 'skip') }, 'skip')) : null;
      rows.push(el('tr', { className: 'blocked-key' }, el('td', {}, k.Key), el('td', { className: 'n' }, k.Held), el('td', {}, when(k.Since)),
        el('td', {}, k.MessageID), el('td', {}, k.Reason), el('td', {}, act)));
    }
    clear($('keys'), keys.length ? el('table', {}, ...rows) : el('p', { id: 'no-keys' }, 'no blocked keys'));
  } catch (e) {
    clear($('keys'), el('p', { className: 'err' }, e.message));
  }
}

async function release(queue, key, mode) {
  const r = $('keys-result');
  try {
    await api('api/release', { queue, key, mode });
    r.textContent = 'released ' + key + ' (' + mode + ')';
    r.className = 'done';
  } catch (e) {
    r.textContent = e.message;
    r.className = 'err';
  }
  loadKeys(queue);
  loadOverview();
}

// The outbox's dead rows, when the console was given an outbox.
async function loadOutbox() {
  try {
    const o = await (await api('api/outbox')).json();
    $('outbox-section').hidden = !o.configured;
    if (!o.configured) return;
    // Keep what the operator selected across the refresh.
    const picked = new Set([...document.querySelectorAll('input.outbox-pick:checked')].map((c) => c.value));
    $('outbox-table').textContent = o.table + ': ' + o.dead + ' dead';
    const rows = [el('tr', {}, canWrite ? el('th', {}, '') : null, el('th', {}, 'row'), el('th', {}, 'message'), el('th', {}, 'to'),
      el('th', {}, 'attempts'), el('th', {}, 'died'), el('th', {}, 'last error'), canWrite ? el('th', {}, '') : null)];
    for (const r of o.rows) {
      const id = String(r.ID);
      let pick = null;
      if (canWrite) {
        pick = el('input', { type: 'checkbox', className: 'outbox-pick', value: id });
        pick.checked = picked.has(id);
      }
      const replay = canWrite
        ? el('button', { className: 'outbox-replay', 'data-id': id, onclick: () => outboxReplay({ ids: [r.ID] }) }, 'replay') : null;
      rows.push(el('tr', { className: 'outbox-row', 'data-id': id }, canWrite ? el('td', {}, pick) : null, el('td', {}, id),
        el('td', {}, r.MessageID), el('td', {}, (r.Exchange || '(default)') + ' / ' + r.RoutingKey),
        el('td', { className: 'n' }, r.Attempts), el('td', {}, when(r.Died)), el('td', {}, r.LastError),
        canWrite ? el('td', {}, replay) : null));
    }
    const actions = canWrite && o.dead > 0 ? el('p', {},
      el('button', { id: 'outbox-replay-selected', onclick: outboxReplaySelected }, 'replay selected'),
      el('button', { id: 'outbox-replay-all', onclick: () => outboxReplay({ all: true }) }, 'replay all ' + o.dead)) : null;
    const more = o.dead > o.rows.length ? el('p', {}, (o.dead - o.rows.length) + ' more not listed') : null;
    clear($('outbox'), o.rows.length ? el('table', {}, ...rows) : el('p', {}, 'no dead rows'), more, actions);
  } catch (e) {
    clear($('outbox'), el('p', { className: 'err' }, e.message));
  }
}

function outboxReplaySelected() {
  const ids = [...document.querySelectorAll('input.outbox-pick:checked')].map((c) => Number(c.value));
  if (ids.length === 0) { setStatus('select outbox rows first', true); return; }
  outboxReplay({ ids });
}

// outboxReplay puts the rows named by req (ids, or all) back for the relay.
async function outboxReplay(req) {
  const r = $('outbox-result');
  try {
    const res = await (await api('api/outbox/replay', req)).json();
    r.textContent = res.revived + (req.ids ? ' of ' + req.ids.length : '') + ' rows put back for the relay'
      + (req.ids && req.ids.length <= 10 ? ' (' + req.ids.join(', ') + ')' : '');
    r.className = 'done';
  } catch (e) {
    r.textContent = e.message;
    r.className = 'err';
  }
  loadOutbox();
}

function refresh() {
  loadOverview();
  loadOutbox();
}

refresh();
setInterval(refresh, 5000);
