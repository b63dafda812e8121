// cudalloc view, the timeline: live and reserved memory over the trace's events. The model
// holds at most a few thousand buckets, each with the minimum and maximum reached inside it;
// a bucket is drawn as a vertical band from min to max, so a peak inside it stays visible.

const TIMELINE_HEIGHT = 260;
const TIMELINE_MARGIN = { left: 78, right: 12, top: 14, bottom: 26 };

// A round step for about `ticks` axis labels up to `max`.
function niceStep(max, ticks) {
  const raw = Math.max(1, max / ticks);
  const power = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const m of [1, 2, 5, 10]) {
    if (m * power >= raw) return m * power;
  }
  return 10 * power;
}

// A power-of-two byte step for at most about `ticks` axis labels up to `max`.
function byteStep(max, ticks) {
  const raw = Math.max(1, max / ticks);
  let step = 1;
  while (step < raw) step *= 2;
  return step;
}

// Maps event indices and bytes to pixels of the plot area.
function timelineScale(t, width) {
  const peak = Math.max(1, t.peak_live.bytes, t.has_reserved ? t.peak_reserved.bytes : 0);
  const plotWidth = width - TIMELINE_MARGIN.left - TIMELINE_MARGIN.right;
  const plotHeight = TIMELINE_HEIGHT - TIMELINE_MARGIN.top - TIMELINE_MARGIN.bottom;
  return {
    maxBytes: peak * 1.08,
    x: (event) => TIMELINE_MARGIN.left + (event / Math.max(1, t.events - 1)) * plotWidth,
    y: (bytes) => TIMELINE_MARGIN.top + plotHeight * (1 - bytes / (peak * 1.08)),
    event: (px) => ((px - TIMELINE_MARGIN.left) / plotWidth) * Math.max(1, t.events - 1),
  };
}

function drawAxes(ctx, t, scale, width) {
  ctx.strokeStyle = "#e3e6ea";
  ctx.fillStyle = cssVar("--muted");
  ctx.font = "11px system-ui, sans-serif";
  ctx.lineWidth = 1;
  const step = byteStep(scale.maxBytes, 5);
  ctx.textAlign = "right";
  for (let bytes = 0; bytes <= scale.maxBytes; bytes += step) {
    const y = Math.round(scale.y(bytes)) + 0.5;
    ctx.beginPath();
    ctx.moveTo(TIMELINE_MARGIN.left, y);
    ctx.lineTo(width - TIMELINE_MARGIN.right, y);
    ctx.stroke();
    ctx.fillText(formatBytes(bytes), TIMELINE_MARGIN.left - 6, y + 4);
  }
  ctx.textAlign = "center";
  const eventStep = niceStep(t.events, 8);
  for (let event = 0; event < t.events; event += eventStep) {
    ctx.fillText(formatCount(event), scale.x(event), TIMELINE_HEIGHT - 8);
  }
}

// One series: a band per bucket from min to max, and a line through the maxima.
function drawSeries(ctx, t, scale, mins, maxs, colour, fillAlpha) {
  ctx.globalAlpha = fillAlpha;
  ctx.fillStyle = colour;
  const base = scale.y(0);
  ctx.beginPath();
  ctx.moveTo(scale.x(t.x[0]), base);
  for (let i = 0; i < t.x.length; i++) ctx.lineTo(scale.x(t.x[i]), scale.y(maxs[i]));
  ctx.lineTo(scale.x(t.events - 1), scale.y(maxs[maxs.length - 1]));
  ctx.lineTo(scale.x(t.events - 1), base);
  ctx.closePath();
  ctx.fill();
  ctx.globalAlpha = 1;
  ctx.strokeStyle = colour;
  ctx.lineWidth = 1;
  for (let i = 0; i < t.x.length; i++) {
    const x = Math.round(scale.x(t.x[i])) + 0.5;
    ctx.beginPath();
    ctx.moveTo(x, scale.y(mins[i]));
    ctx.lineTo(x, scale.y(maxs[i]) - 0.5);
    ctx.stroke();
  }
  ctx.lineWidth = 1.5;
  ctx.beginPath();
  for (let i = 0; i < t.x.length; i++) ctx.lineTo(scale.x(t.x[i]), scale.y(maxs[i]));
  ctx.stroke();
}

function drawPeak(ctx, scale, peak, label, colour, row) {
  const x = scale.x(peak.event);
  ctx.strokeStyle = colour;
  ctx.setLineDash([4, 3]);
  ctx.beginPath();
  ctx.moveTo(x, TIMELINE_MARGIN.top);
  ctx.lineTo(x, scale.y(0));
  ctx.stroke();
  ctx.setLineDash([]);
  ctx.fillStyle = colour;
  ctx.beginPath();
  ctx.arc(x, scale.y(peak.bytes), 3.5, 0, 2 * Math.PI);
  ctx.fill();
  ctx.font = "bold 11px system-ui, sans-serif";
  const text = label + " " + formatBytes(peak.bytes) + " at event " + formatCount(peak.event);
  const right = x > ctx.canvas.clientWidth * 0.6;
  ctx.textAlign = right ? "right" : "left";
  ctx.fillText(text, x + (right ? -6 : 6), TIMELINE_MARGIN.top + 10 + row * 14);
}

// The bucket under pixel column px, described for the tooltip.
function describeBucket(t, scale, px) {
  const event = scale.event(px);
  if (event < 0 || event > t.events) return null;
  let lo = 0;
  let hi = t.x.length - 1;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (t.x[mid] <= event) lo = mid;
    else hi = mid - 1;
  }
  const last = lo + 1 < t.x.length ? t.x[lo + 1] - 1 : t.events - 1;
  const range = (a, b) => (a === b ? formatBytes(a) : formatBytes(a) + " .. " + formatBytes(b));
  let text = "events " + formatCount(t.x[lo]) + " .. " + formatCount(last) +
             "\nlive      " + range(t.live_min[lo], t.live_max[lo]);
  if (t.has_reserved) text += "\nreserved  " + range(t.reserved_min[lo], t.reserved_max[lo]);
  return text;
}

// Draws the timeline of one device into `parent`. Returns true if something was drawn.
function renderTimeline(parent, t) {
  if (!t || t.events === 0) {
    parent.append(element("p", { class: "note" }, "No trace in this snapshot: record one with " +
                          "CUDALLOC_CONF=trace:N or torch.cuda.memory._record_memory_history()."));
    return false;
  }
  const live = cssVar("--live");
  const reserved = cssVar("--reserved");
  const peak = cssVar("--peak");
  const entries = [["live (allocated + pending free)", live]];
  if (t.has_reserved) entries.push(["reserved (segments)", reserved]);
  entries.push(["peak", peak]);
  parent.append(legend(entries));
  const { canvas, ctx, width } = makeCanvas(parent, TIMELINE_HEIGHT);
  const scale = timelineScale(t, width);
  drawAxes(ctx, t, scale, width);
  if (t.has_reserved) drawSeries(ctx, t, scale, t.reserved_min, t.reserved_max, reserved, 0.18);
  drawSeries(ctx, t, scale, t.live_min, t.live_max, live, 0.25);
  drawPeak(ctx, scale, t.peak_live, "peak live", peak, 0);
  if (t.has_reserved) drawPeak(ctx, scale, t.peak_reserved, "peak reserved", cssVar("--muted"), 1);
  onHover(canvas, (x) => describeBucket(t, scale, x));
  parent.append(element("p", { class: "note" }, formatCount(t.events) + " events in " +
                        formatCount(t.x.length) + " buckets (x: event index)."));
  return true;
}
