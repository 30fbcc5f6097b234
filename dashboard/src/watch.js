// The watched counters: one card per key with its live value, its latest rate and a
// rate chart. Keys are kept in localStorage, so the page comes back with the same cards.

import { rateChart } from './chart.js';
import { formatInt, formatRate, h } from './dom.js';
import { RateSeries } from './rates.js';

const STORAGE_KEY = 'tally.watched';

export class Watched {
  // `cards` holds the cards, `empty` is shown when there are none; onChange(keys) is called
  // whenever the set of keys changes.
  constructor({ cards, empty, onChange }) {
    this.cards = cards;
    this.empty = empty;
    this.onChange = onChange;
    this.entries = new Map();  // key -> {value, series, chart, elements}
  }

  // The keys stored by an earlier visit.
  static stored() {
    try {
      const keys = JSON.parse(localStorage.getItem(STORAGE_KEY) || '[]');
      return Array.isArray(keys) ? keys.filter((k) => typeof k === 'string') : [];
    } catch {
      return [];
    }
  }

  keys() {
    return [...this.entries.keys()];
  }

  add(key, { notify = true } = {}) {
    if (!key || this.entries.has(key)) return;
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
    this.changed(notify);
  }

  remove(key) {
    const entry = this.entries.get(key);
    if (!entry) return;
    entry.chart.destroy();
    entry.elements.card.remove();
    this.entries.delete(key);
    this.changed(true);
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

  changed(notify) {
    localStorage.setItem(STORAGE_KEY, JSON.stringify(this.keys()));
    this.empty.hidden = this.entries.size > 0;
    if (notify) this.onChange(this.keys());
  }
}
