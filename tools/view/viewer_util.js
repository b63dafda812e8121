// cudalloc view, shared helpers: formatting, DOM building, canvases, the tooltip and the error
// report. The page's scripts draw the model that `cudalloc view` embedded (the JSON of
// tools/view/view_model.cpp) and nothing else: no network, no computation over the trace.
"use strict";

const STATE_NAMES = ["allocated", "pending free", "free (cached)", "slab object"];
const STATE_VARS = ["--state-allocated", "--state-pending", "--state-free", "--state-slab"];

window.onerror = (message, source, line) => {
  reportError(message + (line ? " (line " + line + ")" : ""));
};

function reportError(text) {
  const box = document.getElementById("errors");
  box.hidden = false;
  box.textContent += text + "\n";
  document.body.dataset.rendered = "error";
}

// ---- formatting ----------------------------------------------------------------------

function formatBytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = Number(n);
  let unit = 0;
  while (Math.abs(value) >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return unit === 0 ? value + " B" : value.toFixed(2) + " " + units[unit];
}

function formatCount(n) {
  return Number(n).toLocaleString("en-US");
}

// "1 segment", "3 segments"
function plural(n, word) {
  return formatCount(n) + " " + word + (n === 1 ? "" : "s");
}

// hex("0x10") + 0x20 as hex; addresses exceed what a JavaScript number holds exactly.
function addHex(hex, offset) {
  return "0x" + (BigInt(hex) + BigInt(offset)).toString(16);
}

function cssVar(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}

// ---- DOM helpers ---------------------------------------------------------------------

function element(tag, attributes, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes || {})) node.setAttribute(key, value);
  for (const child of children) {
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function panel(title, ...children) {
  return element("section", { class: "panel" }, element("h2", {}, title), ...children);
}

function figures(pairs) {
  const list = element("dl", { class: "figures" });
  for (const [name, value] of pairs) list.append(element("dt", {}, name), element("dd", {}, value));
  return list;
}

function legend(entries) {
  const box = element("div", { class: "legend" });
  for (const [label, colour] of entries) {
    const item = element("span", {}, label);
    item.style.setProperty("--swatch", colour);
    box.append(item);
  }
  return box;
}

const tooltip = {
  show(event, text) {
    const box = document.getElementById("tooltip");
    box.textContent = text;
    box.hidden = false;
    const x = Math.min(event.clientX + 14, window.innerWidth - box.offsetWidth - 4);
    box.style.left = Math.max(0, x) + "px";
    box.style.top = (event.clientY + 14) + "px";
  },
  hide() {
    document.getElementById("tooltip").hidden = true;
  },
};

// A canvas of the container's width and `height` CSS pixels, sharp on high-DPI screens.
// Returns {canvas, ctx, width, height} in CSS pixels.
function makeCanvas(parent, height) {
  const canvas = element("canvas");
  parent.append(canvas);
  const width = Math.max(200, canvas.clientWidth || parent.clientWidth || 800);
  const ratio = window.devicePixelRatio || 1;
  canvas.width = Math.round(width * ratio);
  canvas.height = Math.round(height * ratio);
  canvas.style.height = height + "px";
  const ctx = canvas.getContext("2d");
  ctx.scale(ratio, ratio);
  return { canvas, ctx, width, height };
}

// Calls describe(x, y) on hover; it returns the tooltip text or null.
function onHover(canvas, describe) {
  canvas.addEventListener("mousemove", (event) => {
    const box = canvas.getBoundingClientRect();
    const text = describe(event.clientX - box.left, event.clientY - box.top);
    if (text) tooltip.show(event, text);
    else tooltip.hide();
  });
  canvas.addEventListener("mouseleave", () => tooltip.hide());
}
