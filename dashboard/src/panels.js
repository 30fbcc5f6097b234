// The panels filled from polled JSON: hottest counters, top-K of a family, sources and
// definitions. Each render function replaces its panel's content from one answer.

import { fill, formatBytes, formatInt, formatSeconds, h } from './dom.js';

// A ranked list of {key, figure, label}: a bar per row, proportional to the largest
// figure; clicking a row calls onPick(key).
function ranked(list, rows, onPick) {
  const largest = Math.max(1, ...rows.map((row) => Math.abs(row.figure)));
  fill(
    list,
    rows.map((row) =>
      h(
        'li',
        { dataset: { key: row.key, value: String(row.figure) }, title: `Watch ${row.key}` },
        h('button', { type: 'button', class: 'row', onclick: () => onPick(row.key) },
          h('span', { class: 'bar', style: `width:${(100 * Math.abs(row.figure)) / largest}%` }),
          h('span', { class: 'row-key' }, row.key),
          h('span', { class: 'row-figure' }, row.label)),
      ),
    ),
  );
}

function note(list, text) {
  fill(list, h('li', { class: 'note' }, text));
}

// GET /v1/hot: {"window_seconds": 60, "counters": [{"key", "writes_per_second"}]}, or null
// when this tallyd has no such route.
export function renderHot(list, caption, hot, onPick) {
  if (!hot) {
    note(list, 'This tallyd does not report its hottest counters (no GET /v1/hot).');
    return;
  }
  caption.textContent = `writes/s, last ${hot.window_seconds} s`;
  if (hot.counters.length === 0) {
    note(list, 'No writes in the last minute.');
    return;
  }
  ranked(
    list,
    hot.counters.map((c) => ({
      key: c.key,
      figure: c.writes_per_second,
      label: `${c.writes_per_second.toLocaleString('en-US', { maximumFractionDigits: 1 })}/s`,
    })),
    onPick,
  );
}

// GET /v1/top/{counter}/{prefix…}: {"items": [{"key", "value"}]}.
export function renderTop(list, top, onPick) {
  if (top.items.length === 0) {
    note(list, 'No groups under this prefix yet.');
    return;
  }
  ranked(
    list,
    top.items.map((item) => ({ key: item.key, figure: item.value, label: formatInt(item.value) })),
    onPick,
  );
}

export function renderTopMessage(list, text) {
  note(list, text);
}

function figure(label, value, attrs = {}) {
  return h('div', { class: 'figure', ...attrs }, h('dt', {}, label), h('dd', {}, value));
}

// GET /v1/status's "source" (the --source PostgreSQL stream's figures, or null) and the
// defined sources of GET /v1/definitions.
export function renderSources(element, status, definitions) {
  const tables = (definitions?.sources ?? []).map((s) => s.name);
  const stream = status?.source;
  const parts = [];
  if (stream) {
    const healthy = stream.connected && !stream.error;
    parts.push(
      h('div', { class: 'stream-head' },
        h('span', { class: `state ${healthy ? 'ok' : 'bad'}`, id: 'source-state' }, stream.state),
        h('span', { class: 'stream-name' }, 'PostgreSQL change stream')),
      h('dl', { class: 'figures-grid' },
        figure('lag', formatBytes(stream.lag_bytes), { id: 'source-lag' }),
        figure('lag time', formatSeconds(stream.lag_seconds)),
        figure('applied LSN', stream.applied_lsn),
        figure('transactions', formatInt(stream.transactions)),
        figure('rows', formatInt(stream.rows)),
        figure('reconnects', formatInt(stream.reconnects)),
        stream.backfilling ? figure('backfill', `${stream.backfill_percent}%`) : null),
    );
    if (stream.error) parts.push(h('p', { class: 'error-text' }, stream.error));
  } else if (status) {
    parts.push(
      h('div', { class: 'stream-head' },
        h('span', { class: 'state ok', id: 'source-state' }, 'push'),
        h('span', { class: 'stream-name' }, 'changes pushed over HTTP and Redis')),
    );
  }
  parts.push(
    h('p', { class: 'tables' },
      tables.length
        ? ['Tables: ', ...tables.map((name) => h('code', {}, name))]
        : 'No CREATE SOURCE yet.'),
  );
  fill(element, parts);
}

// GET /v1/definitions: {"sources": [{name, sql}], "counters": [{name, source, sql,
// key_columns, groups}]}. Clicking a counter calls onPick(name).
// A key column reads "user_id int64": its name is enough in a summary.
const keyNames = (counter) => counter.key_columns.map((column) => column.split(' ')[0]).join(', ');

// Details the user opened stay open.
export function renderDefinitions(element, definitions, onPick) {
  const open = new Set(
    [...element.querySelectorAll('details[open]')].map((details) => details.dataset.counter));
  if (definitions.counters.length === 0) {
    fill(element, h('p', { class: 'note' },
      'No derived counters yet: POST CREATE COUNTER statements to /v1/definitions.'));
    return;
  }
  fill(
    element,
    definitions.counters.map((counter) =>
      h(
        'details',
        { class: 'definition', dataset: { counter: counter.name }, open: open.has(counter.name) },
        h('summary', {},
          h('span', { class: 'def-name' }, counter.name),
          h('span', { class: 'def-meta' },
            `${counter.source} · by ${keyNames(counter) || '(no key)'} · `,
            h('span', { class: 'def-groups' }, formatInt(counter.groups)),
            counter.groups === 1 ? ' group' : ' groups'),
          h('button', { type: 'button', class: 'link', onclick: (e) => {
            e.preventDefault();
            onPick(counter.name);
          } }, 'top')),
        h('pre', {}, counter.sql),
      ),
    ),
  );
}
