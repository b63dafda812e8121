// cudalloc view, the segment map: every drawn segment laid end to end in address order on one
// strip of bytes, wrapped into rows of equal size, so that area is proportional to memory.
// A thin line marks where each segment starts; a strip under a row shows mapped and unmapped
// pages of virtual-memory segments when the snapshot lists them. Every block in use is drawn at
// least MIN_BLOCK_WIDTH wide, so that a 512-byte block in a 20 GiB map still shows.
// The map can show the blocks at an earlier event (rewound through the model's history), dim
// the segments of other streams, and outline the block an address search found.

const MAP_ROW_HEIGHT = 18;
const MAP_PAGE_STRIP = 3;
const MIN_BLOCK_WIDTH = 2;

// Diagonal stripes for virtual ranges that have no physical memory behind them.
function unmappedPattern(ctx, colour) {
  const tile = document.createElement("canvas");
  tile.width = 6;
  tile.height = 6;
  const t = tile.getContext("2d");
  t.strokeStyle = colour;
  t.globalAlpha = 0.55;
  t.beginPath();
  t.moveTo(0, 6);
  t.lineTo(6, 0);
  t.stroke();
  return ctx.createPattern(tile, "repeat");
}

function stateColours() {
  return {
    states: STATE_VARS.map(cssVar),
    host: cssVar("--state-host"),
    paused: cssVar("--state-paused"),
    mapped: cssVar("--page-mapped"),
    unmapped: cssVar("--page-unmapped"),
  };
}

// Where each segment starts on the strip, and how many bytes one row holds.
function mapLayout(segments, width) {
  const starts = [];
  let total = 0;
  for (const s of segments) {
    starts.push(total);
    total += s.size;
  }
  const rows = Math.min(48, Math.max(6, Math.ceil(Math.sqrt(segments.length) * 3)));
  const bytesPerRow = Math.max(1, Math.ceil(total / rows));
  return { starts, total, rows, bytesPerRow, width };
}

// Calls paint(x, y, w) for each piece of the strip range [begin, end) on its rows.
function forEachPiece(layout, begin, end, paint) {
  let at = begin;
  while (at < end) {
    const row = Math.floor(at / layout.bytesPerRow);
    const rowEnd = Math.min(end, (row + 1) * layout.bytesPerRow);
    const x = ((at - row * layout.bytesPerRow) / layout.bytesPerRow) * layout.width;
    const w = ((rowEnd - at) / layout.bytesPerRow) * layout.width;
    paint(x, row * MAP_ROW_HEIGHT, w);
    at = rowEnd;
  }
}

function blockColour(segment, block, colours) {
  if (segment.paused && block[2] !== 2) return colours.paused;
  if (segment.location === "host" && block[2] !== 2) return colours.host;
  return colours.states[block[2]] || colours.states[2];
}

function drawSegments(ctx, segments, layout, colours, stream) {
  const stripes = unmappedPattern(ctx, colours.unmapped);
  segments.forEach((segment, i) => {
    const start = layout.starts[i];
    ctx.globalAlpha = stream === null || segment.stream === stream ? 1 : 0.18;
    forEachPiece(layout, start, start + segment.size, (x, y, w) => {
      ctx.fillStyle = colours.states[2];
      ctx.fillRect(x, y, w, MAP_ROW_HEIGHT - 1);
    });
    for (const page of segment.pages.filter((p) => !p[2])) {
      ctx.fillStyle = stripes;
      forEachPiece(layout, start + page[0], start + page[0] + page[1], (x, y, w) => {
        ctx.fillRect(x, y, w, MAP_ROW_HEIGHT - 1);
      });
    }
    for (const block of segment.blocks) {
      if (block[2] === 2) continue;
      ctx.fillStyle = blockColour(segment, block, colours);
      forEachPiece(layout, start + block[0], start + block[0] + block[1], (x, y, w) => {
        ctx.fillRect(x, y, Math.max(w, MIN_BLOCK_WIDTH), MAP_ROW_HEIGHT - 1 - MAP_PAGE_STRIP);
      });
    }
    for (const page of segment.pages) {
      ctx.fillStyle = page[2] === 2 ? colours.host : page[2] ? colours.mapped : colours.unmapped;
      forEachPiece(layout, start + page[0], start + page[0] + page[1], (x, y, w) => {
        ctx.fillRect(x, y + MAP_ROW_HEIGHT - 1 - MAP_PAGE_STRIP, w, MAP_PAGE_STRIP);
      });
    }
    forEachPiece(layout, start, start + 1, (x, y) => {
      ctx.fillStyle = "#1f2328";
      ctx.fillRect(x, y, 1.5, MAP_ROW_HEIGHT - 1);
    });
  });
  ctx.globalAlpha = 1;
}

// The last index i with values[i] <= target (values sorted ascending), or -1.
function lastAtOrBelow(values, target, key) {
  let lo = -1;
  let hi = values.length - 1;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (key(values[mid]) <= target) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// The segment index and the offset in it under (x, y), or null.
function pointAt(layout, x, y) {
  const row = Math.floor(y / MAP_ROW_HEIGHT);
  if (row < 0 || row >= layout.rows || x < 0 || x > layout.width) return null;
  const at = row * layout.bytesPerRow + (x / layout.width) * layout.bytesPerRow;
  if (at >= layout.total) return null;
  const i = lastAtOrBelow(layout.starts, at, (v) => v);
  return { index: i, offset: at - layout.starts[i] };
}

// The block of `segment` holding `offset`, or null.
function blockAt(segment, offset) {
  const block = segment.blocks[lastAtOrBelow(segment.blocks, offset, (b) => b[0])];
  return block && offset < block[0] + block[1] ? block : null;
}

function blockLines(segment, block, sites) {
  let state = segment.location === "host" && block[2] !== 2 ? "host tier" : STATE_NAMES[block[2]];
  if (segment.paused && block[2] !== 2) state += " (region " + segment.region + " paused)";
  const lines = ["block    " + addHex(segment.address, block[0]),
                 "size     " + formatBytes(block[1]) + (block[3] ? " (requested " + formatBytes(block[3]) + ")" : ""),
                 "state    " + state];
  if (block[4] > 1) lines.push("         " + formatCount(block[4]) + " blocks merged for drawing");
  if (block[5] >= 0 && sites && sites[block[5]]) {
    sites[block[5]].split("\n").forEach((frame, i) => lines.push((i ? "         " : "at       ") + frame));
  }
  return lines;
}

function segmentLine(segment) {
  return "segment  " + segment.address + ", " + formatBytes(segment.size) +
         (segment.type ? " " + segment.type : "") + (segment.expandable ? ", expandable" : "") +
         (segment.location !== "device" ? ", " + segment.location : "") +
         (segment.region ? ", region " + segment.region + (segment.paused ? " (paused)" : "") : "");
}

function describePoint(segments, sites, point) {
  const segment = segments[point.index];
  const block = blockAt(segment, point.offset);
  const lines = block ? blockLines(segment, block, sites) : [];
  const page = segment.pages.find((p) => point.offset >= p[0] && point.offset < p[0] + p[1]);
  if (page) {
    const state = page[2] === 2 ? "mapped, in host memory" : page[2] ? "mapped" : "unmapped virtual range";
    lines.push("page     " + state + ", " + formatBytes(page[1]));
  }
  lines.push("stream   " + segment.stream, segmentLine(segment));
  return lines.join("\n");
}

function mapLegend(segments, colours) {
  const entries = STATE_NAMES.map((name, i) => [name, colours.states[i]]);
  if (segments.some((s) => s.location === "host")) entries.push(["host tier", colours.host]);
  if (segments.some((s) => s.paused)) entries.push(["paused region", colours.paused]);
  if (segments.some((s) => s.pages.some((p) => p[2] === 1))) entries.push(["mapped page", colours.mapped]);
  if (segments.some((s) => s.pages.some((p) => p[2] === 2))) entries.push(["host-located page", colours.host]);
  if (segments.some((s) => s.pages.some((p) => !p[2]))) {
    entries.push(["unmapped virtual range", colours.unmapped]);
  }
  return legend(entries);
}

// The drawing of one device's segment map, and what it shows: the snapshot's blocks or those
// at an earlier event (`at`), every stream or one (`stream`), and an outlined block.
class SegmentMapPlot {
  constructor(parent, map, history) {
    this.map = map;
    this.segments = map.segments;
    this.history = history && history.count > 0 ? history : null;
    this.colours = stateColours();
    this.at = null;
    this.stream = null;
    this.highlight = null;  // {index, offset, size}: a range of a drawn segment
    this.rewound = [];
    const probe = element("div");
    parent.append(probe);
    const width = Math.max(200, probe.clientWidth || 800);
    probe.remove();
    this.layout = mapLayout(this.segments, width);
    const { canvas, ctx } = makeCanvas(parent, this.layout.rows * MAP_ROW_HEIGHT);
    canvas.classList.add("segment-map");
    this.canvas = canvas;
    this.ctx = ctx;
    this.atNote = element("p", { class: "note map-at" });
    parent.append(this.atNote);
    // Where each segment starts, in bytes from history.base.
    this.offsets = this.segments.map((s) => (this.history ? historyOffset(this.history, BigInt(s.address)) : 0));
    onHover(canvas, (x, y) => this.describe(x, y));
    this.draw();
  }

  draw() {
    const { ctx, layout } = this;
    ctx.clearRect(0, 0, layout.width, layout.rows * MAP_ROW_HEIGHT);
    drawSegments(ctx, this.segments, layout, this.colours, this.stream);
    this.rewound = this.at === null ? [] : rewind(this.history, this.at);
    const outside = this.drawRewound();
    if (this.highlight) this.drawHighlight();
    this.canvas.dataset.atEvent = this.at === null ? "snapshot" : String(this.at);
    this.canvas.dataset.stream = this.stream === null ? "all" : this.stream;
    this.atNote.textContent = this.at === null ? "" : "Blocks at event " + formatCount(this.at) +
      (outside > 0 ? "; " + plural(outside, "block") + " in use then lie in memory released since, not drawn." : ".");
  }

  // Calls paint(x, y, w) for the pieces of the history range [offset, offset + size) that
  // lie in drawn segments. Returns whether there was one.
  forEachHistoryPiece(offset, size, paint) {
    let found = false;
    this.segments.forEach((segment, i) => {
      const lo = Math.max(offset, this.offsets[i]);
      const hi = Math.min(offset + size, this.offsets[i] + segment.size);
      if (lo >= hi) return;
      found = true;
      const start = this.layout.starts[i] + (lo - this.offsets[i]);
      forEachPiece(this.layout, start, start + (hi - lo), paint);
    });
    return found;
  }

  // The rewound ranges over the snapshot's blocks; returns how many blocks in use are outside.
  drawRewound() {
    let outside = 0;
    const { ctx, colours } = this;
    for (const change of this.rewound) {
      ctx.fillStyle = change.state === UNRESERVED ? cssVar("--unreserved") : colours.states[change.state];
      const inUse = change.state === 0 || change.state === 1;
      // As wide as the snapshot's blocks are drawn, so that a rewound one covers them.
      const drawn = this.forEachHistoryPiece(change.offset, change.size, (x, y, w) => {
        ctx.fillRect(x, y, Math.max(w, MIN_BLOCK_WIDTH), MAP_ROW_HEIGHT - 1 - MAP_PAGE_STRIP);
      });
      if (inUse && !drawn) outside += 1;
    }
    return outside;
  }

  drawHighlight() {
    const { ctx, layout, highlight } = this;
    const start = layout.starts[highlight.index] + highlight.offset;
    ctx.strokeStyle = cssVar("--highlight");
    ctx.lineWidth = 2;
    forEachPiece(layout, start, start + highlight.size, (x, y, w) => {
      ctx.strokeRect(x - 1, y + 1, Math.max(w, MIN_BLOCK_WIDTH) + 2, MAP_ROW_HEIGHT - 3);
    });
  }

  // The state at event `at` of the rewound range holding the point, or null.
  rewoundStateAt(point) {
    const offset = this.offsets[point.index] + point.offset;
    for (let i = this.rewound.length - 1; i >= 0; i--) {
      const c = this.rewound[i];
      if (offset >= c.offset && offset < c.offset + c.size) return c.state;
    }
    return null;
  }

  describe(x, y) {
    const point = pointAt(this.layout, x, y);
    if (!point) return null;
    let text = describePoint(this.segments, this.map.sites || [], point);
    if (this.at !== null) {
      const state = this.rewoundStateAt(point);
      const then = state === null ? "as in the snapshot" : state === UNRESERVED ? "not reserved" : STATE_NAMES[state];
      text = "at event " + formatCount(this.at) + ": " + then + "\n" + text;
    }
    return text;
  }

  // Finds the drawn block holding `address` (a BigInt); outlines it. Returns
  // {index, segment, block} or null.
  find(address) {
    for (let i = 0; i < this.segments.length; i++) {
      const segment = this.segments[i];
      const base = BigInt(segment.address);
      if (address < base || address >= base + BigInt(segment.size)) continue;
      const block = blockAt(segment, Number(address - base));
      this.highlight = block ? { index: i, offset: block[0], size: block[1] } : null;
      this.draw();
      return { index: i, segment, block };
    }
    this.highlight = null;
    this.draw();
    return null;
  }
}

function mapNote(map, layout) {
  let note = plural(map.segments.length, "segment") + ", " + plural(map.blocks_total, "block") +
             "; one row is " + formatBytes(layout.bytesPerRow) + ".";
  if (map.blocks_drawn < map.blocks_total) {
    note += " Neighbouring blocks of one state are merged for drawing (" +
            plural(map.blocks_drawn, "run") + ").";
  }
  if (map.segments_left_out > 0) {
    const n = map.segments_left_out;
    note += " The " + (n === 1 ? "smallest segment is" : formatCount(n) + " smallest segments are") + " not drawn.";
  }
  return note;
}

// Draws the segment map of one device into `parent`. Returns the plot, or null when there is
// nothing to draw.
function renderSegmentMap(parent, map, history) {
  if (map.segments.length === 0) {
    parent.append(element("p", { class: "note" }, "No segments: nothing was reserved when " +
                          "the snapshot was taken."));
    return null;
  }
  parent.append(mapLegend(map.segments, stateColours()));
  const plot = new SegmentMapPlot(parent, map, history);
  parent.append(element("p", { class: "note" }, mapNote(map, plot.layout)));
  return plot;
}
