// Unit tests of the dashboard's key splitting (node's built-in test runner): a key's parts
// keep the key's spelling, which is what tallyd's reads take.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { routePath, splitKey } from '../src/api.js';

test('a key splits at each unescaped colon', () => {
  assert.deepEqual(splitKey('blog_posts:7:3'), ['blog_posts', '7', '3']);
  assert.deepEqual(splitKey('c'), ['c']);
  assert.deepEqual(splitKey('c::'), ['c', '', '']);
});

test('escapes stay as the key spells them', () => {
  assert.deepEqual(splitKey('tags:re\\:turn:1'), ['tags', 're\\:turn', '1']);
  assert.deepEqual(splitKey('tags:\\N:\\\\N'), ['tags', '\\N', '\\\\N']);
  assert.deepEqual(splitKey('tags:a\\\\:b'), ['tags', 'a\\\\', 'b']);
  assert.deepEqual(splitKey('tags:\\:\\:'), ['tags', '\\:\\:']);
});

test('parts are percent-encoded in a route', () => {
  assert.equal(routePath('/v1/value/', splitKey('tags:re\\:turn/x?:\\N')),
    '/v1/value/tags/re%5C%3Aturn%2Fx%3F/%5CN');
});
