// cudalloc view, the page: one section per device (summary, fragmentation, timeline with its
// out-of-memory events, segment map with the event slider, stream filter and address search,
// largest allocations) and the allocator's settings, built from the embedded model.

function summaryPanel(device) {
  const s = device.summary;
  const hostTier = s.host_reserved ? [["host tier (host memory, not reserved)",
                                         formatBytes(s.host_reserved)]] : [];
  return panel("Now (when the snapshot was taken)", figures([
    ["reserved (device memory)", formatBytes(s.reserved)],
    ...hostTier,
    ["allocated", formatBytes(s.allocated) + " in " + plural(s.allocations, "block")],
    ["requested", formatBytes(s.requested)],
    ["pending free", formatBytes(Math.max(0, s.active - s.allocated)) + " in " +
                     plural(s.pending_blocks, "block")],
    [s.host_reserved ? "cached (reserved + host tier - active)" : "cached (reserved - active)",
     formatBytes(s.cached)],
    ["segments", formatCount(s.segments)],
  ]));
}

function fragmentationPanel(device) {
  const f = device.fragmentation;
  const rows = [];
  if (f.peak_source) {
    rows.push(["peak reserved", formatBytes(f.peak_reserved)],
              ["peak live", formatBytes(f.peak_live)],
              ["peak reserved / peak live",
               f.peak_ratio ? f.peak_ratio.toFixed(3) : "-"]);
  }
  rows.push(["reserved but unallocated now", formatBytes(f.reserved_unallocated_now)],
            ["free blocks, total", formatBytes(f.free_bytes)],
            ["largest free block", formatBytes(f.largest_free_block)]);
  const box = panel("Fragmentation", figures(rows));
  if (f.peak_source) {
    box.append(element("p", { class: "note peak-source", "data-peak-reserved": f.peak_reserved },
                       "Peaks from the " + f.peak_source + ". Reserved is device memory held " +
                       "from the driver, each physical page once (cudalloc's reserved_bytes)."));
  }
  return box;
}

function topAllocationsPanel(device) {
  const rows = device.top_allocations;
  if (rows.length === 0) return panel("Largest allocations", element("p", { class: "note" }, "None."));
  const head = element("tr", {}, element("th", {}, "address"), element("th", { class: "num" }, "size"),
                       element("th", { class: "num" }, "requested"), element("th", {}, "state"),
                       element("th", {}, "stream"), element("th", {}, "segment"));
  const withSites = rows.some((r) => r.site);
  if (withSites) head.append(element("th", {}, "allocated at"));
  const table = element("table", { class: "top-allocations" }, head);
  for (const r of rows) {
    const row = element("tr", { "data-stream": r.stream },
                        element("td", { class: "mono" }, r.address),
                        element("td", { class: "num" }, formatBytes(r.size)),
                        element("td", { class: "num" }, r.requested ? formatBytes(r.requested) : "-"),
                        element("td", {}, STATE_NAMES[r.state]),
                        element("td", { class: "mono" }, r.stream),
                        element("td", { class: "mono" }, r.segment));
    if (withSites) row.append(element("td", { class: "mono" }, r.site || "-"));
    table.append(row);
  }
  return panel("Largest allocations", table);
}

// The streams of the device's segments and events, for the stream filter.
function deviceStreams(device) {
  const streams = new Set(device.map.segments.map((s) => s.stream));
  for (const s of (device.history && device.history.streams) || []) streams.add(s);
  return Array.from(streams).sort();
}

// The slider that picks the event the segment map shows (the last one: the snapshot).
function eventSlider(history, onChange) {
  const last = historyLastEvent(history);
  const slider = element("input", { type: "range", class: "event-slider", min: String(history.first - 1),
                                    max: String(last), value: String(last), step: "1" });
  const label = element("span", { class: "slider-label" });
  const show = () => {
    const at = Number(slider.value);
    label.textContent = at === last ? "at the snapshot (after event " + formatCount(last) + ")"
                                    : "at event " + formatCount(at);
  };
  slider.addEventListener("input", () => {
    show();
    onChange(Number(slider.value) === last ? null : Number(slider.value));
  });
  show();
  const earliest = history.first > 0 ? " The page holds the last " + formatCount(history.count) +
                                       " events: the map goes back to event " + formatCount(history.first - 1) + "." : "";
  return { slider, label, box: element("label", { class: "control" }, "Blocks ", slider, label),
           note: earliest };
}

function streamFilter(device, onChange) {
  const select = element("select", { class: "stream-filter" }, element("option", { value: "" }, "every stream"));
  for (const s of deviceStreams(device)) select.append(element("option", { value: s }, "stream " + s));
  select.addEventListener("change", () => onChange(select.value || null));
  return { select, box: element("label", { class: "control" }, "Show ", select) };
}

function addressSearch(onFind) {
  const input = element("input", { type: "text", class: "address-search", placeholder: "0x7f...", size: "18" });
  const button = element("button", { type: "button" }, "Find");
  const run = () => onFind(input.value);
  button.addEventListener("click", run);
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter") run();
  });
  return { input, button, box: element("span", { class: "control" }, "Address ", input, button) };
}

// What an address search found: the block, and the events of the history at the address.
function searchResult(device, plot, text) {
  const out = element("div", { class: "search-result" });
  const address = parseAddress(text);
  if (address === null) {
    out.append(element("p", { class: "note" }, "Not an address: " + text));
    return out;
  }
  const found = plot.find(address);
  out.dataset.found = found && found.block ? "block" : found ? "segment" : "none";
  if (found && found.block) {
    out.append(element("pre", { class: "found-block" }, blockLines(found.segment, found.block, device.map.sites || []).join("\n") +
                       "\nstream   " + found.segment.stream + "\n" + segmentLine(found.segment)));
  } else {
    out.append(element("p", { class: "note" }, found ? "In segment " + found.segment.address + ", in no drawn block."
                                                   : "No segment of the snapshot holds " + text.trim() + "."));
  }
  out.append(historyTable(device.history, address));
  return out;
}

function historyTable(h, address) {
  if (!h || h.count === 0) return element("p", { class: "note" }, "The snapshot has no trace to search.");
  const rows = eventsAt(h, historyOffset(h, address));
  if (rows.length === 0) return element("p", { class: "note" }, "No event of the last " + formatCount(h.count) + " touched it.");
  const table = element("table", { class: "address-history" },
                        element("tr", {}, element("th", { class: "num" }, "event"), element("th", {}, "action"),
                                element("th", {}, "block"), element("th", { class: "num" }, "size"),
                                element("th", {}, "stream")));
  for (const i of rows) {
    table.append(element("tr", {}, element("td", { class: "num" }, formatCount(h.first + i)),
                         element("td", {}, KIND_NAMES[h.kind[i]]),
                         element("td", { class: "mono" }, addHex(h.base, h.offset[i])),
                         element("td", { class: "num" }, formatBytes(h.size[i])),
                         element("td", { class: "mono" }, h.streams[h.stream[i]])));
  }
  return table;
}

// The controls over one device's plots: the event slider, the stream filter, address search.
function deviceControls(device, timeline, map, container) {
  const bar = element("div", { class: "controls" });
  const result = element("div");
  const history = device.history;
  if (history && history.count > 0) {
    const picker = eventSlider(history, (at) => {
      map.at = at;
      map.draw();
      if (timeline) timeline.setCursor(at === null ? null : at);
    });
    bar.append(picker.box);
    if (timeline) {
      timeline.onPick = (event) => {
        picker.slider.value = String(Math.max(history.first - 1, Math.min(event, historyLastEvent(history))));
        picker.slider.dispatchEvent(new Event("input"));
      };
    }
    if (picker.note) container.append(element("p", { class: "note" }, picker.note));
  }
  const filter = streamFilter(device, (stream) => {
    map.stream = stream;
    map.draw();
    for (const row of document.querySelectorAll("#device-" + device.device + " table.top-allocations tr[data-stream]")) {
      row.hidden = stream !== null && row.dataset.stream !== stream;
    }
  });
  const search = addressSearch((text) => {
    result.replaceChildren(searchResult(device, map, text));
  });
  bar.append(filter.box, search.box);
  container.prepend(bar);
  container.append(result);
  return { find: (address) => {
    search.input.value = address;
    search.button.click();
    search.input.scrollIntoView({ block: "center" });
  } };
}

// Builds one device's section; returns the number of plots drawn.
function renderDevice(device, container) {
  const section = element("section", { class: "device", id: "device-" + device.device });
  container.append(section);
  section.append(element("h2", {}, "Device " + device.device));
  section.append(element("div", { class: "grid" }, summaryPanel(device), fragmentationPanel(device)));
  const timelineBox = panel("Live and reserved memory over the trace");
  const bandsBox = panel("Allocations over the trace");
  const fragBox = panel("Fragmentation and page maps over the trace");
  const mapBody = element("div");
  section.append(timelineBox, whoHoldsPanel(device), bandsBox, fragBox, panel("Segment map", mapBody),
                 topAllocationsPanel(device));
  const timeline = renderTimeline(timelineBox, device.timeline, device.trace);
  const bands = timeline ? renderBands(bandsBox, device.bands, device.timeline) : null;
  const frag = timeline ? renderFragmentation(fragBox, device.timeline) : null;
  for (const [plot, box] of [[bands, bandsBox], [frag, fragBox]]) {
    if (plot) timeline.followers.push(plot);
    else box.remove();
  }
  const map = renderSegmentMap(mapBody, device.map, device.history);
  const controls = map ? deviceControls(device, timeline, map, mapBody) : null;
  if (bands && controls) bands.onPick = controls.find;
  return (timeline ? 1 : 0) + (map ? 1 : 0) + (bands ? 1 : 0) + (frag ? 1 : 0);
}

// A snapshot written by snapshot_on_oom says which request failed.
function writtenAtOom(oom) {
  let text = "Written when an allocation failed for lack of memory (error " + formatCount(oom.sequence || 0) +
             " of the process): " + formatBytes(oom.size) + " on device " + oom.device + ", stream 0x" +
             Number(oom.stream || 0).toString(16);
  if (oom.device_free !== undefined) text += ", with " + formatBytes(oom.device_free) + " of the device free";
  text += ".";
  const box = element("p", { class: "warning written-at-oom" }, text);
  if (oom.message) box.append(element("br"), element("span", { class: "mono" }, oom.message));
  return box;
}

// One table: each setting once, its value in human units, and where PyTorch's
// allocator_settings hold keys cudalloc's settings do not, those below them.
function renderSettings(settings) {
  const body = document.getElementById("settings-body");
  const c = settings.cudalloc;
  if (c) {
    body.append(element("p", {}, "cudalloc " + (c.version || "") + ", CUDALLOC_CONF='" + (c.conf || "") + "'"));
  }
  const rows = settings.rows || [];
  if (rows.length > 0) {
    const table = element("table", { id: "settings-table" },
      element("tr", {}, element("th", {}, "setting"), element("th", {}, "value"), element("th", {}, "from")));
    for (const row of rows) {
      const recorded = typeof row.value === "object" ? JSON.stringify(row.value) : String(row.value);
      const value = element("td", { class: "mono", title: "recorded as " + recorded }, row.shown);
      table.append(element("tr", {}, element("td", { class: "mono" }, row.key), value, element("td", {}, row.source)));
    }
    body.append(table);
  }
  if (!body.hasChildNodes()) body.append(element("p", { class: "note" }, "The snapshot records no settings."));
}

// True if some pixel of the canvas was painted.
function hasInk(canvas) {
  const data = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
  for (let i = 3; i < data.length; i += 4) {
    if (data[i] !== 0) return true;
  }
  return false;
}

function main() {
  const model = JSON.parse(document.getElementById("model").textContent);
  let source = model.source + " (" + model.format + ", " + formatCount(model.trace_events) + " trace events)";
  if (model.meta && model.meta.workload) source += ", workload " + model.meta.workload;
  document.getElementById("source").textContent = source;
  if (model.written_at_oom) document.getElementById("errors").before(writtenAtOom(model.written_at_oom));
  const container = document.getElementById("devices");
  let drawn = 0;
  for (const device of model.devices) drawn += renderDevice(device, container);
  if (model.devices.length === 0) {
    container.append(panel("Empty snapshot", element("p", { class: "note" }, "No segments and no trace.")));
  }
  renderSettings(model.settings);
  if (document.body.dataset.rendered !== "error") {
    const canvases = Array.from(document.querySelectorAll("canvas"));
    const inked = canvases.length > 0 && canvases.every(hasInk);
    document.body.dataset.rendered = drawn > 0 && inked ? "ok" : "empty";
  }
}

try {
  main();
} catch (error) {
  reportError(String(error && error.stack ? error.stack : error));
}
