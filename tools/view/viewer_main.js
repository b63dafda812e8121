// cudalloc view, the page: one section per device (summary, timeline, segment map, largest
// allocations, fragmentation) and the allocator's settings, built from the embedded model.

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
  if (f.peak_source) box.append(element("p", { class: "note" }, "Peaks from the " + f.peak_source + "."));
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
  const table = element("table", {}, head);
  for (const r of rows) {
    const row = element("tr", {},
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

// Builds one device's section; returns the number of plots drawn.
function renderDevice(device, container) {
  const section = element("section", { class: "device" });
  container.append(section);
  section.append(element("h2", {}, "Device " + device.device));
  section.append(element("div", { class: "grid" }, summaryPanel(device), fragmentationPanel(device)));
  const timeline = panel("Live and reserved memory over the trace");
  const map = panel("Segment map");
  section.append(timeline, map, topAllocationsPanel(device));
  let drawn = 0;
  if (renderTimeline(timeline, device.timeline)) drawn += 1;
  if (renderSegmentMap(map, device.map)) drawn += 1;
  return drawn;
}

function settingsTable(object) {
  const table = element("table");
  for (const [key, value] of Object.entries(object)) {
    const text = typeof value === "object" ? JSON.stringify(value) : String(value);
    table.append(element("tr", {}, element("td", { class: "mono" }, key), element("td", { class: "mono" }, text)));
  }
  return table;
}

function renderSettings(settings) {
  const body = document.getElementById("settings-body");
  const c = settings.cudalloc;
  if (c) {
    body.append(element("h3", {}, "cudalloc " + (c.version || "") + ", CUDALLOC_CONF='" + (c.conf || "") + "'"));
    if (c.settings) body.append(settingsTable(c.settings));
  }
  if (settings.allocator_settings) {
    body.append(element("h3", {}, "allocator_settings"), settingsTable(settings.allocator_settings));
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
