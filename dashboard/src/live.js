// LiveValues: the latest value of each watched key, pushed by tallyd over Server-Sent
// Events (GET /v1/events?key=…: the current value first, then each new durable value,
// coalesced by the server). An EventSource serves one fixed set of keys, so a change of
// the set opens a new stream.
//
// Without the stream (a tallyd that has no /v1/events), the keys of derived counters are
// polled through GET /v1/value instead; plain keys then have no value to show.

import { AuthRequired, HttpError, eventsUrl, getJson } from './api.js';

const POLL_MS = 1000;
const RETRY_MS = 5000;

export class LiveValues {
  // onValue(key, value) for each value; onState(state) with 'idle', 'connecting', 'live',
  // 'reconnecting', 'polling' or 'auth'. valuePath(key) gives the GET /v1/value path of a
  // derived counter's key, or null for a plain key.
  constructor({ onValue, onState, valuePath }) {
    this.onValue = onValue;
    this.onState = onState;
    this.valuePath = valuePath;
    this.keys = [];
    this.source = null;
    this.pollTimer = null;
    this.retryTimer = null;
    this.mode = 'stream';  // 'polling' once the server showed it has no stream
    this.generation = 0;   // bumped by stop(): late answers of an older round are dropped
  }

  // Follows exactly these keys from now on.
  watch(keys) {
    this.keys = [...keys];
    this.restart();
  }

  // Opens the stream again (after a password was entered, say).
  restart() {
    this.stop();
    if (this.keys.length === 0) {
      this.onState('idle');
    } else if (this.mode === 'polling') {
      this.poll();
    } else {
      this.open();
    }
  }

  stop() {
    this.generation++;
    if (this.source) this.source.close();
    this.source = null;
    clearTimeout(this.pollTimer);
    clearTimeout(this.retryTimer);
  }

  open() {
    const url = eventsUrl(this.keys);
    const source = new EventSource(url);
    this.source = source;
    this.onState('connecting');
    source.onopen = () => this.onState('live');
    source.onmessage = (event) => {
      let message;
      try {
        message = JSON.parse(event.data);
      } catch {
        return;
      }
      if (message && typeof message.key === 'string' && typeof message.value === 'number') {
        this.onValue(message.key, message.value);
      }
    };
    // The server dropped this subscriber (it fell too far behind); the browser reconnects.
    source.addEventListener('disconnect', (event) => {
      console.warn(`tallyd ended the live stream: ${event.data}`);
      this.onState('reconnecting');
    });
    source.onerror = () => {
      if (source !== this.source) return;
      // CONNECTING: the browser reconnects by itself. CLOSED: the server refused the
      // stream (not 200 text/event-stream); ask it why.
      if (source.readyState === EventSource.CONNECTING) {
        this.onState('reconnecting');
        return;
      }
      this.source = null;
      this.diagnose(url);
    };
  }

  async diagnose(url) {
    const generation = this.generation;
    const abort = new AbortController();
    let status = 0;
    try {
      const response = await fetch(url, { signal: abort.signal, cache: 'no-store' });
      status = response.status;
    } catch {
      // Unreachable: retried below.
    } finally {
      abort.abort();
    }
    if (generation !== this.generation) return;
    if (status === 401) {
      this.onState('auth');
    } else if (status === 404) {
      this.mode = 'polling';
      this.restart();
    } else {
      this.onState('reconnecting');
      this.retryTimer = setTimeout(() => this.restart(), RETRY_MS);
    }
  }

  async poll() {
    const generation = this.generation;
    this.onState('polling');
    for (const key of this.keys) {
      const path = this.valuePath(key);
      if (!path) continue;
      try {
        const { value } = await getJson(path);
        if (generation !== this.generation) return;
        this.onValue(key, value);
      } catch (error) {
        if (error instanceof AuthRequired) {
          this.onState('auth');
          return;
        }
        if (!(error instanceof HttpError)) break;  // unreachable: try again next round
      }
    }
    if (generation !== this.generation) return;
    this.pollTimer = setTimeout(() => this.poll(), POLL_MS);
  }
}
