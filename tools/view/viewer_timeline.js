// cudalloc view, the timeline: live and reserved memory over the trace's events. The model
// holds at most a few thousand buckets, each with the minimum and maximum reached inside it;
// a bucket is drawn as a vertical band from min to max, so a peak inside it stays visible.
// Dragging across the plot zooms into the events selected (the brush), a double click shows
// every event again, and a click picks the event the segment map shows. Out-of-memory events
// are red marks at the top; hovering over one shows the request and the state then.

const TIMELINE_HEIGHT = 260;
const TIMELINE_MARGIN = { left: 78, right: 12, top: 22, bottom: 26 };
const OOM_MARK_SIZE = 6;

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

// The index of the bucket holding `event`: the last bucket whose first event is <= it.
function bucketAt(t, event) {
  let lo = 0;
  let hi = t.x.length - 1;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (t.x[mid] <= event) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// The highest value of the buckets that overlap events [from, to], replayed curves included.
function highestIn(t, from, to) {
  let peak = 1;
  for (let i = bucketAt(t, from); i < t.x.length && t.x[i] <= to; i++) {
    peak = Math.max(peak, t.live_max[i], t.has_reserved ? t.reserved_max[i] : 0);
    for (const c of t.replay || []) peak = Math.max(peak, c.max[i]);
  }
  return peak;
}

// The trace replayed under other policies (view --replay): each a dashed line through its
// buckets' highest reserved memory.
const REPLAY_STYLES = {
  pytorch: { label: "PyTorch native (replayed)", colour: "#d35400", dash: [6, 3] },
  expandable: { label: "PyTorch expandable segments (replayed)", colour: "#8e44ad", dash: [2, 2] },
  cudalloc: { label: "cudalloc, default settings (replayed)", colour: "#16a085", dash: [8, 3, 2, 3] },
};

function drawReplayed(ctx, t, scale, range) {
  for (const c of t.replay || []) {
    const style = REPLAY_STYLES[c.policy] || { colour: "#555", dash: [3, 3] };
    ctx.strokeStyle = style.colour;
    ctx.setLineDash(style.dash);
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    for (let i = range.first; i <= range.last; i++) {
      ctx.lineTo(scale.x(Math.max(scale.from, t.x[i])), scale.y(c.max[i]));
    }
    ctx.lineTo(scale.x(scale.to), scale.y(c.max[range.last]));
    ctx.stroke();
  }
  ctx.setLineDash([]);
}

// Maps event indices in [view.from, view.to] and bytes to pixels of the plot area.
function timelineScale(t, view, width) {
  const peak = highestIn(t, view.from, view.to) * 1.08;
  const plotWidth = width - TIMELINE_MARGIN.left - TIMELINE_MARGIN.right;
  const plotHeight = TIMELINE_HEIGHT - TIMELINE_MARGIN.top - TIMELINE_MARGIN.bottom;
  const span = Math.max(1, view.to - view.from);
  return {
    maxBytes: peak,
    from: view.from,
    to: view.to,
    x: (event) => TIMELINE_MARGIN.left + ((event - view.from) / span) * plotWidth,
    y: (bytes) => TIMELINE_MARGIN.top + plotHeight * (1 - bytes / peak),
    event: (px) => view.from + ((px - TIMELINE_MARGIN.left) / plotWidth) * span,
    inPlot: (px) => px >= TIMELINE_MARGIN.left && px <= width - TIMELINE_MARGIN.right,
  };
}

function drawAxes(ctx, scale, width) {
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
  const eventStep = niceStep(scale.to - scale.from, 8);
  for (let event = Math.ceil(scale.from / eventStep) * eventStep; event <= scale.to; event += eventStep) {
    ctx.fillText(formatCount(event), scale.x(event), TIMELINE_HEIGHT - 8);
  }
}

// One series over the buckets [first, last]: a band per bucket from min to max, and a line
// through the maxima.
function drawSeries(ctx, t, scale, range, mins, maxs, colour, fillAlpha) {
  const base = scale.y(0);
  const xs = (i) => scale.x(Math.max(scale.from, t.x[i]));
  ctx.globalAlpha = fillAlpha;
  ctx.fillStyle = colour;
  ctx.beginPath();
  ctx.moveTo(xs(range.first), base);
  for (let i = range.first; i <= range.last; i++) ctx.lineTo(xs(i), scale.y(maxs[i]));
  ctx.lineTo(scale.x(scale.to), scale.y(maxs[range.last]));
  ctx.lineTo(scale.x(scale.to), base);
  ctx.closePath();
  ctx.fill();
  ctx.globalAlpha = 1;
  ctx.strokeStyle = colour;
  ctx.lineWidth = 1;
  for (let i = range.first; i <= range.last; i++) {
    const x = Math.round(xs(i)) + 0.5;
    ctx.beginPath();
    ctx.moveTo(x, scale.y(mins[i]));
    ctx.lineTo(x, scale.y(maxs[i]) - 0.5);
    ctx.stroke();
  }
  ctx.lineWidth = 1.5;
  ctx.beginPath();
  for (let i = range.first; i <= range.last; i++) ctx.lineTo(xs(i), scale.y(maxs[i]));
  ctx.stroke();
}

function drawPeak(ctx, scale, peak, label, colour, row) {
  if (peak.event < scale.from || peak.event > scale.to) return;
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

// A red triangle at the top of the plot for each oom event in view.
// The canvas's data-oom-marks says how many are drawn, data-first-oom-x where the first is.
function drawOoms(ctx, t, scale) {
  ctx.fillStyle = cssVar("--oom");
  let drawn = 0;
  for (const oom of t.ooms) {
    if (oom.event < scale.from || oom.event > scale.to) continue;
    const x = scale.x(oom.event);
    if (drawn++ === 0) ctx.canvas.dataset.firstOomX = String(Math.round(x));
    ctx.beginPath();
    ctx.moveTo(x - OOM_MARK_SIZE, 2);
    ctx.lineTo(x + OOM_MARK_SIZE, 2);
    ctx.lineTo(x, 2 + OOM_MARK_SIZE * 1.6);
    ctx.closePath();
    ctx.fill();
  }
  ctx.canvas.dataset.oomMarks = String(drawn);
}

function drawCursor(ctx, scale, event) {
  if (event === null || event < scale.from || event > scale.to) return;
  const x = Math.round(scale.x(event)) + 0.5;
  ctx.strokeStyle = cssVar("--cursor");
  ctx.lineWidth = 1.5;
  ctx.beginPath();
  ctx.moveTo(x, TIMELINE_MARGIN.top);
  ctx.lineTo(x, scale.y(0));
  ctx.stroke();
}

function describeOom(oom) {
  return "out of memory at event " + formatCount(oom.event) +
         "\nrequest   " + formatBytes(oom.size) + " failed" +
         "\ndevice    " + formatBytes(oom.device_free) + " free" +
         "\nlive      " + formatBytes(oom.live) +
         "\nreserved  " + formatBytes(oom.reserved);
}

// The oom mark under (px, py), or null.
function oomAt(t, scale, px, py) {
  if (py > 2 + OOM_MARK_SIZE * 2) return null;
  return t.ooms.find((o) => o.event >= scale.from && o.event <= scale.to &&
                            Math.abs(scale.x(o.event) - px) <= OOM_MARK_SIZE) || null;
}

// The bucket under pixel column px, described for the tooltip.
function describeBucket(t, scale, px) {
  const event = scale.event(px);
  if (!scale.inPlot(px) || event < 0 || event > t.events) return null;
  const lo = bucketAt(t, event);
  const last = lo + 1 < t.x.length ? t.x[lo + 1] - 1 : t.events - 1;
  const range = (a, b) => (a === b ? formatBytes(a) : formatBytes(a) + " .. " + formatBytes(b));
  let text = "events " + formatCount(t.x[lo]) + " .. " + formatCount(last) +
             "\nlive      " + range(t.live_min[lo], t.live_max[lo]);
  if (t.has_reserved) text += "\nreserved  " + range(t.reserved_min[lo], t.reserved_max[lo]);
  for (const c of t.replay || []) text += "\n" + c.policy + " (replayed) " + range(c.min[lo], c.max[lo]);
  return text;
}

function timelineLegend(t) {
  const entries = [["live (allocated + pending free)", cssVar("--live")]];
  if (t.has_reserved) {
    entries.push([t.reserved_recorded ? "reserved (as the stats count it)" : "reserved (segments)",
                  cssVar("--reserved")]);
  }
  for (const c of t.replay || []) {
    const style = REPLAY_STYLES[c.policy];
    entries.push([style ? style.label : c.policy, style ? style.colour : "#555"]);
  }
  entries.push(["peak", cssVar("--peak")]);
  if (t.oom_count > 0) entries.push(["out of memory", cssVar("--oom")]);
  entries.push(["event shown in the segment map", cssVar("--cursor")]);
  return legend(entries);
}

// The drawing of one timeline: its canvas, the events in view and the picked event.
class TimelinePlot {
  constructor(parent, t) {
    this.t = t;
    this.view = { from: 0, to: Math.max(1, t.events - 1) };
    this.cursor = null;
    this.onPick = null;
    this.followers = [];  // plots on the same events: setView(view) after every zoom
    const { canvas, ctx, width } = makeCanvas(parent, TIMELINE_HEIGHT);
    canvas.classList.add("timeline");
    this.canvas = canvas;
    this.ctx = ctx;
    this.width = width;
    this.note = element("p", { class: "note timeline-view" });
    parent.append(this.note);
    this.listen();
    this.draw();
  }

  draw(brush) {
    const { ctx, t, width } = this;
    ctx.clearRect(0, 0, width, TIMELINE_HEIGHT);
    this.scale = timelineScale(t, this.view, width);
    const scale = this.scale;
    const range = { first: bucketAt(t, scale.from), last: bucketAt(t, scale.to) };
    drawAxes(ctx, scale, width);
    if (t.has_reserved) {
      drawSeries(ctx, t, scale, range, t.reserved_min, t.reserved_max, cssVar("--reserved"), 0.18);
    }
    drawSeries(ctx, t, scale, range, t.live_min, t.live_max, cssVar("--live"), 0.25);
    drawReplayed(ctx, t, scale, range);
    drawPeak(ctx, scale, t.peak_live, "peak live", cssVar("--peak"), 0);
    if (t.has_reserved) drawPeak(ctx, scale, t.peak_reserved, "peak reserved", cssVar("--muted"), 1);
    drawOoms(ctx, t, scale);
    drawCursor(ctx, scale, this.cursor);
    if (brush) {
      ctx.fillStyle = "rgba(59, 111, 212, 0.15)";
      ctx.fillRect(Math.min(brush[0], brush[1]), TIMELINE_MARGIN.top, Math.abs(brush[1] - brush[0]),
                   scale.y(0) - TIMELINE_MARGIN.top);
    }
    this.canvas.dataset.viewFrom = String(this.view.from);
    this.canvas.dataset.viewTo = String(this.view.to);
    const zoomed = this.view.from > 0 || this.view.to < Math.max(1, t.events - 1);
    this.note.textContent = "Events " + formatCount(this.view.from) + " .. " + formatCount(this.view.to) +
      " of " + formatCount(t.events) + " (x: event index, " + plural(t.x.length, "bucket") + "). " +
      (zoomed ? "Double-click to show every event." : "Drag across the plot to zoom in.") +
      " A click picks the event the segment map shows.";
  }

  zoom(from, to) {
    const last = Math.max(1, this.t.events - 1);
    from = Math.max(0, Math.floor(from));
    to = Math.min(last, Math.ceil(to));
    this.view = to - from >= 1 ? { from, to } : { from: 0, to: last };
    this.draw();
    for (const f of this.followers) f.setView(this.view);
  }

  setCursor(event) {
    this.cursor = event;
    this.draw();
  }

  listen() {
    const canvas = this.canvas;
    const local = (event) => {
      const box = canvas.getBoundingClientRect();
      return [event.clientX - box.left, event.clientY - box.top];
    };
    let start = null;
    canvas.addEventListener("mousedown", (event) => {
      const [x] = local(event);
      if (this.scale.inPlot(x)) start = x;
    });
    canvas.addEventListener("mousemove", (event) => {
      const [x, y] = local(event);
      if (start !== null) this.draw([start, x]);
      const oom = oomAt(this.t, this.scale, x, y);
      const text = oom ? describeOom(oom) : describeBucket(this.t, this.scale, x);
      if (text) tooltip.show(event, text);
      else tooltip.hide();
    });
    canvas.addEventListener("mouseleave", () => tooltip.hide());
    window.addEventListener("mouseup", (event) => {
      if (start === null) return;
      const [x] = local(event);
      const from = start;
      start = null;
      if (Math.abs(x - from) > 3) {
        this.zoom(this.scale.event(Math.min(from, x)), this.scale.event(Math.max(from, x)));
      } else if (this.onPick) {
        this.onPick(Math.round(Math.min(this.t.events - 1, Math.max(0, this.scale.event(x)))));
      }
    });
    canvas.addEventListener("dblclick", () => this.zoom(0, this.t.events - 1));
  }
}

// The device's out-of-memory events as a table: what failed, and the state then.
function oomTable(t) {
  const head = element("tr", {}, element("th", { class: "num" }, "event"),
                       element("th", { class: "num" }, "request"),
                       element("th", { class: "num" }, "device free"),
                       element("th", { class: "num" }, "live"),
                       element("th", { class: "num" }, "reserved"));
  const table = element("table", { class: "ooms" }, head);
  for (const o of t.ooms) {
    table.append(element("tr", {}, element("td", { class: "num" }, formatCount(o.event)),
                         element("td", { class: "num" }, formatBytes(o.size)),
                         element("td", { class: "num" }, formatBytes(o.device_free)),
                         element("td", { class: "num" }, formatBytes(o.live)),
                         element("td", { class: "num" }, formatBytes(o.reserved))));
  }
  const shown = t.ooms.length < t.oom_count ? " (the first " + formatCount(t.ooms.length) + " are listed)" : "";
  return [element("h3", {}, plural(t.oom_count, "allocation") + " failed for lack of memory" + shown), table];
}

// The replayed policies' figures beside the trace's own: what the same allocations would have
// reserved under each.
function replayTable(t) {
  const table = element("table", { class: "replayed" },
    element("tr", {}, element("th", {}, "policy (replayed on a simulated device)"),
            element("th", { class: "num" }, "peak reserved"), element("th", { class: "num" }, "peak reserved / peak live"),
            element("th", { class: "num" }, "page maps"), element("th", { class: "num" }, "failed allocations")));
  for (const c of t.replay) {
    const style = REPLAY_STYLES[c.policy];
    table.append(element("tr", { "data-policy": c.policy },
      element("td", {}, style ? style.label : c.policy), element("td", { class: "num" }, formatBytes(c.peak_reserved)),
      element("td", { class: "num" }, c.fragmentation ? c.fragmentation.toFixed(3) : "-"),
      element("td", { class: "num" }, c.policy === "pytorch" ? "-" : formatCount(c.page_maps)),
      element("td", { class: "num" }, formatCount(c.oom_events))));
  }
  return element("div", {}, element("h3", {}, "The same trace replayed under other policies"), table,
    element("p", { class: "note" }, "Each policy replays the trace's allocs and frees in order on a simulated device " +
      "of 1 TiB (nothing fails for lack of memory): PyTorch's native caching allocator and its expandable segments as " +
      "models of their rules, cudalloc as its own code with default settings. Page maps: cudalloc's 2 MiB pages, " +
      "the expandable segments' mappings (2 MiB in the small pool, 20 MiB in the large). The ratio divides by the " +
      "peak of what each replay served."));
}

// Draws the timeline of one device into `parent`. Returns the plot, or null without a trace.
function renderTimeline(parent, t, trace) {
  if (trace && trace.note) parent.append(element("p", { class: "warning trace-note" }, trace.note));
  if (!t || t.events === 0) {
    parent.append(element("p", { class: "note" }, "No trace in this snapshot: record one with " +
                          "CUDALLOC_CONF=trace:N or torch.cuda.memory._record_memory_history()."));
    return null;
  }
  parent.append(timelineLegend(t));
  const plot = new TimelinePlot(parent, t);
  if (t.has_reserved) {
    parent.append(element("p", { class: "note peaks", "data-peak-reserved": t.peak_reserved.bytes },
                          "In the trace: peak reserved " + formatBytes(t.peak_reserved.bytes) +
                          ", peak live " + formatBytes(t.peak_live.bytes) +
                          (t.reserved_recorded ? " (reserved as cudalloc's stats count it)." : " (reserved from segment events).")));
  }
  if (t.replay && t.replay.length > 0) parent.append(replayTable(t));
  if (t.oom_count > 0) parent.append(...oomTable(t));
  return plot;
}
