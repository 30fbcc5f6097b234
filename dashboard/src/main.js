// tally's dashboard: live values and rates of watched counters, the hottest counters,
// top-K of a family, the sources and the definitions. Plain modules, no framework: the
// page is a handful of panels refreshed from tallyd's JSON API, which a few DOM helpers
// (dom.js) handle without one.

import './style.css';
import { AuthRequired, HttpError, getJson, routePath, setToken, splitKey } from './api.js';
import { formatInt } from './dom.js';
import { LiveValues } from './live.js';
import {
  renderDefinitions, renderHot, renderSources, renderTop, renderTopMessage,
} from './panels.js';
import { Watched } from './watch.js';

const REFRESH_MS = 2000;

const $ = (id) => document.getElementById(id);

const state = {
  status: null,
  definitions: null,
  counters: new Set(),  // names of derived counters
};

// --- the password -----------------------------------------------------------------------

let login = null;  // the pending prompt's promise, so that it is asked once

// Shows the password dialog until tallyd accepts a password; resolves then.
function askPassword() {
  if (login) return login;
  const dialog = $('login');
  const input = $('login-password');
  const error = $('login-error');
  login = new Promise((resolve) => {
    error.hidden = true;
    $('login-form').onsubmit = async (event) => {
      event.preventDefault();
      setToken(input.value);
      try {
        await getJson('/v1/status');
      } catch (e) {
        if (e instanceof AuthRequired) {
          error.hidden = false;
          input.select();
          return;
        }
      }
      dialog.close();
      login = null;
      resolve();
    };
    // Escape would close the dialog with nothing to show behind it: the data needs the password.
    dialog.oncancel = (event) => event.preventDefault();
    dialog.showModal();
    input.focus();
  });
  login.then(() => {
    live.restart();
    refreshAll();
  });
  return login;
}

// Runs a poll; a 401 brings up the password prompt instead of an error.
async function guarded(poll) {
  try {
    await poll();
  } catch (error) {
    if (error instanceof AuthRequired) {
      askPassword();
      return;
    }
    if (!(error instanceof HttpError)) setReachable(false);
    console.warn(error);
  }
}

// --- header pills -----------------------------------------------------------------------

const LIVE_LABELS = {
  idle: 'live: no keys',
  connecting: 'live: connecting',
  live: 'live',
  reconnecting: 'live: reconnecting',
  polling: 'polling',
  auth: 'live: password needed',
};

function setLive(stateName) {
  const pill = $('pill-live');
  pill.dataset.state = stateName;
  pill.textContent = LIVE_LABELS[stateName] ?? stateName;
  if (stateName === 'auth') askPassword();
}

function setReachable(reachable) {
  $('pill-server').dataset.state = reachable ? 'ok' : 'bad';
  $('pill-server').textContent = reachable ? 'tallyd reachable' : 'tallyd unreachable';
}

// --- watched counters -------------------------------------------------------------------

// The GET /v1/value path of a derived counter's key, null for a plain key.
function valuePath(key) {
  const [counter, ...parts] = splitKey(key);
  if (!state.counters.has(counter) || parts.length === 0) return null;
  return routePath('/v1/value/', [counter, ...parts]);
}

const watched = new Watched({
  cards: $('cards'),
  empty: $('cards-empty'),
  onChange: (keys) => live.watch(keys),
});

const live = new LiveValues({
  onValue: (key, value) => watched.set(key, value),
  onState: setLive,
  valuePath,
});

$('watch-form').addEventListener('submit', (event) => {
  event.preventDefault();
  const input = $('watch-key');
  const key = input.value.trim();
  if (key) watched.add(key);
  input.value = '';
});

setInterval(() => watched.tick(Date.now() / 1000), 1000);

// --- polled panels ----------------------------------------------------------------------

async function refreshStatus() {
  state.status = await getJson('/v1/status');
  setReachable(true);
  $('pill-durability').textContent = `durability: ${state.status.durability}`;
  $('pill-counters').textContent = `${formatInt(state.status.counters)} derived counters`;
  renderSources($('sources'), state.status, state.definitions);
}

async function refreshHot() {
  let hot = null;
  try {
    hot = await getJson('/v1/hot');
  } catch (error) {
    if (!(error instanceof HttpError && error.status === 404)) throw error;
  }
  renderHot($('hot'), $('hot-window'), hot, (key) => watched.add(key));
}

async function refreshDefinitions() {
  const definitions = await getJson('/v1/definitions');
  if (JSON.stringify(definitions) === JSON.stringify(state.definitions)) return;
  state.definitions = definitions;
  state.counters = new Set(state.definitions.counters.map((c) => c.name));
  renderDefinitions($('definitions'), state.definitions, pickTopCounter);
  renderSources($('sources'), state.status, state.definitions);
  const select = $('top-counter');
  const chosen = select.value;
  select.replaceChildren(
    ...state.definitions.counters.map((c) => new Option(c.name, c.name, false, c.name === chosen)),
  );
  select.disabled = state.definitions.counters.length === 0;
}

async function refreshTop() {
  const counter = $('top-counter').value;
  if (!counter) {
    renderTopMessage($('top'), 'Define a counter to see its largest groups.');
    return;
  }
  const prefix = $('top-prefix').value.trim();
  const parts = prefix ? splitKey(prefix) : [];
  const k = Math.min(Math.max(Number($('top-k').value) || 10, 1), 100);
  try {
    renderTop($('top'), await getJson(`${routePath('/v1/top/', [counter, ...parts])}?k=${k}`),
      (key) => watched.add(key));
  } catch (error) {
    if (!(error instanceof HttpError)) throw error;
    renderTopMessage($('top'), error.message);
  }
}

function pickTopCounter(name) {
  $('top-counter').value = name;
  $('top-prefix').value = '';
  guarded(refreshTop);
}

for (const id of ['top-counter', 'top-prefix', 'top-k']) {
  $(id).addEventListener('change', () => guarded(refreshTop));
}
$('top-form').addEventListener('submit', (event) => {
  event.preventDefault();
  guarded(refreshTop);
});

async function refreshAll() {
  await guarded(refreshDefinitions);
  await Promise.all([guarded(refreshStatus), guarded(refreshHot), guarded(refreshTop)]);
}

// --- start ------------------------------------------------------------------------------

for (const key of Watched.stored()) watched.add(key, { notify: false });
live.watch(watched.keys());
refreshAll();
setInterval(() => {
  if (login || document.hidden) return;
  guarded(refreshStatus);
  guarded(refreshHot);
  guarded(refreshTop);
  guarded(refreshDefinitions);
}, REFRESH_MS);

// For tests and the console: what the page shows.
window.tallyDashboard = {
  watched: () => watched.snapshot(),
  watch: (key) => watched.add(key),
};
