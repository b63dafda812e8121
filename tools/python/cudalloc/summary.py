"""memory_summary(): cudalloc's statistics as a text table laid out like
torch.cuda.memory_summary()."""

from ._capi import _read_stats

# Labels only: rows come from whatever names the library reports, unknown ones under "Other".
_GAUGE_LABELS = {
    "allocated_bytes": "Allocated memory",
    "active_bytes": "Active memory",
    "requested_bytes": "Requested memory",
    "reserved_bytes": "GPU reserved memory",
    "cached_bytes": "Cached free memory",
    "slab_bytes": "Small-size slab memory",
    "mapped_bytes": "Mapped page memory",
    "host_reserved_bytes": "Host reserved memory",
    "host_active_bytes": "Host active memory",
    "allocated_count": "Allocations",
    "active_count": "Active allocs",
    "reserved_count": "GPU reserved segments",
    "cached_count": "Cached free blocks",
    "slab_count": "Slabs",
}
_EVENT_LABELS = {
    "ooms": "OOMs",
    "alloc_retries": "Alloc retries",
    "cache_hits": "Cache hits",
    "device_allocs": "Device allocs",
    "device_frees": "Device frees",
    "stream_steals": "Stream steals",
    "pending_frees": "Pending frees",
    "page_maps": "Page maps",
    "page_unmaps": "Page unmaps",
    "page_waits": "Page waits",
    "spills": "Spills",
    "page_offloads": "Page offloads",
    "page_prefetches": "Page prefetches",
}
_COLUMNS = ["Cur Usage", "Peak Usage", "Tot Alloc", "Tot Freed"]
_CELL = 13
_UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"]


def _format_bytes(n):
    value, unit = float(abs(n)), 0
    while value >= 1024 and unit < len(_UNITS) - 1:
        value, unit = value / 1024, unit + 1
    sign = "-" if n < 0 else ""
    number = f"{sign}{int(abs(n))}" if unit == 0 else f"{sign}{value:.2f}"
    return f"{number} {_UNITS[unit]:<3}"


def _format_count(n):
    return f"{n}    "  # the spaces line the digits up with those of byte rows


def _cells(stat, is_bytes):
    fmt = _format_bytes if is_bytes else _format_count
    freed = max(0, stat["total"] - stat["current"])
    values = [stat["current"], stat["peak"], stat["total"], freed]
    return [f" {fmt(v):>{_CELL - 2}} " for v in values]


def _label_width(names):
    labels = [_GAUGE_LABELS.get(n, n) for n in names] + ["Small-size slab memory"]
    return max(len(s) for s in labels) + 2  # the usual rows keep one width


class _Table:
    def __init__(self, label_width):
        self.lw = label_width
        self.width = label_width + len(_COLUMNS) * (_CELL + 1)
        self.lines = []

    def rule(self, ch):
        self.lines.append("|" + ch * self.width + "|")

    def text(self, s, align="^"):
        self.lines.append("|" + f"{s:{align}{self.width}}" + "|")

    def row(self, label, cells):
        self.lines.append("|" + f" {label:<{self.lw - 1}}" + "|" + "|".join(cells) + "|")

    def pairs(self, items):
        """items: (label, value) shown two per line, "label: value"."""
        half = (self.width - 1) // 2
        lw = max(len(k) for k, _ in items)
        texts = [f"{k:>{lw}}: {v}" for k, v in items]
        for i in range(0, len(texts), 2):
            left = f"  {texts[i]:<{half - 2}}"
            right = f"  {texts[i + 1] if i + 1 < len(texts) else '':<{self.width - half - 3}}"
            self.lines.append("|" + left + "|" + right + "|")


def _gauge_section(table, data, names, bytes_rows):
    rows = [n for n in names if n in data and n.endswith("_bytes") == bytes_rows]
    for name in rows:
        table.row(_GAUGE_LABELS[name], _cells(data[name], bytes_rows))
    if rows:
        table.rule("-")


def memory_summary(device=-1):
    """A text table of cudalloc's statistics, laid out like torch.cuda.memory_summary()."""
    dev, data = _read_stats(device)
    gauges = [n for n in _GAUGE_LABELS if n in data]
    events = [n for n in _EVENT_LABELS if n in data]
    others = [n for n in data if n not in _GAUGE_LABELS and n not in _EVENT_LABELS]
    table = _Table(_label_width(gauges + others))
    table.rule("=")
    table.text(f"cudalloc CUDA memory summary, device ID {dev}")
    if events:
        table.rule("-")
        table.pairs([(_EVENT_LABELS[n], data[n]["total"]) for n in events])
    table.rule("=")
    table.row(f"{'Metric':^{table.lw - 2}}", [f"{c:^{_CELL}}" for c in _COLUMNS])
    table.rule("-")
    _gauge_section(table, data, gauges, True)
    _gauge_section(table, data, gauges, False)
    if others:
        table.text(" Other statistics", "<")
        table.rule("-")
        for name in others:
            table.row(name, _cells(data[name], name.endswith("_bytes")))
        table.rule("-")
    table.lines[-1] = table.lines[-1].replace("-", "=")
    return "\n".join(table.lines) + "\n"
