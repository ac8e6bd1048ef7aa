#!/usr/bin/env python3
"""Draws a flame graph (SVG) of a pprof file, via `go tool pprof -traces`.

    python3 scripts/flamegraph.py PROFILE.pb.gz OUT.svg [--title TEXT]

Used for the picture in the README; also handy where no Pyroscope is at hand.
Only the Python standard library and `go` are needed.
"""
import argparse
import html
import re
import subprocess
import sys
import zlib

UNIT = {"ns": 1e-6, "us": 1e-3, "µs": 1e-3, "ms": 1.0, "s": 1e3}
VALUE_RE = re.compile(r"^\s*([0-9.]+)(ns|us|µs|ms|s)\s+(.*)$")


def read_traces(path):
    text = subprocess.run(["go", "tool", "pprof", "-traces", path], check=True, capture_output=True,
                          text=True).stdout
    stacks = []
    for block in text.split("-----------+-------------------------------------------------------")[1:]:
        value, frames = None, []
        for line in block.splitlines():
            match = VALUE_RE.match(line)
            if match and value is None:
                value = float(match.group(1)) * UNIT[match.group(2)]
                frames.append(match.group(3).strip())
            elif value is not None and line.strip():
                frames.append(line.strip())
        if value:
            stacks.append((list(reversed(frames)), value))  # root first
    return stacks


def build_tree(stacks):
    root = {"name": "all", "value": 0.0, "children": {}}
    for frames, value in stacks:
        root["value"] += value
        node = root
        for frame in frames:
            node = node["children"].setdefault(frame, {"name": frame, "value": 0.0, "children": {}})
            node["value"] += value
    return root


def short(name):
    name = re.sub(r"\(anonymous namespace\)::", "", name)
    name = re.sub(r" \[clone [^\]]*\]", "", name)
    depth, out = 0, []
    for ch in name:  # drop template and parameter lists: flame graphs need names, not signatures
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out) or name


def color(name):
    h = zlib.crc32(name.encode())
    return f"rgb({205 + h % 50},{80 + (h >> 8) % 110},{40 + (h >> 16) % 40})"


def render(root, title, width=1200, row=18):
    rects = []

    def walk(node, x, depth):
        rects.append((x, depth, node))
        child_x = x
        for child in sorted(node["children"].values(), key=lambda c: c["name"]):
            walk(child, child_x, depth + 1)
            child_x += child["value"]

    walk(root, 0.0, 0)
    max_depth = max(d for _, d, _ in rects)
    height = (max_depth + 1) * row + 40
    scale = (width - 20) / root["value"]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="Verdana,sans-serif" font-size="11">',
           f'<rect width="100%" height="100%" fill="#fbfaf7"/>',
           f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="15">{html.escape(title)}</text>']
    for x, depth, node in rects:
        w = node["value"] * scale
        if w < 0.5:
            continue
        y = height - (depth + 1) * row - 4
        label = short(node["name"])
        share = 100.0 * node["value"] / root["value"]
        out.append(f'<g><title>{html.escape(node["name"])} ({node["value"]:.0f} ms, {share:.1f}%)</title>'
                   f'<rect x="{10 + x * scale:.1f}" y="{y}" width="{w:.1f}" height="{row - 1}" '
                   f'fill="{color(node["name"])}" rx="2"/>')
        chars = int(w / 7)
        if chars >= 3:
            text = label if len(label) <= chars else label[: chars - 2] + ".."
            out.append(f'<text x="{13 + x * scale:.1f}" y="{y + row - 5}">{html.escape(text)}</text>')
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile")
    parser.add_argument("output")
    parser.add_argument("--title", default="CPU flame graph")
    args = parser.parse_args()
    stacks = read_traces(args.profile)
    if not stacks:
        sys.exit("flamegraph: the profile has no samples")
    with open(args.output, "w") as f:
        f.write(render(build_tree(stacks), args.title))
    return 0


if __name__ == "__main__":
    sys.exit(main())
