// cudalloc view, what the trace tells beyond the curves: who held memory at the peak and at
// each out-of-memory (largest allocations and a flame summary by stack frame), the largest
// allocations as bands over their lifetimes (memory_viz's active-memory timeline), and
// fragmentation and page maps over the trace. The band and fragmentation plots follow the
// timeline's zoom (TimelinePlot.followers).

const BANDS_HEIGHT = TIMELINE_HEIGHT;  // drawAxes writes the event labels for this height
const FRAG_HEIGHT = 170;
const BAND_COLOURS = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948",
                      "#b07aa1", "#ff9da7", "#9c755f", "#86bcb6", "#8cd17d", "#d4a6c8"];

// Who holds memory: a choice of moment (the snapshot, the peak of live memory, each
// out-of-memory) and, for it, the flame summary and the largest live allocations.
function whoHoldsPanel(device) {
  const moments = [{ label: "at the snapshot", flame: device.snapshot_flame, top: null }];
  for (const m of device.moments || []) {
    const what = m.label === "out of memory"
      ? "at the out-of-memory of event " + formatCount(m.event) + " (" + formatBytes(m.request || 0) + " asked)"
      : "at peak live (event " + formatCount(m.event) + ", " + formatBytes(m.live) + ")";
    moments.push({ label: what, flame: m.flame, top: m.top, moment: m });
  }
  const select = element("select", { class: "moment" });
  moments.forEach((m, i) => select.append(element("option", { value: String(i) }, m.label)));
  const body = element("div");
  const show = () => {
    const m = moments[Number(select.value)];
    body.replaceChildren(...momentViews(m, device));
  };
  select.addEventListener("change", show);
  show();
  const box = panel("Who holds memory", element("label", { class: "control" }, "Moment ", select), body);
  box.classList.add("who-holds");
  return box;
}

function momentViews(m, device) {
  const out = [];
  if (m.moment) {
    const before = m.moment.live - m.moment.seen;
    out.push(element("p", { class: "note" }, plural(m.moment.allocations, "allocation") + " live, " +
      formatBytes(m.moment.seen) + " seen allocated in the trace" +
      (before > 0 ? "; " + formatBytes(before) + " were allocated before the trace began." : ".")));
  }
  out.push(element("h3", {}, "By stack frame, outermost first (bytes live under each frame)"));
  out.push(flameTree(m.flame));
  const top = m.top || device.top_allocations;
  out.push(element("h3", {}, "Largest live allocations " + m.label));
  out.push(momentTable(top));
  return out;
}

// The flame summary as nested rows: a bar of the node's share of all bytes, its label, bytes
// and allocation count. The first levels are open; a click on a row opens or closes it.
function flameTree(root) {
  const box = element("div", { class: "flame" });
  if (!root || root.b === 0) {
    box.append(element("p", { class: "note" }, "Nothing live."));
    return box;
  }
  const onlyNoStack = root.k.length === 1 && root.k[0].n === "(no stack recorded)";
  if (onlyNoStack) {
    box.append(element("p", { class: "note" }, "No stack frames recorded: record them with " +
      "torch.cuda.memory._record_memory_history(stacks=\"python\")."));
  }
  const add = (node, parent, depth) => {
    const share = node.b / root.b;
    const bar = element("span", { class: "flame-bar" });
    bar.style.width = Math.max(0.5, share * 100).toFixed(2) + "%";
    const row = element("summary", { class: "flame-row" }, element("span", { class: "flame-track" }, bar),
                        element("span", { class: "mono flame-label" }, node.n),
                        element("span", { class: "num" }, formatBytes(node.b) + " (" + (share * 100).toFixed(1) + "%)"),
                        element("span", { class: "num muted" }, node.c ? plural(node.c, "allocation") : ""));
    const item = element("details", { "data-bytes": String(node.b) }, row);
    if (depth < 3 || node.k.length === 1) item.open = true;
    if (node.k.length === 0) item.classList.add("leaf");
    for (const child of node.k) add(child, item, depth + 1);
    parent.append(item);
  };
  add(root, box, 0);
  return box;
}

function momentTable(rows) {
  if (!rows || rows.length === 0) return element("p", { class: "note" }, "None.");
  const withSites = rows.some((r) => r.site);
  const head = element("tr", {}, element("th", {}, "address"), element("th", { class: "num" }, "size"),
                       element("th", {}, "stream"));
  if (rows[0].event !== undefined) head.append(element("th", { class: "num" }, "allocated at event"));
  if (withSites) head.append(element("th", {}, "allocated at"));
  const table = element("table", { class: "moment-top" }, head);
  for (const r of rows) {
    const row = element("tr", {}, element("td", { class: "mono" }, r.address),
                        element("td", { class: "num" }, formatBytes(r.size)),
                        element("td", { class: "mono" }, r.stream));
    if (r.event !== undefined) row.append(element("td", { class: "num" }, formatCount(r.event)));
    if (withSites) row.append(element("td", { class: "mono" }, r.site || "-"));
    table.append(row);
  }
  return table;
}

// The largest allocations stacked over the events they lived through, in the order they were
// allocated (older lower): at each pixel column the live bands are stacked from 0, so a band
// drops when one beneath it ends, as in memory_viz. The gap up to the live curve is the
// smaller allocations.
class BandsPlot {
  constructor(parent, bands, t) {
    this.bands = bands.bands;
    this.t = t;
    this.view = { from: 0, to: Math.max(1, t.events - 1) };
    this.onPick = null;
    const { canvas, ctx, width } = makeCanvas(parent, BANDS_HEIGHT);
    Object.assign(this, { canvas, ctx, width });
    this.canvas.classList.add("bands");
    onHover(canvas, (x, y) => this.describe(x, y));
    canvas.addEventListener("click", (event) => {
      const box = canvas.getBoundingClientRect();
      const hit = this.bandAt(event.clientX - box.left, event.clientY - box.top);
      if (hit && this.onPick) this.onPick(hit.address);
    });
    this.draw();
  }

  setView(view) {
    this.view = { from: view.from, to: view.to };
    this.draw();
  }

  scale() {
    const s = timelineScale(this.t, this.view, this.width);
    const plotHeight = BANDS_HEIGHT - TIMELINE_MARGIN.top - TIMELINE_MARGIN.bottom;
    s.y = (bytes) => TIMELINE_MARGIN.top + plotHeight * (1 - bytes / s.maxBytes);
    return s;
  }

  // The bands live at event `at`, stacked: [{band, index, low, high}] in stacking order.
  stackAt(at) {
    const out = [];
    let base = 0;
    for (let i = 0; i < this.bands.length; i++) {
      const b = this.bands[i];
      if (b.from > at) break;
      if (b.to <= at) continue;
      out.push({ band: b, index: i, low: base, high: base + b.size });
      base += b.size;
    }
    return out;
  }

  // Draws column by column, left to right, keeping the live bands in allocation order: each
  // column costs what is live in it, not every band.
  draw() {
    const { ctx, width } = this;
    ctx.clearRect(0, 0, width, BANDS_HEIGHT);
    const s = this.scale();
    this.s = s;
    drawAxes(ctx, s, width);
    let painted = 0, next = 0, active = [];
    for (let px = TIMELINE_MARGIN.left; px < width - TIMELINE_MARGIN.right; px++) {
      const at = Math.floor(s.event(px + 0.5));
      while (next < this.bands.length && this.bands[next].from <= at) active.push(next++);
      active = active.filter((i) => this.bands[i].to > at);
      let base = 0;
      for (const i of active) {
        const b = this.bands[i];
        ctx.fillStyle = BAND_COLOURS[i % BAND_COLOURS.length];
        const top = s.y(base + b.size);
        ctx.fillRect(px, top, 1, Math.max(1, s.y(base) - top));
        base += b.size;
        painted++;
      }
    }
    ctx.strokeStyle = cssVar("--live");
    ctx.lineWidth = 1;
    ctx.beginPath();
    const range = { first: bucketAt(this.t, s.from), last: bucketAt(this.t, s.to) };
    for (let i = range.first; i <= range.last; i++) ctx.lineTo(s.x(Math.max(s.from, this.t.x[i])), s.y(this.t.live_max[i]));
    ctx.stroke();
    this.canvas.dataset.bandColumns = String(painted);
    this.canvas.dataset.viewFrom = String(this.view.from);
  }

  bandAt(x, y) {
    if (!this.s || !this.s.inPlot(x)) return null;
    const at = Math.floor(this.s.event(x + 0.5));
    const part = this.stackAt(at).find((p) => y <= this.s.y(p.low) && y >= this.s.y(p.high));
    return part ? part.band : null;
  }

  describe(x, y) {
    const b = this.bandAt(x, y);
    if (!b) return null;
    return formatBytes(b.size) + " at " + b.address + " (stream " + b.stream + ")" +
           "\nallocated at event " + formatCount(b.from) +
           (b.to >= this.t.events ? ", live at the end" : ", freed at event " + formatCount(b.to)) +
           (b.site ? "\n" + b.site : "") + "\nclick: find it in the segment map";
  }
}

function renderBands(parent, bands, t) {
  if (!bands || !t || t.events === 0 || bands.bands.length === 0) return null;
  const shown = bands.bands.length;
  parent.append(element("p", { class: "note bands-note" }, plural(shown, "allocation") + " of " +
    formatCount(bands.allocations) + " in the trace (those holding the most memory over time: bytes times " +
    "events lived), each a band from its alloc to its free, stacked in the order they were allocated. The line " +
    "is live memory; the gap under it, the other allocations. Hover for one, click to find it in the segment map."));
  return new BandsPlot(parent, bands, t);
}

// Fragmentation (reserved / live, from each bucket's highest values) and page maps and unmaps
// per bucket (bars: maps up, unmaps down), on the timeline's events.
class FragmentationPlot {
  constructor(parent, t) {
    this.t = t;
    this.view = { from: 0, to: Math.max(1, t.events - 1) };
    const { canvas, ctx, width } = makeCanvas(parent, FRAG_HEIGHT);
    Object.assign(this, { canvas, ctx, width });
    this.canvas.classList.add("fragmentation");
    onHover(canvas, (x) => this.describe(x));
    this.draw();
  }

  setView(view) {
    this.view = { from: view.from, to: view.to };
    this.draw();
  }

  // reserved_max / live_max of bucket i; null where little is live (the ratio means nothing).
  ratio(i) {
    const t = this.t;
    const live = t.live_max[i];
    if (!t.has_reserved || live < 0.05 * Math.max(1, t.peak_live.bytes) || live <= 0) return null;
    return t.reserved_max[i] / live;
  }

  draw() {
    const { ctx, t, width } = this;
    ctx.clearRect(0, 0, width, FRAG_HEIGHT);
    const plotWidth = width - TIMELINE_MARGIN.left - TIMELINE_MARGIN.right;
    const span = Math.max(1, this.view.to - this.view.from);
    const x = (event) => TIMELINE_MARGIN.left + ((Math.max(event, this.view.from) - this.view.from) / span) * plotWidth;
    const first = bucketAt(t, this.view.from), last = bucketAt(t, this.view.to);
    // The axis reaches the 95th percentile of the ratios in view: a spike where little is
    // live would flatten the rest. Higher values are drawn at the top.
    const ratios = [];
    let maxPages = 1;
    for (let i = first; i <= last; i++) {
      const r = this.ratio(i);
      if (r !== null) ratios.push(r);
      maxPages = Math.max(maxPages, t.maps[i] || 0, t.unmaps[i] || 0);
    }
    ratios.sort((a, b) => a - b);
    const top = Math.max(1.1, (ratios.length ? ratios[Math.floor(0.95 * (ratios.length - 1))] : 1) * 1.1);
    const mid = TIMELINE_MARGIN.top + (FRAG_HEIGHT - TIMELINE_MARGIN.top - TIMELINE_MARGIN.bottom) / 2;
    const half = mid - TIMELINE_MARGIN.top;
    const bottom = FRAG_HEIGHT - TIMELINE_MARGIN.bottom;
    const yRatio = (r) => bottom - ((Math.min(r, top) - 1) / (top - 1)) * (bottom - TIMELINE_MARGIN.top);
    ctx.font = "11px system-ui, sans-serif";
    ctx.fillStyle = cssVar("--muted");
    ctx.textAlign = "right";
    for (const r of [1, (1 + top) / 2, top]) ctx.fillText(r.toFixed(2) + "x", TIMELINE_MARGIN.left - 6, yRatio(r) + 4);
    ctx.textAlign = "left";
    ctx.fillText("page maps " + formatCount(maxPages) + " per bucket", TIMELINE_MARGIN.left + 4, TIMELINE_MARGIN.top - 6);
    let bars = 0;
    for (let i = first; i <= last; i++) {
      const x0 = x(t.x[i]);
      const x1 = i + 1 < t.x.length ? x(t.x[i + 1]) : x(this.view.to);
      const w = Math.max(1, x1 - x0);
      if (t.maps[i]) {
        ctx.fillStyle = cssVar("--page-mapped");
        ctx.globalAlpha = 0.45;
        ctx.fillRect(x0, mid - (t.maps[i] / maxPages) * half, w, (t.maps[i] / maxPages) * half);
        bars++;
      }
      if (t.unmaps[i]) {
        ctx.fillStyle = cssVar("--page-unmapped");
        ctx.globalAlpha = 0.45;
        ctx.fillRect(x0, mid, w, (t.unmaps[i] / maxPages) * half);
        bars++;
      }
      ctx.globalAlpha = 1;
    }
    ctx.strokeStyle = cssVar("--peak");
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    let drawing = false, points = 0;
    for (let i = first; i <= last; i++) {
      const r = this.ratio(i);
      if (r === null) {
        drawing = false;
        continue;
      }
      if (drawing) ctx.lineTo(x(t.x[i]), yRatio(r));
      else ctx.moveTo(x(t.x[i]), yRatio(r));
      drawing = true;
      points++;
    }
    ctx.stroke();
    this.canvas.dataset.ratioPoints = String(points);
    this.canvas.dataset.pageBars = String(bars);
    this.canvas.dataset.viewFrom = String(this.view.from);
  }

  describe(px) {
    const plotWidth = this.width - TIMELINE_MARGIN.left - TIMELINE_MARGIN.right;
    if (px < TIMELINE_MARGIN.left || px > this.width - TIMELINE_MARGIN.right) return null;
    const event = this.view.from + ((px - TIMELINE_MARGIN.left) / plotWidth) * (this.view.to - this.view.from);
    const i = bucketAt(this.t, event);
    const r = this.ratio(i);
    return "events from " + formatCount(this.t.x[i]) +
           "\nreserved / live  " + (r === null ? "-" : r.toFixed(3)) +
           "\npages mapped     " + formatCount(this.t.maps[i] || 0) +
           "\npages unmapped   " + formatCount(this.t.unmaps[i] || 0);
  }
}

function renderFragmentation(parent, t) {
  if (!t || t.events === 0 || !t.has_reserved) return null;
  const maps = t.maps.reduce((a, b) => a + b, 0);
  const unmaps = t.unmaps.reduce((a, b) => a + b, 0);
  parent.append(legend([["reserved / live (each bucket's highest)", cssVar("--peak")],
                        ["pages mapped", cssVar("--page-mapped")], ["pages unmapped", cssVar("--page-unmapped")]]));
  parent.append(element("p", { class: "note frag-note" }, plural(maps, "page map") + " and " +
    plural(unmaps, "unmap") + " in the trace (segment_map and segment_unmap events). The ratio is " +
    "not drawn where less than 5% of peak live memory is live; its axis ends at the 95th percentile of the values in view."));
  return new FragmentationPlot(parent, t);
}
