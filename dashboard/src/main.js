// tally's dashboard: live values and rates of watched counters (the user's, or the hottest
// counters until the user chooses), the hottest counters, top-K of a family, the sources
// and the definitions. Plain modules, no framework: the
// page is a handful of panels refreshed from tallyd's JSON API, which a few DOM helpers
// (dom.js) handle without one.

import './style.css';
import { AuthRequired, HttpError, getJson, routePath, setToken, splitKey } from './api.js';
import { AUTOMATIC_COUNT, pickAutomatic } from './choice.js';
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
  counters: new Map(),  // derived counter name -> how many key columns it has
  hot: null,            // the latest GET /v1/hot answer (null: none, or no such route)
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
      // A named user signs in as "Bearer user:password", the default user with the password.
      const user = $('login-user').value.trim();
      setToken(user ? `${user}:${input.value}` : input.value);
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

// The GET /v1/value path of a derived counter's key, null for a plain key. A counter without
// key columns has one group, keyed by its name alone.
function valuePath(key) {
  const [counter, ...parts] = splitKey(key);
  if (state.counters.get(counter) !== parts.length) return null;
  return routePath('/v1/value/', [counter, ...parts]);
}

// Says whose choice the watched counters are: "automatic: …" with what it follows, or the
// user's, with the way back to automatic.
function showMode(text) {
  $('watch-mode').textContent = watched.automatic ? `automatic: ${text}` : 'your choice';
  $('watch-auto').hidden = watched.automatic;
}

const watched = new Watched({
  cards: $('cards'),
  empty: $('cards-empty'),
  onChange: (keys) => live.watch(keys),
  onMode: () => {
    showMode('…');
    guarded(chooseAutomatically);
  },
});

const live = new LiveValues({
  onValue: (key, value) => watched.set(key, value),
  onState: setLive,
  valuePath,
});

$('watch-auto').addEventListener('click', () => watched.chooseAutomatically());

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
  state.hot = hot;
  renderHot($('hot'), $('hot-window'), hot, (key) => watched.add(key));
  await chooseAutomatically();
}

// Until the user chooses, watches the hottest counters (choice.js).
async function chooseAutomatically() {
  if (!watched.automatic) return;
  const { ranked, label } = await automaticRanking();
  watched.follow(pickAutomatic(watched.keys(), ranked));
  if (watched.automatic) showMode(label);
}

// What the automatic choice picks from, best first, and how the page names it: the hottest
// counters; when nothing was written in the last minute (or this tallyd does not report
// it), the largest groups of the first derived counter that has any.
async function automaticRanking() {
  if (state.hot?.counters.length) {
    return {
      ranked: state.hot.counters.map((c) => ({ key: c.key, figure: c.writes_per_second })),
      label: 'the hottest counters',
    };
  }
  const counter = state.definitions?.counters.find((c) => c.groups > 0);
  if (!counter) {
    return { ranked: [], label: 'nothing written in the last minute, no derived counter has groups' };
  }
  const top = await getJson(`${routePath('/v1/top/', [counter.name])}?k=${AUTOMATIC_COUNT}`);
  return {
    ranked: top.items.map((item) => ({ key: item.key, figure: item.value })),
    label: `the largest groups of ${counter.name}`,
  };
}

async function refreshDefinitions() {
  const definitions = await getJson('/v1/definitions');
  if (JSON.stringify(definitions) === JSON.stringify(state.definitions)) return;
  state.definitions = definitions;
  state.counters = new Map(definitions.counters.map((c) => [c.name, c.key_columns.length]));
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

showMode('…');
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
  automatic: () => watched.automatic,
};
