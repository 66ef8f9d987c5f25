// The worker's /debug page: the sessions (GET /sessions) and, for one, its timeline
// (GET /sessions/{id}/events, followed with a bounded wait): its calls as bars on a time axis
// coloured by outcome, its modes as bands, the ids and the trace id of a call on hover or focus,
// every event in a table. No framework; every text reaches the page through textContent, every
// attribute through setAttribute: nothing the worker answers is ever parsed as HTML. The
// operators' credential stays in this tab (sessionStorage) and goes only to this worker.
'use strict';

const STORE = 'voice-relay-operator';
const WAIT_MS = 25000;
const MAX_EVENTS = 10000;
const traceLink = document.body.dataset.traceLink || '';
let credential = sessionStorage.getItem(STORE) || '';
let watching = null;

const byId = (id) => document.getElementById(id);

/** Places a node on the time axis (through the CSSOM: the page's policy allows no style attribute). */
function place(node, left, width) {
  node.style.left = left;
  if (width !== undefined) node.style.width = width;
  return node;
}

/** An element with attributes and children (strings become text nodes). */
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value !== undefined && value !== null) node.setAttribute(name, String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(typeof child === 'string' ? document.createTextNode(child) : child);
  }
  return node;
}

function text(tag, value, attrs = {}) {
  const node = el(tag, attrs);
  node.textContent = value === undefined || value === null ? '' : String(value);
  return node;
}

function say(message) {
  byId('status').textContent = message;
}

async function api(path, signal) {
  const res = await fetch(path, { headers: { authorization: `Bearer ${credential}` }, signal, cache: 'no-store' });
  if (res.status === 401) {
    sessionStorage.removeItem(STORE);
    throw new Error('the credential was refused');
  }
  const body = await res.json();
  if (!res.ok) throw new Error(body?.error?.message || `the worker answered ${res.status}`);
  return body;
}

const time = (ms) => new Date(ms).toISOString().slice(11, 23);
const duration = (ms) => (ms === undefined || ms === null ? '—' : `${Number(ms).toFixed(1)} ms`);

async function showSessions() {
  let listing;
  try {
    listing = await api('/sessions');
  } catch (err) {
    say(`Could not read the sessions: ${err.message}.`);
    byId('sessions-section').hidden = true;
    return;
  }
  const body = byId('sessions').tBodies[0];
  body.replaceChildren();
  const rows = [
    ...listing.sessions.map((s) => ({ ...s, state: 'open' })),
    ...listing.closed.map((s) => ({ ...s, mode: '—', state: 'closed' })),
  ];
  for (const s of rows) {
    const open = text('button', 'Show', { type: 'button', 'aria-label': `Show the timeline of session ${s.id}` });
    open.addEventListener('click', () => watch(s.id));
    body.append(el('tr', {},
      el('td', {}, text('code', s.id)),
      el('td', {}, text('code', s.key)),
      text('td', s.source),
      text('td', s.room || '—'),
      text('td', s.mode),
      text('td', s.state),
      el('td', {}, open)));
  }
  if (rows.length === 0) body.append(el('tr', {}, text('td', 'No session yet.', { colspan: 7 })));
  byId('sessions-section').hidden = false;
  say(`${listing.sessions.length} open, ${listing.closed.length} closed.`);
}

/** The calls of a timeline: started, and settled when they are. */
function calls(events) {
  const byCall = new Map();
  for (const e of events) {
    if (e.type === 'tool_started') byCall.set(e.call, { call: e.call, tool: e.tool, mode: e.mode, start: e.atMs });
    if (e.type === 'tool_settled') {
      const c = byCall.get(e.call) ?? { call: e.call, tool: e.tool, start: e.atMs - e.tookMs };
      byCall.set(e.call, { ...c, settled: e, end: e.atMs });
    }
  }
  return [...byCall.values()].sort((a, b) => a.call - b.call);
}

/** The modes as intervals. */
function modes(events, end) {
  const bands = [];
  for (const e of events) {
    const mode = e.type === 'opened' ? e.mode : e.type === 'mode_changed' ? e.to : null;
    if (mode === null) continue;
    if (bands.length) bands[bands.length - 1].end = e.atMs;
    bands.push({ mode, start: e.atMs, end });
  }
  return bands;
}

function detail(call) {
  const s = call.settled;
  const rows = [
    ['Call', `#${call.call} ${call.tool}`],
    ['Mode', call.mode ?? '—'],
    ['Outcome', s ? `${s.outcome} (${s.category.replace('_', ' ')})` : 'running'],
    ['Took', s ? duration(s.tookMs) : '—'],
    ['Relay / delivery / tab', s ? `${duration(s.relayMs)} / ${duration(s.deliveryMs)} / ${duration(s.tabMs)}` : '—'],
    ['Call id', s?.callId ?? '—'],
  ];
  const list = el('dl');
  for (const [name, value] of rows) list.append(text('dt', name), el('dd', {}, text('code', value)));
  list.append(text('dt', 'Trace id'));
  const trace = s?.traceId;
  if (trace && traceLink) {
    const link = text('a', trace, { href: traceLink.replace('{traceId}', encodeURIComponent(trace)), rel: 'noreferrer', target: '_blank' });
    list.append(el('dd', {}, link));
  } else {
    list.append(el('dd', {}, text('code', trace ?? '—')));
  }
  byId('details').replaceChildren(list);
}

function draw(page) {
  const events = page.events;
  const first = events.length ? events[0].atMs : page.openedMs;
  const last = page.closedMs ?? Date.now();
  const span = Math.max(1, last - first);
  const x = (ms) => `${Math.min(100, Math.max(0, ((ms - first) / span) * 100))}%`;
  const w = (a, b) => `${Math.max(0, ((b - a) / span) * 100)}%`;
  const chart = byId('chart');
  chart.replaceChildren();
  const bands = el('div', { class: 'bands', 'aria-hidden': 'true' });
  modes(events, last).forEach((band, i) => {
    const node = el('div', { class: `band m${i % 4}` }, text('span', band.mode, { class: 'band-label' }));
    bands.append(place(node, x(band.start), w(band.start, band.end)));
  });
  chart.append(bands);
  const all = calls(events).slice(-100);
  for (const call of all) {
    const end = call.end ?? Date.now();
    const kind = call.settled ? call.settled.category : 'running';
    const outcome = call.settled ? call.settled.outcome : 'running';
    const bar = place(el('button', {
      type: 'button',
      class: `bar ${kind}`,
      'aria-label': `call ${call.call}, ${call.tool}: ${outcome}`,
    }), x(call.start), w(call.start, end));
    bar.addEventListener('mouseenter', () => detail(call));
    bar.addEventListener('focus', () => detail(call));
    bar.addEventListener('click', () => detail(call));
    chart.append(el('div', { class: 'row' }, text('span', `#${call.call} ${call.tool}`, { class: 'row-label' }), el('div', { class: 'track' }, bar)));
  }
  const axis = el('div', { class: 'axis', 'aria-hidden': 'true' });
  for (let i = 0; i <= 4; i++) {
    const at = first + (span * i) / 4;
    const edge = i === 0 ? ' first' : i === 4 ? ' last' : '';
    axis.append(place(text('span', time(at), { class: `tick${edge}` }), `${(i / 4) * 100}%`));
  }
  chart.append(axis);

  const body = byId('events').tBodies[0];
  body.replaceChildren();
  for (const e of events) {
    const { seq, atMs, type, ...rest } = e;
    const details = Object.entries(rest).map(([k, v]) => `${k}: ${typeof v === 'object' ? JSON.stringify(v) : v}`).join(', ');
    body.append(el('tr', {}, text('td', seq), text('td', time(atMs)), text('td', type.replace('_', ' ')), text('td', details)));
  }
  const state = page.closedMs ? `closed at ${time(page.closedMs)}` : 'open';
  const dropped = page.dropped ? `, ${page.dropped} older events forgotten` : '';
  byId('timeline-summary').textContent =
    `Session ${page.id}, key ${page.key}, ${page.source}${page.room ? ` in ${page.room}` : ''}: ${state}; ${all.length} calls, ${events.length} events${dropped}.`;
  byId('timeline-section').hidden = false;
}

/** Shows one session's timeline and follows it while it is the one shown. */
async function watch(id) {
  watching?.abort();
  const stop = new AbortController();
  watching = stop;
  let page;
  try {
    page = await api(`/sessions/${encodeURIComponent(id)}/events`, stop.signal);
  } catch (err) {
    if (!stop.signal.aborted) say(`Could not read the timeline: ${err.message}.`);
    return;
  }
  byId('details').replaceChildren(text('p', 'Point at a call (or focus it) for its ids and trace.'));
  draw(page);
  say(`Showing session ${id}.`);
  while (!stop.signal.aborted && !page.closedMs) {
    try {
      const next = await api(`/sessions/${encodeURIComponent(id)}/events?after=${page.last}&waitMs=${WAIT_MS}`, stop.signal);
      if (next.events.length || next.closedMs) {
        // The worker keeps a bounded timeline; the page keeps at most as many events.
        page = { ...next, events: [...page.events, ...next.events].slice(-MAX_EVENTS) };
        draw(page);
      } else {
        page = { ...page, last: next.last };
      }
    } catch (err) {
      if (!stop.signal.aborted) say(`Stopped following the session: ${err.message}.`);
      return;
    }
  }
}

byId('credential-form').addEventListener('submit', (event) => {
  event.preventDefault();
  credential = byId('credential').value.trim();
  sessionStorage.setItem(STORE, credential);
  void showSessions();
});
byId('refresh').addEventListener('click', () => void showSessions());
if (credential) void showSessions();
