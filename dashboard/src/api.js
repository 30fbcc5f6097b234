// The HTTP API as the page uses it. Every data call is JSON over fetch; with tallyd
// --requirepass it carries the password as "Authorization: Bearer", asked once and kept in
// sessionStorage (gone when the tab closes). EventSource cannot send headers, so the live
// stream takes the password as ?token= instead.

const TOKEN_KEY = 'tally.token';

// A data call answered 401: the page asks for the password and tries again.
export class AuthRequired extends Error {}

// Any other non-2xx answer, with tallyd's {"error": "..."} message.
export class HttpError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export function token() {
  return sessionStorage.getItem(TOKEN_KEY) || '';
}

export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}

async function call(method, path) {
  const headers = {};
  if (token()) headers.Authorization = `Bearer ${token()}`;
  const response = await fetch(path, { method, headers, cache: 'no-store' });
  if (response.status === 401) throw new AuthRequired('tallyd wants a password');
  let body = null;
  try {
    body = await response.json();
  } catch {
    // A non-JSON answer: reported by its status below.
  }
  if (!response.ok) {
    throw new HttpError(response.status, (body && body.error) || `HTTP ${response.status}`);
  }
  return body;
}

export const getJson = (path) => call('GET', path);

// routePath('/v1/top/', ['blog_posts', '7']) is "/v1/top/blog_posts/7": each segment
// percent-encoded, so a part may hold '/', '?' or '%'.
export function routePath(base, segments) {
  return base + segments.map(encodeURIComponent).join('/');
}

// Splits a key or a prefix typed by the user ("blog_posts:7:3") into its parts at each ':'
// that is not escaped, each part kept as the key spells it ("re\:turn", "\N" for NULL,
// "\\N" for the text \N): tallyd's reads take parts in that spelling
// (docs/derived-counters.md, "Key parts in reads").
export function splitKey(text) {
  const parts = [];
  let part = '';
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === '\\' && i + 1 < text.length) {
      part += c + text[++i];
    } else if (c === ':') {
      parts.push(part);
      part = '';
    } else {
      part += c;
    }
  }
  parts.push(part);
  return parts;
}

// The live stream's URL for these keys.
export function eventsUrl(keys) {
  const query = new URLSearchParams();
  for (const key of keys) query.append('key', key);
  if (token()) query.append('token', token());
  return `/v1/events?${query}`;
}
