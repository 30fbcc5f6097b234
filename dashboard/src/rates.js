// Increments per second of one counter, from its successive values as the page saw them.
// The page samples each watched counter's latest value once a second; a point is the
// change since the previous sample over the time between them. Only the last
// `windowSeconds` are kept. A counter that went down (DECRBY, a reset) has a negative rate.
export class RateSeries {
  constructor(windowSeconds = 300) {
    this.windowSeconds = windowSeconds;
    this.times = [];  // seconds since the epoch (uPlot's x unit)
    this.rates = [];  // increments per second over the interval ending at times[i]
    this.last = null; // the previous sample {t, value}
  }

  // Records the value known at time `t` (seconds); null (not known yet) records nothing.
  sample(t, value) {
    if (value === null || value === undefined) return;
    if (this.last && t > this.last.t) {
      this.times.push(t);
      this.rates.push((value - this.last.value) / (t - this.last.t));
    }
    if (!this.last || t > this.last.t) this.last = { t, value };
    let drop = 0;
    while (drop < this.times.length && this.times[drop] < t - this.windowSeconds) drop++;
    if (drop > 0) {
      this.times.splice(0, drop);
      this.rates.splice(0, drop);
    }
  }

  // The latest rate, or null before two samples.
  latest() {
    return this.rates.length ? this.rates[this.rates.length - 1] : null;
  }

  // [times, rates], as uPlot takes its data.
  data() {
    return [this.times, this.rates];
  }
}
