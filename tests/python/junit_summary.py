#!/usr/bin/env python3
"""The summary table of scripts/gpu_check.sh from ctest's --output-junit file:

    junit_summary.py JUNIT_XML

One line per test in running order: name, PASS / FAIL / SKIP, seconds; then the counts.
Exit status 0, or 1 when the file is missing or unreadable (ctest did not get to write it).
"""
import sys
import xml.etree.ElementTree as ET


def outcome(case):
    """PASS, FAIL or SKIP for one <testcase> of CTest's JUnit output."""
    if case.find("failure") is not None or case.get("status") == "fail":
        return "FAIL"
    if case.find("skipped") is not None or case.get("status") in ("notrun", "disabled"):
        return "SKIP"
    return "PASS"


def rows(root):
    """[(name, outcome, seconds)] of every test case."""
    return [(case.get("name", "?"), outcome(case), float(case.get("time") or 0))
            for case in root.iter("testcase")]


def table(lines):
    out = ["", f"{'step':<20} {'result':<6} {'seconds':>8}"]
    out += [f"{name:<20} {result:<6} {seconds:>8.0f}" for name, result, seconds in lines]
    counts = {r: sum(1 for _, x, _ in lines if x == r) for r in ("PASS", "FAIL", "SKIP")}
    out.append(", ".join(f"{n} {r}" for r, n in counts.items()))
    return out


def main(argv):
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        root = ET.parse(argv[0]).getroot()
    except (OSError, ET.ParseError) as e:
        print(f"no test results: {e}")
        return 1
    print("\n".join(table(rows(root))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
