// cudalloc view, the device's last events (the model's "history", tools/view/event_history.h):
// the blocks as they were at event N, rewound from the snapshot's, and what happened at an
// address. Offsets are bytes from history.base; event i of the lists is event first + i.

const KIND_NAMES = ["alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
                    "segment_map", "segment_unmap", "oom", "other"];
const KIND = { alloc: 0, freeRequested: 1, freeCompleted: 2, segmentAlloc: 3, segmentFree: 4,
               segmentMap: 5, segmentUnmap: 6 };
// What a range was before an event, for the ranges the map draws over the snapshot's blocks.
const UNRESERVED = -1;  // no memory there yet (before a segment_alloc or segment_map)

// The last event of the history (the snapshot's state follows it), or -1 when it is empty.
function historyLastEvent(h) {
  return h && h.count > 0 ? h.first + h.count - 1 : -1;
}

// The state before each event, by what the event did (block states of segment_map.h).
function stateBefore(kind) {
  switch (kind) {
    case KIND.alloc: return 2;           // free
    case KIND.freeRequested: return 0;   // allocated
    case KIND.freeCompleted: return 1;   // pending free
    case KIND.segmentAlloc:
    case KIND.segmentMap: return UNRESERVED;
    case KIND.segmentFree:
    case KIND.segmentUnmap: return 2;    // reserved, free unless a block says otherwise
    default: return null;
  }
}

// The ranges whose state at event `at` differs from the snapshot's: for each offset, the state
// before the oldest event after `at` that touched it. Returns [{offset, size, state, order}]
// sorted newest first, so that drawing them in turn leaves the oldest event's word on top.
function rewind(h, at) {
  const changes = new Map();
  for (let i = h.count - 1; i > at - h.first; i--) {
    const state = stateBefore(h.kind[i]);
    if (state === null) continue;
    const key = h.offset[i] + ":" + h.size[i];
    changes.set(key, { offset: h.offset[i], size: h.size[i], state, order: i });
  }
  return Array.from(changes.values()).sort((a, b) => b.order - a.order);
}

// The events of the history whose range holds `offset`, oldest first.
function eventsAt(h, offset) {
  const out = [];
  for (let i = 0; i < h.count; i++) {
    if (h.kind[i] > KIND.segmentUnmap) continue;
    if (offset >= h.offset[i] && offset < h.offset[i] + h.size[i]) out.push(i);
  }
  return out;
}

// "0x7f00" or "7f00" as a BigInt, or null.
function parseAddress(text) {
  const clean = text.trim().toLowerCase();
  if (!/^(0x)?[0-9a-f]+$/.test(clean)) return null;
  return BigInt(clean.startsWith("0x") ? clean : "0x" + clean);
}

// The offset from history.base of an address (BigInt), as a number.
function historyOffset(h, address) {
  return Number(address - BigInt(h.base));
}
