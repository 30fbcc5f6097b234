// Unit tests of the dashboard's rate computation (node's built-in test runner).
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { RateSeries } from '../src/rates.js';

test('no point before the second sample', () => {
  const series = new RateSeries();
  series.sample(100, 5);
  assert.deepEqual(series.data(), [[], []]);
  assert.equal(series.latest(), null);
});

test('a point is the change over the time between samples', () => {
  const series = new RateSeries();
  series.sample(100, 0);
  series.sample(101, 10);
  series.sample(103, 30);  // 20 over 2 s
  series.sample(104, 25);  // went down
  assert.deepEqual(series.data(), [[101, 103, 104], [10, 10, -5]]);
  assert.equal(series.latest(), -5);
});

test('unknown values and repeated times record nothing', () => {
  const series = new RateSeries();
  series.sample(100, null);
  series.sample(101, 7);
  series.sample(101, 9);
  series.sample(102, undefined);
  series.sample(103, 11);
  assert.deepEqual(series.data(), [[103], [2]]);
});

test('points older than the window fall out', () => {
  const series = new RateSeries(10);
  for (let t = 0; t <= 30; t++) series.sample(t, t * 3);
  const [times, rates] = series.data();
  assert.deepEqual(times, [20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30]);
  assert.ok(rates.every((rate) => rate === 3));
});
