// Unit tests of the watched panel's choice (node's built-in test runner): the automatic pick
// and the user's stored keys.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { loadChoice, pickAutomatic, saveChoice } from '../src/choice.js';

const rank = (...rows) => rows.map(([key, figure]) => ({ key, figure }));

test('with nothing watched, the first n of the ranking', () => {
  assert.deepEqual(pickAutomatic([], rank(['a', 9], ['b', 5], ['c', 1]), 2), ['a', 'b']);
  assert.deepEqual(pickAutomatic([], rank(['a', 9]), 3), ['a']);
  assert.deepEqual(pickAutomatic(['a'], [], 3), []);
});

test('watched keys stay while ranked, in their places, when the order wavers', () => {
  assert.deepEqual(pickAutomatic(['a', 'b'], rank(['b', 6], ['c', 5.5], ['a', 5]), 2),
    ['a', 'b']);
});

test('a key twice as hot as the weakest watched one takes its place', () => {
  assert.deepEqual(pickAutomatic(['a', 'b'], rank(['c', 11], ['a', 9], ['b', 5]), 2),
    ['a', 'c']);
  // Not more than twice: it waits.
  assert.deepEqual(pickAutomatic(['a', 'b'], rank(['c', 10], ['a', 9], ['b', 5]), 2),
    ['a', 'b']);
  // Several newcomers, each against the weakest left.
  assert.deepEqual(pickAutomatic(['a', 'b'], rank(['c', 50], ['d', 40], ['a', 9], ['b', 5]), 2),
    ['d', 'c']);
});

test('a key no longer ranked leaves, and the best key not watched takes its place', () => {
  assert.deepEqual(pickAutomatic(['a', 'x', 'b'], rank(['a', 9], ['b', 5], ['c', 1]), 3),
    ['a', 'b', 'c']);
});

test('figures compare by magnitude: a large negative group is large', () => {
  assert.deepEqual(pickAutomatic(['a'], rank(['b', -30], ['a', 10]), 1), ['b']);
});

// A stand-in for localStorage.
class Storage {
  constructor() { this.items = new Map(); }
  getItem(key) { return this.items.has(key) ? this.items.get(key) : null; }
  setItem(key, value) { this.items.set(key, String(value)); }
  removeItem(key) { this.items.delete(key); }
}

test('the user\'s keys round-trip; none stored means automatic', () => {
  const storage = new Storage();
  assert.equal(loadChoice(storage), null);
  saveChoice(storage, ['likes:post:7', 'blog_posts:7:3']);
  assert.deepEqual(loadChoice(storage), ['likes:post:7', 'blog_posts:7:3']);
  saveChoice(storage, []);  // the user removed every card: still their choice
  assert.deepEqual(loadChoice(storage), []);
  saveChoice(storage, null);
  assert.equal(loadChoice(storage), null);
});

test('what is not a list of keys is no choice', () => {
  const storage = new Storage();
  for (const stored of ['{', '"key"', '{"a": 1}', 'null']) {
    storage.setItem('tally.watched', stored);
    assert.equal(loadChoice(storage), null, stored);
  }
  storage.setItem('tally.watched', '["a", 7, "b"]');
  assert.deepEqual(loadChoice(storage), ['a', 'b']);
});
