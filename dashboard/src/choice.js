// Which counters the watched panel shows: the user's own choice, or an automatic one.
//
// Until the user adds or removes a watched key, the page chooses: the hottest counters (GET
// /v1/hot), or, when nothing was written in the last minute, the largest groups of the
// first derived counter that has any (GET /v1/top). Once the user adds or removes a key,
// the keys on screen become theirs: kept in localStorage and shown from then on, until they
// ask for the automatic choice again. Pure functions, so that node's test runner checks
// them (test/choice.test.mjs).

const STORAGE_KEY = 'tally.watched';

// How many counters the automatic choice watches.
export const AUTOMATIC_COUNT = 6;

// The user's keys from `storage` (localStorage), or null when they have not chosen (or what
// is stored is not a list of keys).
export function loadChoice(storage) {
  try {
    const keys = JSON.parse(storage.getItem(STORAGE_KEY));
    return Array.isArray(keys) ? keys.filter((k) => typeof k === 'string') : null;
  } catch {
    return null;
  }
}

// Stores the user's keys; null forgets them (back to the automatic choice).
export function saveChoice(storage, keys) {
  if (keys === null) storage.removeItem(STORAGE_KEY);
  else storage.setItem(STORAGE_KEY, JSON.stringify(keys));
}

// The keys to watch automatically, at most `n`, from `ranked` ([{key, figure}], best first:
// writes per second, or a group's value). It changes as little as it can from `current`,
// so that cards and their charts stay put while the ranking wavers: a watched key stays
// while it is ranked at all, unless a key not watched has more than twice its figure (by
// magnitude); free places go to the best keys not watched, in rank order.
export function pickAutomatic(current, ranked, n = AUTOMATIC_COUNT) {
  const figure = new Map(ranked.map((row) => [row.key, Math.abs(row.figure)]));
  const picked = current.filter((key) => figure.has(key)).slice(0, n);
  for (const { key } of ranked) {
    if (picked.includes(key)) continue;
    if (picked.length < n) {
      picked.push(key);
      continue;
    }
    let weakest = 0;
    for (let i = 1; i < picked.length; i++) {
      if (figure.get(picked[i]) < figure.get(picked[weakest])) weakest = i;
    }
    // Ranked best first: a key that does not displace the weakest, no later key does.
    if (!(figure.get(key) > 2 * figure.get(picked[weakest]))) break;
    picked[weakest] = key;
  }
  return picked;
}
