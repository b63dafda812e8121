// Drives a `cudalloc view` page the way a person does (mouse on the timeline, the event
// slider, address search, the stream filter) and checks what the page drew and wrote.
// check_viewer.sh appends it to a copy of a page, after the page's own script, and names the
// checks to run in the URL's fragment ("#zoom,slider,search"). Each check writes "ok: ..." or
// "FAIL: ..." lines into the pre element #test-results; body[data-tested="done"] marks the end.
"use strict";

(function () {
  const results = [];
  const ok = (text) => results.push("ok: " + text);
  const fail = (text) => results.push("FAIL: " + text);
  const expect = (condition, text) => (condition ? ok(text) : fail(text));

  // Pixels of the canvas whose colour is `hex` (#rrggbb), exactly.
  function countColour(canvas, hex) {
    const want = [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16));
    const data = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
    let n = 0;
    for (let i = 0; i < data.length; i += 4) {
      if (data[i] === want[0] && data[i + 1] === want[1] && data[i + 2] === want[2] && data[i + 3] === 255) n++;
    }
    return n;
  }

  function picture(canvas) {
    const data = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
    let hash = 0;
    for (let i = 0; i < data.length; i += 7) hash = (hash * 31 + data[i]) | 0;
    return hash;
  }

  function mouse(target, type, canvas, x, y) {
    const box = canvas.getBoundingClientRect();
    target.dispatchEvent(new MouseEvent(type, { bubbles: true, clientX: box.left + x, clientY: box.top + y }));
  }

  const colour = (name) => getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  const device = document.querySelector("section.device");
  const timeline = () => device.querySelector("canvas.timeline");
  const map = () => device.querySelector("canvas.segment-map");
  const slider = () => device.querySelector("input.event-slider");

  const checks = {
    // Dragging across the plot zooms into the events under it; a double click shows all.
    zoom() {
      const canvas = timeline();
      const all = [canvas.dataset.viewFrom, canvas.dataset.viewTo];
      const before = picture(canvas);
      const width = canvas.clientWidth;
      mouse(canvas, "mousedown", canvas, width * 0.4, 100);
      mouse(canvas, "mousemove", canvas, width * 0.6, 100);
      mouse(window, "mouseup", canvas, width * 0.6, 100);
      const from = Number(canvas.dataset.viewFrom);
      const to = Number(canvas.dataset.viewTo);
      expect(from > Number(all[0]) && to < Number(all[1]) && from < to,
             "drag zooms the timeline to events " + from + " .. " + to + " of " + all.join(" .. "));
      expect(picture(canvas) !== before, "the zoomed timeline is drawn anew");
      expect(/Double-click/.test(device.querySelector(".timeline-view").textContent), "the note says how to zoom out");
      canvas.dispatchEvent(new MouseEvent("dblclick", { bubbles: true }));
      expect(canvas.dataset.viewFrom === all[0] && canvas.dataset.viewTo === all[1], "a double click shows every event again");
    },
    // The slider rewinds the map; before the first event of a whole trace nothing is in use.
    slider() {
      const s = slider();
      const canvas = map();
      const allocated = colour("--state-allocated");
      const atSnapshot = countColour(canvas, allocated);
      s.value = String(Number(s.max) - Math.floor((Number(s.max) - Number(s.min)) / 2));
      s.dispatchEvent(new Event("input"));
      expect(canvas.dataset.atEvent === s.value, "the map shows event " + s.value + " (" + canvas.dataset.atEvent + ")");
      const middle = countColour(canvas, allocated);
      expect(middle !== atSnapshot, "the blocks in use at event " + s.value + " differ from the snapshot's (" +
             middle + " and " + atSnapshot + " pixels)");
      expect(countColour(timeline(), colour("--cursor")) > 0, "the timeline marks the event the map shows");
      s.value = s.min;
      s.dispatchEvent(new Event("input"));
      expect(countColour(canvas, allocated) === 0 && atSnapshot > 0,
             "before the first event no block is in use (" + countColour(canvas, allocated) + " pixels)");
      s.value = s.max;
      s.dispatchEvent(new Event("input"));
      expect(canvas.dataset.atEvent === "snapshot" && countColour(canvas, allocated) === atSnapshot,
             "at the slider's end the map is the snapshot's again");
    },
    // A click on the timeline picks the event the map shows.
    pick() {
      const canvas = timeline();
      mouse(canvas, "mousedown", canvas, canvas.clientWidth * 0.5, 120);
      mouse(window, "mouseup", canvas, canvas.clientWidth * 0.5, 120);
      canvas.dispatchEvent(new MouseEvent("mouseleave"));
      const s = slider();
      expect(Number(s.value) > Number(s.min) && Number(s.value) < Number(s.max) && map().dataset.atEvent === s.value,
             "a click on the timeline moves the slider and the map to event " + s.value);
    },
    // Searching the largest allocation's address outlines it and lists its events.
    search() {
      const first = device.querySelector("table.top-allocations tr[data-stream] td");
      const address = first.textContent;
      const input = device.querySelector("input.address-search");
      input.value = address;
      device.querySelector(".controls button").click();
      const result = device.querySelector(".search-result");
      expect(result && result.dataset.found === "block", "address " + address + " is found in a block");
      expect(result && result.querySelector("pre").textContent.includes(address), "the block's description names it");
      const rows = result ? Array.from(result.querySelectorAll("table.address-history tr")).slice(1) : [];
      expect(rows.some((r) => r.children[1].textContent === "alloc"), "its history lists an alloc (" + rows.length + " events)");
      expect(countColour(map(), colour("--highlight")) > 0, "the block is outlined in the map");
      input.value = "0x1";
      device.querySelector(".controls button").click();
      expect(device.querySelector(".search-result").dataset.found === "none", "an address outside every segment is not found");
      input.value = address;
      device.querySelector(".controls button").click();
    },
    // One stream's segments stay; the others are dimmed, their rows hidden.
    streams() {
      const select = device.querySelector("select.stream-filter");
      const canvas = map();
      const allocated = colour("--state-allocated");
      const all = countColour(canvas, allocated);
      const other = Array.from(select.options).map((o) => o.value).find((v) => v && v !== "0x0");
      select.value = other;
      select.dispatchEvent(new Event("change"));
      const hidden = device.querySelectorAll("table.top-allocations tr[data-stream][hidden]").length;
      const shown = device.querySelectorAll("table.top-allocations tr[data-stream]:not([hidden])").length;
      expect(canvas.dataset.stream === other && hidden > 0 && shown > 0,
             "stream " + other + ": " + shown + " rows shown, " + hidden + " hidden");
      expect(countColour(canvas, allocated) < all, "other streams' blocks are dimmed in the map");
      select.value = "";
      select.dispatchEvent(new Event("change"));
      expect(countColour(canvas, allocated) === all, "every stream shows again");
    },
    // Out-of-memory events: marks on the timeline, a tooltip, a table.
    oom() {
      const canvas = timeline();
      expect(countColour(canvas, colour("--oom")) > 0, "the timeline marks the out-of-memory events");
      const rows = device.querySelectorAll("table.ooms tr").length - 1;
      expect(rows > 0, rows + " out-of-memory events listed");
      const markX = Number(canvas.dataset.firstOomX);
      mouse(canvas, "mousemove", canvas, markX, 5);
      const tip = document.getElementById("tooltip").textContent;
      expect(/out of memory at event/.test(tip) && /failed/.test(tip) && /reserved/.test(tip),
             "hovering over a mark shows the request and the state then: " + tip.replace(/\n/g, " | "));
    },
    // The trace is said to be incomplete, with the count.
    incomplete() {
      const note = device.querySelector(".trace-note");
      expect(note && /Incomplete trace/.test(note.textContent) && /[0-9]/.test(note.textContent),
             "the page says the trace is incomplete: " + (note ? note.textContent : "no note"));
    },
    // The panel's peak reserved is the timeline's on a trace that holds every event.
    peaks() {
      const panel = device.querySelector(".peak-source");
      const trace = device.querySelector(".peaks");
      expect(panel && trace && panel.dataset.peakReserved === trace.dataset.peakReserved,
             "peak reserved: panel " + (panel && panel.dataset.peakReserved) + ", timeline " +
             (trace && trace.dataset.peakReserved));
    },
    // Who holds memory: the flame summary and largest allocations at the snapshot, at the peak
    // and at the out-of-memory (tests/data/viewer_frames.json).
    who_holds() {
      const box = device.querySelector(".who-holds");
      const select = box && box.querySelector("select.moment");
      expect(select && select.options.length === 3, "moments: " + (select ? Array.from(select.options).map((o) => o.textContent).join(" | ") : "none"));
      const rows = () => Array.from(box.querySelectorAll(".flame summary")).map((r) => r.textContent);
      expect(rows().some((r) => /linear_init \(model.py:41\)256.00 MiB \(94.1%\)4 allocations/.test(r)),
             "at the snapshot the weights' frame holds 256 MiB: " + rows().slice(0, 4).join(" | "));
      const pick = (pattern) => {
        const option = Array.from(select.options).find((o) => pattern.test(o.textContent));
        select.value = option ? option.value : "0";
        select.dispatchEvent(new Event("change"));
        return option;
      };
      expect(pick(/peak live/), "the peak can be picked");
      const top = Array.from(box.querySelectorAll("table.moment-top tr")).slice(1);
      expect(top.length > 4 && /64.00 MiB/.test(top[0].textContent) && /linear_init/.test(top[0].textContent),
             "at the peak the largest live allocation is a 64 MiB weight (" + top.length + " rows)");
      expect(pick(/out-of-memory/), "the out-of-memory can be picked");
      expect(rows().some((r) => /^forward_block \(model.py:57\)/.test(r)),
             "at the out-of-memory the activations' frame is listed");
      expect(/allocations live/.test(box.textContent) && /512.00 MiB asked/.test(select.selectedOptions[0].textContent),
             "the moment names the failed request: " + select.selectedOptions[0].textContent);
      const summary = box.querySelector(".flame details details summary");
      const nested = summary.parentElement;
      const open = nested.open;
      summary.click();
      expect(nested.open !== open, "a click opens or closes a frame");
      summary.click();
    },
    // The largest allocations as bands; hover names one, a click finds it in the segment map.
    bands() {
      const canvas = device.querySelector("canvas.bands");
      expect(canvas && Number(canvas.dataset.bandColumns) > 0, "bands drawn (" + (canvas && canvas.dataset.bandColumns) + " columns)");
      const box = canvas.getBoundingClientRect();
      const x = canvas.clientWidth - 20, y = box.height - 30;
      mouse(canvas, "mousemove", canvas, x, y);
      const tip = document.getElementById("tooltip").textContent;
      expect(/allocated at event/.test(tip), "hovering over a band describes it: " + tip.replace(/\n/g, " | "));
      canvas.dispatchEvent(new MouseEvent("click", { bubbles: true, clientX: box.left + x, clientY: box.top + y }));
      const result = device.querySelector(".search-result");
      expect(result && result.dataset.found === "block", "a click on a band finds its block (" + (result && result.dataset.found) + ")");
    },
    // Fragmentation and page maps follow the timeline's zoom.
    fragmentation() {
      const canvas = device.querySelector("canvas.fragmentation");
      expect(canvas && Number(canvas.dataset.ratioPoints) > 0 && Number(canvas.dataset.pageBars) > 0,
             "ratio and page maps drawn (" + (canvas && canvas.dataset.ratioPoints) + " points, " + (canvas && canvas.dataset.pageBars) + " bars)");
      expect(/page maps? and .* unmaps?/.test(device.querySelector(".frag-note").textContent), "the note counts maps and unmaps");
      const t = timeline();
      mouse(t, "mousedown", t, t.clientWidth * 0.5, 100);
      mouse(t, "mousemove", t, t.clientWidth * 0.7, 100);
      mouse(window, "mouseup", t, t.clientWidth * 0.7, 100);
      expect(canvas.dataset.viewFrom === t.dataset.viewFrom && canvas.dataset.viewFrom !== "0" &&
             device.querySelector("canvas.bands").dataset.viewFrom === t.dataset.viewFrom,
             "the plots below follow the timeline's zoom to event " + t.dataset.viewFrom);
      t.dispatchEvent(new MouseEvent("dblclick", { bubbles: true }));
    },
    // The trace replayed under the other policies: a dashed curve each and their figures.
    replayed() {
      const rows = Array.from(device.querySelectorAll("table.replayed tr[data-policy]"));
      expect(rows.map((r) => r.dataset.policy).join(",") === "cudalloc,pytorch,expandable",
             "replayed policies: " + rows.map((r) => r.dataset.policy).join(", "));
      const legendText = device.querySelector(".legend").textContent;
      expect(/PyTorch native \(replayed\)/.test(legendText) && /expandable segments \(replayed\)/.test(legendText),
             "the legend names the replayed curves");
      for (const colour of ["#d35400", "#8e44ad", "#16a085"]) {
        expect(countColour(timeline(), colour) > 0, "a replayed curve is drawn in " + colour);
      }
      const native = rows.find((r) => r.dataset.policy === "pytorch");
      expect(native && /GiB/.test(native.children[1].textContent) && Number(native.children[2].textContent) >= 1,
             "PyTorch native's peak and ratio: " + (native ? native.textContent : "none"));
    },
    // A snapshot written by snapshot_on_oom: the failed request is named at the top.
    written_at_oom() {
      const box = document.querySelector(".written-at-oom");
      expect(box && /512.00 MiB on device 0, stream 0x7/.test(box.textContent) && /error 2 of the process/.test(box.textContent) &&
             /100.00 MiB of the device free/.test(box.textContent), "the page names the failed request: " + (box ? box.textContent : "no banner"));
    },
    // One settings table: every key once, byte options in human units.
    settings() {
      const rows = Array.from(document.querySelectorAll("#settings-table tr")).slice(1);
      const keys = rows.map((r) => r.children[0].textContent);
      expect(document.querySelectorAll("#settings table").length === 1 && rows.length > 0,
             "one settings table with " + rows.length + " rows");
      expect(new Set(keys).size === keys.length, "each setting is listed once");
      const big = rows.find((r) => r.children[0].textContent === "large_segment");
      expect(big && big.children[1].textContent === "20 MiB" && /20971520/.test(big.children[1].title),
             "large_segment reads 20 MiB (" + (big ? big.children[1].textContent : "absent") + ")");
    },
    // A block far smaller than a row's pixel is still drawn in its colour.
    small_blocks() {
      expect(countColour(map(), colour("--state-allocated")) > 0, "a 512-byte block in a 1 GiB segment is visible");
    },
  };

  try {
    for (const name of location.hash.slice(1).split(",").filter(Boolean)) {
      if (!checks[name]) fail("no check named " + name);
      else checks[name]();
    }
  } catch (error) {
    fail(String(error && error.stack ? error.stack : error));
  }
  window.scrollTo(0, 0);  // a check may have scrolled (a band's click); headless screenshots the top
  const out = document.createElement("pre");
  out.id = "test-results";
  out.textContent = results.join("\n");
  document.body.append(out);
  document.body.dataset.tested = "done";
})();
