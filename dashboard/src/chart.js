// The rate chart of one watched counter: increments per second over the last minutes.
//
// uPlot rather than Chart.js: the chart is a time series redrawn every second on several
// cards at once, which is exactly uPlot's case (canvas, no animation machinery to turn
// off), and its minified build is 51 KB against Chart.js 4.6's 210 KB, most of which is
// chart types and animations this page does not use.
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';

const HEIGHT = 150;  // the whole chart, axes included
const MIN_SPAN_SECONDS = 60;  // the x axis shows at least the last minute
const ACCENT = '#4f46e5';

// A compact figure for the y axis: 950, 1.2k, 3.4M.
function compact(value) {
  const abs = Math.abs(value);
  if (abs >= 1e9) return `${+(value / 1e9).toFixed(1)}G`;
  if (abs >= 1e6) return `${+(value / 1e6).toFixed(1)}M`;
  if (abs >= 1e3) return `${+(value / 1e3).toFixed(1)}k`;
  return `${+value.toFixed(abs < 10 ? 1 : 0)}`;
}

const clock = new Intl.DateTimeFormat('en-GB', {
  hour: '2-digit', minute: '2-digit', second: '2-digit', hourCycle: 'h23',
});

// Draws into `element`, as wide as it is, and follows its width.
export function rateChart(element) {
  const axis = {
    stroke: '#6b7280',
    font: '11px system-ui, sans-serif',
    grid: { stroke: '#eef0f4', width: 1 },
    ticks: { show: false },
  };
  const options = {
    width: Math.max(element.clientWidth, 200),
    height: HEIGHT,
    legend: { show: false },
    cursor: { y: false, points: { size: 6 } },
    scales: {
      x: { time: true, range: (u, min, max) => [Math.min(min, max - MIN_SPAN_SECONDS), max] },
      // Always show 0, and a little room above the highest rate.
      y: { range: (u, min, max) => [Math.min(0, min), Math.max(1, max * 1.15)] },
    },
    axes: [
      {
        ...axis,
        size: 30,
        space: 70,
        values: (u, ticks) => ticks.map((t) => clock.format(t * 1000)),
      },
      { ...axis, size: 44, values: (u, ticks) => ticks.map(compact) },
    ],
    series: [
      {},
      {
        label: 'increments/s',
        stroke: ACCENT,
        width: 2,
        fill: 'rgba(79, 70, 229, 0.10)',
        points: { show: false },
      },
    ],
  };
  const plot = new uPlot(options, [[], []], element);
  const resize = new ResizeObserver(() => {
    plot.setSize({ width: Math.max(element.clientWidth, 200), height: HEIGHT });
  });
  resize.observe(element);
  return {
    update(data) {
      plot.setData(data);
    },
    destroy() {
      resize.disconnect();
      plot.destroy();
    },
  };
}
