// cudalloc view, the segment map: every drawn segment laid end to end in address order on one
// strip of bytes, wrapped into rows of equal size, so that area is proportional to memory.
// A thin line marks where each segment starts; a strip under a row shows mapped and unmapped
// pages of virtual-memory segments when the snapshot lists them.

const MAP_ROW_HEIGHT = 18;
const MAP_PAGE_STRIP = 3;

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
  if (segment.location === "host" && block[2] !== 2) return colours.host;
  return colours.states[block[2]] || colours.states[2];
}

function drawSegments(ctx, segments, layout, colours) {
  const stripes = unmappedPattern(ctx, colours.unmapped);
  segments.forEach((segment, i) => {
    const start = layout.starts[i];
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
        ctx.fillRect(x, y, Math.max(w, 0.5), MAP_ROW_HEIGHT - 1 - MAP_PAGE_STRIP);
      });
    }
    for (const page of segment.pages) {
      ctx.fillStyle = page[2] ? colours.mapped : colours.unmapped;
      forEachPiece(layout, start + page[0], start + page[0] + page[1], (x, y, w) => {
        ctx.fillRect(x, y + MAP_ROW_HEIGHT - 1 - MAP_PAGE_STRIP, w, MAP_PAGE_STRIP);
      });
    }
    forEachPiece(layout, start, start + 1, (x, y) => {
      ctx.fillStyle = "#1f2328";
      ctx.fillRect(x, y, 1.5, MAP_ROW_HEIGHT - 1);
    });
  });
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

function describeBlock(segments, sites, layout, x, y) {
  const row = Math.floor(y / MAP_ROW_HEIGHT);
  if (row < 0 || row >= layout.rows || x < 0 || x > layout.width) return null;
  const at = row * layout.bytesPerRow + (x / layout.width) * layout.bytesPerRow;
  if (at >= layout.total) return null;
  const i = lastAtOrBelow(layout.starts, at, (v) => v);
  const segment = segments[i];
  const offset = at - layout.starts[i];
  const block = segment.blocks[lastAtOrBelow(segment.blocks, offset, (b) => b[0])];
  const lines = [];
  if (block && offset < block[0] + block[1]) {
    const state = segment.location === "host" && block[2] !== 2 ? "host tier" : STATE_NAMES[block[2]];
    lines.push("block    " + addHex(segment.address, block[0]),
               "size     " + formatBytes(block[1]) + (block[3] ? " (requested " + formatBytes(block[3]) + ")" : ""),
               "state    " + state);
    if (block[4] > 1) lines.push("         " + formatCount(block[4]) + " blocks merged for drawing");
    if (block[5] >= 0 && sites && sites[block[5]]) {
      sites[block[5]].split("\n").forEach((frame, i) => lines.push((i ? "         " : "at       ") + frame));
    }
  }
  const page = segment.pages.find((p) => offset >= p[0] && offset < p[0] + p[1]);
  if (page) lines.push("page     " + (page[2] ? "mapped" : "unmapped virtual range") + ", " + formatBytes(page[1]));
  lines.push("stream   " + segment.stream,
             "segment  " + segment.address + ", " + formatBytes(segment.size) +
             (segment.type ? " " + segment.type : "") + (segment.expandable ? ", expandable" : "") +
             (segment.location !== "device" ? ", " + segment.location : ""));
  return lines.join("\n");
}

function mapLegend(segments, colours) {
  const entries = STATE_NAMES.map((name, i) => [name, colours.states[i]]);
  if (segments.some((s) => s.location === "host")) entries.push(["host tier", colours.host]);
  if (segments.some((s) => s.pages.some((p) => p[2]))) entries.push(["mapped page", colours.mapped]);
  if (segments.some((s) => s.pages.some((p) => !p[2]))) {
    entries.push(["unmapped virtual range", colours.unmapped]);
  }
  return legend(entries);
}

// Draws the segment map of one device into `parent`. Returns true if something was drawn.
function renderSegmentMap(parent, map) {
  const segments = map.segments;
  if (segments.length === 0) {
    parent.append(element("p", { class: "note" }, "No segments: nothing was reserved when " +
                          "the snapshot was taken."));
    return false;
  }
  const colours = stateColours();
  parent.append(mapLegend(segments, colours));
  const probe = element("div");
  parent.append(probe);
  const width = Math.max(200, probe.clientWidth || 800);
  probe.remove();
  const layout = mapLayout(segments, width);
  const { canvas, ctx } = makeCanvas(parent, layout.rows * MAP_ROW_HEIGHT);
  drawSegments(ctx, segments, layout, colours);
  onHover(canvas, (x, y) => describeBlock(segments, map.sites || [], layout, x, y));
  let note = plural(segments.length, "segment") + ", " + plural(map.blocks_total, "block") +
             "; one row is " + formatBytes(layout.bytesPerRow) + ".";
  if (map.blocks_drawn < map.blocks_total) {
    note += " Neighbouring blocks of one state are merged for drawing (" +
            formatCount(map.blocks_drawn) + " runs).";
  }
  if (map.segments_left_out > 0) {
    note += " " + formatCount(map.segments_left_out) + " smallest segments are not drawn.";
  }
  parent.append(element("p", { class: "note" }, note));
  return true;
}
