// Small DOM helpers: the page builds its elements with h() (text is always a text node,
// never parsed as HTML) and formats figures with the functions below.

// h('li', {class: 'row', onclick: f}, 'text', child): an element with attributes,
// listeners ("on…") and children; null, undefined and false children are skipped.
export function h(tag, props = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith('on')) element.addEventListener(name.slice(2), value);
    else if (name === 'class') element.className = value;
    else if (name === 'dataset') Object.assign(element.dataset, value);
    else element.setAttribute(name, value === true ? '' : value);
  }
  element.append(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
  return element;
}

// Replaces an element's children.
export function fill(element, ...children) {
  element.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined));
}

const integer = new Intl.NumberFormat('en-US');
const decimal = new Intl.NumberFormat('en-US', { maximumFractionDigits: 1 });

export const formatInt = (value) => integer.format(value);

export function formatRate(rate) {
  if (rate === null || rate === undefined) return '–';
  const sign = rate > 0 ? '+' : '';
  return `${sign}${decimal.format(rate)}/s`;
}

export function formatBytes(bytes) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = Number(bytes) || 0;
  let unit = 0;
  while (Math.abs(value) >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return `${unit ? value.toFixed(1) : value} ${units[unit]}`;
}

export function formatSeconds(seconds) {
  const s = Number(seconds) || 0;
  if (s < 1) return `${Math.round(s * 1000)} ms`;
  if (s < 120) return `${s.toFixed(1)} s`;
  return `${Math.round(s / 60)} min`;
}
