// Small line charts drawn on <canvas> by hand: a few series sharing one
// y axis that starts at zero, time on the x axis, the latest values in a
// legend. Colours come from CSS custom properties (style.css).

function cssVar(name, fallback) {
  const value = getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  return value || fallback;
}

function niceMax(value) {
  if (!(value > 0)) return 1;
  const magnitude = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 2.5, 5, 10]) if (value <= step * magnitude) return step * magnitude;
  return 10 * magnitude;
}

const format = (value) => (value >= 100 ? value.toFixed(0) : value >= 10 ? value.toFixed(1) : value.toFixed(2));

/**
 * @param {HTMLCanvasElement} canvas
 * @param {{ label: string, color: string, values: (number | null)[] }[]} series
 * @param {{ windowSeconds: number }} options
 */
export function drawLineChart(canvas, series, { windowSeconds }) {
  const ratio = window.devicePixelRatio || 1;
  const width = canvas.clientWidth;
  const height = canvas.clientHeight;
  if (canvas.width !== Math.round(width * ratio) || canvas.height !== Math.round(height * ratio)) {
    canvas.width = Math.round(width * ratio);
    canvas.height = Math.round(height * ratio);
  }
  const ctx = canvas.getContext('2d');
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.clearRect(0, 0, width, height);

  const pad = { left: 44, right: 8, top: 22, bottom: 18 };
  const plotW = width - pad.left - pad.right;
  const plotH = height - pad.top - pad.bottom;
  const grid = cssVar('--grid', '#2a3340');
  const text = cssVar('--muted', '#8b98a9');
  const max = niceMax(Math.max(0, ...series.flatMap((s) => s.values.filter((v) => v !== null && Number.isFinite(v)))));

  ctx.font = '11px system-ui, sans-serif';
  ctx.lineWidth = 1;
  ctx.strokeStyle = grid;
  ctx.fillStyle = text;
  ctx.textBaseline = 'middle';
  for (let i = 0; i <= 4; i += 1) {
    const y = pad.top + plotH - (plotH * i) / 4;
    ctx.beginPath();
    ctx.moveTo(pad.left, y);
    ctx.lineTo(pad.left + plotW, y);
    ctx.stroke();
    ctx.textAlign = 'right';
    ctx.fillText(format((max * i) / 4), pad.left - 6, y);
  }
  ctx.textAlign = 'left';
  ctx.fillText(`-${Math.round(windowSeconds / 60)} min`, pad.left, height - 8);
  ctx.textAlign = 'right';
  ctx.fillText('now', pad.left + plotW, height - 8);

  let legendX = pad.left;
  for (const { label, color, values } of series) {
    const slots = Math.max(windowSeconds, values.length);
    const x = (index) => pad.left + plotW - ((values.length - 1 - index) / (slots - 1)) * plotW;
    const y = (value) => pad.top + plotH - (value / max) * plotH;
    ctx.strokeStyle = color;
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    let drawing = false;
    values.forEach((value, index) => {
      if (value === null || !Number.isFinite(value)) {
        drawing = false;
        return;
      }
      if (drawing) ctx.lineTo(x(index), y(value));
      else ctx.moveTo(x(index), y(value));
      drawing = true;
    });
    ctx.stroke();

    const latest = [...values].reverse().find((v) => v !== null && Number.isFinite(v));
    const legend = `${label} ${latest === undefined ? '–' : format(latest)}`;
    ctx.fillStyle = color;
    ctx.fillRect(legendX, 6, 10, 3);
    ctx.fillStyle = text;
    ctx.textAlign = 'left';
    ctx.fillText(legend, legendX + 14, 8);
    legendX += ctx.measureText(legend).width + 28;
  }
}
