// The watched counters: one card per key with its live value, its latest rate and a
// rate chart. The keys are the user's choice, kept in localStorage so that the page comes
// back with the same cards, or, until the user chooses, an automatic one (choice.js).

import { rateChart } from './chart.js';
import { loadChoice, saveChoice } from './choice.js';
import { formatInt, formatRate, h } from './dom.js';
import { RateSeries } from './rates.js';

export class Watched {
  // `cards` holds the cards, `empty` is shown when there are none; onChange(keys) is called
  // whenever the set of keys changes, onMode(automatic) whenever the choice changes hands.
  // Starts with the user's stored keys, or automatic (and no cards) when there are none.
  constructor({ cards, empty, onChange, onMode }) {
    this.cards = cards;
    this.empty = empty;
    this.onChange = onChange;
    this.onMode = onMode;
    this.entries = new Map();  // key -> {value, series, chart, elements}
    const stored = loadChoice(localStorage);
    this.automatic = stored === null;
    for (const key of stored ?? []) this.show(key);
    this.empty.hidden = this.entries.size > 0;
  }

  keys() {
    return [...this.entries.keys()];
  }

  // The user watches `key` too: the keys on screen become theirs.
  add(key) {
    if (!key || this.entries.has(key)) return;
    this.show(key);
    this.chosen();
  }

  // The user stops watching `key`: the keys on screen become theirs.
  remove(key) {
    if (!this.entries.has(key)) return;
    this.hide(key);
    this.chosen();
  }

  // The automatic choice: shows exactly `keys` (cards of keys kept stay as they are).
  // Ignored once the user has chosen.
  follow(keys) {
    if (!this.automatic) return;
    const wanted = new Set(keys);
    const before = this.keys();
    for (const key of before) if (!wanted.has(key)) this.hide(key);
    for (const key of keys) if (!this.entries.has(key)) this.show(key);
    const after = this.keys();
    this.empty.hidden = after.length > 0;
    if (after.length !== before.length || after.some((key, i) => key !== before[i])) {
      this.onChange(after);
    }
  }

  // Forgets the user's choice: the page chooses again (follow) from now on.
  chooseAutomatically() {
    if (this.automatic) return;
    this.automatic = true;
    saveChoice(localStorage, null);
    this.onMode(true);
  }

  chosen() {
    saveChoice(localStorage, this.keys());
    this.empty.hidden = this.entries.size > 0;
    this.onChange(this.keys());
    if (this.automatic) {
      this.automatic = false;
      this.onMode(false);
    }
  }

  // A card for `key`.
  show(key) {
    const value = h('span', { class: 'value', dataset: { value: '' } }, '…');
    const rate = h('span', { class: 'rate' }, '–');
    const chart = h('div', { class: 'chart', dataset: { points: '0' } });
    const card = h(
      'article',
      { class: 'card', dataset: { key } },
      h(
        'header',
        {},
        h('span', { class: 'key', title: key }, key),
        h('button', {
          class: 'remove',
          type: 'button',
          title: `Stop watching ${key}`,
          'aria-label': `Stop watching ${key}`,
          onclick: () => this.remove(key),
        }, '×'),
      ),
      h('div', { class: 'figures' }, value, rate),
      chart,
    );
    this.cards.append(card);
    this.entries.set(key, {
      value: null,
      series: new RateSeries(),
      chart: rateChart(chart),
      elements: { card, value, rate, chart },
    });
  }

  hide(key) {
    const entry = this.entries.get(key);
    entry.chart.destroy();
    entry.elements.card.remove();
    this.entries.delete(key);
  }

  // A new value of `key` (from the live stream).
  set(key, value) {
    const entry = this.entries.get(key);
    if (!entry) return;
    entry.value = value;
    entry.elements.value.textContent = formatInt(value);
    entry.elements.value.dataset.value = String(value);
  }

  // Once a second: each counter's value at `t` (seconds) becomes a rate point.
  tick(t) {
    for (const entry of this.entries.values()) {
      entry.series.sample(t, entry.value);
      entry.chart.update(entry.series.data());
      const latest = entry.series.latest();
      entry.elements.rate.textContent = formatRate(latest);
      entry.elements.rate.dataset.sign = latest > 0 ? 'up' : latest < 0 ? 'down' : 'flat';
      entry.elements.chart.dataset.points = String(entry.series.times.length);
    }
  }

  // What the page shows, for tests and the console: [{key, value, times, rates}].
  snapshot() {
    return [...this.entries].map(([key, entry]) => ({
      key,
      value: entry.value,
      times: [...entry.series.times],
      rates: [...entry.series.rates],
    }));
  }
}
